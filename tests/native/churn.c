/* churn.c: threads created and destroyed all the time, for argv[1]
 * seconds: the sampler must count exited threads as skipped and never
 * crash, hang or signal a thread that is gone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_long created;

static void *short_life(void *arg) {
    volatile unsigned long x = (unsigned long)arg;
    for (int i = 0; i < 1000000; i++)
        x = x * 31 + (unsigned long)i;
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *creator(void *arg) {
    double end = *(double *)arg;
    while (now() < end) {
        pthread_t t[8];
        int n = 0;
        for (int i = 0; i < 8; i++)
            if (pthread_create(&t[n], NULL, short_life, (void *)(long)i) == 0)
                n++;
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
        atomic_fetch_add(&created, n);
    }
    return NULL;
}

int main(int argc, char **argv) {
    double end = now() + (argc > 1 ? atof(argv[1]) : 2.0);
    pthread_t c[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&c[i], NULL, creator, &end);
    for (int i = 0; i < 4; i++)
        pthread_join(c[i], NULL);
    printf("churn: %ld threads created\n", atomic_load(&created));
    return 0;
}
