/* strip_host.c: a native host whose busy thread ("strip-worker") runs
 * code of a stripped library (stripx.c) for the given seconds.
 *
 *     profiles_strip_host <seconds>
 *
 * Exits 0 when the worker ran (its checksum is non-zero). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t stripx_run(uint64_t n);

static double seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    uint64_t *sum = arg;
    double end = now() + seconds;
    while (now() < end)
        *sum += stripx_run(200000);
    return NULL;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 2;
    uint64_t sum = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &sum) != 0)
        return 2;
    pthread_setname_np(t, "strip-worker");
    pthread_join(t, NULL);
    printf("strip_host: checksum %llx\n", (unsigned long long)sum);
    return sum ? 0 : 1;
}
