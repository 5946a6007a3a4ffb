/* bench_footprint.c: what the preloaded agent costs a process that does
 * not profile anything yet, or only a little: ratios against the same
 * command without the agent, measured in the same run, configurations
 * interleaved (A B C A B C ...) so that the machine's load falls on all.
 *
 *   /bin/true x N       spawn and wait, N times (the agent is armed and
 *                       never starts: the run is shorter than one round)
 *                       with STACKSHOT_EXPORTERS=text and with the default
 *                       (otlp_logs)
 *   fork()+_exit        a process forks N children that _exit at once,
 *                       with the agent armed (before its first round: a
 *                       loop that forks often, whose children get no start
 *                       thread at fork after the 8th of a second) and
 *                       running (text, 100 ms interval); the floor: the
 *                       same process without the agent but with one idle
 *                       thread of its own (what any agent with a thread
 *                       costs a single-threaded host's fork), and with the
 *                       libraries the agent's core maps and two idle
 *                       threads (what its presence alone costs); and
 *                       running with the default exporter (otlp_logs over
 *                       gRPC, to a closed port) with gRPC in its helper
 *                       process and, STACKSHOT_GRPC_HELPER=false, in the
 *                       host
 *   resident memory     VmRSS of an idle process after 1.5 s with the
 *                       agent running (text, 100 ms interval), and after
 *                       7 s (the resolver releases libdw's tables once no
 *                       address has missed its cache for 5 s)
 *   busy host children  a host with two computing threads forks children
 *                       that exit(0) at once (destructors run), with the
 *                       agent running at 10 ms and at 1 s: per child,
 *                       right after the agent's start and from 3 s after
 *                       it (its first rounds' one-time work done)
 *   make -j2            20 tiny C files compiled and linked (make -B), the
 *                       agent at 10 ms and at the default 1 s
 *   xz -T2              24 MB of pseudo-random bytes compressed by two
 *                       threads that block every signal (liblzma's): the
 *                       kernel samples them (a perf event on each), the
 *                       agent at 10 ms and at the default 1 s
 *
 * Each is measured without the agent, with an empty preloaded library
 * (libss_bench_empty.so, next to this program: the floor any preloaded
 * library pays) and with the agent, in the same run; ratios against both.
 *
 * usage: bench_footprint <libstackshot.so> [spawns=200] [repeats=7] [before.so]
 * With a fourth argument (another build's libstackshot.so: the library of
 * before a change), the busy host's children and fork()+_exit with the
 * agent running are measured with it too, interleaved in the same run.
 * The fork-per-connection host (pgbench -C) is bench/footprint/pgbench.sh.
 * A run that has not ended within 120 s is killed with its process group,
 * with one line on stderr (its figure then reads 0). Prints a table; never
 * a test. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tests/common/host_threads.h"

extern char **environ;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- environments ----------------------------------------------------- */

#define MAX_ENV 512
typedef struct env {
    char *v[MAX_ENV];
    int n;
} env;

static void env_base(env *e) {
    e->n = 0;
    for (char **p = environ; *p && e->n < MAX_ENV - 16; p++)
        if (strncmp(*p, "SPLUNK_", 7) && strncmp(*p, "STACKSHOT_", 10) &&
            strncmp(*p, "OTEL_", 5) && strncmp(*p, "LD_PRELOAD=", 11))
            e->v[e->n++] = *p;
    e->v[e->n] = NULL;
}

static void env_add(env *e, const char *kv) {
    e->v[e->n++] = strdup(kv);
    e->v[e->n] = NULL;
}

static void env_agent(env *e, const char *lib, const char *exporters, const char *out) {
    env_base(e);
    char buf[1200];
    snprintf(buf, sizeof buf, "LD_PRELOAD=%s", lib);
    env_add(e, buf);
    env_add(e, "SPLUNK_PROFILER_ENABLED=true");
    if (exporters) {
        snprintf(buf, sizeof buf, "STACKSHOT_EXPORTERS=%s", exporters);
        env_add(e, buf);
    }
    snprintf(buf, sizeof buf, "STACKSHOT_OUTPUT_DIR=%s", out);
    env_add(e, buf);
    /* otlp_logs to a port nothing listens on: never reached by these runs */
    env_add(e, "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9");
}

/* ---- running a command ------------------------------------------------ */

/* A run that has not ended after this long is killed with everything it
 * started (its process group), with one line: a hung host (a child blocked
 * for good in exit, say) must not hold the whole benchmark. */
#ifndef RUN_TIMEOUT_S
#define RUN_TIMEOUT_S 120
#endif
static volatile sig_atomic_t run_timed_out;

static void on_alarm(int sig) {
    (void)sig;
    run_timed_out = 1;
}

/* Called when a read or wait was interrupted: the group killed once. */
static void kill_if_late(pid_t pid, char *const argv[], bool *killed) {
    if (!run_timed_out || *killed)
        return;
    *killed = true;
    fprintf(stderr, "bench_footprint: %s %s did not end within %d s: killed with its process group\n",
            argv[0], argv[1] ? argv[1] : "", RUN_TIMEOUT_S);
    kill(-pid, SIGKILL);
}

static int run(char *const argv[], char *const envp[], char *out, size_t out_len) {
    int fds[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out) {
        if (pipe(fds) != 0)
            return -1;
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
    }
    posix_spawnattr_t sa;
    posix_spawnattr_init(&sa);
    posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETPGROUP); /* its own group: killed whole */
    posix_spawnattr_setpgroup(&sa, 0);
    run_timed_out = 0;
    alarm(RUN_TIMEOUT_S);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, &sa, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&sa);
    if (rc != 0) {
        alarm(0);
        return -1;
    }
    bool killed = false;
    if (out) {
        close(fds[1]);
        size_t got = 0;
        ssize_t r;
        while (got < out_len - 1 && ((r = read(fds[0], out + got, out_len - 1 - got)) > 0 ||
                                     (r < 0 && errno == EINTR))) {
            if (r > 0)
                got += (size_t)r;
            else
                kill_if_late(pid, argv, &killed);
        }
        out[got] = '\0';
        close(fds[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        kill_if_late(pid, argv, &killed);
    alarm(0);
    return !killed && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* The wall time of argv under four configurations, runs interleaved (A B
 * C D A B C D ...), at most five of each (n asked): the medians. */
static void median_runs(char *const argv[], env *const cfg[4], int n, uint64_t med[4]) {
    uint64_t t[4][64];
    int rn = n < 5 ? n : 5;
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 4; c++) {
            uint64_t t0 = now_ns();
            run(argv, cfg[c]->v, NULL, 0);
            t[c][r] = now_ns() - t0;
        }
    for (int c = 0; c < 4; c++)
        med[c] = median(t[c], rn);
}

/* ---- child modes ------------------------------------------------------ */

/* Sleep until ms from now, whatever interrupts (an EINTR is not ours to
 * measure here). */
static void sleep_ms(long ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
}

static int child_fork_loop(int n) {
    sleep_ms(400); /* the agent starts and runs */
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        int st;
        waitpid(p, &st, 0);
    }
    printf("%llu\n", (unsigned long long)((now_ns() - t0) / (uint64_t)n));
    return 0;
}

/* The floor of any agent that has a thread of its own: the same loop in a
 * host (no agent) with one idle thread. glibc's fork of a multi-threaded
 * process takes its locks and resets them in the child, the kernel
 * flushes the TLBs of the CPUs the process has run on, and the child's
 * exit waits for nothing more. */
static void *idle_thread(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int child_fork_loop_thread(int n) {
    pthread_t t;
    if (pthread_create(&t, NULL, idle_thread, NULL) != 0)
        return 1;
    return child_fork_loop(n);
}

/* The same floor without a thread left: the host made one thread, which
 * ended and was joined, before its loop. glibc stays on its multi-threaded
 * fork path for good once a process has made a thread, so an agent whose
 * threads lived only for its rounds would not give a host the fork of a
 * single-threaded process back. */
static void *no_op(void *arg) { return arg; }

static int child_fork_loop_exited(int n) {
    pthread_t t;
    if (pthread_create(&t, NULL, no_op, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    return child_fork_loop(n);
}

/* The rest of what the agent's presence alone costs a fork, without the
 * agent: the libraries its core maps (libdw, libelf, libunwind and what
 * they need: libz, liblzma, libbz2) and two idle threads (the sampler and
 * the exporter). What the running agent costs beyond this is its own
 * memory and its at-fork work. */
static int child_fork_loop_libs(int n) {
    static const char *const libs[] = {"libdw.so.1", "libelf.so.1", "libunwind.so.8"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++)
        if (!dlopen(libs[i], RTLD_NOW | RTLD_LOCAL)) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, idle_thread, NULL) != 0)
            return 1;
    return child_fork_loop(n);
}

static atomic_bool spinning_done;

static void *spin(void *arg) {
    volatile unsigned long x = (unsigned long)(uintptr_t)arg;
    while (!atomic_load_explicit(&spinning_done, memory_order_relaxed))
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return NULL;
}

static uint64_t cpu_ns(const struct rusage *u) {
    return ((uint64_t)u->ru_utime.tv_sec + (uint64_t)u->ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)u->ru_utime.tv_usec + (uint64_t)u->ru_stime.tv_usec) * 1000ull;
}

/* Two threads compute; once the agent (if any) has started (and
 * settle_ms more: its first rounds done), n children that exit(0) at
 * once, one after the other. Prints the wall time per child and the CPU
 * time per child of the forking thread and the child together (what the
 * scheduler's choices between the computing threads, the parent and the
 * child do not move). */
static int child_busy_children(int n, long settle_ms) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, spin, (void *)(uintptr_t)(i + 1));
    sleep_ms(200);
    for (int i = 0; i < 400 && thread_named("stackshot-start"); i++)
        sleep_ms(10);
    if (settle_ms > 0)
        sleep_ms(settle_ms);
    struct rusage self0, kids0, self1, kids1;
    getrusage(RUSAGE_THREAD, &self0);
    getrusage(RUSAGE_CHILDREN, &kids0);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0)
            exit(0);
        int st;
        waitpid(p, &st, 0);
    }
    uint64_t per = (now_ns() - t0) / (uint64_t)n;
    getrusage(RUSAGE_THREAD, &self1);
    getrusage(RUSAGE_CHILDREN, &kids1);
    uint64_t cpu = (cpu_ns(&self1) - cpu_ns(&self0) + cpu_ns(&kids1) - cpu_ns(&kids0)) / (uint64_t)n;
    atomic_store(&spinning_done, true);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("%llu %llu\n", (unsigned long long)per, (unsigned long long)cpu);
    return 0;
}

/* 20 tiny C files and a Makefile in dir. */
static int make_project(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/Makefile", dir);
    FILE *mk = fopen(path, "w");
    if (!mk)
        return -1;
    fprintf(mk, "SRC := $(wildcard f*.c) main.c\nOBJ := $(SRC:.c=.o)\n"
                "prog: $(OBJ)\n\tcc -o $@ $(OBJ)\n%%.o: %%.c\n\tcc -O0 -c $< -o $@\n");
    fclose(mk);
    for (int i = 0; i < 20; i++) {
        snprintf(path, sizeof path, "%s/f%02d.c", dir, i);
        FILE *f = fopen(path, "w");
        if (!f)
            return -1;
        fprintf(f, "int f%02d(int x) { return x * %d + 1; }\n", i, i + 3);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/main.c", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "int main(void) { return 0; }\n");
    fclose(f);
    return 0;
}

static int child_rss(int ms) {
    sleep_ms(ms);
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long rss = 0, anon = 0, file = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            rss = strtoul(line + 6, NULL, 10);
        else if (strncmp(line, "RssAnon:", 8) == 0)
            anon = strtoul(line + 8, NULL, 10);
        else if (strncmp(line, "RssFile:", 8) == 0)
            file = strtoul(line + 8, NULL, 10);
    }
    if (f)
        fclose(f);
    printf("%lu %lu %lu\n", rss, anon, file);
    return 0;
}

/* The busy host (--busy-children) under each of nc configurations, n
 * times, interleaved: the medians of its wall and CPU time per child. */
static void run_busy(char **argv, env **cfg, int nc, int n, uint64_t *wall, uint64_t *cpu) {
    uint64_t w[8][64], u[8][64];
    for (int r = 0; r < n; r++)
        for (int c = 0; c < nc; c++) {
            char buf[64], *end;
            run(argv, cfg[c]->v, buf, sizeof buf);
            w[c][r] = strtoull(buf, &end, 10);
            u[c][r] = strtoull(end, NULL, 10);
        }
    for (int c = 0; c < nc; c++) {
        wall[c] = median(w[c], n);
        cpu[c] = median(u[c], n);
    }
}

/* ---- main ------------------------------------------------------------- */

int main(int argc, char **argv) {
    struct sigaction alrm = {.sa_handler = on_alarm}; /* no SA_RESTART: reads and waits end */
    sigaction(SIGALRM, &alrm, NULL);
    if (argc > 2 && strcmp(argv[1], "--fork-loop") == 0)
        return child_fork_loop(atoi(argv[2]));
    if (argc > 1 && strcmp(argv[1], "--rss") == 0)
        return child_rss(argc > 2 ? atoi(argv[2]) : 1500);
    if (argc > 2 && strcmp(argv[1], "--fork-loop-thread") == 0)
        return child_fork_loop_thread(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "--fork-loop-exited") == 0)
        return child_fork_loop_exited(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "--fork-loop-libs") == 0)
        return child_fork_loop_libs(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "--busy-children") == 0)
        return child_busy_children(atoi(argv[2]), argc > 3 ? atol(argv[3]) : 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s <libstackshot.so> [spawns=200] [repeats=7]\n", argv[0]);
        return 2;
    }
    /* absolute: make -C and the children it starts change directory */
    static char lib_abs[PATH_MAX], before_abs[PATH_MAX];
    const char *lib = realpath(argv[1], lib_abs) ? lib_abs : argv[1];
    int spawns = argc > 2 ? atoi(argv[2]) : 200;
    int repeats = argc > 3 ? atoi(argv[3]) : 7;
    const char *before = argc <= 4 ? NULL : realpath(argv[4], before_abs) ? before_abs : argv[4];
    char out[] = "/tmp/bench-footprint-XXXXXX";
    if (!mkdtemp(out))
        return 1;
    char self[1024];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';

    /* the empty library: next to this program */
    char empty_lib[1100];
    snprintf(empty_lib, sizeof empty_lib, "%s", self);
    char *slash = strrchr(empty_lib, '/');
    snprintf(slash ? slash + 1 : empty_lib, sizeof empty_lib - (size_t)(slash ? slash + 1 - empty_lib : 0),
             "libss_bench_empty.so");
    if (access(empty_lib, R_OK) != 0) {
        fprintf(stderr, "no %s (built with this program)\n", empty_lib);
        return 1;
    }
    env none, empty, text, dflt, running;
    env_base(&none);
    env_base(&empty);
    {
        char buf[1200];
        snprintf(buf, sizeof buf, "LD_PRELOAD=%s", empty_lib);
        env_add(&empty, buf);
    }
    env_agent(&text, lib, "text", out);
    env_agent(&dflt, lib, NULL, out);
    env_agent(&running, lib, "text", out);
    env_add(&running, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");

    /* 1. /bin/true */
    char *true_argv[] = {"/bin/true", NULL};
    uint64_t t_none[64], t_text[64], t_dflt[64], t_empty[64];
    env *cfg[4] = {&none, &text, &dflt, &empty};
    uint64_t *res[4] = {t_none, t_text, t_dflt, t_empty};
    for (int r = 0; r < repeats && r < 64; r++)
        for (int c = 0; c < 4; c++) {
            uint64_t t0 = now_ns();
            for (int i = 0; i < spawns; i++)
                run(true_argv, cfg[c]->v, NULL, 0);
            res[c][r] = (now_ns() - t0) / (uint64_t)spawns;
        }
    int n = repeats < 64 ? repeats : 64;
    uint64_t m_none = median(t_none, n), m_text = median(t_text, n), m_dflt = median(t_dflt, n);
    uint64_t m_empty = median(t_empty, n);

    /* 1b. a busy host's short-lived children, the agent running in it */
    env at10, at1s;
    env_agent(&at10, lib, "text", out);
    env_add(&at10, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=10");
    env_agent(&at1s, lib, "text", out);
    char *busy_argv[] = {self, "--busy-children", "100", NULL};
    env before10, before_running;
    env_agent(&before10, before ? before : lib, "text", out);
    env_add(&before10, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=10");
    env_agent(&before_running, before ? before : lib, "text", out);
    env_add(&before_running, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");
    env *bcfg[5] = {&none, &empty, &at10, &at1s, &before10};
    int nb = before ? 5 : 4;
    uint64_t mb[5] = {0}, mbc[5] = {0};
    run_busy(busy_argv, bcfg, nb, n, mb, mbc);
    /* the same once the agent's first rounds are done (3 s after its
     * start): a child's own cost, without the first rounds' one-time work
     * (libdw reading DWARF) competing for the two CPUs */
    char *settled_argv[] = {self, "--busy-children", "100", "3000", NULL};
    env *scfg[2] = {&at10, &at1s};
    uint64_t ms_[2] = {0}, msc[2] = {0};
    run_busy(settled_argv, scfg, 2, n, ms_, msc);

    /* 1c. make -j2 of 20 tiny files */
    char proj[1100];
    snprintf(proj, sizeof proj, "%s/make", out);
    mkdir(proj, 0755);
    uint64_t mm[4] = {0};
    if (make_project(proj) == 0 && access("/usr/bin/make", X_OK) == 0) {
        char *make_argv[] = {"/usr/bin/make", "-s", "-B", "-j2", "-C", proj, NULL};
        env *mcfg[4] = {&none, &empty, &at10, &text};
        median_runs(make_argv, mcfg, n, mm);
    }

    /* 1d. xz -T2: threads that block every signal, sampled by the kernel */
    char xz_in[1100];
    snprintf(xz_in, sizeof xz_in, "%s/xz-data.bin", out);
    uint64_t mx[4] = {0};
    FILE *xf = access("/usr/bin/xz", X_OK) == 0 ? fopen(xz_in, "wb") : NULL;
    if (xf) {
        uint64_t x = 88172645463325252ull; /* xorshift: incompressible, the same every run */
        for (int i = 0; i < (24 << 20) / 8; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            fwrite(&x, 8, 1, xf);
        }
        fclose(xf);
        char *xz_argv[] = {"/usr/bin/xz", "-6", "-T2", "--block-size=4MiB", "-k", "-f", "-q",
                           xz_in, NULL};
        env *xcfg[4] = {&none, &empty, &at10, &at1s};
        median_runs(xz_argv, xcfg, n, mx);
    }

    /* 2. fork()+_exit: the agent armed (before its first round), running,
     * and running without separate debuginfo */
    env armed, nodebug;
    env_agent(&armed, lib, "text", out);
    env_add(&armed, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=3600000");
    env_agent(&nodebug, lib, "text", out);
    env_add(&nodebug, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");
    env_add(&nodebug, "STACKSHOT_SYMBOLS_DEBUGINFO=false");
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", 2000);
    char *fork_argv[] = {self, "--fork-loop", nbuf, NULL};
    char *floor_argv[] = {self, "--fork-loop-thread", nbuf, NULL};
    char *libs_argv[] = {self, "--fork-loop-libs", nbuf, NULL};
    char *exited_argv[] = {self, "--fork-loop-exited", nbuf, NULL};
    env before_armed;
    env_agent(&before_armed, before ? before : lib, "text", out);
    env_add(&before_armed, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=3600000");
    env grpc_helper, grpc_host;
    env_agent(&grpc_helper, lib, NULL, out);
    env_add(&grpc_helper, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");
    env_agent(&grpc_host, lib, NULL, out);
    env_add(&grpc_host, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");
    env_add(&grpc_host, "STACKSHOT_GRPC_HELPER=false");
    /* 6: no agent, one idle thread of the host's (the floor); 8: no agent,
     * the agent's libraries and two idle threads; 9: no agent, a thread
     * that ended; 4 and 7: the library of before, running and armed; 10
     * and 11: the default exporter, gRPC in its helper and in the host */
    env *fcfg[12] = {&none, &armed, &running, &nodebug, &before_running,
                     &empty, &none, &before_armed, &none, &none, &grpc_helper, &grpc_host};
    char **fargv[12] = {fork_argv, fork_argv, fork_argv, fork_argv, fork_argv,
                        fork_argv, floor_argv, fork_argv, libs_argv, exited_argv,
                        fork_argv, fork_argv};
    uint64_t fk[12][64], mf[12] = {0};
    for (int r = 0; r < n; r++)
        for (int c = 0; c < 12; c++) {
            if (!before && (c == 4 || c == 7))
                continue;
            char buf[64];
            run(fargv[c], fcfg[c]->v, buf, sizeof buf);
            fk[c][r] = strtoull(buf, NULL, 10);
        }
    for (int c = 0; c < 12; c++)
        mf[c] = median(fk[c], n);

    /* 3. resident memory, idle process, agent running with text; again
     * without separate debuginfo (libc6-dbg's DWARF is most of it) */
    char *rss_argv[] = {self, "--rss", NULL};
    env *rcfg[3] = {&none, &running, &nodebug};
    unsigned long rss[3][3][8] = {{{0}}}; /* config, rss/anon/file, repeat */
    int rn = n < 3 ? n : 3;
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 3; c++) {
            char buf[96];
            run(rss_argv, rcfg[c]->v, buf, sizeof buf);
            sscanf(buf, "%lu %lu %lu", &rss[c][0][r], &rss[c][1][r], &rss[c][2][r]);
        }
    uint64_t mr[3][3];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            uint64_t v[8];
            for (int r = 0; r < rn; r++)
                v[r] = rss[c][k][r];
            mr[c][k] = median(v, rn);
        }
    /* the same after 7 s: libdw's tables released */
    char *rss7_argv[] = {self, "--rss", "7000", NULL};
    unsigned long rss7[3][3][8] = {{{0}}};
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 3; c++) {
            char buf[96];
            run(rss7_argv, rcfg[c]->v, buf, sizeof buf);
            sscanf(buf, "%lu %lu %lu", &rss7[c][0][r], &rss7[c][1][r], &rss7[c][2][r]);
        }
    uint64_t mr7[3][3];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            uint64_t v[8];
            for (int r = 0; r < rn; r++)
                v[r] = rss7[c][k][r];
            mr7[c][k] = median(v, rn);
        }

    printf("footprint of %s (%d spawns, %d repeats, medians)\n", lib, spawns, n);
    printf("%-36s %11s %11s %11s %7s %8s\n", "measure", "no agent", "empty lib", "agent",
           "/none", "/empty");
    const struct {
        const char *name;
        uint64_t none, empty, agent;
    } rows[] = {
        {"/bin/true, text (ms)", m_none, m_empty, m_text},
        {"/bin/true, default otlp_logs (ms)", m_none, m_empty, m_dflt},
        {"busy host child, agent 10 ms (ms)", mb[0], mb[1], mb[2]},
        {"busy host child, agent 1 s (ms)", mb[0], mb[1], mb[3]},
        {"  same, 10 ms, from 3 s after start", mb[0], mb[1], ms_[0]},
        {"  same, 1 s, from 3 s after start", mb[0], mb[1], ms_[1]},
        {"busy host child CPU, 10 ms (ms)", mbc[0], mbc[1], mbc[2]},
        {"busy host child CPU, 1 s (ms)", mbc[0], mbc[1], mbc[3]},
        {"  same, 10 ms, from 3 s after start", mbc[0], mbc[1], msc[0]},
        {"  same, 1 s, from 3 s after start", mbc[0], mbc[1], msc[1]},
        {"make -j2, 20 files, 10 ms (ms)", mm[0], mm[1], mm[2]},
        {"make -j2, 20 files, 1 s (ms)", mm[0], mm[1], mm[3]},
        {"xz -T2, 24 MB, 10 ms (ms)", mx[0], mx[1], mx[2]},
        {"xz -T2, 24 MB, 1 s (ms)", mx[0], mx[1], mx[3]},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("%-36s %11.3f %11.3f %11.3f %7.2f %8.2f\n", rows[i].name, rows[i].none / 1e6,
               rows[i].empty / 1e6, rows[i].agent / 1e6,
               rows[i].none ? (double)rows[i].agent / (double)rows[i].none : 0,
               rows[i].empty ? (double)rows[i].agent / (double)rows[i].empty : 0);
    printf("%-34s %12s %12s %8s %8s\n", "measure", "no agent", "agent", "ratio", "target");
    static const char *const fname[4] = {"", "fork()+_exit+wait, agent armed",
                                         "fork()+_exit+wait, agent running",
                                         "  same, SYMBOLS_DEBUGINFO=false"};
    for (int c = 1; c < 4; c++)
        printf("%-34s %10.1f us %10.1f us %8.2f %8s\n", fname[c], mf[0] / 1e3, mf[c] / 1e3,
               (double)mf[c] / (double)mf[0], "1.50");
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "  same, otlp_logs, gRPC helper", mf[0] / 1e3,
           mf[10] / 1e3, (double)mf[10] / (double)mf[0]);
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "  same, otlp_logs, gRPC in host", mf[0] / 1e3,
           mf[11] / 1e3, (double)mf[11] / (double)mf[0]);
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "fork()+_exit+wait, empty lib", mf[0] / 1e3,
           mf[5] / 1e3, (double)mf[5] / (double)mf[0]);
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "  floor: no agent, 1 idle thread", mf[0] / 1e3,
           mf[6] / 1e3, (double)mf[6] / (double)mf[0]);
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "  no agent, a thread that ended", mf[0] / 1e3,
           mf[9] / 1e3, (double)mf[9] / (double)mf[0]);
    printf("%-34s %10.1f us %10.1f us %8.2f\n", "  no agent, its libs, 2 threads", mf[0] / 1e3,
           mf[8] / 1e3, (double)mf[8] / (double)mf[0]);
    if (before) {
        printf("before: %s\n", before);
        printf("%-34s %11.3f %11.3f %11.3f %7.2f %8.2f\n", "busy host child, 10 ms, before (ms)",
               mb[0] / 1e6, mb[1] / 1e6, mb[4] / 1e6, (double)mb[4] / (double)mb[0],
               (double)mb[4] / (double)mb[1]);
        printf("%-34s %11.3f %11.3f %11.3f %7.2f %8.2f\n", "busy child CPU, 10 ms, before (ms)",
               mbc[0] / 1e6, mbc[1] / 1e6, mbc[4] / 1e6, (double)mbc[4] / (double)mbc[0],
               (double)mbc[4] / (double)mbc[1]);
        printf("%-34s %10.1f us %10.1f us %8.2f %8s\n", "fork()+_exit+wait, running, before",
               mf[0] / 1e3, mf[4] / 1e3, (double)mf[4] / (double)mf[0], "1.50");
        printf("%-34s %10.1f us %10.1f us %8.2f %8s\n", "fork()+_exit+wait, armed, before",
               mf[0] / 1e3, mf[7] / 1e3, (double)mf[7] / (double)mf[0], "1.50");
    }
    static const char *const rname[2] = {"resident memory, text, idle", "  same, SYMBOLS_DEBUGINFO=false"};
    for (int c = 1; c < 3; c++)
        printf("%-34s %9llu KiB %9llu KiB %+7lld KiB %6s  (anon %+lld, file %+lld KiB)\n",
               rname[c - 1], (unsigned long long)mr[0][0], (unsigned long long)mr[c][0],
               (long long)mr[c][0] - (long long)mr[0][0], "3 MiB",
               (long long)mr[c][1] - (long long)mr[0][1], (long long)mr[c][2] - (long long)mr[0][2]);
    static const char *const rname7[2] = {"resident memory, text, idle 7 s", "  same, SYMBOLS_DEBUGINFO=false"};
    for (int c = 1; c < 3; c++)
        printf("%-34s %9llu KiB %9llu KiB %+7lld KiB %6s  (anon %+lld, file %+lld KiB)\n",
               rname7[c - 1], (unsigned long long)mr7[0][0], (unsigned long long)mr7[c][0],
               (long long)mr7[c][0] - (long long)mr7[0][0], "3 MiB",
               (long long)mr7[c][1] - (long long)mr7[0][1], (long long)mr7[c][2] - (long long)mr7[0][2]);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", out);
    return 0;
}
