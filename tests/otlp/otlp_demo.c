/* otlp_demo.c: a small native host program for the otlp_logs tests.
 *
 *   otlp_demo <milliseconds>
 *
 * Runs three named threads for the given time, then exits 0:
 *   "otlp-spinner"  burns CPU in spin_work();
 *   "otlp-sleeper"  sleeps in nanosleep() under sleep_work();
 *   "otlp-traced"   sleeps inside a span: it sets the span context
 *                   (trace 0102..10, span a1a2..a8) through the agent's
 *                   public API when the agent is loaded (LD_PRELOAD), found
 *                   with dlsym so the program also runs without it.
 * It prints "ready" once every thread runs. With OTLP_DEMO_FORK=<ms> it
 * forks when half the time has gone: the child (one thread, "otlp-child",
 * spinning) runs <ms> more and exits 0; the parent waits for it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_bool stop;
static atomic_int running;

static const uint8_t trace_id[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t span_id[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};

/* Sleep ms, resumed after signals (the sampler's interrupt sleeps). */
static void nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

__attribute__((noinline)) static void spin_work(void) {
    volatile uint64_t x = 0;
    while (!atomic_load(&stop))
        for (int i = 0; i < 100000; i++)
            x += (uint64_t)i * 7;
}

__attribute__((noinline)) static void sleep_work(void) {
    while (!atomic_load(&stop))
        nap(20);
}

static void *spinner(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "otlp-spinner");
    atomic_fetch_add(&running, 1);
    spin_work();
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "otlp-sleeper");
    atomic_fetch_add(&running, 1);
    sleep_work();
    return NULL;
}

static void *traced(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "otlp-traced");
    void (*set)(const uint8_t *, const uint8_t *) =
        (void (*)(const uint8_t *, const uint8_t *))dlsym(RTLD_DEFAULT,
                                                          "stackshot_set_span_context");
    if (set)
        set(trace_id, span_id);
    atomic_fetch_add(&running, 1);
    sleep_work();
    return NULL;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 3000;
    pthread_t t[3];
    void *(*fns[3])(void *) = {spinner, sleeper, traced};
    for (int i = 0; i < 3; i++)
        if (pthread_create(&t[i], NULL, fns[i], NULL) != 0)
            return 1;
    while (atomic_load(&running) < 3)
        nap(1);
    printf("ready\n");
    fflush(stdout);
    const char *fork_ms = getenv("OTLP_DEMO_FORK");
    pid_t child = -1;
    if (fork_ms) {
        nap(ms / 2);
        child = fork();
        if (child == 0) {
            /* the child: only this thread; it spins under its own name */
            pthread_setname_np(pthread_self(), "otlp-child");
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            volatile uint64_t x = 0;
            do {
                for (int i = 0; i < 100000; i++)
                    x += (uint64_t)i;
                clock_gettime(CLOCK_MONOTONIC, &t1);
            } while ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 <
                     atol(fork_ms));
            exit(0); /* the agent flushes at exit, as in any host */
        }
        ms -= ms / 2;
    }
    nap(ms);
    if (child > 0)
        waitpid(child, NULL, 0);
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    return 0;
}
