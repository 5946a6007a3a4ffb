#define _GNU_SOURCE
/* qb_native_demo.c: a small native program for the LD_PRELOAD test: a
 * thread named "busy-worker" spends DEMO_SECONDS (default 4) in
 * compute_primes -> is_prime while main waits for it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long primes;

__attribute__((noinline)) static int is_prime(unsigned long n) {
    for (unsigned long d = 2; d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

__attribute__((noinline)) void compute_primes(double seconds) {
    double end = now_s() + seconds;
    unsigned long n = 2;
    while (now_s() < end)
        for (int i = 0; i < 2000; i++)
            primes += (unsigned long)is_prime(n++);
}

static void *worker(void *arg) {
    pthread_setname_np(pthread_self(), "busy-worker");
    compute_primes(*(double *)arg);
    return NULL;
}

int main(void) {
    const char *s = getenv("DEMO_SECONDS");
    double seconds = s ? atof(s) : 4;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &seconds) != 0)
        return 1;
    pthread_join(t, NULL);
    printf("%lu primes\n", primes);
    return 0;
}
