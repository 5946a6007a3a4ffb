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
 *                       with the agent running (text, 100 ms interval)
 *   resident memory     VmRSS of an idle process after 1.5 s with the
 *                       agent running (text, 100 ms interval)
 *
 * usage: bench_footprint <libstackshot.so> [spawns=200] [repeats=7]
 * The fork-per-connection host (pgbench -C) is bench/footprint/pgbench.sh.
 * Prints a table; never a test. */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    if (out) {
        close(fds[1]);
        size_t got = 0;
        ssize_t r;
        while (got < out_len - 1 && (r = read(fds[0], out + got, out_len - 1 - got)) > 0)
            got += (size_t)r;
        out[got] = '\0';
        close(fds[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
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

static int child_rss(void) {
    sleep_ms(1500);
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

/* ---- main ------------------------------------------------------------- */

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--fork-loop") == 0)
        return child_fork_loop(atoi(argv[2]));
    if (argc > 1 && strcmp(argv[1], "--rss") == 0)
        return child_rss();
    if (argc < 2) {
        fprintf(stderr, "usage: %s <libstackshot.so> [spawns=200] [repeats=7]\n", argv[0]);
        return 2;
    }
    const char *lib = argv[1];
    int spawns = argc > 2 ? atoi(argv[2]) : 200;
    int repeats = argc > 3 ? atoi(argv[3]) : 7;
    char out[] = "/tmp/bench-footprint-XXXXXX";
    if (!mkdtemp(out))
        return 1;
    char self[1024];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';

    env none, text, dflt, running;
    env_base(&none);
    env_agent(&text, lib, "text", out);
    env_agent(&dflt, lib, NULL, out);
    env_agent(&running, lib, "text", out);
    env_add(&running, "SPLUNK_PROFILER_CALL_STACK_INTERVAL=100");

    /* 1. /bin/true */
    char *true_argv[] = {"/bin/true", NULL};
    uint64_t t_none[64], t_text[64], t_dflt[64];
    env *cfg[3] = {&none, &text, &dflt};
    uint64_t *res[3] = {t_none, t_text, t_dflt};
    for (int r = 0; r < repeats && r < 64; r++)
        for (int c = 0; c < 3; c++) {
            uint64_t t0 = now_ns();
            for (int i = 0; i < spawns; i++)
                run(true_argv, cfg[c]->v, NULL, 0);
            res[c][r] = (now_ns() - t0) / (uint64_t)spawns;
        }
    int n = repeats < 64 ? repeats : 64;
    uint64_t m_none = median(t_none, n), m_text = median(t_text, n), m_dflt = median(t_dflt, n);

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
    env *fcfg[4] = {&none, &armed, &running, &nodebug};
    uint64_t fk[4][64], mf[4];
    for (int r = 0; r < n; r++)
        for (int c = 0; c < 4; c++) {
            char buf[64];
            run(fork_argv, fcfg[c]->v, buf, sizeof buf);
            fk[c][r] = strtoull(buf, NULL, 10);
        }
    for (int c = 0; c < 4; c++)
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

    printf("footprint of %s (%d spawns, %d repeats, medians)\n", lib, spawns, n);
    printf("%-34s %12s %12s %8s %8s\n", "measure", "no agent", "agent", "ratio", "target");
    printf("%-34s %10.3f ms %10.3f ms %8.2f %8s\n", "/bin/true, text", m_none / 1e6,
           m_text / 1e6, (double)m_text / (double)m_none, "1.30");
    printf("%-34s %10.3f ms %10.3f ms %8.2f %8s\n", "/bin/true, default (otlp_logs)",
           m_none / 1e6, m_dflt / 1e6, (double)m_dflt / (double)m_none, "1.50");
    static const char *const fname[4] = {"", "fork()+_exit+wait, agent armed",
                                         "fork()+_exit+wait, agent running",
                                         "  same, SYMBOLS_DEBUGINFO=false"};
    for (int c = 1; c < 4; c++)
        printf("%-34s %10.1f us %10.1f us %8.2f %8s\n", fname[c], mf[0] / 1e3, mf[c] / 1e3,
               (double)mf[c] / (double)mf[0], "1.50");
    static const char *const rname[2] = {"resident memory, text, idle", "  same, SYMBOLS_DEBUGINFO=false"};
    for (int c = 1; c < 3; c++)
        printf("%-34s %9llu KiB %9llu KiB %+7lld KiB %6s  (anon %+lld, file %+lld KiB)\n",
               rname[c - 1], (unsigned long long)mr[0][0], (unsigned long long)mr[c][0],
               (long long)mr[c][0] - (long long)mr[0][0], "3 MiB",
               (long long)mr[c][1] - (long long)mr[0][1], (long long)mr[c][2] - (long long)mr[0][2]);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", out);
    return 0;
}
