/* stackshot-demo.c: a small native program with threads in known places,
 * to look at with stackshot (LD_PRELOAD=libstackshot.so) or gdb.
 *
 *   busy-worker   burns CPU in compute_primes()
 *   sleeper       nanosleep() from sleep_forever()
 *   mutex-waiter  blocked in pthread_mutex_lock() from wait_for_lock()
 *                 (the mutex is held by main for the whole run)
 *   cond-waiter   pthread_cond_wait() from wait_for_signal()
 *   recursive     recurse(200) deep, then sleeping at the bottom
 *   main          waits for the end of the run in nanosleep()
 *
 * Usage: stackshot-demo [seconds]   (default 5). Exits cleanly.
 *
 * The comments "marker: <name>" tag the lines the integration test expects
 * in the stacks (tests/native/check_demo.py); keep them on those lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_bool done;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static volatile unsigned long primes_found;

static void nap_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    /* a signal handler (the sampler's) ends nanosleep early: sleep the rest */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) /* marker: nap */
        ;
}

static int is_prime(unsigned long n) {
    if (n < 2)
        return 0;
    for (unsigned long d = 2; d * d <= n; d++)
        if (n % d == 0)
            return 0;
    return 1;
}

static void compute_primes(void) {
    unsigned long n = 2;
    while (!atomic_load(&done)) {
        if (is_prime(n)) /* marker: compute */
            primes_found++;
        n = n > 5000000 ? 2 : n + 1;
    }
}

static void *busy_worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "busy-worker");
    compute_primes(); /* marker: busy_worker */
    return NULL;
}

static void sleep_forever(void) {
    while (!atomic_load(&done))
        nap_ms(50); /* marker: sleep_forever */
}

static void *sleeper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "sleeper");
    sleep_forever(); /* marker: sleeper */
    return NULL;
}

static void wait_for_lock(void) {
    pthread_mutex_lock(&held); /* marker: wait_for_lock */
    pthread_mutex_unlock(&held);
}

static void *mutex_waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "mutex-waiter");
    wait_for_lock(); /* marker: mutex_waiter */
    return NULL;
}

static void wait_for_signal(void) {
    pthread_mutex_lock(&cond_lock);
    while (!atomic_load(&done))
        pthread_cond_wait(&never, &cond_lock); /* marker: wait_for_signal */
    pthread_mutex_unlock(&cond_lock);
}

static void *cond_waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "cond-waiter");
    wait_for_signal(); /* marker: cond_waiter */
    return NULL;
}

/* noinline and a use of the result after the call: a real frame per level */
__attribute__((noinline)) static int recurse(int n) {
    if (n == 0) {
        sleep_forever(); /* marker: recurse_bottom */
        return 0;
    }
    return recurse(n - 1) + 1; /* marker: recurse */
}

static void *recursive(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "recursive");
    int depth = recurse(200); /* marker: recursive */
    return depth == 200 ? NULL : (void *)1;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    pthread_mutex_lock(&held);
    void *(*fns[])(void *) = {busy_worker, sleeper, mutex_waiter, cond_waiter, recursive};
    enum { N = sizeof fns / sizeof fns[0] };
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        if (pthread_create(&t[i], NULL, fns[i], NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    printf("stackshot-demo: pid %d, running %.1f s\n", (int)getpid(), seconds);
    fflush(stdout);
    nap_ms((long)(seconds * 1000)); /* marker: main */
    atomic_store(&done, true);
    pthread_mutex_unlock(&held);
    pthread_mutex_lock(&cond_lock);
    pthread_cond_broadcast(&never);
    pthread_mutex_unlock(&cond_lock);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("stackshot-demo: done (%lu primes)\n", primes_found);
    return 0;
}
