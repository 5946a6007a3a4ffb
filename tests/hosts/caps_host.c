/* caps_host.c: a root host that drops privileges as libcap-ng's
 * capng_change_id does, keeps CAP_SETUID/CAP_SETGID, then has threads of
 * its own and switches its effective ids later in its life, while the
 * agent runs (libstackshot.so preloaded, a short interval).
 *
 *   1. computes for <ms before> (the agent starts and samples as root);
 *   2. prctl(PR_SET_KEEPCAPS, 1); capset on this thread: keep CAP_SETUID,
 *      CAP_SETGID, CAP_NET_BIND_SERVICE; setresgid, setgroups(0),
 *      setresuid to <uid>/<gid>; prctl(PR_SET_KEEPCAPS, 0); capset
 *      again to raise the kept capabilities (the caller keeps them, a
 *      thread started before without PR_SET_KEEPCAPS lost them all);
 *   3. starts two threads of its own ("worker"), which inherit that state;
 *   4. computes for half of <ms after>;
 *   5. later in its life: setegid/seteuid to another user and back, as a
 *      server acting for a user does; glibc runs these on every thread and
 *      aborts if one of them fails where this one succeeds;
 *   6. gives up its capabilities with capset on each of its threads (no
 *      thread of the process may keep one), starts a thread named
 *      "after-late" and computes for the other half of <ms after>;
 *   7. prints how many threads have credentials other than its own (and,
 *      on stderr, the names of those that have its own).
 *
 * With --fork the process forks after step 1 and the child runs steps 2
 * to 7 at once (a forked child whose agent has not started again yet);
 * the parent waits for it and exits with its status.
 *
 * usage: caps_host [--fork] <uid> <gid> <other uid> <ms before> <ms after>
 * Prints one line per step; exit 0 when every call succeeded. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int capset(cap_user_header_t header, const cap_user_data_t data);

static _Atomic bool stop, drop_caps;
static _Atomic int dropped;

static long ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void spin_ms(long ms) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 0;
    while (ms_since(&t0) < ms)
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i;
}

static int set_caps(unsigned caps);

/* Capabilities are per thread: each of the host's threads gives up its
 * own when asked (step 6). */
static void *worker(void *arg) {
    (void)arg;
    bool mine_dropped = false;
    while (!atomic_load(&stop)) {
        if (atomic_load(&drop_caps) && !mine_dropped) {
            mine_dropped = true;
            atomic_fetch_add(&dropped, set_caps(0) == 0 ? 1 : 100);
        }
        volatile unsigned long x = 0;
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* This thread's permitted and effective sets become `caps` (a mask of
 * capability numbers below 32), none inheritable. */
static int set_caps(unsigned caps) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2] = {{caps, caps, 0}, {0, 0, 0}};
    return capset(&h, d);
}

static int fail(const char *what) {
    printf("caps_host: %s failed: %s\n", what, strerror(errno));
    fflush(stdout);
    return 1;
}

/* The lines of a thread's status that make its credentials. */
static void creds_of(const char *tid, char *out, size_t n) {
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t len = 0;
    while (fgets(buf, sizeof buf, f))
        if (!strncmp(buf, "Uid:", 4) || !strncmp(buf, "Gid:", 4) || !strncmp(buf, "Groups:", 7) ||
            !strncmp(buf, "CapPrm:", 7) || !strncmp(buf, "CapEff:", 7)) {
            int w = snprintf(out + len, n - len, "%s", buf);
            if (w > 0 && (size_t)w < n - len)
                len += (size_t)w;
        }
    fclose(f);
}

static void comm_of(const char *tid, char *out, size_t n) {
    char path[300];
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", tid);
    snprintf(out, n, "?");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)n, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* Threads whose credentials are not this thread's, each printed; the
 * names of the others go to stderr. */
static int threads_unlike_me(void) {
    char me[64], mine[1024], theirs[1024], comm[64];
    snprintf(me, sizeof me, "%ld", (long)syscall(SYS_gettid));
    creds_of(me, mine, sizeof mine);
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    fprintf(stderr, "caps_host: threads like this one:");
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, me))
            continue;
        creds_of(e->d_name, theirs, sizeof theirs);
        comm_of(e->d_name, comm, sizeof comm);
        if (theirs[0] && strcmp(theirs, mine) != 0) {
            printf("caps_host: thread %s (%s) has other credentials:\n%s", e->d_name, comm,
                   theirs);
            n++;
        } else if (theirs[0]) {
            fprintf(stderr, " %s", comm);
        }
    }
    fprintf(stderr, "\n");
    closedir(d);
    return n;
}

/* 2. what capng_change_id does */
static int drop_like_capng(uid_t uid, gid_t gid, unsigned kept) {
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
        return fail("prctl(PR_SET_KEEPCAPS, 1)");
    if (set_caps(kept) != 0)
        return fail("capset (keep setuid, setgid, net_bind_service)");
    if (setresgid(gid, gid, gid) != 0)
        return fail("setresgid");
    if (setgroups(0, NULL) != 0)
        return fail("setgroups");
    if (setresuid(uid, uid, uid) != 0)
        return fail("setresuid");
    if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0)
        return fail("prctl(PR_SET_KEEPCAPS, 0)");
    if (set_caps(kept) != 0)
        return fail("capset (raise the kept capabilities)");
    printf("caps_host: dropped to %d:%d keeping setuid, setgid, net_bind_service\n", (int)uid,
           (int)gid);
    return 0;
}

/* 5. act as another user for a moment */
static int act_as(uid_t other, uid_t uid, gid_t gid) {
    if (setegid((gid_t)other) != 0)
        return fail("setegid(other)");
    if (seteuid(other) != 0)
        return fail("seteuid(other)");
    if (seteuid(uid) != 0)
        return fail("seteuid(back)");
    if (setegid(gid) != 0)
        return fail("setegid(back)");
    printf("caps_host: acted as %d and came back\n", (int)other);
    return 0;
}

/* 6. no capability left anywhere in the process: the workers drop
 * theirs, then this thread */
static int drop_all_caps(void) {
    atomic_store(&drop_caps, true);
    while (atomic_load(&dropped) < 2)
        spin_ms(1);
    if (atomic_load(&dropped) != 2)
        return fail("a worker's capset (none)");
    if (set_caps(0) != 0)
        return fail("capset (none)");
    return 0;
}

static int steps_2_to_7(uid_t uid, gid_t gid, uid_t other, long after) {
    unsigned kept = 1u << CAP_SETUID | 1u << CAP_SETGID | 1u << CAP_NET_BIND_SERVICE;
    if (drop_like_capng(uid, gid, kept) != 0)
        return 1;
    pthread_t w[3];
    for (int i = 0; i < 2; i++) {
        if (pthread_create(&w[i], NULL, worker, NULL) != 0)
            return fail("pthread_create");
        pthread_setname_np(w[i], "worker");
    }
    spin_ms(after / 2);
    if (act_as(other, uid, gid) != 0 || drop_all_caps() != 0)
        return 1;
    if (pthread_create(&w[2], NULL, worker, NULL) != 0)
        return fail("pthread_create");
    pthread_setname_np(w[2], "after-late");
    spin_ms(after / 2);
    int unlike = threads_unlike_me();
    printf("caps_host: %d thread(s) with other credentials\n", unlike);
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(w[i], NULL);
    printf("caps_host: done\n");
    return unlike == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    bool forking = argc > 1 && !strcmp(argv[1], "--fork");
    argv += forking;
    argc -= forking;
    if (argc < 6) {
        fprintf(stderr, "usage: caps_host [--fork] <uid> <gid> <other uid> <ms before> <ms after>\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* each step's line, even if we abort */
    spin_ms(atol(argv[4]));
    if (forking) {
        pid_t child = fork();
        if (child < 0)
            return fail("fork");
        if (child > 0) {
            int status;
            if (waitpid(child, &status, 0) != child)
                return fail("waitpid");
            printf("caps_host: child %s %d\n", WIFEXITED(status) ? "exit" : "signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
    }
    return steps_2_to_7((uid_t)atol(argv[1]), (gid_t)atol(argv[2]), (uid_t)atol(argv[3]),
                        atol(argv[5]));
}
