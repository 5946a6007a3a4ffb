#define _GNU_SOURCE
/* mlock_host.c: a service that locks its memory: after <delay> ms it
 * calls mlockall (MCL_CURRENT | MCL_FUTURE, or MCL_CURRENT alone with
 * "current"), starts two threads on small stacks that compute for half a
 * second, then takes blocks of 100 KiB (written) until malloc fails or it
 * has 400, and prints how many. Under a locked-memory limit that count is
 * what the limit leaves it. Used by hosts.py (case mlock). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *compute(void *arg) {
    (void)arg;
    double end = now() + 0.5;
    volatile unsigned long x = 0;
    while (now() < end)
        x++;
    return NULL;
}

int main(int argc, char **argv) {
    int delay_ms = argc > 1 ? atoi(argv[1]) : 0;
    int flags = argc > 2 && strcmp(argv[2], "current") == 0 ? MCL_CURRENT : MCL_CURRENT | MCL_FUTURE;
    if (delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000u);
    if (mlockall(flags) != 0) {
        perror("mlockall");
        return 2;
    }
    printf("mlockall 0\n");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_t t[2];
    int made = 0;
    for (int i = 0; i < 2; i++)
        made += pthread_create(&t[made], &attr, compute, NULL) == 0;
    printf("threads %d\n", made);
    int blocks = 0;
    while (blocks < 400) {
        void *p = malloc(100 * 1024);
        if (!p)
            break;
        memset(p, 1, 100 * 1024);
        blocks++;
    }
    for (int i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    printf("blocks %d\n", blocks);
    return 0;
}
