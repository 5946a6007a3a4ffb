/* bk_host.c: a steady native workload that counts its operations, the host
 * of the dead-and-hostile-backend tests and of bench/backends.
 *
 *   bk_host <run ms> [workers] [sleepers] [depth] [pause us]
 *
 * With <run ms> 0 the run lasts until standard input ends (the tests
 * decide when, by what the backends saw); a line read before that ("m")
 * takes the early resident set again, then (the tests send it once the
 * agent's exporter has opened, and with it the module it loads: the
 * libraries of a module are part of the start, not growth).
 * `workers` threads (default 2, named "bk-worker-N") run a hash loop for
 * `run ms` and count the loop's iterations; `sleepers` threads (default 0,
 * "bk-sleeper-N") wait `depth` calls deep (default 8), so that every round
 * carries a known amount of stack data; the main thread waits. With a
 * pause, workers sleep that many microseconds after every 1024 loops (the
 * tests use it so that parallel cases do not starve the machine; the bench
 * runs without). With
 * BK_FSIZE_LIMIT=<bytes> the host limits the size of files it writes
 * (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail with EFBIG), a full
 * disk as far as the agent's file writes are concerned. At the
 * end it prints one line
 *   ops <n> run_ms <ms> rss_early_kb <kb> rss_end_kb <kb> hwm_kb <kb> cpu_ms <ms>
 * (resident set 300 ms after start and at the end, and its high-water
 * mark, and the CPU time of the whole process, agent included, so far),
 * then returns from main: the agent's exit path (destructor, flush
 * within STACKSHOT_SHUTDOWN_TIMEOUT) runs after that line, so the caller
 * measures the exit delay as the time from the line to the process end.
 *
 * The agent comes by LD_PRELOAD. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#define MAX_WORKERS 64

static atomic_bool stop;
static long pause_us;
static uint64_t counts[MAX_WORKERS];

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The "operation": a few hundred ns of integer work, checked often enough
 * that the stop flag ends the run promptly. */
static void *worker(void *arg) {
    size_t i = (size_t)arg;
    char name[16];
    snprintf(name, sizeof name, "bk-worker-%zu", i);
    pthread_setname_np(pthread_self(), name);
    uint64_t h = 1469598103934665603ull ^ i, n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 256; k++) {
            h ^= (uint64_t)k;
            h *= 1099511628211ull;
        }
        n++;
        if (pause_us && (n & 1023) == 0) {
            struct timespec ts = {0, pause_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    counts[i] = n + (h == 42); /* keep h alive */
    return NULL;
}

/* The sampler's signal cuts a nanosleep short: sleep to a deadline. */
static void sleep_until(uint64_t deadline_ms) {
    for (uint64_t now = now_ms(); now < deadline_ms; now = now_ms()) {
        struct timespec ts = {(time_t)((deadline_ms - now) / 1000),
                              (long)((deadline_ms - now) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int depth = 8;

static __attribute__((noinline)) int descend(int left) {
    volatile int keep = left;
    if (left > 0)
        return descend(left - 1) + keep;
    pthread_mutex_lock(&idle_mu);
    while (!atomic_load(&stop))
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return keep;
}

static void *sleeper(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "bk-sleeper-%zu", (size_t)arg);
    pthread_setname_np(pthread_self(), name);
    descend(depth);
    return NULL;
}

static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = atol(line + n + 1);
            break;
        }
    fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    uint64_t run_ms = argc > 1 ? strtoull(argv[1], NULL, 10) : 3000;
    size_t workers = argc > 2 ? strtoul(argv[2], NULL, 10) : 2;
    size_t sleepers = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
    depth = argc > 4 ? atoi(argv[4]) : 8;
    pause_us = argc > 5 ? atol(argv[5]) : 0;
    if (pause_us < 0 || pause_us > 999999)
        pause_us = 0;
    if (workers < 1 || workers > MAX_WORKERS)
        workers = 2;
    if (sleepers > 4 * MAX_WORKERS)
        sleepers = 4 * MAX_WORKERS;
    if (depth < 0 || depth > 1000)
        depth = 8;
    const char *fsize = getenv("BK_FSIZE_LIMIT");
    if (fsize) {
        struct rlimit rl = {strtoul(fsize, NULL, 10), strtoul(fsize, NULL, 10)};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
    }
    pthread_t t[MAX_WORKERS], z[4 * MAX_WORKERS];
    uint64_t start = now_ms();
    for (size_t i = 0; i < workers; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (size_t i = 0; i < sleepers; i++)
        pthread_create(&z[i], NULL, sleeper, (void *)i);
    sleep_until(start + 300);
    long rss_early = status_kb("VmRSS");
    if (run_ms) {
        sleep_until(start + run_ms);
    } else {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0)
            rss_early = status_kb("VmRSS");
    }
    atomic_store(&stop, true);
    uint64_t ops = 0;
    for (size_t i = 0; i < workers; i++) {
        pthread_join(t[i], NULL);
        ops += counts[i];
    }
    pthread_mutex_lock(&idle_mu);
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    for (size_t i = 0; i < sleepers; i++)
        pthread_join(z[i], NULL);
    uint64_t took = now_ms() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t cpu_ms = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000u +
                      (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000u;
    printf("ops %llu run_ms %llu rss_early_kb %ld rss_end_kb %ld hwm_kb %ld cpu_ms %llu\n",
           (unsigned long long)ops, (unsigned long long)took, rss_early, status_kb("VmRSS"),
           status_kb("VmHWM"), (unsigned long long)cpu_ms);
    fflush(stdout);
    return 0;
}
