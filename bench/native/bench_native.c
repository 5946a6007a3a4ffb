/* bench_native.c: the cost of native sampling, against the targets of the
 * copy design (STACKSHOT_UNWIND=copy), with ratios to a baseline measured
 * in the same run on the same threads: a serial signal round trip per
 * thread (signal one thread, wait for its handler's answer, next; no
 * unwinding).
 *
 *   A  100 threads x 50 frames, all blocked (condition variable), the
 *      first round that sees them (no stack known yet; symbol and unwind
 *      caches warm from threads of the same shape): time, signals sent.
 *   B  100 threads x 50 frames that ran since the last round (wake every
 *      10 ms, burn a few us): rounds with the signal path forced for all
 *      of them (as if all were running: handler copy + sampler-side
 *      unwind), and the time each handler took (median, p99); then the
 *      same threads as the sampler really takes them (most asleep, read
 *      without a signal), and with STACKSHOT_UNWIND=gcc / step (libgcc's
 *      or libunwind's unwinder in the handler) for comparison.
 *   C  1,000 threads x 20 frames, all blocked, first round; resident
 *      memory the agent added (VmRSS) and /proc descriptors kept.
 *      A and C also measure their floor on fresh threads of the same
 *      shape: the /proc and stack reads of a first round made by hand
 *      (floor_cpu_us), what no sampler of sleeping threads goes below.
 *   D  100 idle + 2 spinning threads, a round every second (the default
 *      interval): the agent's CPU (the sampling thread and the handlers
 *      in the spinners) per second.
 *   E  198 blocked + 2 spinning threads x 50 frames, a round every 20 ms:
 *      the agent's CPU per round with each exporter: the sampling thread,
 *      the handlers, and the exporter's work on the round (text: the
 *      consume that formats and writes the file; otlp_logs: the encoding
 *      of its requests, not the network; otlp_profiles: adding the round
 *      to the period, plus the period's encoding shared out over its
 *      rounds), all measured on this thread's CPU clock. Twice in the
 *      same run: with stack identities (what an exporter made of an
 *      unchanged stack is reused) and without (STACKSHOT_STACK_REUSE=
 *      false: everything formatted every round), on the same threads.
 *      Then the same host under the whole agent (stackshot_start, text
 *      exporter, 20 ms) for `repeats` seconds each way: the CPU clocks of
 *      all the agent's threads (sampler, fan-out, exporter) per round.
 *
 * usage: bench_native [repeats [cases]]   (default 5, ABCDE; e: E with reuse only). Prints a
 * table; asserts nothing. Run it alone on the machine for meaningful
 * figures. */
#define _GNU_SOURCE
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "samplers/ss_samplers.h"
#include "exporters/common/aggregate.h"
#include "exporters/otlp_logs/logs.h"
#include "exporters/profiles/encode.h"
#include "exporters/ss_exporters.h"
#include "include/stackshot.h"
#include "proc/threads.h"

extern const ss_exporter_ops ss_text_exporter;

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- host threads ------------------------------------------------ */

enum { IDLE, ACTIVE, SPIN };

typedef struct group {
    int n, depth, kind;
    pthread_t *t;
    pid_t *tids;
    atomic_int ready;
    atomic_int stop;
    pthread_mutex_t m;
    pthread_cond_t c;
} group;

typedef struct member {
    group *g;
    int index;
} member;

static void nap_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void at_the_bottom(member *me) {
    group *g = me->g;
    g->tids[me->index] = ss_gettid();
    atomic_fetch_add(&g->ready, 1);
    if (g->kind == SPIN) {
        volatile unsigned long x = 0;
        while (!atomic_load(&g->stop))
            x++;
        return;
    }
    if (g->kind == ACTIVE) {
        while (!atomic_load(&g->stop)) {
            volatile unsigned x = 0;
            for (int i = 0; i < 2000; i++)
                x += (unsigned)i;
            nap_us(10000);
        }
        return;
    }
    pthread_mutex_lock(&g->m);
    while (!atomic_load(&g->stop))
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

__attribute__((noinline)) static int bench_depth(member *me, int n) {
    if (n <= 1) {
        at_the_bottom(me);
        return 1;
    }
    return bench_depth(me, n - 1) + 1; /* not a tail call: one frame per level */
}

static void *thread_main(void *arg) {
    member *me = arg;
    bench_depth(me, me->g->depth);
    free(me);
    return NULL;
}

static void group_start(group *g, int n, int depth, int kind) {
    memset(g, 0, sizeof *g);
    g->n = n;
    g->depth = depth;
    g->kind = kind;
    g->t = calloc((size_t)n, sizeof *g->t);
    g->tids = calloc((size_t)n, sizeof *g->tids);
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    for (int i = 0; i < n; i++) {
        member *me = malloc(sizeof *me);
        me->g = g;
        me->index = i;
        pthread_create(&g->t[i], &a, thread_main, me);
    }
    pthread_attr_destroy(&a);
    while (atomic_load(&g->ready) < n)
        nap_us(1000);
    nap_us(50000); /* from the count into the wait */
}

static void group_stop(group *g) {
    atomic_store(&g->stop, 1);
    pthread_mutex_lock(&g->m);
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
    for (int i = 0; i < g->n; i++)
        pthread_join(g->t[i], NULL);
    free(g->t);
    free(g->tids);
}

/* ---- baseline: serial signal round trip -------------------------- */

static _Atomic uint32_t pong;
#define PONG_SIGNAL (SIGRTMAX - 5)

static void pong_handler(int sig) {
    (void)sig;
    int e = errno;
    atomic_fetch_add(&pong, 1);
    syscall(SYS_futex, (uint32_t *)&pong, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = e;
}

static double baseline_us(const group *g) {
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < g->n; i++) {
        uint32_t seen = atomic_load(&pong);
        syscall(SYS_tgkill, getpid(), g->tids[i], PONG_SIGNAL);
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

static ss_config cfg;

/* One round; its wall time in us, and the sampling thread's CPU. */
static double one_round(double *cpu_us, uint32_t *threads) {
    ss_round *r;
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = ss_mono_ns();
    int rc = ss_native_sample_once(&cfg, &r);
    uint64_t t1 = ss_mono_ns(), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    if (rc != 0) {
        fprintf(stderr, "bench_native: round failed: %d\n", rc);
        return -1;
    }
    if (threads)
        *threads = r->n_threads;
    ss_round_unref(r);
    if (cpu_us)
        *cpu_us = (double)(c1 - c0) / 1e3;
    return (double)(t1 - t0) / 1e3;
}

static void use_unwinder(const char *mode) {
    setenv("STACKSHOT_UNWIND", mode, 1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, uint32_t n, double p) {
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    uint32_t i = (uint32_t)(p * (n - 1) + 0.5);
    return v[i];
}

static void row(const char *what, const char *target, double value, const char *unit,
                double base_us, const char *note) {
    if (strcmp(unit, "%1c") == 0) /* a share of one CPU, in percent */
        printf("%-58s %-12s %10.4f %-4s", what, target, value, "%");
    else
        printf("%-58s %-12s %10.1f %-4s", what, target, value, unit);
    if (base_us > 0)
        printf(" %7.2fx", value / base_us * (strcmp(unit, "ms") == 0 ? 1000 : 1));
    else
        printf(" %8s", "");
    printf("  %s\n", note ? note : "");
}

/* ---- the cases --------------------------------------------------- */

/* The floor of a first round: what the kernel takes for the reads no
 * sampler of sleeping threads can do without, made by hand on fresh
 * threads (their /proc entries not made yet), on this thread's CPU clock:
 * the listing of /proc/self/task, and per thread its CPU clock (before and
 * after), its stat and its syscall line (each opened through the task
 * directory, read once, closed) and its stack from the syscall line's SP
 * to the top of its stack (one pread of /proc/self/mem, at most 64 KiB).
 * No checks, no unwinding, no symbols. */
static double floor_cpu_us(const group *g) {
    static char stack[65536];
    char buf[1024], path[48], dents[4096];
    uint64_t *tops = calloc((size_t)g->n, sizeof *tops);
    for (int i = 0; i < g->n; i++) {
        pthread_attr_t a;
        void *lo;
        size_t size;
        if (pthread_getattr_np(g->t[i], &a) == 0) {
            if (pthread_attr_getstack(&a, &lo, &size) == 0)
                tops[i] = (uint64_t)(uintptr_t)lo + size;
            pthread_attr_destroy(&a);
        }
    }
    volatile ssize_t sink = 0;
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    int list = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (syscall(SYS_getdents64, list, dents, sizeof dents) > 0)
        ;
    close(list);
    for (int i = 0; i < g->n; i++) {
        pid_t tid = g->tids[i];
        sink += (ssize_t)ss_thread_cpu_ns(tid);
        snprintf(path, sizeof path, "%d/stat", (int)tid);
        int fd = openat(dir, path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            sink += pread(fd, buf, sizeof buf, 0);
            close(fd);
        }
        snprintf(path, sizeof path, "%d/syscall", (int)tid);
        fd = openat(dir, path, O_RDONLY | O_CLOEXEC);
        uint64_t sp = 0;
        if (fd >= 0) {
            ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
            close(fd);
            buf[n > 0 ? n : 0] = '\0';
            char *q = buf; /* "nr a1 .. a6 sp pc": the 8th field */
            for (int f = 0; f < 7 && q; f++)
                q = strchr(q + 1, ' ');
            sp = q ? strtoull(q + 1, NULL, 16) : 0;
        }
        if (sp && sp < tops[i]) {
            uint64_t len = tops[i] - sp < sizeof stack ? tops[i] - sp : sizeof stack;
            sink += pread(mem, stack, (size_t)len, (off_t)sp);
        }
        sink += (ssize_t)ss_thread_cpu_ns(tid);
    }
    close(mem);
    close(dir);
    uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    free(tops);
    (void)sink;
    return (double)(c1 - c0) / 1e3;
}

/* First round over fresh blocked threads (caches warm from a group of
 * the same shape). Returns the mean of `repeats`, and the worst. */
static void first_round(int n, int depth, int repeats, double *mean_us, double *worst_us,
                        double *base_us, uint64_t *signals, long *rss_kb, double *cpu_us,
                        double *floor_us) {
    group warm;
    group_start(&warm, n < 100 ? n : 100, depth, IDLE);
    for (int i = 0; i < 2; i++)
        one_round(NULL, NULL);
    group_stop(&warm);
    one_round(NULL, NULL); /* forget them */
    double sum = 0, worst = 0, base = 0;
    uint64_t sent = 0;
    long rss0 = vm_rss_kb(), rss = 0;
    for (int r = 0; r < repeats; r++) {
        group f; /* the floor, on threads of their own */
        group_start(&f, n, depth, IDLE);
        *floor_us += floor_cpu_us(&f) / repeats;
        group_stop(&f);
        group g;
        group_start(&g, n, depth, IDLE);
        ss_native_counts c0, c1;
        ss_native_sample_counts(&c0);
        double cpu;
        double us = one_round(&cpu, NULL);
        *cpu_us += cpu / repeats;
        ss_native_sample_counts(&c1);
        sent += c1.sent - c0.sent;
        sum += us;
        if (us > worst)
            worst = us;
        base += baseline_us(&g);
        long now = vm_rss_kb() - rss0;
        if (now > rss)
            rss = now;
        group_stop(&g);
        one_round(NULL, NULL);
    }
    *mean_us = sum / repeats;
    *worst_us = worst;
    *base_us = base / repeats;
    *signals = sent;
    *rss_kb = rss;
}

/* E: the 200-thread host at 20 ms, the agent's CPU per round per exporter. */
typedef struct e_cost {
    double sampler, handlers, text, logs, prof_add, prof_encode;
    uint64_t text_bytes;
    uint32_t rounds, threads;
    size_t memo_bytes; /* what otlp_logs' memo held at the end */
} e_cost;

static void e_measure(int rounds, bool reuse, e_cost *c) {
    memset(c, 0, sizeof *c);
    ss_stack_reuse_set(reuse);
    ss_config tcfg = cfg;
    snprintf(tcfg.output_dir, sizeof tcfg.output_dir, "/tmp/bench_native.%d", (int)getpid());
    ss_exporter_stats tstats;
    memset(&tstats, 0, sizeof tstats);
    void *text = NULL;
    if (ss_text_exporter.open(&text, &tcfg, &tstats) != 0)
        text = NULL;
    ss_otlp_resource res;
    bool have_res = ss_otlp_resource_build(&res) == 0;
    ss_logs_encoder enc;
    ss_logs_encoder_init(&enc);
    ss_buf req;
    ss_buf_init(&req);
    ss_agg *agg = ss_agg_create(cfg.max_memory / 4);
    for (int i = -3; i < rounds; i++) { /* 3 to settle: stacks known, memos filled */
        ss_round *r;
        ss_native_counts n0, n1;
        ss_native_sample_counts(&n0);
        uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (ss_native_sample_once(&cfg, &r) != 0) {
            fprintf(stderr, "bench_native: round failed\n");
            break;
        }
        uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (text)
            ss_text_exporter.consume(text, r);
        uint64_t c2 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (uint32_t first = 0; have_res && first < r->n_threads;) {
            uint32_t recs, dropped;
            int used = ss_logs_encode(&enc, &res, r, first, SS_LOGS_DEFAULT_BATCH,
                                      SS_LOGS_MAX_REQUEST, ss_wall_ns(), &req, &recs, &dropped);
            if (used <= 0)
                break;
            first += (uint32_t)used;
        }
        uint64_t c3 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        if (agg)
            ss_agg_add_round(agg, r);
        uint64_t c4 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        double hs[4096];
        ss_native_sample_counts(&n1); /* this round's handlers: the newest */
        uint64_t sent = n1.sent - n0.sent;
        uint32_t nh = ss_native_handler_ns(hs, sent < 4096 ? (uint32_t)sent : 4096);
        if (i >= 0) {
            c->sampler += (double)(c1 - c0) / 1e3;
            c->text += (double)(c2 - c1) / 1e3;
            c->logs += (double)(c3 - c2) / 1e3;
            c->prof_add += (double)(c4 - c3) / 1e3;
            for (uint32_t k = 0; k < nh; k++)
                c->handlers += hs[k] / 1e3;
            c->rounds++;
            c->threads = r->n_threads;
        }
        ss_round_unref(r);
        nap_us(20000);
    }
    if (agg && !ss_agg_empty(agg)) {
        ss_prof_request_opts o = {.version = SS_OTLP_PROF_V1DEVELOPMENT, .timestamps = true};
        ss_buf out;
        ss_buf_init(&out);
        uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        ss_otlp_profiles_encode(agg, &o, &out);
        c->prof_encode = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / 1e3;
        ss_buf_free(&out);
    }
    c->text_bytes = atomic_load(&tstats.bytes_sent);
    ss_memo_stats ms;
    ss_stack_memo_stats(enc.memo, &ms);
    c->memo_bytes = ms.bytes;
    ss_agg_destroy(agg);
    ss_buf_free(&req);
    ss_logs_encoder_free(&enc);
    if (have_res)
        ss_otlp_resource_free(&res);
    if (text)
        ss_text_exporter.close(text, 0);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tcfg.output_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_native: could not remove %s\n", tcfg.output_dir);
    ss_stack_reuse_set(true);
}

/* The CPU clocks of the agent's threads (registered as internal), summed. */
static uint64_t agent_threads_cpu(void) {
    pid_t *tids = NULL;
    size_t cap = 0;
    int n = ss_proc_list_tids(&tids, &cap);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (ss_internal_thread_is(tids[i])) {
            uint64_t c = ss_thread_cpu_ns(tids[i]);
            if (c != SS_UNKNOWN_U64)
                sum += c;
        }
    free(tids);
    return sum;
}

/* The whole agent (stackshot_start: sampler thread, fan-out, the text
 * exporter's thread writing its file) at 20 ms for `seconds`: the CPU of
 * all its threads per round (threads that exit meanwhile are not counted:
 * none do while it runs). */
static double e_agent_text(bool reuse, int seconds, uint64_t *rounds_out) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/bench_native_agent.%d", (int)getpid());
    setenv("STACKSHOT_OUTPUT_DIR", dir, 1);
    setenv("STACKSHOT_EXPORTERS", "text", 1);
    setenv("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "20", 1);
    setenv("STACKSHOT_LOG_LEVEL", "warn", 1);
    ss_stack_reuse_set(reuse);
    if (stackshot_start() != 0)
        return -1;
    nap_us(1000000); /* its first rounds: threads seen, memos filled */
    ss_native_counts c0, c1;
    ss_native_sample_counts(&c0);
    uint64_t cpu0 = agent_threads_cpu();
    nap_us((long)seconds * 1000000);
    uint64_t cpu1 = agent_threads_cpu();
    ss_native_sample_counts(&c1);
    stackshot_stop();
    ss_stack_reuse_set(true);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_native: could not remove %s\n", dir);
    uint64_t rounds = c1.rounds - c0.rounds;
    *rounds_out = rounds;
    return rounds ? (double)(cpu1 - cpu0) / 1e3 / (double)rounds : -1;
}

static void case_e(int repeats, bool reuse_only) {
    ss_native_release(); /* a sampler of a 20 ms agent */
    cfg.interval_ms = 20;
    group blocked, spin;
    group_start(&blocked, 198, 50, IDLE);
    group_start(&spin, 2, 50, SPIN);
    int rounds = repeats * 20;
    e_cost on, off;
    /* baseline first, each twice (the second counts): caches warm for both */
    for (int i = 0; i < 2; i++) {
        if (!reuse_only)
            e_measure(rounds, false, &off);
        e_measure(rounds, true, &on);
    }
    if (reuse_only)
        off = on;
    const e_cost *cs[2] = {&off, &on};
    const char *label[2] = {"everything formatted (STACKSHOT_STACK_REUSE=false)",
                            "unchanged stacks reused"};
    double total[2][3];
    for (int m = reuse_only ? 1 : 0; m < 2; m++) {
        const e_cost *c = cs[m];
        double n = c->rounds ? c->rounds : 1;
        double base = (c->sampler + c->handlers) / n;
        /* the period's encoding shared out over its rounds */
        double prof = c->prof_add / n + c->prof_encode / n;
        total[m][0] = base + c->text / n;
        total[m][1] = base + c->logs / n;
        total[m][2] = base + prof;
        char note[200];
        snprintf(note, sizeof note,
                 "%s: %u threads; sampler %.0f + handlers %.0f us/round; %.0f KB text/round; "
                 "otlp_logs memo %.0f KB",
                 label[m], c->threads, c->sampler / n, c->handlers / n,
                 (double)c->text_bytes / n / 1e3, (double)c->memo_bytes / 1e3);
        printf("%s\n", note);
        char what[100];
        const char *names[3] = {"text", "otlp_logs", "otlp_profiles"};
        double exp_us[3] = {c->text / n, c->logs / n, prof};
        for (int x = 0; x < 3; x++) {
            snprintf(what, sizeof what, "E 200 thr x 50, 20 ms, %s%s: agent CPU/round", names[x],
                     m ? "" : " (no reuse)");
            snprintf(note, sizeof note, "exporter %.0f us%s", exp_us[x],
                     x == 2 ? " (add + period encode / rounds)" : "");
            row(what, x < 2 ? "<= 1 ms" : "", total[m][x] / 1e3, "ms", 0, note);
        }
    }
    for (int x = 0; x < 3 && !reuse_only; x++)
        printf("E   %s: reused / formatted every round = %.2f\n",
               x == 0 ? "text" : x == 1 ? "otlp_logs" : "otlp_profiles",
               total[1][x] / total[0][x]);
    if (!reuse_only) {
        /* the same host under the whole agent, text exporter */
        ss_native_release();
        double agent[2];
        uint64_t n[2];
        for (int m = 0; m < 2; m++)
            agent[m] = e_agent_text(m == 1, repeats, &n[m]);
        char note[160];
        for (int m = 0; m < 2; m++) {
            snprintf(note, sizeof note,
                     "all agent threads over %llu rounds (sampler, fan-out, exporter%s)",
                     (unsigned long long)n[m], m ? "" : "; STACKSHOT_STACK_REUSE=false");
            row(m ? "E agent running, text: agent threads' CPU/round"
                  : "E agent running, text (no reuse): agent threads' CPU/round",
                "<= 1 ms", agent[m] / 1e3, "ms", 0, note);
        }
        if (agent[0] > 0 && agent[1] > 0)
            printf("E   agent running, text: reused / formatted every round = %.2f\n",
                   agent[1] / agent[0]);
    }
    group_stop(&spin);
    group_stop(&blocked);
    one_round(NULL, NULL);
    ss_native_release();
    cfg.interval_ms = 1000;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 5;
    if (repeats < 1)
        repeats = 1;
    const char *cases = argc > 2 ? argv[2] : "ABCDE";
    ss_log_set_level(SS_LOG_WARN);
    ss_config_load(&cfg);
    cfg.enabled = true;
    cfg.interval_ms = 1000;
    signal(PONG_SIGNAL, pong_handler);
    use_unwinder("copy");

    printf("%-58s %-12s %10s %-4s %8s\n", "case", "target", "measured", "", "/base");

    /* A */
    if (strchr(cases, 'A')) {
    double a_mean, a_worst, a_base, a_cpu = 0, a_floor = 0;
    uint64_t a_signals;
    long a_rss;
    first_round(100, 50, repeats, &a_mean, &a_worst, &a_base, &a_signals, &a_rss, &a_cpu,
                &a_floor);
    char note[160];
    snprintf(note, sizeof note,
             "sampler CPU %.2f ms, worst %.2f ms; %llu signals sent in %d first rounds; base %.2f ms",
             a_cpu / 1e3, a_worst / 1e3, (unsigned long long)a_signals, repeats, a_base / 1e3);
    row("A 100 blocked x 50, first round", "<= 1.5 ms", a_mean / 1e3, "ms", a_base, note);
    snprintf(note, sizeof note,
             "CPU; the sampler's CPU is %.2fx it (%.1f us a thread, the floor %.1f us)",
             a_cpu / a_floor, a_cpu / 100, a_floor / 100);
    row("A   floor: its /proc reads and stack reads by hand", "", a_floor / 1e3, "ms", 0, note);
    }
    char note[160];

    /* B */
    if (strchr(cases, 'B')) {
    group b;
    group_start(&b, 100, 50, ACTIVE);
    double base_b = 0;
    for (int i = 0; i < repeats; i++)
        base_b += baseline_us(&b);
    base_b /= repeats;
    const char *modes[] = {"copy", "copy", "gcc", "step"};
    for (int m = 0; m < 4; m++) {
        bool forced = m == 0;
        use_unwinder(modes[m]);
        ss_native_bench_force_signal(forced);
        for (int i = 0; i < 3; i++) { /* warm-up: caches, settled stacks */
            one_round(NULL, NULL);
            nap_us(20000);
        }
        ss_native_counts c0, c1;
        ss_native_sample_counts(&c0);
        double sum = 0, cpu_sum = 0;
        for (int i = 0; i < repeats * 4; i++) {
            double cpu;
            sum += one_round(&cpu, NULL);
            cpu_sum += cpu;
            nap_us(20000);
        }
        ss_native_sample_counts(&c1);
        int rounds = repeats * 4;
        double mean = sum / rounds;
        snprintf(note, sizeof note, "%.1f signals, %.1f read asleep per round; sampler CPU %.2f ms",
                 (double)(c1.sent - c0.sent) / rounds, (double)(c1.asleep - c0.asleep) / rounds,
                 cpu_sum / rounds / 1e3);
        char what[80];
        snprintf(what, sizeof what, "B 100 ran x 50, %s%s", modes[m],
                 forced ? ": all signalled and copied" : m == 1 ? ": as sampled" : " in the handler");
        row(what, forced ? "<= 2 ms" : "", mean / 1e3, "ms", base_b, note);
        if (forced) {
            double ns[4096];
            uint32_t n = ss_native_handler_ns(ns, 4096);
            double med = pct(ns, n, 0.5), p99 = pct(ns, n, 0.99);
            snprintf(note, sizeof note, "over %u handlers", n);
            row("B   time in the copy handler, median", "<= 5 us", med / 1e3, "us", 0, note);
            row("B   time in the copy handler, p99", "<= 20 us", p99 / 1e3, "us", 0, note);
        }
    }
    ss_native_bench_force_signal(false);
    use_unwinder("copy");
    printf("%-58s %-12s %10.1f %-4s\n", "B   baseline: serial signal round trip, 100 threads", "",
           base_b / 1e3, "ms");
    group_stop(&b);
    one_round(NULL, NULL);
    }

    /* C */
    if (strchr(cases, 'C')) {
    double c_mean, c_worst, c_base, c_cpu = 0, c_floor = 0;
    uint64_t c_signals;
    long c_rss;
    int c_rep = repeats < 3 ? repeats : 3;
    first_round(1000, 20, c_rep, &c_mean, &c_worst, &c_base, &c_signals, &c_rss, &c_cpu,
                &c_floor);
    snprintf(note, sizeof note,
             "sampler CPU %.2f ms, worst %.2f ms; %llu signals in %d first rounds; base %.2f ms",
             c_cpu / 1e3, c_worst / 1e3, (unsigned long long)c_signals, c_rep, c_base / 1e3);
    row("C 1000 blocked x 20, first round", "<= 15 ms", c_mean / 1e3, "ms", c_base, note);
    snprintf(note, sizeof note,
             "CPU; the sampler's CPU is %.2fx it (%.1f us a thread, the floor %.1f us)",
             c_cpu / c_floor, c_cpu / 1000, c_floor / 1000);
    row("C   floor: its /proc reads and stack reads by hand", "", c_floor / 1e3, "ms", 0, note);
    {
        /* a fresh sampler (its symbol tables too), 1000 threads */
        ss_native_release();
        malloc_trim(0);
        group g;
        group_start(&g, 1000, 20, IDLE);
        long rss0 = vm_rss_kb();
        for (int i = 0; i < 3; i++)
            one_round(NULL, NULL);
        long agent_kb = vm_rss_kb() - rss0;
        ss_native_counts cc;
        ss_native_sample_counts(&cc);
        snprintf(note, sizeof note,
                 "VmRSS added by a fresh sampler's first 3 rounds (symbols included); cap "
                 "STACKSHOT_MAX_MEMORY %llu MiB",
                 (unsigned long long)(cfg.max_memory >> 20));
        row("C   agent resident memory, 1000 threads", "in the cap", (double)agent_kb / 1024.0,
            "MiB", 0, note);
        group_stop(&g);
        one_round(NULL, NULL);
    }
    }

    /* D */
    if (strchr(cases, 'D')) {
        group idle, spin;
        group_start(&idle, 100, 20, IDLE);
        group_start(&spin, 2, 20, SPIN);
        for (int i = 0; i < 3; i++) {
            one_round(NULL, NULL);
            nap_us(1000000);
        }
        double cpu_sum = 0, wall = 0, handlers = 0;
        uint64_t p0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID), w0 = ss_mono_ns();
        int rounds = repeats;
        for (int i = 0; i < rounds; i++) {
            double cpu;
            one_round(&cpu, NULL);
            cpu_sum += cpu;
            double ns[8];
            uint32_t n = ss_native_handler_ns(ns, 2);
            for (uint32_t k = 0; k < n; k++)
                handlers += ns[k] / 1e3;
            nap_us(1000000);
        }
        wall = (double)(ss_mono_ns() - w0) / 1e3;
        double host_cpu = (double)(clock_ns(CLOCK_PROCESS_CPUTIME_ID) - p0) / 1e3;
        double agent = cpu_sum + handlers;
        snprintf(note, sizeof note,
                 "of one CPU; %.0f us per round (%.0f in handlers); %.4f %% of the host's CPU",
                 agent / rounds,
                 handlers / rounds, 100.0 * agent / host_cpu);
        row("D 100 idle + 2 spinning, 1 s interval: agent CPU", "< 0.1 %", 100.0 * agent / wall, "%1c",
            0, note);
        group_stop(&spin);
        group_stop(&idle);
    }
    if (strchr(cases, 'E') || strchr(cases, 'e'))
        case_e(repeats, !strchr(cases, 'E')); /* e: with reuse only (perf record) */
    printf("\nA, C: a round over threads the sampler has not seen yet (their stacks read from\n"
           "      /proc without a signal); the mean of the repeats. B: rounds every 20 ms over\n"
           "      threads that ran since the last one. /base: ratio to the serial signal round\n"
           "      trip to the same threads (no unwinding), measured in this run. D: the agent's\n"
           "      CPU (sampling thread + handlers) over wall time, as a share of one CPU.\n");
    ss_native_release();
    return 0;
}
