/* bench_native.c: the cost of one native sampling round.
 *
 * Creates N threads whose stacks are D frames deep (recursion in
 * bench_depth), in two variants:
 *   idle    they block in a condition variable: after the first round the
 *           sampler reuses their stacks without signalling them;
 *   active  they wake every 10 ms and burn a few microseconds, so their CPU
 *           time always changes and every round signals and unwinds them.
 * For each, after warm-up rounds (symbol cache hot) it times rounds taken
 * with ss_native_sample_once, and compares them with a baseline measured in
 * the same run on the same threads: a serial signal round trip per thread
 * (signal one thread, wait for its handler's answer, next; no unwinding).
 * It also reports the resident memory the sampler added (VmRSS before the
 * first round and after the last).
 *
 * usage: bench_native [rounds [case]]   (default 20 rounds, all four cases;
 * case 1-4 runs only that one, for profiling). Prints a table; asserts
 * nothing. */
#define _GNU_SOURCE
#include "samplers/ss_samplers.h"

#include <dirent.h>
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop_flag;
static atomic_int ready;
static int active_mode;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;

static void nap_us(long us) {
    struct timespec ts = {0, us * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void at_the_bottom(void) {
    atomic_fetch_add(&ready, 1);
    if (active_mode) {
        while (!atomic_load(&stop_flag)) {
            volatile unsigned x = 0;
            for (int i = 0; i < 2000; i++)
                x += (unsigned)i;
            nap_us(10000);
        }
        return;
    }
    pthread_mutex_lock(&m);
    while (!atomic_load(&stop_flag))
        pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
}

__attribute__((noinline)) static int bench_depth(int n) {
    if (n <= 1) {
        at_the_bottom();
        return 1;
    }
    return bench_depth(n - 1) + 1; /* not a tail call: one frame per level */
}

static void *thread_main(void *arg) {
    bench_depth((int)(long)arg);
    return NULL;
}

/* ---- baseline: serial signal round trip -------------------------- */

static _Atomic uint32_t pong;

static void pong_handler(int sig) {
    (void)sig;
    int e = errno;
    atomic_fetch_add(&pong, 1);
    syscall(SYS_futex, (uint32_t *)&pong, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = e;
}

static double baseline_round_us(const pid_t *tids, int n, int sig) {
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < n; i++) {
        uint32_t seen = atomic_load(&pong);
        syscall(SYS_tgkill, getpid(), tids[i], sig);
        struct timespec ts = {0, 100000000};
        while (atomic_load(&pong) == seen)
            syscall(SYS_futex, (uint32_t *)&pong, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
    }
    return (double)(ss_mono_ns() - t0) / 1e3;
}

/* ---- helpers ----------------------------------------------------- */

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long vm_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

static int list_tids(pid_t *out, int max) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    pid_t me = ss_gettid();
    while (d && (e = readdir(d)) != NULL && n < max) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && tid != me)
            out[n++] = tid;
    }
    if (d)
        closedir(d);
    return n;
}

typedef struct result {
    double round_us, base_us;
    double sampler_cpu_us; /* CPU of the thread taking the round */
    double agent_cpu_us;   /* process CPU of the round minus the threads' own */
    uint32_t threads, frames;
    uint64_t signalled, reused;
    long rss_added_kb;
} result;

static result run_case(const ss_config *cfg, int n, int depth, int active, int rounds) {
    result r = {0};
    atomic_store(&stop_flag, 0);
    atomic_store(&ready, 0);
    active_mode = active;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], &a, thread_main, (void *)(long)depth);
    while (atomic_load(&ready) < n)
        nap_us(1000);
    nap_us(20000);

    long rss0 = vm_rss_kb();
    ss_round *round;
    for (int i = 0; i < 3; i++) { /* warm-up: caches hot, idle stacks known */
        if (ss_native_sample_once(cfg, &round) == 0)
            ss_round_unref(round);
        nap_us(20000);
    }
    uint64_t s0, r0, sig0, sig1, reu0, reu1;
    ss_native_sample_stats(&s0, &sig0, &reu0);
    uint64_t total = 0, sampler_cpu = 0, round_cpu = 0, bg_cpu = 0, bg_wall = 0;
    for (int i = 0; i < rounds; i++) {
        uint64_t c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        uint64_t s0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        uint64_t t0 = ss_mono_ns();
        if (ss_native_sample_once(cfg, &round) == 0) {
            uint64_t t1 = ss_mono_ns();
            uint64_t s1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            uint64_t c1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
            total += t1 - t0;
            sampler_cpu += s1 - s0;
            round_cpu += c1 - c0;
            r.threads = round->n_threads;
            r.frames = round->n_frames;
            ss_round_unref(round);
        }
        /* let active threads run between rounds; what the process burns
         * meanwhile is the threads' own work, without any sampling */
        uint64_t w0 = ss_mono_ns(), b0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        nap_us(20000);
        bg_cpu += clock_ns(CLOCK_PROCESS_CPUTIME_ID) - b0;
        bg_wall += ss_mono_ns() - w0;
    }
    /* agent CPU: the process's CPU during the rounds, minus what the
     * threads burn on their own over the same wall time (the rate seen
     * between rounds). Includes the handlers, which run on the sampled
     * threads, and the sampler thread itself. */
    double bg_rate = bg_wall ? (double)bg_cpu / (double)bg_wall : 0;
    double agent = (double)round_cpu - bg_rate * (double)total;
    r.agent_cpu_us = (agent > 0 ? agent : 0) / rounds / 1e3;
    r.sampler_cpu_us = (double)sampler_cpu / rounds / 1e3;
    ss_native_sample_stats(&r0, &sig1, &reu1);
    r.rss_added_kb = vm_rss_kb() - rss0;
    r.signalled = sig1 - sig0;
    r.reused = reu1 - reu0;
    r.round_us = (double)total / rounds / 1e3;

    pid_t *tids = calloc((size_t)n + 8, sizeof *tids);
    int k = list_tids(tids, n + 8);
    double base = 0;
    for (int i = 0; i < rounds; i++)
        base += baseline_round_us(tids, k, SIGRTMAX - 5);
    r.base_us = base / rounds;
    free(tids);

    atomic_store(&stop_flag, 1);
    pthread_mutex_lock(&m);
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    return r;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    int only = argc > 2 ? atoi(argv[2]) : 0; /* 1..4: run one case (profiling) */
    ss_log_set_level(SS_LOG_WARN);
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    cfg.interval_ms = 1000;
    signal(SIGRTMAX - 5, pong_handler);

    struct { int n, depth, active; } cases[] = {
        {100, 50, 0}, {100, 50, 1}, {1000, 20, 0}, {1000, 20, 1},
    };
    printf("%-7s %-5s %-6s %9s %9s %9s %9s %9s %9s %8s %7s %9s %6s %8s\n", "threads", "depth",
           "mode", "round_us", "cpu_us", "smp_cpu", "us/thread", "ns/frame", "base_us", "ratio",
           "cpu/b", "signalled", "reused", "rss_KiB");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only > 0 && (size_t)only != i + 1)
            continue;
        result r = run_case(&cfg, cases[i].n, cases[i].depth, cases[i].active, rounds);
        printf("%-7d %-5d %-6s %9.1f %9.1f %9.1f %9.2f %9.1f %9.1f %7.2fx %6.2fx %9llu %6llu "
               "%8ld\n",
               cases[i].n, cases[i].depth, cases[i].active ? "active" : "idle", r.round_us,
               r.agent_cpu_us, r.sampler_cpu_us, r.threads ? r.round_us / r.threads : 0,
               r.frames ? r.round_us * 1e3 / r.frames : 0, r.base_us,
               r.base_us > 0 ? r.round_us / r.base_us : 0,
               r.base_us > 0 ? r.agent_cpu_us / r.base_us : 0,
               (unsigned long long)r.signalled / (unsigned)rounds,
               (unsigned long long)r.reused / (unsigned)rounds, r.rss_added_kb);
    }
    printf("\nround_us: one round with ss_native_sample_once (hot symbol cache), mean of %d\n"
           "cpu_us:   agent CPU per round: process CPU during the round minus the threads' own\n"
           "          (their CPU rate between rounds); the handlers plus the sampler thread\n"
           "smp_cpu:  CPU of the thread that takes the round (lists, /proc, signals, resolves)\n"
           "us/thread, ns/frame: round_us per listed thread / per frame of the round\n"
           "base_us:  serial signal round trip to every thread (no unwinding), same threads\n"
           "ratio:    round_us / base_us; cpu/b: cpu_us / base_us\n"
           "signalled / reused: stacks per round\n"
           "rss_KiB:  VmRSS growth from before the first round of the case to after its last\n"
           "          (the first case includes loading the symbol tables)\n", rounds);
    ss_native_release();
    return 0;
}
