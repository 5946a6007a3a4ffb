/* thread_creds.c: do the agent's threads have the calling thread's
 * credentials? (asked by core/lifecycle.c when the loader's set*id and
 * capset wrappers step aside, loader/loader_ids.c)
 *
 * Credentials are per thread in Linux. glibc makes the set*id family
 * process-wide by running the call on every thread (signal SIGSETXID,
 * nptl/nptl_setxid.c) and aborts the process when the threads' results
 * differ: a thread left behind would keep the old ids. A host changes its
 * calling thread's own state before such calls: capset (libcap, libcap-ng,
 * setpriv), prctl(PR_SET_KEEPCAPS) whose effect shows at the next setuid
 * (the threads without it lose their capabilities, the caller keeps them),
 * a seccomp filter without TSYNC. Whether a set*id call succeeds on a
 * thread depends on that thread's ids, its effective capabilities and its
 * seccomp filter (and an LSM's per-thread label, not compared here): a
 * thread whose status lines below are the caller's gets the caller's
 * result. The lines are read from /proc/thread-self/status and
 * /proc/self/task/<tid>/status of each thread the agent registered as its
 * own (ss_internal_thread_is: the agent's stackshot-* threads and gRPC's).
 */
#include "agent/dir.h"
#include "agent/thread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The lines compared; the Cap* ones are also read as masks (same order). */
static const char *const cred_fields[] = {
    "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
    "Uid:",    "Gid:",    "Groups:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:",
};
#define N_CAP_FIELDS 5
#define N_FIELDS (sizeof cred_fields / sizeof cred_fields[0])

typedef struct creds {
    char text[1024]; /* the lines above, in the file's order */
    size_t len;
    unsigned long long caps[N_CAP_FIELDS];
} creds;

static void take_line(creds *c, const char *line, size_t n) {
    for (size_t f = 0; f < N_FIELDS; f++) {
        size_t k = strlen(cred_fields[f]);
        if (n < k || memcmp(line, cred_fields[f], k) != 0)
            continue;
        if (f < N_CAP_FIELDS)
            c->caps[f] = strtoull(line + k, NULL, 16);
        if (c->len + n + 1 < sizeof c->text) {
            memcpy(c->text + c->len, line, n);
            c->len += n;
            c->text[c->len++] = '\n';
        }
        return;
    }
}

/* 0, -ENOENT (the thread has ended), or another -errno. */
static int read_creds(const char *path, creds *c) {
    memset(c, 0, sizeof *c);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[4096];
    size_t have = 0;
    ssize_t n;
    while (have < sizeof buf - 1 && (n = read(fd, buf + have, sizeof buf - 1 - have)) > 0)
        have += (size_t)n;
    close(fd);
    if (have == 0)
        return -ENOENT; /* an ended thread's file reads empty */
    buf[have] = '\0';
    for (char *line = buf, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) {
            take_line(c, line, strlen(line));
            break;
        }
        take_line(c, line, (size_t)(end - line));
    }
    return 0;
}

typedef bool (*creds_test)(const creds *caller, const creds *ours);

typedef struct creds_scan {
    creds_test test;
    creds me;
    pid_t self;
    bool ok;
} creds_scan;

static int check_one(const char *name, void *arg) {
    creds_scan *c = arg;
    pid_t tid = (pid_t)atoi(name);
    if (tid <= 0 || tid == c->self || !ss_internal_thread_is(tid))
        return 0;
    char path[64];
    creds them;
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    int rc = read_creds(path, &them);
    if (rc == -ENOENT)
        return 0;
    c->ok = rc == 0 && c->test(&c->me, &them);
    return !c->ok; /* one that fails: stop */
}

/* Every registered thread of ours but the caller: does `test` hold for
 * each? A thread whose status cannot be read fails it (the safe answer:
 * step aside); one that has ended passes. */
static bool all_ours(creds_test test) {
    creds_scan c = {.test = test, .self = ss_gettid(), .ok = true};
    if (read_creds("/proc/thread-self/status", &c.me) != 0)
        return false;
    if (ss_dir_each(AT_FDCWD, "/proc/self/task", check_one, &c) < 0)
        return false;
    return c.ok;
}

static bool same(const creds *caller, const creds *ours) {
    return caller->len == ours->len && memcmp(caller->text, ours->text, caller->len) == 0;
}

static bool within(const creds *caller, const creds *ours) {
    for (int i = 0; i < N_CAP_FIELDS; i++)
        if (ours->caps[i] & ~caller->caps[i])
            return false;
    return true;
}

bool ss_creds_same_as_caller(void) { return all_ours(same); }

bool ss_creds_exceed_caller(void) { return !all_ours(within); }
