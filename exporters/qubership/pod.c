/* pod.c: who this process is to the Qubership collectors.
 *
 * The pod name is "<server name>_<agent start, epoch ms>", the Java agent's
 * Dumper.podName: the TCP handshake sends it, the dumps collector files
 * every upload under it (specs/qubership-dumps.md §1.2, §2.3). It must be
 * unique per process: the TCP collector closes the older connection of a
 * pod name it sees twice, and two processes forked in the same millisecond
 * would otherwise share one. So the millisecond is claimed: the process
 * binds an abstract unix socket named after its pod name, which the kernel
 * grants to one live process of the network namespace (the pod) at a time
 * and releases when the process dies; a name in use moves on to the next
 * millisecond. No file is left behind. A forked child inherits its
 * parent's socket and claims a name of its own.
 *
 * The same name goes to $NC_DIAGNOSTIC_FOLDER/pod.name (where diagtools
 * and the Java agent keep it), written by the first live agent of the pod:
 * a process leaves the file alone while the process named in it still
 * holds its claim (a helper program started under the same LD_PRELOAD must
 * not take the pod's name over), and takes it over otherwise. */
#include "agent/config.h"
#include "agent/hmap.h"
#include "agent/log.h"
#include "proc/process.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#define CLAIM_PREFIX "stackshot-qbpod:"
#define CLAIM_TRIES 1000 /* milliseconds to move forward at most */

static qb_proclock lock;
static struct {
    pid_t pid;    /* the process this was computed in */
    int fd;       /* the claim; -1 none */
    ss_kept_fd kept; /* its identity: the host may close it and reuse the number */
    qb_pod pod;
} cur = {.fd = -1, .kept = SS_KEPT_FD_NONE};

/* Bind fd to the abstract name of `pod` (a hash of it: the abstract
 * namespace has room for 107 bytes, a pod name may be longer, and the
 * milliseconds at its end are what tell two processes apart):
 * 0, -EADDRINUSE, or -errno. */
static int bind_claim(int fd, const char *pod) {
    uint64_t h = ss_fnv1a64(SS_FNV1A64_SEED, pod, strlen(pod));
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, CLAIM_PREFIX "%016llx",
                     (unsigned long long)h);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return bind(fd, (struct sockaddr *)&a, len) == 0 ? 0 : -errno;
}

static int claim_socket(void) {
    return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

/* Does a live process hold the claim of `pod`? */
static bool claim_alive(const char *pod) {
    int fd = claim_socket();
    if (fd < 0)
        return false;
    int rc = bind_claim(fd, pod);
    close(fd);
    return rc == -EADDRINUSE;
}

static void server_name(char *out, size_t n) {
    const char *pod = ss_config_str("POD_NAME", "");
    const ss_process_info *p = ss_process();
    if (!*pod)
        pod = p->host_name[0] ? p->host_name : "default";
    snprintf(out, n, "%.300s", pod);
}

/* Write the pod name to $NC_DIAGNOSTIC_FOLDER/pod.name, unless a live
 * process owns the name written there. */
static void write_pod_file(const qb_pod *pod, bool forked_child) {
    const char *dir = ss_config_str("NC_DIAGNOSTIC_FOLDER", "");
    if (!*dir || forked_child)
        return;
    char path[1200];
    snprintf(path, sizeof path, "%s/pod.name", dir);
    char old[512];
    qb_read_small(path, old, sizeof old);
    if (old[0] && strcmp(old, pod->name) != 0 && claim_alive(old))
        return; /* the pod's first agent still runs: its name stays */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || write(fd, pod->name, strlen(pod->name)) != (ssize_t)strlen(pod->name))
        ss_warn("qubership: cannot write %s: %s; diagtools will not know the pod name %s",
                path, strerror(errno), pod->name);
    if (fd >= 0)
        close(fd);
}

static void compute(void) {
    pid_t self = (pid_t)syscall(SYS_getpid);
    bool forked_child = cur.pid != 0; /* computed before, in the parent */
    if (cur.fd >= 0) /* the parent's claim, inherited: the parent keeps it */
        ss_kept_fd_close(&cur.kept); /* unless the number is the host's now */
    memset(&cur.pod, 0, sizeof cur.pod);
    cur.fd = -1;
    cur.pid = self;
    server_name(cur.pod.server, sizeof cur.pod.server);
    const ss_process_info *p = ss_process();
    int64_t ms = (int64_t)(p->pid == self && p->start_wall_ms ? p->start_wall_ms
                                                             : ss_wall_ns() / 1000000u);
    int fd = claim_socket();
    for (int i = 0; fd >= 0 && i < CLAIM_TRIES; i++, ms++) {
        snprintf(cur.pod.name, sizeof cur.pod.name, "%s_%lld", cur.pod.server, (long long)ms);
        int rc = bind_claim(fd, cur.pod.name);
        if (rc == 0) {
            if (ss_kept_fd_adopt(&cur.kept, fd) == 0) /* else closed: unclaimed */
                cur.fd = fd;
            fd = -1;
            break;
        }
        if (rc != -EADDRINUSE)
            break; /* no abstract sockets here: the name goes unclaimed */
    }
    if (cur.fd < 0 && fd >= 0)
        close(fd);
    snprintf(cur.pod.name, sizeof cur.pod.name, "%s_%lld", cur.pod.server, (long long)ms);
    cur.pod.start_ms = ms;
    cur.pod.dir_valid = qb_pod_dir_valid(cur.pod.name);
    write_pod_file(&cur.pod, forked_child);
}

void qb_pod_get(qb_pod *out) {
    qb_proclock_lock(&lock);
    if (cur.pid != (pid_t)syscall(SYS_getpid))
        compute();
    *out = cur.pod;
    qb_proclock_unlock(&lock);
}

/* The dumps collector's pod pattern (spec §2.3 (4)), as a POSIX ERE: the
 * lazy quantifier and the named groups of the original change what the
 * groups capture, not whether a name matches. */
bool qb_pod_dir_valid(const char *name) {
    regex_t re;
    if (regcomp(&re,
                "^[a-z0-9]+(-[a-z0-9]+)*(-[a-f0-9]*)?-[a-z0-9]+(_[0-9]+)?$",
                REG_EXTENDED | REG_NOSUB) != 0)
        return true; /* cannot judge: say nothing */
    bool ok = regexec(&re, name, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

void qb_namespace(char *out, size_t n) {
    const char *ns = ss_config_str("CLOUD_NAMESPACE", "");
    if (!*ns)
        ns = ss_config_str("NAMESPACE", "");
    if (*ns) {
        snprintf(out, n, "%s", ns);
        return;
    }
    /* inside Kubernetes: the service account's namespace */
    char buf[256];
    qb_read_small("/var/run/secrets/kubernetes.io/serviceaccount/namespace", buf, sizeof buf);
    snprintf(out, n, "%s", buf[0] ? buf : "unknown");
}
