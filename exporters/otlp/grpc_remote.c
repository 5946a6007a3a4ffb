/* grpc_remote.c: the gRPC client table of grpc_module.h, over a helper
 * process (stackshot-grpc-helper, grpc_helper.c) instead of the module
 * mapped into the host.
 *
 * Why a process. gRPC C core maps about 60 libraries (abseil, libstdc++,
 * OpenSSL, c-ares, re2, upb: some 300 mappings), starts its own threads
 * (8 or more, each with an 8 MiB stack and a malloc arena of its own) and
 * keeps several MiB resident. In the host, every fork() pays for all of
 * it: a preloaded host with the default exporter (otlp_logs over gRPC)
 * forked 2x slower than with the file exporter alone. In a helper the
 * host keeps one socket; the helper runs the same client (grpc_client.c)
 * and ends when the host's end of the socket closes.
 *
 * How it is started, so that the host never has it for a child: a host
 * that reaps "any child" (waitpid(-1) on SIGCHLD: PostgreSQL's
 * postmaster, shells, supervisors) must never get the helper's status or
 * its SIGCHLD. An execve gives any process the exit signal SIGCHLD, so
 * the helper is not the host's child at all: the exporter thread (every
 * signal blocked) clones a go-between (CLONE_VM | CLONE_VFORK |
 * CLONE_FILES, no exit signal: invisible to the host's wait() and never
 * signalled; reaped by pid with __WALL), which clones the helper
 * (CLONE_VM | CLONE_VFORK: it execs at once) and ends. The helper is then
 * an orphan, adopted by init or the nearest subreaper, which reaps it
 * when it ends (a subreaper or a pid-1 host adopts orphans by design).
 * The helper's pidfd, from CLONE_PIDFD into the descriptor table the
 * go-between shares with the host, is how the agent sees it end and
 * kills one that does not answer, without a pid that could be reused.
 * The helper gets the environment the agent read its configuration
 * from (without LD_PRELOAD, the agent off), the socket as descriptor 3,
 * /dev/null as 0-2 and nothing else of the host's; its lines come back
 * over the socket and go to the agent's log.
 *
 * When it is not used (the module in the host, as before): with
 * STACKSHOT_GRPC_HELPER=false, in the static core of tests (no helper
 * program), when the program is not next to the core or cannot be run,
 * under a seccomp filter (execve may be what it forbids), under valgrind
 * (which ends a program that clones but as fork, vfork or a thread do),
 * in sanitizer builds, or when the clone fails. A helper that ends is started
 * again at the next call; so is one whose user, group or network
 * namespace is no longer the host's (a host that drops its privileges
 * after the start must not keep a helper with the old ones).
 *
 * One helper serves the processes of a user that are configured alike:
 * a helper is found by a name in the abstract socket namespace (of the
 * network namespace): "stackshot-grpc" with the user, the group and a
 * hash of the control group, the mount namespace, the root, the helper
 * program's identity, the agent's configuration and the environment
 * gRPC reads (proxies, roots).
 * The process that starts one (its owner) binds and listens on the name
 * first (the bind decides between two that start at once) and hands the
 * listening socket to the helper; every other process of that kind,
 * the owner's forked children first, connects to it and talks on that
 * connection, with its own endpoint frame, gRPC client and calls. Both
 * ends check the other's user and group (SO_PEERCRED): the helper acts
 * with its owner's rights, and a name is no proof of who listens. So a
 * forking server's children export over gRPC through their parent's
 * helper (those forked before it started too: PostgreSQL's background
 * processes at the 1 s interval), without gRPC in a forked child (gRPC
 * cannot be used in a forked child of a process that ran it) and without
 * a helper each (which would double a forking server's processes). A
 * process that finds no helper, or one of another user, starts its own.
 * The owner does not wait for a helper that others use when it stops (the
 * helper answers its 'Q' with 'K'); the helper ends with its last client. */
#include "agent/config.h"
#include "agent/hmap.h"
#include "agent/kept_fd.h"
#include "agent/log.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "exporters/common/common.h"
#include "exporters/otlp/grpc_module.h"
#include "exporters/otlp/grpc_wire.h"
#include "proc/process.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* Sanitizer builds keep gRPC in the process: their runtimes do not follow
 * a clone(CLONE_VM) child (the tests of the helper run in plain builds). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#define HELPER_FD 3
#define LISTEN_FD 4
/* How long a new helper may take to make its client (gRPC's start). */
#define CREATE_WAIT_NS (10ull * 1000000000ull)
/* How long a cancel or a close waits for the helper before killing it. */
#define END_WAIT_NS 1000000000ull
#define MAX_REMOTES 8

typedef struct remote {
    ss_kept_fd sock;
    ss_kept_fd pidfd;    /* the helper's, while it runs (none: kernel before 5.2,
                          * or a helper joined, not started) */
    pid_t pid;           /* the helper, 0: none */
    ss_buf endpoint;     /* the 'E' frame, sent to every helper started */
    ss_buf in, out;
    char who[32];
    char path[PATH_MAX];
    uid_t uid[3];        /* what the helper was started with */
    gid_t gid[3];
    ino_t netns;
    bool in_call;
    bool unstartable;    /* the last start of a helper failed */
    bool joined;         /* the helper was started by another process */
} remote;

/* ---- a forked child lets go of its parent's connections ---------------- */

static remote *_Atomic live[MAX_REMOTES];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child's copy of the parent's connection is closed (the helper must
 * see it close when the parent's does), and of its pidfd (the owner's to
 * watch); the child connects by name when its own exporter opens. */
static void forget_in_child(void) {
    for (int i = 0; i < MAX_REMOTES; i++) {
        remote *r = atomic_load_explicit(&live[i], memory_order_relaxed);
        if (!r)
            continue;
        ss_kept_fd_close_inherited(&r->sock);
        ss_kept_fd_close_inherited(&r->pidfd);
        r->pid = 0;
        atomic_store_explicit(&live[i], NULL, memory_order_relaxed);
    }
}

static void install_atfork(void) { pthread_atfork(NULL, NULL, forget_in_child); }

static void track(remote *r, bool on) {
    pthread_once(&atfork_once, install_atfork);
    for (int i = 0; i < MAX_REMOTES; i++) {
        remote *want = on ? NULL : r;
        if (atomic_compare_exchange_strong(&live[i], &want, on ? r : NULL))
            return;
    }
}

/* ---- starting the helper ---------------------------------------------- */

typedef struct spawn_args {
    const char *path;
    char *const *envp;
    int sock;
    int listener;
    char *helper_stack; /* its top */
    pid_t pid;          /* the helper's, from the go-between */
    int pidfd;          /* CLONE_PIDFD's answer, -1 none */
    int err;            /* errno of what failed: the helper's exec, its clone */
} spawn_args;

/* The helper: shares the agent's memory until execve (CLONE_VM; the
 * go-between waits: CLONE_VFORK), has its own descriptor table. Only
 * system calls here. */
static int helper_child(void *arg) {
    spawn_args *a = arg;
    char *argv[] = {(char *)"stackshot-grpc-helper", NULL};
    /* both above the numbers they go to first (either may be 3 or 4),
     * then in place (dup2 clears close-on-exec) */
    int sock = fcntl(a->sock, F_DUPFD, LISTEN_FD + 1);
    int listener = fcntl(a->listener, F_DUPFD, LISTEN_FD + 1);
    if (sock < 0 || listener < 0 || dup2(sock, HELPER_FD) != HELPER_FD ||
        dup2(listener, LISTEN_FD) != LISTEN_FD)
        goto fail;
    int null = open("/dev/null", O_RDWR);
    if (null < 0)
        goto fail;
    for (int fd = 0; fd <= 2; fd++)
        if (null != fd && dup2(null, fd) != fd)
            goto fail;
    if (syscall(SYS_close_range, LISTEN_FD + 1, ~0u, 0) != 0)
        for (int fd = LISTEN_FD + 1; fd < 65536; fd++)
            close(fd);
    execve(a->path, argv, a->envp);
fail:
    a->err = errno;
    _exit(127);
}

/* The go-between: clones the helper, returns once it has exec'd (or
 * failed to), and ends, leaving it an orphan. It shares the host's
 * descriptor table (CLONE_FILES): the pidfd lands there. */
static int go_between(void *arg) {
    spawn_args *a = arg;
    int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
    pid_t pid = clone(helper_child, a->helper_stack, flags | CLONE_PIDFD, a, &a->pidfd);
    if (pid < 0 && !a->err) {
        a->pidfd = -1; /* a kernel before 5.2 */
        pid = clone(helper_child, a->helper_stack, flags, a);
    }
    if (pid < 0 && !a->err)
        a->err = errno;
    a->pid = pid;
    _exit(0);
}

static void creds_now(uid_t uid[3], gid_t gid[3], ino_t *netns) {
    getresuid(&uid[0], &uid[1], &uid[2]);
    getresgid(&gid[0], &gid[1], &gid[2]);
    struct stat st;
    *netns = stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

static bool creds_changed(const remote *r) {
    uid_t uid[3];
    gid_t gid[3];
    ino_t netns;
    creds_now(uid, gid, &netns);
    return memcmp(uid, r->uid, sizeof uid) != 0 || memcmp(gid, r->gid, sizeof gid) != 0 ||
           netns != r->netns;
}

/* The helper ended or is to end (its socket closed): wait for it at most
 * wait_ns, then kill it. Not our child: init or a subreaper reaps it.
 * Without a pidfd it is left to end on its own (its socket is closed). */
static void wait_end(remote *r, uint64_t wait_ns) {
    int fd = ss_kept_fd_get(&r->pidfd);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = (int)(wait_ns / 1000000);
        while (poll(&p, 1, ms) < 0 && errno == EINTR)
            ;
        if (!(p.revents & POLLIN))
            syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
        /* its task counts for the host's limits until init reaps it */
        ss_internal_process_ending(fd);
        ss_kept_fd_forget(&r->pidfd);
    }
    r->pid = 0;
}

static int send_out(remote *r, uint64_t deadline_ns);
static int next_frame(remote *r, uint64_t deadline_ns, int *type, size_t *len);

/* The owner quits a helper that others may share (the processes that
 * joined it): 'Q', then its end or its 'K' awaited. true: it keeps on
 * for the others; do not wait for it. */
static bool quit_shared(remote *r, uint64_t wait_ns) {
    int sock = ss_kept_fd_get(&r->sock), pidfd = ss_kept_fd_get(&r->pidfd);
    if (sock < 0 || pidfd < 0 || wait_ns == 0)
        return false;
    uint64_t deadline = ss_mono_ns() + wait_ns;
    ss_gw_begin(&r->out, SS_GW_QUIT);
    if (ss_gw_end(&r->out, 0) != 0 || send_out(r, deadline) != 0)
        return false;
    for (;;) {
        uint64_t now = ss_mono_ns();
        if (now >= deadline)
            return false;
        struct pollfd p[2] = {{.fd = pidfd, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
        int ms = (int)((deadline - now + 999999) / 1000000);
        if (poll(p, 2, ms) < 0 && errno != EINTR)
            return false;
        if (p[0].revents & POLLIN)
            return false; /* it ended */
        int type;
        size_t len;
        int got = p[1].revents ? next_frame(r, 0, &type, &len) : 0;
        if (got < 0)
            return false; /* its socket closed: it is ending */
        if (got == 1) {
            ss_gw_consume(&r->in, len);
            if (type == SS_GW_KEEPING)
                return true;
        }
    }
}

/* Let go of the helper: an owner quits it (waiting at most wait_ns for
 * its end, then killing it, unless it keeps on for other clients); a
 * process that joined it only closes its connection. */
static void stop_helper(remote *r, uint64_t wait_ns) {
    bool keeps = !r->joined && quit_shared(r, wait_ns);
    ss_kept_fd_close(&r->sock); /* the helper's end closes: it ends */
    if (keeps) {
        ss_debug("%s: the gRPC helper (pid %d) keeps on for its other clients", r->who,
                 (int)r->pid);
        ss_kept_fd_close(&r->pidfd);
        r->pid = 0;
    } else {
        wait_end(r, wait_ns);
    }
    ss_buf_reset(&r->in);
    r->in_call = false;
}

/* The helper's environment: the one the agent read its configuration
 * from, without LD_PRELOAD and with the agent off (the helper must not
 * profile itself and start a helper of its own). NULL: no memory. */
static char **helper_env(void) {
    static char off[] = "SPLUNK_PROFILER_ENABLED=false";
    char *const *env = ss_env_all();
    size_t n = 0;
    while (env && env[n])
        n++;
    char **out = malloc((n + 2) * sizeof *out);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(env[i], "LD_PRELOAD=", 11) != 0 &&
            strncmp(env[i], "SPLUNK_PROFILER_ENABLED=", 24) != 0)
            out[k++] = env[i];
    out[k++] = off;
    out[k] = NULL;
    return out;
}

/* A new helper, listening on `listener` (bound to its name, or not). */
static int start_process(remote *r, int listener, char *why, size_t why_len) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(why, why_len, "socketpair: %s", strerror(errno));
        return -errno;
    }
    int mine = ss_fd_move_high(sv[0]);
    size_t stack_len = 64 * 1024; /* two: the go-between's and the helper's */
    char *stacks = mmap(NULL, 2 * stack_len, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    char **envp = helper_env();
    spawn_args a = {.path = r->path, .envp = envp, .sock = sv[1], .listener = listener,
                    .pid = -1, .pidfd = -1};
    int err = ENOMEM;
    if (stacks != MAP_FAILED && envp) {
        a.helper_stack = stacks + 2 * stack_len;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        creds_now(r->uid, r->gid, &r->netns);
        /* no exit signal: a child the host's wait() never sees */
        pid_t mid = clone(go_between, stacks + stack_len, CLONE_VM | CLONE_VFORK | CLONE_FILES, &a);
        err = mid < 0 ? errno : a.err;
        if (mid > 0)
            while (waitpid(mid, NULL, __WALL) < 0 && errno == EINTR)
                ;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (stacks != MAP_FAILED)
        munmap(stacks, 2 * stack_len);
    free(envp);
    close(sv[1]);
    if (a.pid > 0 && a.err == 0 && a.pidfd >= 0 && ss_kept_fd_adopt(&r->pidfd, ss_fd_move_high(a.pidfd)) != 0)
        a.pidfd = -1;
    if (a.pid <= 0 || a.err) {
        if (a.pidfd >= 0)
            close(a.pidfd); /* a helper that could not exec: it ended already */
        close(mine);
        snprintf(why, why_len, "%s: %s", r->path, strerror(err ? err : ECHILD));
        return -(err ? err : ECHILD);
    }
    r->pid = a.pid;
    int rc = ss_kept_fd_adopt(&r->sock, mine);
    if (rc != 0) {
        wait_end(r, 0);
        snprintf(why, why_len, "its socket: %s", strerror(-rc));
    }
    return rc;
}

/* ---- finding a helper by its name ---------------------------------------- */

/* The helper of this user and group, in this control group, mount
 * namespace and root, for this helper program, this configuration and
 * the environment gRPC reads: a process that differs in any of them
 * (another service, a container, other proxies or roots) gets a helper
 * of its own. Named in the abstract namespace of the network namespace:
 * no file, gone with the helper. Not the session: forking servers put
 * each child in a session of its own (PostgreSQL does). */
static socklen_t helper_name(const remote *r, struct sockaddr_un *sa) {
    uint64_t h = SS_FNV1A64_SEED;
    char *const *env = ss_env_all();
    for (size_t i = 0; env && env[i]; i++) {
        const char *e = env[i];
        if (strncmp(e, "OTEL_", 5) != 0 && strncmp(e, "SPLUNK_", 7) != 0 &&
            strncmp(e, "STACKSHOT_", 10) != 0 && strncmp(e, "GRPC_", 5) != 0 &&
            strncasecmp(e, "grpc_proxy=", 11) != 0 &&
            strncasecmp(e, "http_proxy=", 11) != 0 && strncasecmp(e, "https_proxy=", 12) != 0 &&
            strncasecmp(e, "no_proxy=", 9) != 0 && strncmp(e, "SSL_CERT_", 9) != 0)
            continue;
        h += ss_fnv1a64(SS_FNV1A64_SEED, e, strlen(e) + 1); /* in any order */
    }
    static const char *const places[] = {NULL, "/proc/self/ns/mnt", "/"};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        struct stat st;
        if (stat(places[i] ? places[i] : r->path, &st) == 0) {
            uint64_t id[3] = {st.st_dev, st.st_ino, (uint64_t)st.st_mtime};
            h = ss_fnv1a64(h, id, places[i] ? 2 * sizeof id[0] : sizeof id);
        }
    }
    char cg[512];
    int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, cg, sizeof cg) : -1;
    if (fd >= 0)
        close(fd);
    if (k > 0)
        h = ss_fnv1a64(h, cg, (size_t)k);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "stackshot-grpc.%u.%u.%016llx",
                     (unsigned)geteuid(), (unsigned)getegid(), (unsigned long long)h);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Connect to the helper of our kind: 0 (r->sock), -ECONNREFUSED (none
 * listens: start one), -EACCES (a process of another user listens, or
 * the helper does not take new clients: its queue is full), or -errno
 * with why. Never waits: a helper that hangs is not joined. */
static int join_helper(remote *r, const struct sockaddr_un *sa, socklen_t len, char *why,
                       size_t why_len) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, why_len, "socket: %s", strerror(errno));
        return -errno;
    }
    int rc;
    while ((rc = connect(fd, (const struct sockaddr *)sa, len)) != 0 && errno == EINTR)
        ;
    if (rc != 0) {
        int e = errno;
        close(fd);
        snprintf(why, why_len, "connect: %s", strerror(e));
        return e == ENOENT ? -ECONNREFUSED : e == EAGAIN ? -EACCES : -e;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || !ss_gw_peer_is_us(fd)) {
        close(fd); /* a name is no proof of who listens */
        snprintf(why, why_len, "the helper's name is taken by a process of another user");
        return -EACCES;
    }
    rc = ss_kept_fd_adopt(&r->sock, ss_fd_move_high(fd));
    if (rc != 0)
        snprintf(why, why_len, "its socket: %s", strerror(-rc));
    return rc;
}

/* A socket that listens nowhere, for a helper of our own that nobody
 * else may join (the name is another user's, or its helper takes
 * nobody): the socket, or -errno with why. */
static int no_name(char *why, size_t why_len) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_len, "socket: %s", strerror(errno));
        return -errno;
    }
    return fd;
}

/* The name, bound and listened on for a helper of our own: the listening
 * socket, -EADDRINUSE (another process bound it first: join it), or
 * -errno with why. */
static int claim_name(const struct sockaddr_un *sa, socklen_t len, char *why, size_t why_len) {
    int fd = no_name(why, why_len);
    if (fd >= 0 && (bind(fd, (const struct sockaddr *)sa, len) != 0 || listen(fd, 64) != 0)) {
        int e = errno;
        close(fd);
        snprintf(why, why_len, "its name: %s", strerror(e));
        return -e;
    }
    return fd;
}

/* ---- frames ------------------------------------------------------------ */

static int send_out(remote *r, uint64_t deadline_ns) {
    int fd = ss_kept_fd_get(&r->sock);
    int rc = fd < 0 ? -EPIPE : r->out.failed ? -ENOMEM
                                             : ss_gw_send(fd, r->out.data, r->out.len, deadline_ns);
    ss_buf_reset(&r->out);
    r->out.failed = false;
    return rc;
}

/* The helper's next frame other than a log line (those are written here).
 * 1 (*type, payload in r->in), 0 before deadline_ns, or -errno. */
static int next_frame(remote *r, uint64_t deadline_ns, int *type, size_t *len) {
    for (;;) {
        int fd = ss_kept_fd_get(&r->sock);
        if (fd < 0)
            return -EPIPE;
        int got = ss_gw_recv(fd, &r->in, deadline_ns, type, len);
        if (got != 1 || *type != SS_GW_LOG)
            return got;
        ss_gw_reader rd;
        ss_gw_reader_init(&rd, r->in.data + SS_GW_HEADER, *len);
        uint32_t level = ss_gw_get_u32(&rd);
        char line[1024];
        ss_gw_get_str_into(&rd, line, sizeof line);
        if (!rd.bad && level >= SS_LOG_ERROR && level <= SS_LOG_DEBUG)
            ss_log((ss_log_level)level, "%s", line);
        ss_gw_consume(&r->in, *len);
    }
}

/* The helper, just started or joined, makes this client's gRPC client:
 * 0, or -errno with why (the helper let go of). */
static int greet(remote *r, char *why, size_t why_len) {
    ss_buf_append(&r->out, r->endpoint.data, r->endpoint.len);
    uint64_t deadline = ss_mono_ns() + CREATE_WAIT_NS;
    int rc = send_out(r, deadline);
    int type = 0;
    size_t len = 0;
    if (rc == 0)
        rc = next_frame(r, deadline, &type, &len);
    if (rc == 1 && type == SS_GW_CREATED) {
        ss_gw_reader rd;
        ss_gw_reader_init(&rd, r->in.data + SS_GW_HEADER, len);
        uint32_t e = ss_gw_get_u32(&rd);
        pid_t pid = (pid_t)ss_gw_get_u32(&rd);
        ss_gw_consume(&r->in, len);
        if (!rd.bad && e == 0 && pid > 0) {
            r->pid = pid;
            ss_debug("%s: gRPC calls made by stackshot-grpc-helper, pid %d%s", r->who, (int)r->pid,
                     r->joined ? " (joined)" : "");
            return 0;
        }
        snprintf(why, why_len, "the helper could not make its client");
        stop_helper(r, END_WAIT_NS);
        return -EIO; /* it said why in its own lines */
    }
    stop_helper(r, rc == 0 ? 0 : END_WAIT_NS);
    snprintf(why, why_len, "%s did not start (%s)", r->path,
             rc == 0 ? "no answer in 10 s" : rc == 1 ? "an unexpected answer" : strerror(-rc));
    return rc == 0 ? -ETIMEDOUT : -ECHILD;
}

/* A helper for the next call: the one of our kind, joined, or a new one
 * of our own when none listens (or when the name is another user's, or
 * its helper takes nobody: a helper of our own, unnamed). 0, or -errno
 * with why. */
static int start_helper(remote *r, char *why, size_t why_len) {
    struct sockaddr_un sa;
    socklen_t len = helper_name(r, &sa);
    int rc = -ECONNREFUSED;
    for (int tries = 0; tries < 3; tries++) {
        rc = join_helper(r, &sa, len, why, why_len);
        if (rc == 0) {
            r->joined = true;
            creds_now(r->uid, r->gid, &r->netns);
            rc = greet(r, why, why_len);
            if (rc == -ECHILD)
                continue; /* it ended as we came: look again */
            return rc;
        }
        if (rc != -ECONNREFUSED && rc != -EACCES)
            return rc;
        int listener = rc == -EACCES ? no_name(why, why_len) : claim_name(&sa, len, why, why_len);
        if (listener == -EADDRINUSE)
            continue; /* another process is starting it: join that one */
        if (listener < 0)
            return listener;
        r->joined = false;
        rc = start_process(r, listener, why, why_len);
        close(listener); /* the helper has it */
        return rc != 0 ? rc : greet(r, why, why_len);
    }
    return rc;
}

/* ---- the table --------------------------------------------------------- */

static void remote_free(remote *r) {
    ss_buf_free(&r->endpoint);
    ss_buf_free(&r->in);
    ss_buf_free(&r->out);
    free(r);
}

ss_grpc_client *ss_grpc_remote_create(const ss_otlp_endpoint *ep, const char *who, int *err) {
    char why[PATH_MAX + 128] = "";
    remote *r = calloc(1, sizeof *r);
    if (!r) {
        *err = -ENOMEM;
        return NULL;
    }
    r->sock = (ss_kept_fd)SS_KEPT_FD_NONE;
    r->pidfd = (ss_kept_fd)SS_KEPT_FD_NONE;
    snprintf(r->who, sizeof r->who, "%s", who);
    ss_buf_init(&r->endpoint);
    ss_buf_init(&r->in);
    ss_buf_init(&r->out);
    ss_gw_begin(&r->endpoint, SS_GW_ENDPOINT);
    ss_gw_put_endpoint(&r->endpoint, ep);
    int rc = ss_gw_end(&r->endpoint, 0);
#ifdef SANITIZED
    if (rc == 0)
        rc = -ENOEXEC, snprintf(why, sizeof why, "a sanitizer build");
#endif
    if (rc == 0 && ss_process_under_valgrind()) /* its clone ends the program there */
        rc = -ENOEXEC, snprintf(why, sizeof why, "valgrind");
    if (rc == 0 && !ss_config_bool("STACKSHOT_GRPC_HELPER", true))
        rc = -ENOEXEC, snprintf(why, sizeof why, "STACKSHOT_GRPC_HELPER=false");
    else if (rc == 0 && prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2)
        rc = -ENOEXEC, snprintf(why, sizeof why, "a seccomp filter may forbid starting it");
    else if (rc == 0 && (rc = ss_module_helper_path("grpc", r->path, sizeof r->path)) != 0)
        snprintf(why, sizeof why, "%s: %s", r->path[0] ? r->path : "no helper program",
                 strerror(-rc)), rc = -ENOEXEC;
    if (rc == 0)
        rc = start_helper(r, why, sizeof why);
    if (rc != 0) {
        if (rc != -EIO) {
            ss_debug("%s: gRPC runs in this process, not in stackshot-grpc-helper (%s)", who, why);
            rc = -ENOEXEC;
        }
        remote_free(r);
        *err = rc;
        return NULL;
    }
    track(r, true);
    return (ss_grpc_client *)r;
}

static ss_grpc_client *remote_client_create(const ss_otlp_endpoint *ep) {
    int err;
    return ss_grpc_remote_create(ep, "otlp", &err);
}

static void remote_client_destroy(ss_grpc_client *c) {
    remote *r = (remote *)c;
    track(r, false);
    stop_helper(r, END_WAIT_NS);
    remote_free(r);
}

static void no_threads(ss_grpc_client *c) { (void)c; }
static pid_t no_pid(void) { return 0; }
static void no_release(void) {}

static void fail(ss_grpc_result *res, int status, const char *fmt, const char *what) {
    res->status = status;
    snprintf(res->message, sizeof res->message, fmt, what);
}

/* The helper is gone (its socket closed, a frame it should not send):
 * the call in flight ends UNAVAILABLE (retryable); the next starts
 * another helper. */
static void helper_gone(remote *r, ss_grpc_result *res, int rc) {
    pid_t pid = r->pid;
    stop_helper(r, END_WAIT_NS / 10);
    char what[128];
    snprintf(what, sizeof what, "pid %d: %s", (int)pid,
             rc == -EPIPE ? "its socket closed" : strerror(-rc));
    fail(res, SS_GRPC_UNAVAILABLE, "the gRPC helper process ended (%s)", what);
}

/* Between calls the helper sends nothing: a readable socket is one whose
 * other end closed (the helper was killed, or ended). */
static bool helper_closed(remote *r) {
    int fd = ss_kept_fd_get(&r->sock);
    if (fd < 0)
        return true;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) != 1)
        return false;
    char c;
    return (p.revents & (POLLHUP | POLLERR)) || recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static ss_grpc_call *remote_call_start(ss_grpc_client *c, const char *method, const void *bytes,
                                       size_t len, uint64_t deadline_ns, ss_grpc_result *res) {
    remote *r = (remote *)c;
    /* a helper that ended since the last call, a host that changed its ids
     * or network or took our socket: a new helper, not a failed call */
    if (r->pid > 0 && (helper_closed(r) || creds_changed(r)))
        stop_helper(r, END_WAIT_NS);
    if (r->pid <= 0) {
        char why[PATH_MAX + 128];
        int rc = start_helper(r, why, sizeof why);
        r->unstartable = rc != 0 && rc != -EIO;
        if (rc != 0) {
            fail(res, SS_GRPC_UNAVAILABLE, "the gRPC helper process cannot be started: %.200s", why);
            return NULL;
        }
    }
    ss_gw_begin(&r->out, SS_GW_START);
    ss_gw_u64(&r->out, deadline_ns);
    ss_gw_str(&r->out, method);
    ss_gw_bytes(&r->out, bytes, len);
    int rc = ss_gw_end(&r->out, 0);
    if (rc != 0) {
        ss_buf_reset(&r->out);
        r->out.failed = false;
        fail(res, SS_GRPC_RESOURCE_EXHAUSTED, "%s", "no memory for the request");
        return NULL;
    }
    rc = send_out(r, deadline_ns ? deadline_ns : ss_mono_ns() + CREATE_WAIT_NS);
    if (rc != 0) {
        helper_gone(r, res, rc);
        return NULL;
    }
    r->in_call = true;
    return (ss_grpc_call *)r;
}

static bool remote_call_poll(ss_grpc_client *c, ss_grpc_call *call, uint64_t wait_ns,
                             ss_grpc_result *res) {
    remote *r = (remote *)c;
    (void)call;
    if (!r->in_call) {
        fail(res, SS_GRPC_INTERNAL, "%s", "no call in flight");
        return true;
    }
    uint64_t now = ss_mono_ns();
    uint64_t deadline = wait_ns == UINT64_MAX || now + wait_ns < now ? UINT64_MAX : now + wait_ns;
    if (wait_ns == 0)
        deadline = 0;
    int type = 0;
    size_t len = 0;
    int got = next_frame(r, deadline, &type, &len);
    if (got == 0)
        return false;
    if (got == 1 && type == SS_GW_DONE) {
        ss_gw_reader rd;
        ss_gw_reader_init(&rd, r->in.data + SS_GW_HEADER, len);
        int rc = ss_gw_get_result(&rd, res);
        ss_gw_consume(&r->in, len);
        r->in_call = false;
        if (rc == 0)
            return true;
        got = rc;
    }
    helper_gone(r, res, got == 1 ? -EPROTO : got);
    return true;
}

static void remote_call_cancel(ss_grpc_client *c, ss_grpc_call *call, ss_grpc_result *res) {
    remote *r = (remote *)c;
    if (!r->in_call)
        return;
    ss_gw_begin(&r->out, SS_GW_CANCEL);
    uint64_t deadline = ss_mono_ns() + END_WAIT_NS;
    if (ss_gw_end(&r->out, 0) == 0 && send_out(r, deadline) == 0) {
        /* the answer to the cancel, or the call's own if it ended first */
        uint64_t left = deadline - ss_mono_ns();
        if (ss_mono_ns() < deadline && remote_call_poll(c, call, left, res))
            return;
    }
    /* the helper does not answer: it goes, the next call starts another */
    stop_helper(r, 0);
    fail(res, SS_GRPC_CANCELLED, "%s", "cancelled");
}

bool ss_grpc_remote_unstartable(ss_grpc_client *c) { return ((remote *)c)->unstartable; }

int ss_grpc_remote_endpoint(ss_grpc_client *c, ss_otlp_endpoint *ep) {
    remote *r = (remote *)c;
    if (r->endpoint.len < SS_GW_HEADER)
        return -EINVAL;
    ss_gw_reader rd;
    ss_gw_reader_init(&rd, r->endpoint.data + SS_GW_HEADER, r->endpoint.len - SS_GW_HEADER);
    int rc = ss_gw_get_endpoint(&rd, ep);
    if (rc != 0)
        ss_otlp_endpoint_free(ep);
    return rc;
}

const ss_grpc_module ss_grpc_remote = {
    .size = sizeof(ss_grpc_module),
    .client_create = remote_client_create,
    .client_destroy = remote_client_destroy,
    .note_threads = no_threads,
    .call_start = remote_call_start,
    .call_poll = remote_call_poll,
    .call_cancel = remote_call_cancel,
    .started_pid = no_pid,
    .release = no_release,
};
