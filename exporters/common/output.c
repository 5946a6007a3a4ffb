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
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

static atomic_uint_fast64_t reopened;
static atomic_bool reopen_told;

uint64_t ss_output_reopened(void) { return atomic_load(&reopened); }

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
        atomic_fetch_add(&reopened, 1);
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
    return fd;
}

int ss_output_file_write(ss_output_file *f, const void *buf, size_t len) {
    const char *p = buf;
    int lost_mid_write = 0;
    do {
        /* a chunk at a time, each after the check: a host that closes our
         * descriptor mid-write gets none of what follows */
        int fd = output_fd(f);
        if (fd < 0)
            return fd;
        size_t n = len < SS_OUTPUT_CHUNK ? len : SS_OUTPUT_CHUNK;
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
    } while (len);
    return 0;
}

void ss_output_file_close(ss_output_file *f) { ss_kept_fd_close(&f->kept); }
