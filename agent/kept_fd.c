/* kept_fd.c: descriptors checked before every use (see kept_fd.h). */
#include "kept_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static _Atomic uint64_t lost;

int ss_kept_fd_adopt(ss_kept_fd *k, int fd) {
    k->fd = -1;
    if (fd < 0)
        return -EBADF;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    k->dev = st.st_dev;
    k->ino = st.st_ino;
    k->fd = fd;
    return 0;
}

static bool still_ours(const ss_kept_fd *k) {
    struct stat st;
    return fstat(k->fd, &st) == 0 && st.st_dev == k->dev && st.st_ino == k->ino;
}

bool ss_kept_fd_is_ours(const ss_kept_fd *k) { return k->fd >= 0 && still_ours(k); }

int ss_kept_fd_get(ss_kept_fd *k) {
    if (k->fd < 0)
        return -1;
    if (still_ours(k))
        return k->fd;
    atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    k->fd = -1;
    return -1;
}

void ss_kept_fd_close(ss_kept_fd *k) {
    if (ss_kept_fd_get(k) >= 0)
        close(k->fd);
    k->fd = -1;
}

void ss_kept_fd_forget(ss_kept_fd *k) { k->fd = -1; }

uint64_t ss_kept_fd_lost(void) { return atomic_load_explicit(&lost, memory_order_relaxed); }

#define HIGH_MAX 1024

int ss_fd_move_high(int fd) {
    struct rlimit rl;
    if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > INT_MAX)
        return fd;
    /* at most 1024: the kernel sizes a process's table (and copies it at
     * every fork) up to its highest open number, and a limit of 2^20 would
     * put ours at 917504 */
    rlim_t top = rl.rlim_cur - rl.rlim_cur / 8;
    int floor = top < HIGH_MAX ? (int)top : HIGH_MAX;
    if (fd >= floor)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0)
        return fd; /* the top is full (or the limit changed meanwhile) */
    close(fd);
    return high;
}
