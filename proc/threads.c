/* proc_threads.c: thread facts from /proc/self/task and the CPU clocks.
 *
 * No stdio and no allocation per read: files are read into stack buffers,
 * with pread on a descriptor kept open for the threads the sampler reads
 * every round (ss_task_files), or open/read/close when none is kept (a
 * new thread's first look: no fstat, nothing kept, ss_task_look_*).
 *
 * Kept descriptors are a guest's use of the host's descriptor table, and
 * the host may close every descriptor >= 3 at any moment and get the
 * numbers back for files and sockets of its own, so:
 *   - at most ss_proc_fd_budget() of them (an eighth of the soft
 *     RLIMIT_NOFILE, at most 4096; none under a limit below
 *     SS_PROC_KEEP_MIN, where every file is opened for one read), all
 *     O_CLOEXEC, in the top eighth of the table (ss_fd_move_high). The
 *     limit is read again every round (ss_proc_limits_round): a host that
 *     lowers it gets every kept descriptor back at the next round when
 *     the new budget is smaller than what is kept;
 *   - reads are pread only: on a host's regular file it moves no offset,
 *     on a pipe, socket, terminal, eventfd... it fails with ESPIPE (a
 *     read() there would steal the host's data);
 *   - what a kept descriptor reads is checked to be the file it was
 *     opened on before it is used ("<tid> (" for stat, the shapes of
 *     syscall and io): free, where an identity check (fstat) per read
 *     would cost one more system call per file per thread per round (see
 *     docs/safety/descriptors.md for the figures). A read that fails or
 *     does not look right is followed by the identity check (ss_kept_fd:
 *     device and inode): not ours any more, the number is forgotten,
 *     never closed, and the file opened again;
 *   - every close, of a kept descriptor or of a one-shot one, comes after
 *     a check that the number is still ours: the identity check, or for a
 *     file opened for one look and never fstat'ed (close_once), what it
 *     just read (a stat line of that tid, a syscall line with registers:
 *     no file of the host's reads so), else that it is still a regular
 *     file of procfs; a number that is the host's now is never closed;
 *   - every kept one is in a small set, so a forked child closes the
 *     copies it inherited (they name the parent's threads) before the
 *     host's code runs again (ss_proc_close_inherited from the at-fork child
 *     handler), each after the same check. */
#include "agent/dir.h"
#include "agent/grow.h"
#include "agent/round.h"
#include "agent/time.h"
#include "proc/threads.h"
#include "agent/kept_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *const task_file_names[SS_TASK_FILES] = {"stat", "syscall", "io"};

/* ---- the set of kept descriptors ----------------------------------- */

/* Open addressing over fd numbers (fd -1: empty), linear probing,
 * deletion by backward shift; each entry with the identity it was opened
 * on. Used by the sampler thread only (and a forked child's at-fork
 * handler, when no other thread exists). */
static ss_kept_fd *kept_set;
static uint32_t kept_mask; /* capacity - 1; 0 with no table */
static uint32_t kept_n;
/* The entries were closed (ss_proc_close_all) but not yet emptied: a
 * forked child closes its copies without writing the table (each page of
 * it written there is a page the fork shared, copied), and the table is
 * emptied at its next use, on the sampler thread. */
static bool kept_stale;

static void kept_empty_stale(void) {
    if (!kept_stale || !kept_set)
        return;
    kept_stale = false;
    for (uint32_t i = 0; i <= kept_mask; i++)
        kept_set[i].fd = -1;
}
/* The limit and the budget it gives: atomics, as ss_proc_fds_tight may be
 * asked from another thread than the sampler's (a resolver's creation). */
static _Atomic uint32_t budget;
static _Atomic uint64_t nofile_cur; /* the soft RLIMIT_NOFILE last read; 0: not yet */
static uint32_t generation = 1; /* ss_task_files of another generation hold nothing */

static void read_limit(void) {
    struct rlimit rl;
    uint64_t cur = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
    uint64_t b = cur < SS_PROC_KEEP_MIN ? 0 : cur / 8;
    atomic_store_explicit(&budget, (uint32_t)(b > 4096 ? 4096 : b), memory_order_relaxed);
    atomic_store_explicit(&nofile_cur, cur ? cur : 1, memory_order_relaxed);
}

uint32_t ss_proc_fd_budget(void) {
    if (!atomic_load_explicit(&nofile_cur, memory_order_relaxed))
        read_limit();
    return atomic_load_explicit(&budget, memory_order_relaxed);
}

bool ss_proc_fds_tight(void) {
    ss_proc_fd_budget();
    return atomic_load_explicit(&nofile_cur, memory_order_relaxed) < SS_PROC_KEEP_MIN;
}

void ss_proc_limits_round(void) {
    uint64_t before = atomic_load_explicit(&nofile_cur, memory_order_relaxed);
    read_limit();
    if (atomic_load_explicit(&nofile_cur, memory_order_relaxed) != before &&
        kept_n > ss_proc_fd_budget())
        ss_proc_close_all(); /* the host lowered its limit: all of them back */
}

uint32_t ss_proc_fds_kept(void) { return kept_n; }

static void kept_put(ss_kept_fd *set, uint32_t mask, const ss_kept_fd *k) {
    uint32_t i = (uint32_t)k->fd * 2654435761u & mask;
    while (set[i].fd >= 0)
        i = (i + 1) & mask;
    set[i] = *k;
}

/* The table doubles as it fills (load <= 1/2), up to what the budget
 * needs: sized for the whole budget at once it was 8,192 entries
 * (192 KiB, every one written) under a limit of 20,000 descriptors, for a
 * host of a few threads. The new table is filled before it replaces the
 * old one (a fork meanwhile leaves the child's handler a whole table).
 * false when memory is short (the file is then opened for each read, as
 * past the budget). */
static bool kept_room(void) {
    uint32_t cap = kept_set ? kept_mask + 1 : 0;
    if (kept_set && kept_n < cap / 2)
        return true;
    uint32_t want = cap ? cap * 2 : 16;
    ss_kept_fd *old = kept_set, *set = malloc(want * sizeof *set);
    if (!set)
        return false;
    for (uint32_t i = 0; i < want; i++)
        set[i].fd = -1;
    for (uint32_t i = 0; i < cap; i++)
        if (old[i].fd >= 0)
            kept_put(set, want - 1, &old[i]);
    kept_set = set;
    kept_mask = want - 1;
    free(old);
    return true;
}

static bool kept_add(const ss_kept_fd *k) {
    if (kept_n >= ss_proc_fd_budget())
        return false;
    kept_empty_stale();
    if (!kept_room())
        return false;
    kept_put(kept_set, kept_mask, k);
    kept_n++;
    return true;
}

static void kept_remove(int fd) {
    if (!kept_set)
        return;
    kept_empty_stale();
    uint32_t i = (uint32_t)fd * 2654435761u & kept_mask;
    while (kept_set[i].fd != fd) {
        if (kept_set[i].fd < 0)
            return;
        i = (i + 1) & kept_mask;
    }
    kept_n--;
    /* backward shift: later entries of the probe run move up */
    for (uint32_t j = (i + 1) & kept_mask; kept_set[j].fd >= 0; j = (j + 1) & kept_mask) {
        uint32_t home = (uint32_t)kept_set[j].fd * 2654435761u & kept_mask;
        if (((j - home) & kept_mask) >= ((j - i) & kept_mask)) {
            kept_set[i] = kept_set[j];
            i = j;
        }
    }
    kept_set[i].fd = -1;
}

static void held_release(void (*close_one)(ss_kept_fd *));

static void close_all(void (*close_one)(ss_kept_fd *)) {
    held_release(close_one);
    if (kept_set && !kept_stale) {
        for (uint32_t i = 0; i <= kept_mask; i++)
            if (kept_set[i].fd >= 0) {
                ss_kept_fd k = kept_set[i]; /* read only: see kept_stale */
                close_one(&k);              /* only what is still ours */
            }
        kept_stale = true;
    }
    kept_n = 0;
    generation++;
}

void ss_proc_close_all(void) { close_all(ss_kept_fd_close); }

bool ss_proc_keep(const ss_kept_fd *k, uint32_t *gen) {
    if (k->fd < 0 || !kept_add(k))
        return false;
    *gen = generation;
    return true;
}

bool ss_proc_kept_still(uint32_t gen) { return gen == generation; }

void ss_proc_unkeep(ss_kept_fd *k, uint32_t gen) {
    if (k->fd >= 0 && gen == generation) {
        kept_remove(k->fd);
        ss_kept_fd_close(k);
    }
    k->fd = -1;
}

/* The parent's copies: one found taken over is not the child's loss (see
 * ss_kept_fd_close_inherited), not counted. */
void ss_proc_close_inherited(void) { close_all(ss_kept_fd_close_inherited); }

static void files_fresh(ss_task_files *f) {
    if (f->gen == generation)
        return;
    for (int i = 0; i < SS_TASK_FILES; i++)
        f->fd[i] = -1;
    f->gen = generation;
}

static ss_kept_fd kept_of(const ss_task_files *f, int which) {
    return (ss_kept_fd){f->fd[which], (dev_t)f->dev[which], (ino_t)f->ino[which]};
}

void ss_task_files_close(ss_task_files *f) {
    if (f->gen != generation)
        return;
    for (int i = 0; i < SS_TASK_FILES; i++) {
        if (f->fd[i] < 0)
            continue;
        ss_kept_fd k = kept_of(f, i);
        f->fd[i] = -1;
        kept_remove(k.fd);
        ss_kept_fd_close(&k); /* still the file we opened, else left to the host */
    }
}

/* ---- reading ------------------------------------------------------- */

/* Opened for one read; O_NONBLOCK: a FIFO found where a /proc file was
 * expected (a host's directory at a reused number) never blocks us. */
static int open_task_file(pid_t tid, const char *file) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, file);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* "<tid>/<file>" into out (48 bytes), without vsnprintf (a quarter of a
 * microsecond per open, several opens per new thread). */
static void task_rel_path(char *out, pid_t tid, const char *file) {
    char digits[12];
    int n = 0;
    unsigned v = (unsigned)tid;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < (int)sizeof digits);
    char *p = out;
    while (n)
        *p++ = digits[--n];
    *p++ = '/';
    size_t len = strlen(file);
    memcpy(p, file, len + 1); /* callers pass the short names above */
}

/* /proc/self/task kept open for the sampler's opens: "<tid>/stat" from
 * there walks two path components instead of five (about a quarter of an
 * open's cost). Sampler thread only, like the rest of the kept set. An
 * openat through a number the host took over for a directory of its own
 * opens nothing of ours or something the content check refuses. */
static ss_kept_fd task_dir = SS_KEPT_FD_NONE;
static uint32_t task_dir_gen;

/* Opens path into k (moved high, in the kept set) once per process image
 * (*gen: the generation it was opened in), within the budget. */
static void keep_open(ss_kept_fd *k, uint32_t *gen, const char *path, int flags) {
    if (*gen == generation && k->fd >= 0)
        return;
    *gen = generation;
    int fd = kept_n < ss_proc_fd_budget() ? open(path, flags | O_CLOEXEC) : -1;
    if (ss_kept_fd_adopt(k, ss_fd_move_high(fd)) == 0 && !kept_add(k))
        ss_kept_fd_close(k);
}

static int open_kept_task_file(pid_t tid, const char *file) {
    keep_open(&task_dir, &task_dir_gen, "/proc/self/task", O_RDONLY | O_DIRECTORY);
    if (task_dir.fd >= 0) {
        char rel[48];
        task_rel_path(rel, tid, file);
        int fd = openat(task_dir.fd, rel, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0 || (errno != ENOTDIR && errno != EBADF))
            return fd < 0 ? -errno : fd;
        /* not our directory any more (the host closed it and reused the
         * number): forget it, never close that number */
        kept_remove(task_dir.fd);
        ss_kept_fd_forget(&task_dir);
    }
    return open_task_file(tid, file);
}

/* The whole file from offset 0 into buf, NUL-terminated: the length or
 * -errno. /proc files are generated anew by a read at offset 0. */
static ssize_t pread_all(int fd, char *buf, size_t n) {
    size_t len = 0;
    while (len + 1 < n) {
        ssize_t r = pread(fd, buf + len, n - 1 - len, (off_t)len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        len += (size_t)r;
        /* A task file is one record, made whole by a read at offset 0
         * when the buffer holds it (seq_file's single_open): a short read
         * that ends its line is all of it, and the read that would only
         * find the end is saved (a system call per file). */
        if ((size_t)r < n - 1 - (len - (size_t)r) && buf[len - 1] == '\n')
            break;
    }
    buf[len] = '\0';
    return (ssize_t)len;
}

/* Digits (at least one), then what follows them. */
static const char *skip_digits(const char *p) {
    const char *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    return q > p ? q : NULL;
}

/* Whether buf is what /proc/self/task/<tid>/<file> reads as: the check
 * that a kept descriptor still reads the file it was opened on (a number
 * the host took over reads the host's data, or fails). */
static bool looks_like(int which, pid_t tid, const char *buf) {
    const char *p;
    switch (which) {
    case SS_TASK_STAT: {
        /* "<tid> (<comm>) <state> ..." */
        char want[24];
        int n = snprintf(want, sizeof want, "%d (", (int)tid);
        return strncmp(buf, want, (size_t)n) == 0 && strrchr(buf, ')') != NULL;
    }
    case SS_TASK_SYSCALL:
        /* "running", or "<nr> 0x<hex> ..." with nr -1 outside a call */
        if (strncmp(buf, "running", 7) == 0)
            return buf[7] == '\n' || buf[7] == '\0';
        p = skip_digits(buf[0] == '-' ? buf + 1 : buf);
        return p && strncmp(p, " 0x", 3) == 0;
    default:
        /* "rchar: <n>\nwchar: <n>\n..." */
        return strncmp(buf, "rchar: ", 7) == 0 && (p = skip_digits(buf + 7)) != NULL &&
               strncmp(p, "\nwchar: ", 8) == 0;
    }
}

/* Close a descriptor opened for one read, if it is still the file opened
 * (the host may have closed it and got the number since). */
static void close_checked(int fd, const struct stat *opened) {
    ss_kept_fd k = {fd, opened->st_dev, opened->st_ino};
    ss_kept_fd_close(&k);
}

/* procfs's device (0: not known yet), for close_once. Any thread: two
 * threads learning it at once learn the same value. */
static _Atomic uint64_t proc_dev;

static uint64_t procfs_dev(void) {
    uint64_t d = atomic_load_explicit(&proc_dev, memory_order_relaxed);
    struct stat st;
    if (!d && stat("/proc/self/task", &st) == 0) {
        d = (uint64_t)st.st_dev;
        atomic_store_explicit(&proc_dev, d, memory_order_relaxed);
    }
    return d;
}

/* Does what a task file just read name the file and the thread it was
 * opened for, beyond its shape? A stat line starts "<tid> (" (looks_like
 * checked it); a syscall line with its registers (a stack pointer and a
 * program counter) is no file of the host's. "running" and io are shapes
 * any file could have. */
static bool reads_as_ours(int which, const char *buf) {
    return which == SS_TASK_STAT || (which == SS_TASK_SYSCALL && buf[0] != 'r');
}

/* Close a descriptor opened by us for a read or two and never fstat'ed.
 * `verified`: what it read last could only come from the file we opened
 * (reads_as_ours), so the number was ours then: closed at once, the same
 * window as an identity check just before the close. Otherwise (a failed
 * read, a line of a shape any file could have) it is closed only if it is
 * still a regular file of procfs: a number the host took over meanwhile
 * (closed ours, opened its own) is left to it. Saves the two fstat of
 * close_checked on the reads of a new thread. */
static void close_once(int fd, bool verified) {
    struct stat st;
    struct statfs sf;
    if (!verified) {
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            return;
        uint64_t dev = procfs_dev();
        /* no /proc to compare with (a chroot since the open): its magic */
        if (dev ? (uint64_t)st.st_dev != dev
                : fstatfs(fd, &sf) != 0 || sf.f_type != PROC_SUPER_MAGIC)
            return;
    }
    close(fd);
}

/* The file a sampler's look holds open between two reads (a new thread's
 * syscall line, read again after its walk where the CPU clock alone
 * cannot tell that the thread did not run): one at a time, not kept (not
 * moved high, not in the budget), with its identity (the walk between
 * the reads is time for a host to take the number over), closed checked
 * by ss_proc_release_held, by the next hold, or by ss_proc_close_all (a
 * fork's child). Sampler thread only. */
static struct {
    ss_kept_fd k; /* fd -1: none */
    pid_t tid;
    int which;
    uint32_t gen;
} held = {.k = SS_KEPT_FD_NONE};

static void held_release(void (*close_one)(ss_kept_fd *)) {
    if (held.k.fd >= 0 && held.gen == generation) {
        ss_kept_fd k = held.k;
        close_one(&k);
    }
    ss_kept_fd_forget(&held.k);
}

void ss_proc_release_held(void) { held_release(ss_kept_fd_close); }

/* How read_task_file opens a file that f does not keep yet. */
enum {
    HOW_ONCE, /* f NULL, any thread: open, read, close */
    HOW_KEEP, /* kept in f when the budget allows */
    HOW_LOOK, /* sampler thread: opened through the kept task directory, closed */
    HOW_HOLD, /* ... and held for the next read when it reads as ours */
};

/* Read /proc/self/task/<tid>/<file> into buf: through f's kept descriptor
 * or the held one, else opened and, as `how` says, kept, held or closed. */
static ssize_t read_task_file(pid_t tid, ss_task_files *f, int which, char *buf, size_t n,
                              int how) {
    if (f) {
        files_fresh(f);
        if (f->fd[which] >= 0) {
            ssize_t len = pread_all(f->fd[which], buf, n);
            if (len >= 0 && looks_like(which, tid, buf))
                return len; /* the common case: no system call but the read */
            ss_kept_fd k = kept_of(f, which);
            if (ss_kept_fd_is_ours(&k))
                return len < 0 ? len : -EINVAL; /* ours: the thread is gone (ESRCH) */
            /* the host closed it (and maybe has the number now): forget
             * it, never close that number; counted, and opened again */
            ss_kept_fd_get(&k);
            kept_remove(f->fd[which]);
            f->fd[which] = -1;
        }
        if (held.k.fd >= 0 && held.gen == generation && held.tid == tid && held.which == which) {
            ssize_t len = pread_all(held.k.fd, buf, n);
            if (len >= 0 && looks_like(which, tid, buf))
                return len;
            bool ours = ss_kept_fd_is_ours(&held.k);
            ss_proc_release_held(); /* gone, or not ours any more: checked */
            if (ours)
                return len < 0 ? len : -EINVAL; /* the thread is gone */
        }
    }
    if (how != HOW_KEEP || kept_n >= ss_proc_fd_budget()) {
        /* not kept: no identity to record (no fstat); what it reads is
         * checked, and the close with it (close_once) */
        int fd = f ? open_kept_task_file(tid, task_file_names[which])
                   : open_task_file(tid, task_file_names[which]);
        if (fd < 0)
            return fd;
        ssize_t len = pread_all(fd, buf, n);
        bool ok = len >= 0 && looks_like(which, tid, buf);
        bool ours = ok && reads_as_ours(which, buf);
        if (ours && how == HOW_HOLD) {
            ss_proc_release_held();
            if (ss_kept_fd_adopt(&held.k, fd) == 0) { /* closes fd on failure */
                held.tid = tid;
                held.which = which;
                held.gen = generation;
            }
            return len;
        }
        close_once(fd, ours);
        return ok ? len : len < 0 ? len : -EINVAL; /* not what we asked for: never used */
    }
    int fd = open_kept_task_file(tid, task_file_names[which]);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd); /* just opened by us: fstat cannot fail on it but for EOVERFLOW */
        return -EIO;
    }
    ssize_t len = pread_all(fd, buf, n);
    if (len >= 0 && !looks_like(which, tid, buf))
        len = -EINVAL; /* not what we asked for: never used */
    if (len >= 0)
        fd = ss_fd_move_high(fd); /* the same file (st stays true) */
    ss_kept_fd k = {fd, st.st_dev, st.st_ino};
    if (len >= 0 && kept_add(&k)) {
        f->fd[which] = fd;
        f->dev[which] = (uint64_t)st.st_dev;
        f->ino[which] = (uint64_t)st.st_ino;
        return len;
    }
    close_checked(fd, &st);
    return len;
}

/* One-shot read of another file (status, comm). */
static ssize_t read_once(pid_t tid, const char *file, char *buf, size_t n) {
    int fd = open_task_file(tid, file);
    if (fd < 0)
        return fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -EIO;
    }
    ssize_t len = pread_all(fd, buf, n);
    close_checked(fd, &st);
    return len;
}

/* ---- the thread list ----------------------------------------------- */

static int cmp_tid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

typedef struct tid_list {
    pid_t **tids;
    size_t *cap, n;
} tid_list;

static int add_tid(const char *name, void *arg) {
    tid_list *l = arg;
    if (name[0] < '0' || name[0] > '9')
        return 0;
    if (ss_grow((void **)l->tids, l->cap, l->n + 1, sizeof **l->tids, 256) != 0)
        return -ENOMEM;
    (*l->tids)[l->n++] = (pid_t)atoi(name);
    return 0;
}

/* Through ss_dir_each (getdents64 into a stack buffer) rather than
 * opendir, which allocates 32 KiB per call in glibc. */
int ss_proc_list_tids(pid_t **tids, size_t *cap) {
    tid_list l = {.tids = tids, .cap = cap, .n = 0};
    int rc = ss_dir_each(AT_FDCWD, "/proc/self/task", add_tid, &l);
    if (rc < 0)
        return rc;
    /* kernel order; sorted so every round lists threads alike */
    qsort(*tids, l.n, sizeof **tids, cmp_tid);
    return (int)l.n;
}

int ss_proc_thread_count(void) {
    /* The task directory's link count is 2 + the number of threads
     * (proc_task_getattr): one stat, 1.5 us, where /proc/self/stat sums
     * the CPU times of every thread first (9 us with 200 threads). A
     * kernel that does not count them there falls back to num_threads. */
    struct stat st;
    /* through the kept directory when it is still ours (0.3 us) */
    if (task_dir_gen == generation && task_dir.fd >= 0 && fstat(task_dir.fd, &st) == 0 &&
        (uint64_t)st.st_dev == (uint64_t)task_dir.dev &&
        (uint64_t)st.st_ino == (uint64_t)task_dir.ino && st.st_nlink > 2 &&
        st.st_nlink < INT32_MAX)
        return (int)(st.st_nlink - 2);
    if (stat("/proc/self/task", &st) == 0 && st.st_nlink > 2 && st.st_nlink < INT32_MAX)
        return (int)(st.st_nlink - 2);
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[1024];
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    int err = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? -err : -EIO;
    buf[n] = '\0';
    /* field 20, num_threads: the 18th after the name's last ')' */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 20; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return -EINVAL;
    long v = strtol(p + 1, NULL, 10);
    return v > 0 && v < INT32_MAX ? (int)v : -EINVAL;
}

/* ---- parsers ------------------------------------------------------- */

static int parse_stat(char *buf, ss_proc_stat *out) {
    /* the name (field 2) may hold spaces and parentheses: skip to the last ')' */
    char *p = strrchr(buf, ')');
    char *open_paren = strchr(buf, '(');
    if (!p || p[1] != ' ' || !open_paren || open_paren > p)
        return -EINVAL;
    size_t nlen = (size_t)(p - open_paren - 1);
    if (nlen >= sizeof out->name)
        nlen = sizeof out->name - 1;
    memcpy(out->name, open_paren + 1, nlen);
    out->name[nlen] = '\0';
    p += 2;
    out->state = *p;
    /* fields after the state: 4 ppid ... 19 nice ... 22 starttime */
    long long field[23] = {0};
    int idx = 3;
    while (*p && idx < 22) {
        while (*p && *p != ' ')
            p++;
        while (*p == ' ')
            p++;
        idx++;
        field[idx] = strtoll(p, NULL, 10);
    }
    if (idx < 22)
        return -EINVAL;
    out->utime = (uint64_t)field[14];
    out->stime = (uint64_t)field[15];
    out->priority = (int32_t)field[18];
    out->nice = (int32_t)field[19];
    out->start_ticks = (uint64_t)field[22];
    return 0;
}

static int read_stat_how(pid_t tid, ss_task_files *f, ss_proc_stat *out, int how) {
    char buf[1024];
    ssize_t len = read_task_file(tid, f, SS_TASK_STAT, buf, sizeof buf, how);
    if (len < 0)
        return (int)len;
    return parse_stat(buf, out);
}

int ss_task_read_stat(pid_t tid, ss_task_files *f, ss_proc_stat *out) {
    return read_stat_how(tid, f, out, f ? HOW_KEEP : HOW_ONCE);
}

int ss_task_look_stat(pid_t tid, ss_task_files *f, ss_proc_stat *out) {
    return read_stat_how(tid, f, out, HOW_LOOK);
}

int ss_proc_read_stat(pid_t tid, ss_proc_stat *out) { return ss_task_read_stat(tid, NULL, out); }

/* "running", "<nr> <sp> <pc>" (nr < 0: stopped outside a system call) or
 * "<nr> <6 args> <sp> <pc>" (fs/proc/base.c, proc_pid_syscall). */
static int read_syscall_how(pid_t tid, ss_task_files *f, ss_proc_syscall *out, int how) {
    char buf[sizeof out->line];
    ssize_t len = read_task_file(tid, f, SS_TASK_SYSCALL, buf, sizeof buf, how);
    if (len < 0)
        return (int)len;
    memcpy(out->line, buf, (size_t)len + 1);
    out->len = (uint8_t)len;
    out->running = false;
    out->unknown = false;
    out->nr = -1;
    out->sp = out->pc = 0;
    memset(out->args, 0, sizeof out->args);
    if (strncmp(buf, "running", 7) == 0) {
        out->running = true;
        return 0;
    }
    uint64_t v[9];
    int n = 0;
    char *p = buf, *end;
    long nr = strtol(p, &end, 10);
    if (end == p)
        return -EINVAL;
    for (p = end; n < 9; p = end) {
        v[n] = strtoull(p, &end, 16);
        if (end == p)
            break;
        n++;
    }
    if (n != 2 && n != 8)
        return -EINVAL;
    out->nr = nr < 0 ? -1 : nr;
    out->sp = v[n - 2];
    out->pc = v[n - 1];
    if (n == 8)
        memcpy(out->args, v, sizeof out->args);
    return 0;
}

int ss_task_read_syscall(pid_t tid, ss_task_files *f, ss_proc_syscall *out) {
    return read_syscall_how(tid, f, out, f ? HOW_KEEP : HOW_ONCE);
}

int ss_task_look_syscall(pid_t tid, ss_task_files *f, bool hold, ss_proc_syscall *out) {
    return read_syscall_how(tid, f, out, hold ? HOW_HOLD : HOW_LOOK);
}

static int parse_io(const char *buf, uint64_t *read_bytes, uint64_t *write_bytes) {
    const char *r = strstr(buf, "\nread_bytes:");
    const char *w = strstr(buf, "\nwrite_bytes:");
    if (!r || !w)
        return -EINVAL;
    *read_bytes = strtoull(r + 12, NULL, 10);
    *write_bytes = strtoull(w + 13, NULL, 10);
    return 0;
}

int ss_task_read_io(pid_t tid, ss_task_files *f, uint64_t *read_bytes, uint64_t *write_bytes) {
    char buf[512];
    ssize_t len = read_task_file(tid, f, SS_TASK_IO, buf, sizeof buf, f ? HOW_KEEP : HOW_ONCE);
    if (len < 0)
        return (int)len;
    return parse_io(buf, read_bytes, write_bytes);
}

int ss_proc_read_io(pid_t tid, uint64_t *read_bytes, uint64_t *write_bytes) {
    return ss_task_read_io(tid, NULL, read_bytes, write_bytes);
}

long ss_proc_read_syscall(pid_t tid) {
    ss_proc_syscall sc;
    if (ss_task_read_syscall(tid, NULL, &sc) != 0 || sc.running)
        return -1;
    return sc.nr;
}

/* A one-line task file into buf, without its newline. 0 or -errno. */
static int read_line_once(pid_t tid, const char *file, char *buf, size_t n) {
    ssize_t len = read_once(tid, file, buf, n);
    if (len < 0)
        return (int)len;
    if (len > 0 && buf[len - 1] == '\n')
        buf[len - 1] = '\0';
    return 0;
}

int ss_proc_read_comm(pid_t tid, char *buf, size_t n) {
    return read_line_once(tid, "comm", buf, n);
}

/* /proc/self/status kept open (moved high, in the kept set) for the
 * tracer's pid: read every round, and an open per round would take the
 * lowest free descriptor for a moment (see host_ended in the sampler). */
static ss_kept_fd status_fd = SS_KEPT_FD_NONE;
static uint32_t status_gen;

int ss_proc_tracer(void) {
    keep_open(&status_fd, &status_gen, "/proc/self/status", O_RDONLY);
    if (status_fd.fd < 0)
        return -EMFILE;
    char buf[1024];
    ssize_t len = pread_all(status_fd.fd, buf, sizeof buf);
    const char *t = len > 0 && strncmp(buf, "Name:", 5) == 0 ? strstr(buf, "\nTracerPid:") : NULL;
    if (!t) {
        /* not our file any more (the host closed it and reused the
         * number): forget it, never close that number */
        if (!ss_kept_fd_is_ours(&status_fd)) {
            kept_remove(status_fd.fd);
            ss_kept_fd_forget(&status_fd);
        }
        return len < 0 ? (int)len : -EINVAL;
    }
    return atoi(t + strlen("\nTracerPid:"));
}

int ss_proc_read_wchan(pid_t tid, char *buf, size_t n) {
    return read_line_once(tid, "wchan", buf, n);
}

typedef struct named_scan {
    char dir[48];
    const char *prefix;
    bool found;
} named_scan;

static int has_prefix_comm(const char *name, void *arg) {
    named_scan *n = arg;
    char path[96], comm[32];
    snprintf(path, sizeof path, "%s/%.20s/comm", n->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* ended meanwhile */
    ssize_t len = read(fd, comm, sizeof comm - 1);
    close(fd);
    size_t k = strlen(n->prefix);
    n->found = len >= (ssize_t)k && memcmp(comm, n->prefix, k) == 0;
    return n->found; /* found: stop */
}

int ss_proc_has_thread_named(pid_t pid, const char *prefix) {
    named_scan n = {.prefix = prefix};
    if (pid)
        snprintf(n.dir, sizeof n.dir, "/proc/%d/task", (int)pid);
    else
        snprintf(n.dir, sizeof n.dir, "/proc/self/task");
    int rc = ss_dir_each(AT_FDCWD, n.dir, has_prefix_comm, &n);
    return rc < 0 ? rc : n.found;
}

/* SigBlk of a status file's text. */
static int sigblk_in(const char *status, uint64_t *mask) {
    const char *p = strstr(status, "\nSigBlk:");
    if (!p)
        return -EINVAL;
    *mask = strtoull(p + 8, NULL, 16);
    return 0;
}

/* Does a thread with this status block `sig`? One in seccomp's strict mode
 * ("Seccomp: 1") counts as blocking every signal: a handler's first system
 * call other than read, write, _exit or rt_sigreturn would kill it
 * (loader/loader_seccomp.c). 1 yes, 0 no, -EINVAL unreadable. */
static int blocks_in(const char *status, int sig) {
    uint64_t mask;
    if (sigblk_in(status, &mask) != 0)
        return -EINVAL;
    const char *m = strstr(status, "\nSeccomp:");
    if (m && strtoul(m + 9, NULL, 10) == 1)
        return 1;
    return (mask >> (sig - 1)) & 1u ? 1 : 0;
}

int ss_proc_sigblk(pid_t tid, uint64_t *mask) {
    char buf[2048];
    ssize_t len = read_once(tid, "status", buf, sizeof buf);
    return len < 0 ? (int)len : sigblk_in(buf, mask);
}

int ss_proc_blocks_signal(pid_t tid, int sig) {
    char buf[2048];
    ssize_t len = read_once(tid, "status", buf, sizeof buf);
    return len < 0 ? (int)len : blocks_in(buf, sig);
}

int ss_proc_blocks_signal_out(pid_t tid, int sig, uint64_t *slept, uint64_t *switched_out) {
    char buf[4096]; /* the context switches are at the end */
    ssize_t len = read_once(tid, "status", buf, sizeof buf);
    if (len < 0)
        return (int)len;
    const char *v = strstr(buf, "\nvoluntary_ctxt_switches:");
    const char *n = strstr(buf, "\nnonvoluntary_ctxt_switches:");
    int rc = blocks_in(buf, sig);
    if (rc < 0 || !v || !n)
        return -EINVAL;
    *slept = strtoull(v + 25, NULL, 10);
    *switched_out = *slept + strtoull(n + 28, NULL, 10);
    return rc;
}

int ss_proc_schedstat(pid_t tid, uint64_t *switched_in) {
    char buf[128];
    ssize_t len = read_once(tid, "schedstat", buf, sizeof buf);
    if (len < 0)
        return (int)len;
    unsigned long long run, wait, slices;
    if (sscanf(buf, "%llu %llu %llu", &run, &wait, &slices) != 3)
        return -EINVAL;
    *switched_in = slices;
    return 0;
}

/* ---- clocks -------------------------------------------------------- */

uint64_t ss_thread_cpu_ns(pid_t tid) {
    /* The kernel's CPU-clock id for a thread: ~tid << 3 | CPUCLOCK_SCHED |
     * CPUCLOCK_PERTHREAD_MASK. Works for any thread of this process. */
    clockid_t clk = (clockid_t)(((unsigned)~tid << 3) | 6);
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0)
        return SS_UNKNOWN_U64;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ss_boottime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ss_proc_elapsed_ns(uint64_t start_ticks, uint64_t now_boot_ns) {
    static long hz;
    if (!hz)
        hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        return SS_UNKNOWN_U64;
    uint64_t start_ns = start_ticks * (1000000000ull / (uint64_t)hz);
    return now_boot_ns > start_ns ? now_boot_ns - start_ns : 0;
}

uint64_t ss_proc_start_wall_ms(pid_t tid) {
    ss_proc_stat st;
    if (ss_proc_read_stat(tid, &st) != 0)
        return 0;
    uint64_t elapsed = ss_proc_elapsed_ns(st.start_ticks, ss_boottime_ns());
    uint64_t now_ms = ss_wall_ns() / 1000000ull;
    if (elapsed == SS_UNKNOWN_U64 || elapsed / 1000000ull > now_ms)
        return 0;
    return now_ms - elapsed / 1000000ull;
}

const char *ss_syscall_name(long nr) {
    switch (nr) {
    case SYS_read: return "read";
    case SYS_write: return "write";
    case SYS_poll: return "poll";
    case SYS_ppoll: return "ppoll";
    case SYS_select: return "select";
    case SYS_pselect6: return "pselect6";
    case SYS_epoll_wait: return "epoll_wait";
    case SYS_epoll_pwait: return "epoll_pwait";
    case SYS_futex: return "futex";
    case SYS_nanosleep: return "nanosleep";
    case SYS_clock_nanosleep: return "clock_nanosleep";
    case SYS_accept: return "accept";
    case SYS_accept4: return "accept4";
    case SYS_connect: return "connect";
    case SYS_recvfrom: return "recvfrom";
    case SYS_recvmsg: return "recvmsg";
    case SYS_sendto: return "sendto";
    case SYS_sendmsg: return "sendmsg";
    case SYS_wait4: return "wait4";
    case SYS_waitid: return "waitid";
    case SYS_pause: return "pause";
    case SYS_rt_sigsuspend: return "rt_sigsuspend";
    case SYS_rt_sigtimedwait: return "rt_sigtimedwait";
    case SYS_io_getevents: return "io_getevents";
    case SYS_msgrcv: return "msgrcv";
    case SYS_semop: return "semop";
    case SYS_semtimedop: return "semtimedop";
    case SYS_flock: return "flock";
    case SYS_fcntl: return "fcntl";
    case SYS_pread64: return "pread64";
    case SYS_pwrite64: return "pwrite64";
    case SYS_readv: return "readv";
    case SYS_writev: return "writev";
    case SYS_openat: return "openat";
    case SYS_fsync: return "fsync";
    case SYS_fdatasync: return "fdatasync";
    default: return NULL;
    }
}

/* Is one of the first frames (leaf side) a function whose name contains
 * one of `names`? Blocking calls sit a few frames above the system call. */
static bool near_leaf(const ss_frame *frames, uint32_t n, const char *const *names) {
    uint32_t limit = n < 12 ? n : 12;
    for (uint32_t i = 0; i < limit; i++) {
        const char *fn = frames[i].fn ? frames[i].fn->name : NULL;
        if (!fn)
            continue;
        for (const char *const *s = names; *s; s++)
            if (strstr(fn, *s))
                return true;
    }
    return false;
}

static const char *const mutex_fns[] = {"lll_lock_wait", "pthread_mutex_lock",
                                        "pthread_mutex_timedlock",
                                        "pthread_mutex_clocklock",
                                        "pthread_rwlock_", NULL};
static const char *const timed_cond_fns[] = {"pthread_cond_timedwait",
                                             "pthread_cond_clockwait", NULL};
static const char *const cond_fns[] = {"pthread_cond_wait", NULL};

void ss_native_state(char proc_state, long syscall_nr, const ss_frame *frames,
                     uint32_t n_frames, ss_thread_state *state,
                     const char **status, const char **detail) {
    *detail = NULL;
    switch (proc_state) {
    case 'R':
        *state = SS_STATE_RUNNABLE;
        *status = "runnable";
        return;
    case 'T':
    case 't':
        *state = SS_STATE_STOPPED;
        *status = "stopped";
        *detail = proc_state == 't' ? "traced" : "stopped";
        return;
    case 'Z':
    case 'X':
        *state = SS_STATE_TERMINATED;
        *status = "terminated";
        return;
    case 'S':
    case 'D':
        break;
    default:
        *state = SS_STATE_UNKNOWN;
        *status = "unknown";
        return;
    }
    if (syscall_nr == SYS_nanosleep || syscall_nr == SYS_clock_nanosleep) {
        *state = SS_STATE_TIMED_WAITING;
        *status = "sleeping";
        *detail = "sleeping";
        return;
    }
    /* restart_syscall continues a call a signal or a debugger's stop
     * (attach, detach) interrupted: the kernel restarts that way only
     * calls with a time limit (nanosleep, clock_nanosleep, poll, a futex
     * wait with a timeout), so the thread still waits with a deadline. */
    if (syscall_nr == SYS_restart_syscall) {
        if (near_leaf(frames, n_frames, mutex_fns)) {
            *state = SS_STATE_BLOCKED;
            *status = "waiting for monitor entry";
            *detail = "on mutex";
            return;
        }
        bool cond = near_leaf(frames, n_frames, timed_cond_fns);
        *state = SS_STATE_TIMED_WAITING;
        *status = cond ? "waiting on condition" : "sleeping";
        *detail = cond ? "on condition" : "sleeping";
        return;
    }
    if (syscall_nr == SYS_futex) {
        if (near_leaf(frames, n_frames, mutex_fns)) {
            *state = SS_STATE_BLOCKED;
            *status = "waiting for monitor entry";
            *detail = "on mutex";
            return;
        }
        if (near_leaf(frames, n_frames, timed_cond_fns)) {
            *state = SS_STATE_TIMED_WAITING;
            *status = "waiting on condition";
            *detail = "on condition";
            return;
        }
        if (near_leaf(frames, n_frames, cond_fns)) {
            *state = SS_STATE_WAITING;
            *status = "waiting on condition";
            *detail = "on condition";
            return;
        }
    }
    *state = SS_STATE_WAITING;
    *status = "waiting on condition";
    if (proc_state == 'D') {
        *detail = "uninterruptible";
        return;
    }
    const char *name = ss_syscall_name(syscall_nr);
    *detail = name ? name : "sleeping";
}
