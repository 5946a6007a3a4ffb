#define _GNU_SOURCE
/* main_exit.c: a host whose main thread calls pthread_exit while a worker
 * computes for a second; the process ends when the worker returns (glibc:
 * exit(0) in the last thread). Used by hosts.py (case mainexit). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    (void)arg;
    double end = now() + 1.0;
    volatile unsigned long x = 0;
    while (now() < end)
        x++;
    printf("worker done\n");
    fflush(stdout);
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    pthread_setname_np(t, "mx-worker");
    pthread_exit(NULL);
}
