/* log.c: the agent's own messages, one line each, on the stderr the
 * process had when the agent started, or in STACKSHOT_LOG_FILE.
 *
 * Every message is one complete line prefixed "stackshot: ", written with
 * a single call so that concurrent lines never interleave with each other
 * (the log file is opened O_APPEND: a forked child's lines land after its
 * parent's, whole). A file name with %p is opened again, under the
 * child's pid, by a forked child's first line.
 *
 * Whose stderr. fd 2 is the host's: a daemon closes it and its next
 * open() gets number 2 for a data file. So the agent never writes to "fd
 * 2": it keeps a private duplicate (F_DUPFD_CLOEXEC, numbered 3 or more),
 * taken at its start (ss_log_take_stderr, when the loader opens the core)
 * and only if fd 2 is then still the file it was when the loader was
 * loaded (the loader records its device and inode in its constructor),
 * or a log the host pointed fd 2 to (a regular file open write-only with
 * O_APPEND: nginx's error log): a host that put another file of its own
 * on fd 2 in between (a data file, a socket), or started with fd 2
 * closed, gets no line at all. The duplicate is a kept descriptor
 * (kept_fd.h): a host that closes every descriptor and reuses the number
 * is noticed, the number forgotten; a new duplicate is taken only while
 * fd 2 is still the original file, otherwise lines are dropped. A host
 * that only moves fd 2 elsewhere (close(2), open) leaves the duplicate
 * alone: the lines keep going to the original stderr.
 *
 * Never waiting for a reader. A pipe nobody reads fills up, and a
 * blocking write would hold the agent's thread (and the host's exit and
 * exec, which wait for it) forever. Each destination is written in a way
 * that cannot wait:
 *   - pipe or FIFO: through an open file description of our own, opened
 *     from /proc/self/fd/<n> with O_NONBLOCK (setting O_NONBLOCK on a
 *     duplicate would set it on the host's stderr too: duplicates share
 *     the description and its flags). Where that open is refused (a pipe
 *     created by another user, no /proc) the line is written into a
 *     private pipe and spliced over with SPLICE_F_NONBLOCK;
 *   - socket: poll(POLLOUT, 0), then send(MSG_DONTWAIT | MSG_NOSIGNAL);
 *   - tty or other character device: poll(POLLOUT, 0), then write;
 *   - regular file: write, on the duplicate (the host's offset is
 *     shared: reopening the file would overwrite the host's bytes).
 * A line that cannot be written now is dropped and counted; the count is
 * told once at the agent's stop (ss_log_report) and in its debug line.
 * SIGPIPE, SIGXFSZ and SIGTTOU are blocked around each write: a closed
 * pipe, a file at its size limit or a background tty answer with an error
 * instead of a signal to the host (a SIGPIPE we caused is taken back).
 *
 * The lock around a line is taken with a bound: a thread stuck in a write
 * to a regular file (a hung NFS mount) makes the others drop, not wait. */
#include "agent/log.h"
#include "agent/time.h"
#include "agent/version.h"
#include "agent/kept_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_WAIT_NS 100000000ull /* 100 ms */

static _Atomic int log_level = SS_LOG_WARN;

/* How a destination is written without waiting for its reader. */
typedef enum dest_kind {
    DEST_FILE = 0, /* regular file, block device: write(2) */
    DEST_NONBLOCK, /* pipe or FIFO, our own O_NONBLOCK description: write(2) */
    DEST_SPLICE,   /* pipe or FIFO we could not reopen: splice, non-blocking */
    DEST_SOCKET,   /* poll, then send(MSG_DONTWAIT | MSG_NOSIGNAL) */
    DEST_POLL,     /* tty, other character device: poll, then write(2) */
} dest_kind;

typedef struct dest {
    ss_kept_fd fd;
    dest_kind kind;
} dest;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool lock_stuck; /* the last bounded wait failed: only try */

/* stderr, under log_lock */
typedef enum err_state {
    ERR_UNTAKEN = 0, /* not looked at yet: taken at the first line */
    ERR_KEPT,        /* the original is err_dev/err_ino; `err` holds ours */
    ERR_NOWHERE,     /* the host's fd 2 is not the stderr we started with */
} err_state;
static err_state err_is;
static dev_t err_dev;
static ino_t err_ino;
static dest err = {SS_KEPT_FD_NONE, DEST_FILE};

/* STACKSHOT_LOG_FILE, under log_lock: the template, and the file opened
 * for a pid. */
static char file_tmpl[1024];
static dest file = {SS_KEPT_FD_NONE, DEST_FILE};
static pid_t file_pid;

/* Lines dropped: the destination could not take them now (full), or
 * there was none or it failed. `reported`: the sum told at the last stop. */
static _Atomic uint64_t dropped_full, dropped_gone, reported;

void ss_log_set_level(ss_log_level level) { atomic_store(&log_level, (int)level); }
ss_log_level ss_log_get_level(void) { return (ss_log_level)atomic_load(&log_level); }
bool ss_log_enabled(ss_log_level level) {
    return level != SS_LOG_OFF && (int)level <= atomic_load(&log_level);
}

static void expand(const char *tmpl, char *out, size_t n) {
    size_t len = 0;
    for (const char *p = tmpl; *p && len + 24 < n; p++) {
        if (p[0] == '%' && (p[1] == 'p' || p[1] == 'u')) {
            len += (size_t)snprintf(out + len, n - len, "%u",
                                    p[1] == 'p' ? (unsigned)getpid() : (unsigned)geteuid());
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            out[len++] = '%';
            p++;
        } else {
            out[len++] = *p;
        }
    }
    out[len] = '\0';
}

/* ---- descriptors ------------------------------------------------------ */

/* A descriptor the agent keeps must not hold 0, 1 or 2: a host that
 * closed one of them expects its next open() to get it back. And it goes
 * to the top eighth of the table, out of the host's way (kept_fd.h). */
static int above_stdio(int fd) {
    if (fd < 0 || fd > 2)
        return ss_fd_move_high(fd);
    int high = ss_fd_dup_high(fd);
    close(fd);
    return high;
}

static dest_kind kind_of(mode_t mode) {
    if (S_ISFIFO(mode))
        return DEST_NONBLOCK;
    if (S_ISSOCK(mode))
        return DEST_SOCKET;
    if (S_ISCHR(mode))
        return DEST_POLL;
    return DEST_FILE;
}

/* Keep `fd` (ours, just opened) in d. 0 or -errno. */
static int dest_adopt(dest *d, int fd) {
    struct stat st;
    if (fd < 0)
        return -EBADF;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    d->kind = kind_of(st.st_mode);
    return ss_kept_fd_adopt(&d->fd, fd);
}

/* Ours from `src`, which names the original stderr: for a pipe or FIFO
 * an O_NONBLOCK description of our own (or a duplicate to splice into),
 * for anything else a duplicate. */
static int dest_take(dest *d, int src) {
    struct stat st;
    if (fstat(src, &st) != 0)
        return -errno;
    if (S_ISFIFO(st.st_mode)) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", src);
        int fd = above_stdio(open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
        if (fd >= 0)
            return dest_adopt(d, fd);
        /* refused (the pipe belongs to another user: its inode is 0600;
         * no /proc; a FIFO without a reader): splice into a duplicate */
        int rc = dest_adopt(d, ss_fd_dup_high(src));
        d->kind = DEST_SPLICE;
        return rc;
    }
    return dest_adopt(d, ss_fd_dup_high(src));
}

/* The kept descriptor if it is still ours: same file (kept_fd), and still
 * close-on-exec as we made it (a host's open of the same file on our
 * number, without O_CLOEXEC, is not ours). -1 otherwise, forgotten. */
static int dest_get(dest *d) {
    int fd = ss_kept_fd_get(&d->fd);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFD);
    if (fl < 0 || !(fl & FD_CLOEXEC)) {
        ss_kept_fd_forget(&d->fd);
        return -1;
    }
    return fd;
}

/* Under a small RLIMIT_NOFILE (below 256, as for the samplers' kept /proc
 * files) the duplicate of stderr is not kept between lines: taken for a
 * line, closed after it, so the host has every number but the output
 * file's (prlimit --nofile=32: 28 files of its own, not 27). A host that
 * moved fd 2 elsewhere then gets no more lines (they are dropped,
 * counted) rather than lines in the original stderr. */
#define TIGHT_NOFILE 256

static bool nofile_tight(void) {
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < TIGHT_NOFILE;
}

static bool is_original(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == err_dev && st.st_ino == err_ino;
}

/* fd 2 (st) is a log the host pointed its stderr to: a regular file open
 * write-only for appending, as servers open their error log before they
 * dup2 it onto fd 2 (nginx) and as a shell's 2>> does. A data file that
 * an open() after close(2) happened to put there is read-write, or not
 * appended to. */
static bool host_log(int fd, const struct stat *st) {
    int fl = fcntl(fd, F_GETFL);
    return S_ISREG(st->st_mode) && fl >= 0 && (fl & O_ACCMODE) == O_WRONLY && (fl & O_APPEND);
}

/* With log_lock held: stderr as it is now becomes the agent's stderr,
 * if it is the file the loader saw there at load, or the host's log. */
static void take_stderr_locked(bool known, bool open_at_load, uint64_t dev, uint64_t ino) {
    struct stat st;
    bool open_now = fstat(STDERR_FILENO, &st) == 0;
    bool same = known && open_at_load && open_now && (uint64_t)st.st_dev == dev &&
                (uint64_t)st.st_ino == ino;
    if (!open_now || (known && !same && !host_log(STDERR_FILENO, &st))) {
        err_is = ERR_NOWHERE; /* the host's file, not the stderr it was started with */
        return;
    }
    err_dev = st.st_dev;
    err_ino = st.st_ino;
    err_is = ERR_KEPT;
    if (!nofile_tight())
        dest_take(&err, STDERR_FILENO); /* failed (no descriptor left): tried again per line */
}

/* With log_lock held: our stderr descriptor, or -1 (lines dropped). */
static int stderr_fd_locked(void) {
    if (err_is == ERR_UNTAKEN)
        take_stderr_locked(false, false, 0, 0);
    if (err_is != ERR_KEPT)
        return -1;
    int fd = dest_get(&err);
    if (fd >= 0)
        return fd;
    /* the host closed ours (and may have reused the number): fd 2, if it
     * is still the original stderr, gives another */
    if (is_original(STDERR_FILENO) && dest_take(&err, STDERR_FILENO) == 0)
        return dest_get(&err);
    return -1;
}

/* ---- writing without waiting ----------------------------------------- */

/* The line through a private pipe: splice never waits with
 * SPLICE_F_NONBLOCK, and moves the line whole (one buffer). */
static ssize_t splice_line(int fd, const char *buf, size_t len) {
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    ssize_t n = write(p[1], buf, len);
    if (n == (ssize_t)len)
        n = splice(p[0], NULL, fd, NULL, len, SPLICE_F_NONBLOCK);
    int e = errno;
    close(p[0]);
    close(p[1]);
    errno = e;
    return n;
}

static bool ready(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, 0);
    if (n == 1 && (p.revents & POLLOUT))
        return true;
    errno = n == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) ? EPIPE : EAGAIN;
    return false;
}

static ssize_t send_line(int fd, dest_kind kind, const char *buf, size_t len) {
    switch (kind) {
    case DEST_SPLICE:
        return splice_line(fd, buf, len);
    case DEST_SOCKET:
        if (!ready(fd))
            return -1;
        return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    case DEST_POLL:
        if (!ready(fd))
            return -1;
        return write(fd, buf, len);
    case DEST_FILE:
    case DEST_NONBLOCK:
    default:
        return write(fd, buf, len);
    }
}

/* send_line with SIGPIPE, SIGXFSZ and SIGTTOU blocked on this thread (a
 * blocked SIGTTOU is not even sent: the tty lets the write through). A
 * SIGPIPE or SIGXFSZ the write raised is taken back, unless one was
 * pending already. */
static ssize_t send_guarded(int fd, dest_kind kind, const char *buf, size_t len) {
    sigset_t guard, old, pending;
    sigemptyset(&guard);
    sigaddset(&guard, SIGPIPE);
    sigaddset(&guard, SIGXFSZ);
    sigaddset(&guard, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &guard, &old);
    sigemptyset(&pending);
    sigpending(&pending);
    ssize_t n = send_line(fd, kind, buf, len);
    int e = errno;
    int raised = n < 0 && e == EPIPE ? SIGPIPE : n < 0 && e == EFBIG ? SIGXFSZ : 0;
    if (raised && !sigismember(&pending, raised)) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, raised);
        struct timespec zero = {0, 0};
        while (sigtimedwait(&one, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return n;
}

/* ---- the lock, bounded ------------------------------------------------ */

static bool lock_bounded(void) {
    if (atomic_load_explicit(&lock_stuck, memory_order_relaxed)) {
        if (pthread_mutex_trylock(&log_lock) != 0)
            return false;
        atomic_store_explicit(&lock_stuck, false, memory_order_relaxed);
        return true;
    }
    struct timespec ts = ss_realtime_in(LOCK_WAIT_NS);
    if (pthread_mutex_timedlock(&log_lock, &ts) == 0)
        return true;
    atomic_store_explicit(&lock_stuck, true, memory_order_relaxed);
    return false;
}

/* ---- STACKSHOT_LOG_FILE ---------------------------------------------- */

void ss_log_after_fork(void) {
    pthread_mutex_init(&log_lock, NULL);
    atomic_store(&lock_stuck, false);
    /* the child tells its own drops, not its parent's */
    atomic_store(&reported, atomic_load(&dropped_full) + atomic_load(&dropped_gone));
}

void ss_log_set_file(const char *path) {
    pthread_mutex_lock(&log_lock);
    ss_kept_fd_close(&file.fd);
    file_pid = 0;
    snprintf(file_tmpl, sizeof file_tmpl, "%s", path ? path : "");
    pthread_mutex_unlock(&log_lock);
}

static void write_locked(int fd, dest_kind kind, const char *line, size_t len);

/* With log_lock held: the log file (opened on first use, again in a
 * forked child when its name has the pid, again when the host closed
 * it), or NULL: stderr. O_NONBLOCK: a FIFO without a reader fails the
 * open rather than holding it, and a FIFO or tty is never waited for. */
static dest *file_dest_locked(int *fdp) {
    if (!file_tmpl[0])
        return NULL;
    pid_t pid = getpid();
    if (file_pid != pid && file.fd.fd >= 0) {
        /* a forked child's copy of its parent's file: its own when the
         * name has no pid and it is still that file; otherwise closed (or
         * forgotten, if the child's host closed it: not a loss of ours) */
        if (!strstr(file_tmpl, "%p") && ss_kept_fd_is_ours(&file.fd))
            file_pid = pid;
        else
            ss_kept_fd_close_inherited(&file.fd);
    }
    int fd = dest_get(&file);
    if (fd >= 0) {
        *fdp = fd;
        return &file;
    }
    char path[1100];
    expand(file_tmpl, path, sizeof path);
    fd = above_stdio(open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
                                    O_NONBLOCK | O_NOCTTY,
                          0600));
    int e = fd < 0 ? errno : 0;
    if (fd >= 0 && (e = -dest_adopt(&file, fd)) == 0) {
        file_pid = pid;
        *fdp = fd;
        return &file;
    }
    char line[1300];
    int n = snprintf(line, sizeof line,
                     SS_NAME ": STACKSHOT_LOG_FILE=%s: cannot open %s: %s; logging to stderr\n",
                     file_tmpl, path, strerror(e));
    file_tmpl[0] = '\0';
    int err_fd = stderr_fd_locked();
    if (err_fd >= 0 && n > 0 && (size_t)n < sizeof line)
        write_locked(err_fd, err.kind, line, (size_t)n);
    return NULL;
}

/* ---- lines -------------------------------------------------------------- */

static void write_locked(int fd, dest_kind kind, const char *line, size_t len) {
    ssize_t w = send_guarded(fd, kind, line, len);
    if (w == (ssize_t)len)
        return;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        atomic_fetch_add(&dropped_full, 1);
    else
        atomic_fetch_add(&dropped_gone, 1); /* failed, or cut (a socket took part) */
}

void ss_log_take_stderr(bool known, bool open_at_load, uint64_t dev, uint64_t ino) {
    pthread_mutex_lock(&log_lock);
    if (err_is == ERR_UNTAKEN)
        take_stderr_locked(known, open_at_load, dev, ino);
    pthread_mutex_unlock(&log_lock);
}

void ss_log_retake_stderr(void) {
    pthread_mutex_lock(&log_lock);
    ss_kept_fd_close(&err.fd);
    err_is = ERR_UNTAKEN;
    pthread_mutex_unlock(&log_lock);
}

/* A process whose lines another process writes (the gRPC helper): each
 * message goes to the sink, without the prefix and the newline. */
static void (*_Atomic line_sink)(ss_log_level level, const char *msg);

void ss_log_set_sink(void (*sink)(ss_log_level level, const char *msg)) {
    atomic_store(&line_sink, sink);
}

void ss_vlog(ss_log_level level, const char *fmt, va_list ap) {
    if (!ss_log_enabled(level))
        return;
    char line[1024];
    void (*sink)(ss_log_level, const char *) = atomic_load(&line_sink);
    if (sink) {
        if (vsnprintf(line, sizeof line, fmt, ap) >= 0)
            sink(level, line);
        return;
    }
    int n = snprintf(line, sizeof line, SS_NAME ": ");
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2; /* truncated: still one line */
    line[len++] = '\n';
    if (!lock_bounded()) {
        atomic_fetch_add(&dropped_full, 1); /* another thread is stuck writing */
        return;
    }
    int fd = -1;
    dest *d = file_dest_locked(&fd);
    if (!d) {
        d = &err;
        fd = stderr_fd_locked();
    }
    if (fd >= 0)
        write_locked(fd, d->kind, line, len);
    else
        atomic_fetch_add(&dropped_gone, 1);
    if (d == &err && fd >= 0 && nofile_tight())
        ss_kept_fd_close(&err.fd); /* taken again at the next line */
    pthread_mutex_unlock(&log_lock);
}

void ss_log(ss_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ss_vlog(level, fmt, ap);
    va_end(ap);
}

/* The first line, then at most one a minute with the count of those not
 * written in between ("... (and 3000 more like it in the last 60 s)"). */
void ss_log_limited(ss_log_limit *state, ss_log_level level, const char *fmt, ...) {
    if (!ss_log_enabled(level))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* not ss_mono_ns: log.c stands alone */
    uint64_t now = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) | 1;
    uint64_t last = atomic_load(&state->last_ns);
    if (last && now - last < SS_LOG_LIMIT_NS) {
        atomic_fetch_add(&state->suppressed, 1);
        return;
    }
    if (!atomic_compare_exchange_strong(&state->last_ns, &last, now)) {
        atomic_fetch_add(&state->suppressed, 1); /* another thread writes it */
        return;
    }
    uint64_t n = atomic_exchange(&state->suppressed, 0);
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    if (n)
        ss_log(level, "%s (and %llu more like it in the last %llu s)", msg,
               (unsigned long long)n, (unsigned long long)((now - last) / 1000000000ull));
    else
        ss_log(level, "%s", msg);
}

uint64_t ss_log_dropped(void) {
    return atomic_load(&dropped_full) + atomic_load(&dropped_gone);
}

void ss_log_report(void) {
    uint64_t full = atomic_load(&dropped_full), gone = atomic_load(&dropped_gone);
    uint64_t before = atomic_exchange(&reported, full + gone);
    if (full + gone > before) {
        uint64_t now = full + gone - before;
        ss_info("%llu of its lines %s dropped (%llu in all: %llu with the destination full, "
                "%llu with none to write to: stderr closed or the host's file, or a failed "
                "write)",
                (unsigned long long)now, now == 1 ? "was" : "were",
                (unsigned long long)(full + gone), (unsigned long long)full,
                (unsigned long long)gone);
    } else {
        ss_debug("log: no line dropped since the last report (%llu in all); %llu kept "
                 "descriptors taken over by the host",
                 (unsigned long long)(full + gone), (unsigned long long)ss_kept_fd_lost());
    }
}
