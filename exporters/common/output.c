/* output.c: local files, created safely.
 *
 * The agent writes into someone else's process's environment: its files
 * are created mode 0600 in a directory it creates 0700 (whatever the
 * umask), and it never follows a symlink, neither at the file name nor at
 * the output directory itself (a link planted there by another user of a
 * shared /tmp would redirect the agent's writes into a file of the
 * victim's choosing). It writes only into a directory owned by this user,
 * only to a regular file owned by this user with a single link, and never
 * blocks opening a FIFO planted at the name.
 *
 * The directory is a template, expanded when a file is created: %u is the
 * effective uid then (a server that drops privileges after fork writes
 * its workers' files where they may: the default is
 * $TMPDIR/stackshot-%u), %p the pid, %% a percent sign.
 *
 * Every refusal is counted (ss_output_refused) and told in one line; the
 * same refusal again (a periodic writer) is told at debug level only. */
#include "agent/config.h"
#include "agent/dir.h"
#include "agent/log.h"
#include "proc/process.h"
#include "exporters/common/common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static atomic_uint_fast64_t refused;
static atomic_bool refusal_told;

uint64_t ss_output_refused(void) {
    return atomic_load(&refused);
}

/* Count a refused write and say why: the first time as an error, then at
 * debug level (a periodic writer would repeat it every period). */
#define refuse(...)                                                            \
    do {                                                                       \
        atomic_fetch_add(&refused, 1);                                         \
        ss_log(atomic_exchange(&refusal_told, true) ? SS_LOG_DEBUG            \
                                                    : SS_LOG_ERROR,           \
               __VA_ARGS__);                                                   \
    } while (0)

int ss_output_dir_expand(const char *tmpl, char *out, size_t n) {
    size_t len = 0;
    for (const char *p = tmpl; *p; p++) {
        char num[24];
        const char *add = num;
        if (p[0] == '%' && p[1] == 'u') {
            snprintf(num, sizeof num, "%u", (unsigned)geteuid());
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            snprintf(num, sizeof num, "%d", (int)ss_process()->pid);
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            add = "%";
            p++;
        } else {
            num[0] = *p;
            num[1] = '\0';
        }
        size_t k = strlen(add);
        if (len + k >= n)
            return -ENAMETOOLONG;
        memcpy(out + len, add, k);
        len += k;
    }
    out[len] = '\0';
    return 0;
}

/* Why `path` (or a parent of it) cannot be our directory, in words. */
static const char *dir_problem(const char *path, int err, char *why, size_t n) {
    struct stat lst;
    if (lstat(path, &lst) == 0) {
        if (S_ISLNK(lst.st_mode))
            return "is a symbolic link; not following it";
        if (!S_ISDIR(lst.st_mode))
            return S_ISREG(lst.st_mode) ? "is a regular file, not a directory"
                                        : "exists and is not a directory";
    }
    if (err == ENOTDIR)
        return "has a path component that is not a directory";
    snprintf(why, n, "cannot be created or opened: %s", strerror(err));
    return why;
}

void ss_output_file_stem(char *out, size_t n) {
    const ss_process_info *p = ss_process();
    snprintf(out, n, "%s.%d", p->program_name[0] ? p->program_name : "process", (int)p->pid);
}

static int make_dirs(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Close a descriptor this file opened moments ago, if it is still what
 * was opened: the host may close every descriptor and get the number back
 * at any moment, even between our open and our close. */
static void close_opened(int fd, const struct stat *st) {
    ss_kept_fd k = {fd, st->st_dev, st->st_ino};
    ss_kept_fd_close(&k);
}

/* The output directory itself, never through a symlink (O_NOFOLLOW on the
 * last component; O_DIRECTORY refuses anything else), owned by us; *st
 * what was opened. */
static int open_dir(const char *dir, struct stat *st) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        int err = errno;
        char why[128];
        struct stat lst;
        bool link = lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode);
        refuse("output directory %s %s; not writing there", dir,
               dir_problem(dir, err, why, sizeof why));
        /* O_NOFOLLOW|O_DIRECTORY on a link says ENOTDIR: a link is ELOOP */
        return link ? -ELOOP : -err;
    }
    if (fstat(dfd, st) != 0) {
        close(dfd); /* cannot be: just opened */
        return -EIO;
    }
    if (st->st_uid != geteuid()) {
        close_opened(dfd, st);
        refuse("output directory %s is owned by uid %u, not by this process's user "
               "(uid %u); not writing there (a %%u in STACKSHOT_OUTPUT_DIR gives each "
               "user its own)",
               dir, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    return dfd;
}

/* A file we may write: a regular file of ours with no other name (a hard
 * link planted to another file would make us overwrite it), mode 0600
 * even when it existed before with another mode. */
static int check_file(int fd, const char *dir, const char *name, struct stat *out) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    *out = st;
    if (!S_ISREG(st.st_mode)) {
        refuse("%s/%s is not a regular file; not writing to it", dir, name);
        return -EINVAL;
    }
    if (st.st_uid != geteuid() || st.st_nlink != 1) {
        refuse("%s/%s is not a file of this user with a single link; not writing to it",
               dir, name);
        return -EPERM;
    }
    if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) != 0)
        return -errno;
    /* opened O_NONBLOCK so that a FIFO could not stall us: back to blocking */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        return -errno;
    return 0;
}

/* ---- retention -------------------------------------------------------- */

#define RETENTION_MAX 4096 /* candidate files looked at, at most */

typedef struct old_file {
    char name[256];
    time_t mtime;
    off_t size;
    bool dead; /* its process is gone */
} old_file;

/* Strip ".<digits>" from the end of name[0..*len): the number, or -1. */
static long strip_number(const char *name, size_t *len) {
    size_t i = *len;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == *len || i < 2 || name[i - 1] != '.' || *len - i > 9)
        return -1;
    long v = strtol(name + i, NULL, 10);
    *len = i - 1;
    return v;
}

static bool strip_suffix(const char *name, size_t *len, const char *suffix) {
    size_t k = strlen(suffix);
    if (*len <= k || memcmp(name + *len - k, suffix, k) != 0)
        return false;
    *len -= k;
    return true;
}

/* The pid in a name of this agent's naming, or 0: "<program>.<pid>.txt",
 * "<program>.<pid>.txt.<N>" (rotated), "<program>.<pid>.<seq>.pb.gz",
 * ".collapsed", ".html". */
static long pid_of_name(const char *name) {
    size_t len = strlen(name), l = len;
    if (strip_number(name, &l) >= 0 && strip_suffix(name, &l, ".txt")) {
        long pid = strip_number(name, &l);
        return pid > 0 && l > 0 ? pid : 0;
    }
    l = len;
    if (strip_suffix(name, &l, ".txt")) {
        long pid = strip_number(name, &l);
        return pid > 0 && l > 0 ? pid : 0;
    }
    l = len;
    if (!strip_suffix(name, &l, ".pb.gz") && !strip_suffix(name, &l, ".collapsed") &&
        !strip_suffix(name, &l, ".html"))
        return 0;
    if (strip_number(name, &l) < 0) /* the period's number */
        return 0;
    long pid = strip_number(name, &l);
    return pid > 0 && l > 0 ? pid : 0;
}

static bool pid_alive(long pid) {
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

static int by_mtime(const void *a, const void *b) {
    const old_file *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* The directory's files as retention sees them (ss_dir_each callback). */
typedef struct retention_scan {
    int dfd;
    old_file *files;
    size_t n;
    int64_t total;
    uid_t me;
    pid_t self;
} retention_scan;

static int retention_add(const char *name, void *arg) {
    retention_scan *rs = arg;
    if (rs->n == RETENTION_MAX)
        return 1;
    long pid = pid_of_name(name);
    struct stat st;
    if (!pid || strlen(name) >= sizeof rs->files[0].name ||
        fstatat(rs->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != rs->me || st.st_nlink != 1)
        return 0;
    old_file *f = &rs->files[rs->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->mtime = st.st_mtime;
    f->size = st.st_size;
    f->dead = pid != (long)rs->self && !pid_alive(pid);
    rs->total += st.st_size;
    return 0;
}

int ss_output_retention(int dfd, const char *dir) {
    int64_t max_age = ss_config_int("STACKSHOT_OUTPUT_MAX_AGE", 7 * 86400, 0, INT64_MAX / 2);
    int64_t max_total = ss_config_int("STACKSHOT_OUTPUT_MAX_TOTAL", 1073741824ll, 0,
                                      INT64_MAX / 2);
    old_file *files = calloc(RETENTION_MAX, sizeof *files);
    if (!files)
        return 0;
    /* ss_dir_each, not opendir: no malloc arena for this thread */
    retention_scan rs = {.dfd = dfd, .files = files, .me = geteuid(), .self = getpid()};
    if (ss_dir_each(dfd, ".", retention_add, &rs) != 0) {
        free(files);
        return 0;
    }
    size_t n = rs.n;
    int64_t total = rs.total;
    qsort(files, n, sizeof *files, by_mtime);
    time_t now = time(NULL);
    int removed = 0;
    int64_t freed = 0;
    for (size_t i = 0; i < n; i++) { /* oldest first */
        old_file *f = &files[i];
        bool old = now - f->mtime > max_age;
        if (!f->dead || !(old || total > max_total))
            continue;
        if (unlinkat(dfd, f->name, 0) == 0) {
            removed++;
            total -= f->size;
            freed += f->size;
        }
    }
    free(files);
    if (removed)
        ss_info("output directory %s: removed %d files (%lld bytes) of processes gone, older "
                "than STACKSHOT_OUTPUT_MAX_AGE (%lld s) or past STACKSHOT_OUTPUT_MAX_TOTAL "
                "(%lld bytes)",
                dir, removed, (long long)freed, (long long)max_age, (long long)max_total);
    return removed;
}

/* Once per process and directory (a forked child, or a worker that writes
 * elsewhere under another uid, runs its own): the first file opened
 * there runs the retention. */
static void retention_once(int dfd, const char *dir, const struct stat *dst) {
    static _Atomic pid_t done_pid;
    static _Atomic uint64_t done_dev, done_ino;
    pid_t self = getpid();
    if (atomic_load(&done_pid) == self && atomic_load(&done_dev) == (uint64_t)dst->st_dev &&
        atomic_load(&done_ino) == (uint64_t)dst->st_ino)
        return;
    atomic_store(&done_pid, self);
    atomic_store(&done_dev, (uint64_t)dst->st_dev);
    atomic_store(&done_ino, (uint64_t)dst->st_ino);
    ss_output_retention(dfd, dir);
}

/* ss_output_open, with the identity of what was opened in *kept (taken
 * by the same fstat that checked the file). */
static int output_open(const char *tmpl, const char *name, bool append, ss_kept_fd *kept) {
    char dir[1100];
    int rc = ss_output_dir_expand(tmpl, dir, sizeof dir);
    if (rc != 0) {
        refuse("output directory %s: too long once expanded; not writing there", tmpl);
        return rc;
    }
    rc = make_dirs(dir);
    if (rc != 0) {
        char why[128];
        refuse("output directory %s %s; not writing there", dir,
               dir_problem(dir, -rc, why, sizeof why));
        return rc;
    }
    struct stat dst, st = {0};
    int dfd = open_dir(dir, &dst);
    if (dfd < 0)
        return dfd;
    retention_once(dfd, dir, &dst);
    /* No O_TRUNC yet: a file that fails check_file must stay untouched. */
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC |
                (append ? O_APPEND : 0);
    int fd = openat(dfd, name, flags, 0600);
    rc = fd < 0 ? -errno : 0;
    close_opened(dfd, &dst);
    if (fd < 0) {
        if (rc == -ELOOP)
            refuse("%s/%s is a symbolic link; not following it, not writing", dir, name);
        else
            refuse("cannot open %s/%s: %s", dir, name, strerror(-rc));
        return rc;
    }
    fd = ss_fd_move_high(fd); /* kept: out of the host's way (kept_fd.h) */
    rc = check_file(fd, dir, name, &st);
    if (rc == 0 && !append && ftruncate(fd, 0) != 0)
        rc = -errno;
    if (rc != 0) {
        if (st.st_ino)
            close_opened(fd, &st);
        else
            close(fd); /* fstat failed: cannot be, just opened */
        return rc;
    }
    *kept = (ss_kept_fd){fd, st.st_dev, st.st_ino};
    return fd;
}

int ss_output_open(const char *tmpl, const char *name, bool append) {
    ss_kept_fd k;
    return output_open(tmpl, name, append, &k);
}

int ss_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* ---- files kept open across writes ---------------------------------- */

static ss_own_count reopened; /* a forked child's own: its parent's are not */
static atomic_bool reopen_told;

uint64_t ss_output_reopened(void) { return ss_own_count_read(&reopened); }

/* 64 MiB a file and 7 kept: at most 512 MiB for a process's text dump.
 * A 200-thread program writes about 1.8 KB a thread a round in the text
 * format (11 KB a round for 6 threads): 370 KB a round, 31 GB a day at
 * 1 s, unbounded before; now a week of it uses 512 MiB, the last 23
 * minutes of rounds. */
#define DEFAULT_MAX_BYTES (64ull << 20)
#define DEFAULT_KEEP 7

uint64_t ss_output_max_bytes(void) {
    return (uint64_t)ss_config_int("STACKSHOT_OUTPUT_MAX_BYTES", (int64_t)DEFAULT_MAX_BYTES, 0,
                                   INT64_MAX / 2);
}

uint32_t ss_output_keep(void) {
    return (uint32_t)ss_config_int("STACKSHOT_OUTPUT_KEEP", DEFAULT_KEEP, 0, 1000);
}

void ss_output_file_limit(ss_output_file *f, uint64_t max_bytes, uint32_t keep) {
    f->max_bytes = max_bytes;
    f->keep = keep;
}

void ss_output_file_init(ss_output_file *f, const char *dir, const char *name, bool append) {
    memset(f, 0, sizeof *f);
    f->kept.fd = -1;
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->append = append;
}

/* The descriptor to write the next chunk to: the kept one while it is
 * still our file, else the file opened again (appending: what was
 * written before is in it). -errno when it cannot be opened. */
static int output_fd(ss_output_file *f) {
    int fd = ss_kept_fd_get(&f->kept);
    if (fd >= 0)
        return fd;
    bool reopen = f->opened;
    if (reopen) {
        ss_own_count_add(&reopened);
        f->reopens++;
        /* the host's doing, and it may do it again every round */
        ss_log(atomic_exchange(&reopen_told, true) ? SS_LOG_DEBUG : SS_LOG_WARN,
               "output file %s/%s: its descriptor was closed by the host (the number may "
               "name a file of the host's now: not touched); opening the file again",
               f->dir, f->name);
    }
    fd = output_open(f->dir, f->name, reopen || f->append, &f->kept);
    if (fd < 0)
        return fd;
    f->opened = true;
    struct stat st;
    f->size = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    return fd;
}

/* name.<i> for i > 0, name for 0. */
static void numbered(const ss_output_file *f, uint32_t i, char *out, size_t n) {
    if (i)
        snprintf(out, n, "%s.%u", f->name, (unsigned)i);
    else
        snprintf(out, n, "%s", f->name);
}

/* The current file becomes name.1 (name.1 name.2, ..., the oldest past
 * `keep` removed; with keep 0 the file is removed) and the next write
 * starts a new one. Names are moved inside the directory opened as
 * ss_output_open opens it (never through a symlink, owned by us); a
 * failure is said once per file, and the current file is then removed so
 * that the limit holds all the same. */
static void rotate(ss_output_file *f) {
    ss_kept_fd_close(&f->kept);
    f->opened = false; /* the next open is a new file, not a reopen */
    f->size = 0;
    f->rotations++;
    char dir[1100], from[480], to[480];
    struct stat dst;
    int dfd = ss_output_dir_expand(f->dir, dir, sizeof dir) == 0 ? open_dir(dir, &dst) : -1;
    if (dfd < 0)
        return;
    int rc = 0;
    numbered(f, f->keep, to, sizeof to);
    if (unlinkat(dfd, to, 0) != 0 && errno != ENOENT)
        rc = -errno;
    for (uint32_t i = f->keep; rc == 0 && i > 0; i--) {
        numbered(f, i - 1, from, sizeof from);
        numbered(f, i, to, sizeof to);
        if (renameat(dfd, from, dfd, to) != 0 && errno != ENOENT)
            rc = -errno;
    }
    if (rc != 0) {
        if (!f->rotate_told)
            ss_warn("output file %s/%s: rotation failed (%s); starting it again instead",
                    dir, f->name, strerror(-rc));
        f->rotate_told = true;
        unlinkat(dfd, f->name, 0);
    }
    close_opened(dfd, &dst);
}

int ss_output_file_write(ss_output_file *f, const void *buf, size_t len) {
    const char *p = buf;
    int lost_mid_write = 0;
    /* a whole write in one file: rotate before one that would pass the cap */
    if (f->max_bytes && f->opened && f->size && f->size + len > f->max_bytes)
        rotate(f);
    do {
        /* a chunk at a time, each after the check: a host that closes our
         * descriptor mid-write gets none of what follows */
        int fd = output_fd(f);
        if (fd < 0)
            return fd;
        size_t n = len < SS_OUTPUT_CHUNK ? len : SS_OUTPUT_CHUNK;
        /* each chunk ends where the file reaches a multiple of the chunk
         * size: the page cache then fills whole large folios (ext4 on Linux
         * 6.18 here: 140 KB appended in 32 KiB writes cost 68 us, in writes
         * so aligned 46 us; the text exporter writes that every round at
         * 10 ms) */
        size_t edge = SS_OUTPUT_CHUNK - (size_t)(f->size % SS_OUTPUT_CHUNK);
        if (n > edge)
            n = edge;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int err = errno;
            if (err == EBADF) {
                /* closed between the check and the write: the number is
                 * free or the host's, open ours again (a few times) */
                ss_kept_fd_forget(&f->kept);
                if (++lost_mid_write <= 3)
                    continue;
            }
            return -err;
        }
        p += w;
        len -= (size_t)w;
        f->size += (uint64_t)w;
    } while (len);
    return 0;
}

void ss_output_file_close(ss_output_file *f) { ss_kept_fd_close(&f->kept); }
