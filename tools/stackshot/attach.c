/*
 * attach.c: `stackshot attach PID [options]` and `stackshot stop PID`,
 * HotSpot's dynamic attach protocol, without a JDK on the machine. Stop
 * is a load of the library the JVM already maps with the option string
 * "stop" (core/jvmti_entry.c); attach loads that library too when there is one.
 *
 * The handshake (OpenJDK's VirtualMachineImpl on Linux and HotSpot's
 * attachListener_linux.cpp): a JVM that has not started its attach
 * listener yet starts it on SIGQUIT when the file .attach_pid<pid> exists
 * in its working directory or in /tmp; the listener is a Unix socket
 * /tmp/.java_pid<pid>. <pid> is the JVM's pid in its own pid namespace
 * (the last NSpid of /proc/PID/status), and both paths are the JVM's: we
 * reach them through /proc/PID/cwd and /proc/PID/root, so a JVM in another
 * container needs no setns. A request is protocol version "1", the command
 * and three arguments, each NUL-terminated (at most 1024 bytes each); for
 * "load": the library, "true" (the path is absolute) and the option
 * string. The reply is a line with the listener's code (0: done) and the
 * command's output; for load, "return code: N" carries Agent_OnAttach's.
 *
 * The listener accepts a peer with the JVM's effective uid and gid (or
 * root): as root we connect with the target's ids. Before SIGQUIT we check
 * the JVM catches it (SigCgt): a process that leaves it at its default
 * action would dump core and die of it, so we refuse instead. (-Xrs JVMs
 * ignore SIGQUIT and start their listener at start-up: no signal needed.)
 */
#include "tools/stackshot/stackshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char attach_help[] =
    "usage: stackshot attach PID [options]\n"
    "Load the stackshot agent into the running HotSpot JVM PID (OpenJDK, Temurin, ...)\n"
    "through the JVM's dynamic attach mechanism; no JDK tools are needed. Works for a\n"
    "JVM in another container (its mount and pid namespaces are reached through\n"
    "/proc/PID; the library is copied into the JVM's /tmp when the JVM cannot see it)\n"
    "and, as root, for a JVM of another user. Options set the agent's keys, passed\n"
    "in the agent's option string (they win over the JVM's environment):\n"
    "  -i, --interval MS        SPLUNK_PROFILER_CALL_STACK_INTERVAL\n"
    "  -e, --exporters LIST     STACKSHOT_EXPORTERS\n"
    "  -o, --output DIR         STACKSHOT_OUTPUT_DIR (a path in the JVM's file system;\n"
    "                           a relative one is made absolute from this directory)\n"
    "      --endpoint URL       OTEL_EXPORTER_OTLP_ENDPOINT\n"
    "      --service NAME       OTEL_SERVICE_NAME\n"
    "      --log-level LEVEL    STACKSHOT_LOG_LEVEL\n"
    "  -s, --set KEY=VALUE      any other key of stackshot(7)\n"
    "  -d, --duration TIME      STACKSHOT_DURATION: stop sampling after TIME (30s, 2m)\n"
    "  -t, --timeout TIME       wait this long for the JVM's attach listener (default 10s)\n"
    "      --lib PATH           libstackshot.so to load (default: next to this command)\n"
    "A JVM already running the agent is left as it is (exit 1): the agent ignores a\n"
    "second load, its settings stay. After `stackshot stop PID` an attach starts\n"
    "sampling again, with its own settings, in the library the JVM has loaded.\n"
    "Exit status: 0 loaded, 1 failed (the message says why), 2 bad usage.\n";

static const char stop_help[] =
    "usage: stackshot stop PID [-t TIME]\n"
    "Stop the agent's sampling in the running HotSpot JVM PID: the agent's files and\n"
    "exporters get what it holds (as at the JVM's exit) and the JVM runs on. Sent\n"
    "through the JVM's attach mechanism to the agent library the JVM has loaded\n"
    "(attached, or from -agentpath or LD_PRELOAD); the library stays loaded (HotSpot\n"
    "never unloads an agent) and `stackshot attach PID` starts sampling again.\n"
    "A native program's agent cannot be stopped from outside (the program can call\n"
    "stackshot_stop(); the agent ends at its exit): JVMs only.\n"
    "  -t, --timeout TIME       wait this long for the JVM's attach listener and for\n"
    "                           the sampler to end (default 10s)\n"
    "Exit status: 0 stopped, 1 failed or nothing to stop (the message says why),\n"
    "2 bad usage.\n";

/* Each argument of a request is at most this long (HotSpot's limit). */
#define ARG_MAX_LEN 1024

typedef struct {
    pid_t pid;    /* as we see it */
    long nspid;   /* as the JVM sees itself */
    uid_t uid;    /* effective */
    gid_t gid;
    unsigned long long sigcgt;
    char root[64]; /* /proc/PID/root */
} target;

static const char *sub = "attach"; /* or "stop": the messages' prefix */

static int fail(pid_t pid, const char *fmt, const char *detail) {
    fprintf(stderr, "stackshot %s: %d: ", sub, (int)pid);
    fprintf(stderr, fmt, detail);
    fputc('\n', stderr);
    return 1;
}

static int read_status(target *t) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/status", (int)t->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    t->nspid = t->pid;
    while (fgets(line, sizeof line, f)) {
        unsigned r, e, r2, e2;
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
            t->uid = e;
        else if (sscanf(line, "Gid: %u %u", &r2, &e2) == 2)
            t->gid = e2;
        else if (!strncmp(line, "SigCgt:", 7))
            t->sigcgt = strtoull(line + 7, NULL, 16);
        else if (!strncmp(line, "NSpid:", 6)) {
            char *p = line + 6, *end;
            for (long v = strtol(p, &end, 10); end != p; v = strtol(p, &end, 10)) {
                t->nspid = v; /* the last one is the innermost namespace's */
                p = end;
            }
        }
    }
    fclose(f);
    return 0;
}

/* Does PID map a library whose name contains `name`? 1, 0, or -errno. */
static int maps_has(pid_t pid, const char *name) {
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

/* The agent library (the loader, libstackshot.so[.N...], which has
 * Agent_OnAttach) that PID maps, as a path in PID's file system, checked
 * to be that very file through /proc/PID/root (dev and inode of the
 * mapping). A load of this path reaches the agent the JVM runs: another
 * path, another copy, would be another agent beside it. 1 found, 0 none,
 * -errno. */
static int mapped_agent(pid_t pid, char *out, size_t n) {
    char path[64], line[4096 + 128];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned maj, min;
        unsigned long long ino;
        int at = 0;
        if (sscanf(line, "%*s %*s %*s %x:%x %llu %n", &maj, &min, &ino, &at) < 3 || !at)
            continue;
        char *file = line + at;
        file[strcspn(file, "\n")] = '\0';
        const char *base = strrchr(file, '/');
        if (file[0] != '/' || !base || strncmp(base + 1, "libstackshot.so", 15) ||
            (base[16] != '\0' && base[16] != '.'))
            continue;
        char seen[PATH_MAX + 64];
        struct stat st;
        snprintf(seen, sizeof seen, "/proc/%d/root%s", (int)pid, file);
        if (stat(seen, &st) == 0 && st.st_ino == ino && major(st.st_dev) == maj &&
            minor(st.st_dev) == min && strlen(file) < n) {
            memcpy(out, file, strlen(file) + 1);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* Is one of PID's threads the agent's sampler ("stackshot-sampler",
 * comm keeps 15 bytes)? */
static bool agent_running(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char comm[300], name[32] = "";
        snprintf(comm, sizeof comm, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *f = fopen(comm, "r");
        if (f) {
            if (fgets(name, sizeof name, f))
                found = !strncmp(name, "stackshot-sampl", 15);
            fclose(f);
        }
    }
    closedir(d);
    return found;
}

static bool same_mount_ns(pid_t pid) {
    char path[64];
    struct stat a, b;
    snprintf(path, sizeof path, "/proc/%d/ns/mnt", (int)pid);
    if (stat("/proc/self/ns/mnt", &a) || stat(path, &b))
        return true; /* cannot tell: assume the usual case */
    return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

static int copy_file(const char *from, const char *to, uid_t uid, gid_t gid) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755);
    if (out < 0) {
        int e = errno;
        close(in);
        return -e;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) {
            rc = -EIO;
            break;
        }
    if (n < 0)
        rc = -errno;
    if (!rc && geteuid() == 0 && fchown(out, uid, gid))
        rc = -errno;
    if (close(out) && !rc)
        rc = -errno;
    close(in);
    return rc;
}

/* The JVM cannot see our file system: copy libstackshot.so and the core
 * and modules next to it (libstackshot*.so*) into a new directory of the
 * JVM's /tmp; `lib` becomes the path the JVM sees. */
static int copy_into(const target *t, char *lib, size_t n) {
    char dir[PATH_MAX], here[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tmp/stackshot.XXXXXX", t->root);
    if (!mkdtemp(dir))
        return fail(t->pid, "cannot create a directory in the JVM's /tmp: %s", strerror(errno));
    if (chmod(dir, 0755) || (geteuid() == 0 && chown(dir, t->uid, t->gid)))
        return fail(t->pid, "cannot give the copy to the JVM's user: %s", strerror(errno));
    snprintf(here, sizeof here, "%s", lib);
    char *slash = strrchr(here, '/');
    *slash = '\0';
    const char *base = slash + 1;
    DIR *d = opendir(here);
    if (!d)
        return fail(t->pid, "cannot list the library's directory: %s", strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (strncmp(e->d_name, "libstackshot", 12) || !strstr(e->d_name, ".so"))
            continue;
        char from[PATH_MAX + 256], to[PATH_MAX + 256];
        snprintf(from, sizeof from, "%s/%s", here, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
        rc = copy_file(from, to, t->uid, t->gid);
        if (rc)
            fail(t->pid, "copying the agent into the JVM's /tmp: %s", strerror(-rc));
    }
    closedir(d);
    if (rc)
        return 1;
    /* the path inside the JVM: strip /proc/PID/root */
    snprintf(lib, n, "%s/%s", dir + strlen(t->root), base);
    fprintf(stderr, "stackshot attach: %d: the JVM is in another mount namespace: the agent "
                    "was copied to %s there (left in place: the JVM maps it)\n",
            (int)t->pid, lib);
    return 0;
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read a 64-bit counter of a HotSpot perfdata file (what jps and jstat
 * read: /tmp/hsperfdata_<user>/<pid>). Layout (HotSpot's perfMemory.hpp):
 * a 32-byte prologue, magic 0xcafec0c0 stored big-endian, byte order at 4
 * (1: little endian), entry offset at 24, entry count at 28; each entry:
 * length, name offset, vector length (int32 each), type, flags, units,
 * variability (a byte each), data offset (int32), offsets from the entry.
 * 1 found (value in *v), 0 not found, -1 not a perfdata file. */
static int perf_counter(const unsigned char *m, size_t n, const char *name, int64_t *v) {
    if (n < 32 || memcmp(m, "\xca\xfe\xc0\xc0", 4) || m[4] != 1)
        return -1;
    int32_t off, count;
    memcpy(&off, m + 24, 4);
    memcpy(&count, m + 28, 4);
    for (int32_t i = 0; i < count && off >= 32 && (size_t)off + 20 <= n; i++) {
        int32_t len, name_off, vec, data_off;
        memcpy(&len, m + off, 4);
        memcpy(&name_off, m + off + 4, 4);
        memcpy(&vec, m + off + 8, 4);
        memcpy(&data_off, m + off + 16, 4);
        if (len <= 0 || (size_t)off + (size_t)len > n)
            return 0;
        const char *nm = (const char *)m + off + name_off;
        if (name_off > 0 && name_off < len && vec == 0 && m[off + 12] == 'J' &&
            data_off > 0 && data_off + 8 <= len && strnlen(nm, (size_t)(len - name_off)) <
                                                       (size_t)(len - name_off) &&
            !strcmp(nm, name)) {
            memcpy(v, m + off + data_off, 8);
            return 1;
        }
        off += len;
    }
    return 0;
}

/* Is the JVM past its start-up (JVMTI's live phase)? A JVM refuses, or
 * worse half-accepts, an agent before then (JDK 21 on: "only permitted
 * in the live phase"; JDK 17 loads it without a JVMTI environment), and a
 * JVM started a moment ago is what a script attaches to. HotSpot records
 * sun.rt.createVmEndTime in its perfdata file when start-up is complete.
 * 1 live, 0 not yet, -1 cannot tell (no perfdata: -XX:-UsePerfData). */
static int jvm_live(const target *t) {
    char pattern[128], buf[65536];
    snprintf(pattern, sizeof pattern, "%s/tmp/hsperfdata_*/%ld", t->root, t->nspid);
    glob_t g;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0)
        return -1;
    int live = -1;
    for (size_t i = 0; i < g.gl_pathc && live < 0; i++) {
        int fd = open(g.gl_pathv[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = pread(fd, buf, sizeof buf, 0);
        close(fd);
        int64_t end = 0;
        int r = n > 0 ? perf_counter((unsigned char *)buf, (size_t)n, "sun.rt.createVmEndTime",
                                     &end) : -1;
        if (r == 1) /* a counter not found: cannot tell, never wait on it */
            live = end != 0;
    }
    globfree(&g);
    return live;
}

/* Start the JVM's attach listener if it is not up, and wait for its
 * socket. 0, or 1 after a message. */
static int start_listener(const target *t, const char *sock, long long timeout_ms) {
    struct stat st;
    if (stat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
        return 0;
    if (!(t->sigcgt & (1ull << (SIGQUIT - 1))))
        return fail(t->pid, "%s", "the JVM does not catch SIGQUIT (still starting, or a program "
                                  "embedding a JVM): the attach signal would end it; not sent");
    char trigger[PATH_MAX];
    snprintf(trigger, sizeof trigger, "/proc/%d/cwd/.attach_pid%ld", (int)t->pid, t->nspid);
    int fd = open(trigger, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(trigger, sizeof trigger, "%s/tmp/.attach_pid%ld", t->root, t->nspid);
        fd = open(trigger, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return fail(t->pid, "cannot create the attach trigger file: %s", strerror(errno));
    close(fd);
    int rc = 0;
    if (kill(t->pid, SIGQUIT)) {
        rc = fail(t->pid, "cannot signal the JVM: %s", strerror(errno));
    } else {
        long long start = mono_ms(), deadline = start + timeout_ms;
        bool again = false;
        int wait = 20;
        while (!(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode))) {
            if (!again && mono_ms() - start > timeout_ms / 2) {
                kill(t->pid, SIGQUIT); /* a second chance, as the JDK's client gives */
                again = true;
            }
            if (mono_ms() >= deadline || kill(t->pid, 0)) {
                rc = fail(t->pid, "%s", "no attach listener came up in time (a JVM started "
                                        "with -XX:+DisableAttachMechanism, or busy in a long "
                                        "safepoint); try a longer --timeout");
                break;
            }
            poll(NULL, 0, wait);
            if (wait < 200)
                wait *= 2;
        }
    }
    unlink(trigger);
    return rc;
}

/* Connect as the JVM's user: its listener checks the peer's ids. */
static int connect_as(const target *t, const char *sock) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(sock) >= sizeof a.sun_path)
        return -ENAMETOOLONG;
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    /* the listener's socket is the JVM user's (or root's): anything else
     * in a shared /tmp is someone else's socket */
    struct stat st;
    if (lstat(sock, &st) || !S_ISSOCK(st.st_mode) || (st.st_uid != t->uid && st.st_uid != 0))
        return -EPERM;
    uid_t euid = geteuid();
    gid_t egid = getegid();
    bool switched = false;
    if (euid == 0 && (t->uid != euid || t->gid != egid)) {
        if (setegid(t->gid))
            return -errno;
        if (seteuid(t->uid)) {
            int e = errno;
            if (setegid(egid))
                return -errno;
            return -e;
        }
        switched = true;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
        rc = -errno;
        close(fd);
    }
    if (switched && (seteuid(euid) || setegid(egid)))
        rc = rc ? rc : -errno;
    return rc ? rc : fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Send load(lib, options) and read the whole reply into buf. */
static int load_request(int fd, const char *lib, const char *opts, char *buf, size_t n,
                        long long timeout_ms) {
    const char *parts[] = {"1", "load", lib, "true", opts};
    for (size_t k = 0; k < 5; k++)
        if (send_all(fd, parts[k], strlen(parts[k]) + 1))
            return -errno;
    size_t len = 0;
    long long deadline = mono_ms() + timeout_ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        long long left = deadline - mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r ? -errno : -ETIMEDOUT;
        ssize_t got = read(fd, buf + len, n - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -errno;
        if (got == 0 || len + (size_t)got == n - 1) {
            len += (size_t)(got > 0 ? got : 0);
            break;
        }
        len += (size_t)got;
    }
    buf[len] = '\0';
    return (int)len;
}

/* Judge the reply: "<code>\n<output>". A JVM refuses with a code other
 * than 0; newer ones (JDK 21 on) answer 0 and put the reason in the output
 * instead: as the JDK's own client does, only "return code: N" (or, from
 * a JDK 8, a bare N) in the output means the agent was loaded, and N is
 * what Agent_OnAttach returned. */
static int judge(const target *t, char *reply) {
    char *end;
    long code = strtol(reply, &end, 10);
    if (end == reply)
        return fail(t->pid, "the JVM sent no answer it could be judged by: '%s'", reply);
    char *msg = end + strspn(end, "\r\n");
    for (char *c = msg; *c; c++) /* one line for the message */
        if (*c == '\n' || *c == '\r')
            *c = c[1] ? ';' : '\0';
    if (code != 0 || !*msg)
        return fail(t->pid, "the JVM refused to load the agent: %s",
                    *msg ? msg : "(no reason given)");
    long rc;
    if (!strncmp(msg, "return code: ", 13))
        rc = strtol(msg + 13, &end, 10);
    else
        rc = strtol(msg, &end, 10);
    if (end == msg || end == msg + 13 || (*end && *end != ';'))
        return fail(t->pid, "the JVM did not load the agent: %s", msg);
    if (rc != 0)
        return fail(t->pid, "the agent's Agent_OnAttach failed (%s); see the JVM's output", msg);
    return 0;
}

/* The JVM's /tmp, where its attach socket is, must be a directory:
 * past /proc/PID/root, symbolic links resolve in OUR root, and a /tmp
 * that is a link in the JVM's file system would lead the socket, the
 * trigger file and the copy into ours. */
static bool tmp_is_dir(const target *t) {
    char tmp[96];
    struct stat st;
    snprintf(tmp, sizeof tmp, "%s/tmp", t->root);
    if (lstat(tmp, &st) || !S_ISDIR(st.st_mode)) {
        fail(t->pid, "%s", "the JVM's /tmp is not a directory (a symbolic link?); "
                           "its attach socket lives there: not followed");
        return false;
    }
    return true;
}

/* load(lib, opts) through the JVM's attach listener (started if need
 * be), once the JVM is live; judged as the JDK's client does. 0, or 1
 * after a message. t->root is set. */
static int send_load(target *t, const char *lib, const char *opts, long long timeout_ms) {
    if (!tmp_is_dir(t))
        return 1;
    if (strlen(lib) >= ARG_MAX_LEN)
        return fail(t->pid, "%s", "the library's path is over the JVM's 1024 bytes");
    char sock[PATH_MAX];
    snprintf(sock, sizeof sock, "%s/tmp/.java_pid%ld", t->root, t->nspid);
    long long timeout = timeout_ms > 0 ? timeout_ms : 10000;
    long long deadline = mono_ms() + timeout;
    while (jvm_live(t) == 0) { /* still starting: wait, as long as --timeout */
        if (mono_ms() >= deadline)
            return fail(t->pid, "%s", "the JVM did not finish starting in time; try a longer "
                                      "--timeout");
        poll(NULL, 0, 50);
    }
    if (start_listener(t, sock, timeout))
        return 1;
    char reply[8192];
    for (;;) {
        int fd = connect_as(t, sock);
        if (fd < 0)
            return fail(t->pid, "cannot connect to the JVM's attach listener: %s",
                        strerror(-fd));
        int got = load_request(fd, lib, opts, reply, sizeof reply, timeout);
        close(fd);
        if (got < 0)
            return fail(t->pid, "no reply from the JVM's attach listener: %s", strerror(-got));
        /* a JVM without perfdata may still be starting: it said so, try again */
        if (!strstr(reply, "only permitted in the live phase") || mono_ms() >= deadline)
            break;
        poll(NULL, 0, 100);
    }
    return judge(t, reply);
}

/* The process's name from /proc/PID/comm, for messages ("?" unknown). */
static void read_comm(pid_t pid, char *comm, size_t size) {
    char path[64];
    snprintf(comm, size, "?");
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(comm, (int)size, f))
        comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
}

static int attach(target *t, const ss_cmd_settings *s, char *lib) {
    char comm[64];
    read_comm(t->pid, comm, sizeof comm);
    int jvm = maps_has(t->pid, "/libjvm.so");
    if (jvm < 0)
        return fail(t->pid, "cannot read its memory map: %s (attach as its user or as root)",
                    strerror(-jvm));
    if (!jvm) {
        fprintf(stderr, "stackshot attach: %d (%s) is not a HotSpot JVM (no libjvm.so in its "
                        "memory map); a native program is profiled from its start: stackshot "
                        "run -- PROGRAM\n", (int)t->pid, comm);
        return 1;
    }
    if (agent_running(t->pid)) {
        fprintf(stderr, "stackshot attach: %d (%s): the agent is already running in this JVM; "
                        "not loaded again (the agent would ignore a second load: its settings "
                        "stay as they are)\n", (int)t->pid, comm);
        return 1;
    }
    /* the option string: every setting, the switch first; a relative
     * output directory is ours, not the JVM's working directory's */
    char opts[ARG_MAX_LEN + 1], cwd[PATH_MAX];
    size_t len = (size_t)snprintf(opts, sizeof opts, "SPLUNK_PROFILER_ENABLED=true");
    for (int k = 0; k < s->n && len < sizeof opts; k++) {
        const char *v = s->value[k];
        bool rel = !strcmp(s->key[k], "STACKSHOT_OUTPUT_DIR") && v[0] != '/';
        if (rel && !getcwd(cwd, sizeof cwd))
            return fail(t->pid, "cannot make the output directory absolute: %s",
                        strerror(errno));
        len += (size_t)snprintf(opts + len, sizeof opts - len, ",%s=%s%s%s", s->key[k],
                                rel ? cwd : "", rel ? "/" : "", v);
    }
    if (len >= ARG_MAX_LEN)
        return fail(t->pid, "%s", "the settings make an option string over the JVM's 1024 "
                                  "bytes; set some in the JVM's environment instead");
    snprintf(t->root, sizeof t->root, "/proc/%d/root", (int)t->pid);
    if (!tmp_is_dir(t))
        return 1;
    /* the JVM has the agent's library already (stopped, or a load that
     * left it off): that one, never a second copy beside it */
    char mapped[PATH_MAX];
    if (mapped_agent(t->pid, mapped, sizeof mapped) == 1) {
        if (strcmp(mapped, lib))
            fprintf(stderr, "stackshot attach: %d: the JVM has the agent's library %s "
                            "already: loading that one\n", (int)t->pid, mapped);
        snprintf(lib, PATH_MAX, "%s", mapped);
    } else if (!same_mount_ns(t->pid) && copy_into(t, lib, PATH_MAX)) {
        return 1;
    }
    if (send_load(t, lib, opts, s->timeout_ms))
        return 1;
    /* the sampler thread shows the agent did start (it stays off with
     * one line in the JVM's output otherwise) */
    for (int k = 0; k < 40 && !agent_running(t->pid); k++)
        poll(NULL, 0, 50);
    if (agent_running(t->pid))
        printf("stackshot: agent loaded into %d (%s); sampling\n", (int)t->pid, comm);
    else
        printf("stackshot: agent loaded into %d (%s); no sampler thread yet: the JVM's "
               "output says why if it stays off\n", (int)t->pid, comm);
    return 0;
}

int ss_cmd_attach(int argc, char **argv) {
    ss_cmd_settings s = {0};
    int i = 1;
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(attach_help, stdout);
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-') {
        fputs("stackshot attach: a process id is needed first (see stackshot attach --help)\n",
              stderr);
        return 2;
    }
    char *end;
    long pid = strtol(argv[1], &end, 10);
    if (*end || pid <= 0 || pid > 0x3fffffff) {
        fprintf(stderr, "stackshot attach: '%s' is not a process id\n", argv[1]);
        return 2;
    }
    i = 2;
    int rc = ss_cmd_parse(argc, argv, &i, &s, "t", "attach");
    if (rc == 3) {
        fputs(attach_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (i < argc) {
        fprintf(stderr, "stackshot attach: unexpected '%s' (see stackshot attach --help)\n",
                argv[i]);
        return 2;
    }
    target t = {.pid = (pid_t)pid};
    int e = read_status(&t);
    if (e)
        return fail(t.pid, "%s", e == -ENOENT ? "no such process" : strerror(-e));
    char lib[PATH_MAX];
    if (ss_cmd_find_lib(&s, lib, sizeof lib))
        return 1;
    return attach(&t, &s, lib);
}

/* `stackshot stop PID`: "stop" as the option string of a load of the
 * library the JVM has (core/jvmti_entry.c). */
static int stop(target *t, long long timeout_ms) {
    char comm[64];
    read_comm(t->pid, comm, sizeof comm);
    int jvm = maps_has(t->pid, "/libjvm.so");
    if (jvm < 0)
        return fail(t->pid, "cannot read its memory map: %s (run as its user or as root)",
                    strerror(-jvm));
    if (!jvm) {
        fprintf(stderr, "stackshot stop: %d (%s) is not a HotSpot JVM: a native program's "
                        "agent cannot be stopped from outside (the program may call "
                        "stackshot_stop(); it stops at exit)\n", (int)t->pid, comm);
        return 1;
    }
    if (!agent_running(t->pid)) {
        fprintf(stderr, "stackshot stop: %d (%s): the agent is not sampling in this JVM; "
                        "nothing to stop\n", (int)t->pid, comm);
        return 1;
    }
    char lib[PATH_MAX];
    int m = mapped_agent(t->pid, lib, sizeof lib);
    if (m < 0)
        return fail(t->pid, "cannot read its memory map: %s", strerror(-m));
    if (m == 0)
        return fail(t->pid, "%s", "the agent's library is no longer where the JVM loaded it "
                                  "from (removed?): it cannot be reached");
    snprintf(t->root, sizeof t->root, "/proc/%d/root", (int)t->pid);
    if (send_load(t, lib, "stop", timeout_ms))
        return 1;
    /* the sampler ends within the agent's STACKSHOT_SHUTDOWN_TIMEOUT */
    long long deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 10000);
    while (agent_running(t->pid) && mono_ms() < deadline)
        poll(NULL, 0, 50);
    if (agent_running(t->pid))
        return fail(t->pid, "%s", "the agent's sampler is still running; see the JVM's "
                                  "output");
    printf("stackshot: sampling stopped in %d (%s); the JVM runs on\n", (int)t->pid, comm);
    return 0;
}

int ss_cmd_stop(int argc, char **argv) {
    sub = "stop";
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(stop_help, stdout);
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-') {
        fputs("stackshot stop: a process id is needed first (see stackshot stop --help)\n",
              stderr);
        return 2;
    }
    char *end;
    long pid = strtol(argv[1], &end, 10);
    if (*end || pid <= 0 || pid > 0x3fffffff) {
        fprintf(stderr, "stackshot stop: '%s' is not a process id\n", argv[1]);
        return 2;
    }
    long long timeout_ms = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(stop_help, stdout);
            return 0;
        }
        if (!strncmp(a, "--timeout=", 10))
            v = a + 10;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--timeout")) && i + 1 < argc)
            v = argv[++i];
        timeout_ms = v ? ss_cmd_parse_duration(v) : -1;
        if (timeout_ms <= 0) {
            fprintf(stderr, "stackshot stop: unexpected '%s' (see stackshot stop --help)\n", a);
            return 2;
        }
    }
    target t = {.pid = (pid_t)pid};
    int e = read_status(&t);
    if (e)
        return fail(t.pid, "%s", e == -ENOENT ? "no such process" : strerror(-e));
    return stop(&t, timeout_ms);
}
