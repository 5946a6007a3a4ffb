/* kept_fd.c: descriptors checked before every use (see kept_fd.h). */
#include "agent/kept_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static ss_own_count lost;

void ss_own_count_add(ss_own_count *c) {
    uint64_t me = (uint64_t)(uint32_t)getpid() << 32;
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed), next;
    do {
        if ((v & ~0xffffffffull) != me)
            next = me | 1; /* the first in this process: a parent's count is not ours */
        else if ((v & 0xffffffffull) == 0xffffffffull)
            return;
        else
            next = v + 1;
    } while (!atomic_compare_exchange_weak_explicit(c, &v, next, memory_order_relaxed,
                                                    memory_order_relaxed));
}

uint64_t ss_own_count_read(ss_own_count *c) {
    uint64_t v = atomic_load_explicit(c, memory_order_relaxed);
    return (v >> 32) == (uint64_t)(uint32_t)getpid() ? (v & 0xffffffffull) : 0;
}

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
    ss_own_count_add(&lost);
    k->fd = -1;
    return -1;
}

void ss_kept_fd_close(ss_kept_fd *k) {
    if (ss_kept_fd_get(k) >= 0)
        close(k->fd);
    k->fd = -1;
}

void ss_kept_fd_forget(ss_kept_fd *k) { k->fd = -1; }

void ss_kept_fd_close_inherited(ss_kept_fd *k) {
    if (ss_kept_fd_is_ours(k))
        close(k->fd);
    k->fd = -1;
}

uint64_t ss_kept_fd_lost(void) { return ss_own_count_read(&lost); }

#define HIGH_MAX 1024

/* The lowest number of the top eighth, or 3 when the limit cannot say. */
static int high_floor(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > INT_MAX)
        return 3;
    /* at most 1024: the kernel sizes a process's table (and copies it at
     * every fork) up to its highest open number, and a limit of 2^20 would
     * put ours at 917504 */
    rlim_t top = rl.rlim_cur - rl.rlim_cur / 8;
    return top < 3 ? 3 : top < HIGH_MAX ? (int)top : HIGH_MAX;
}

/* ThreadSanitizer models a close() of a number another thread fstat'ed
 * (the HTTP client's scan of the open descriptors) as a data race; the
 * scan checks identities and takes nothing for granted, so it is none,
 * but under TSan the move, and its close, is left out. */
#if defined(__SANITIZE_THREAD__)
#define NO_MOVE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NO_MOVE 1
#endif
#endif

int ss_fd_move_high(int fd) {
#ifdef NO_MOVE
    return fd;
#endif
    int floor = high_floor();
    if (fd < 0 || fd >= floor)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high < 0)
        return fd; /* the top is full (or the limit changed meanwhile) */
    close(fd);
    return high;
}

int ss_fd_dup_high(int src) {
    int fd = fcntl(src, F_DUPFD_CLOEXEC, high_floor());
    return fd >= 0 ? fd : fcntl(src, F_DUPFD_CLOEXEC, 3); /* the top is full */
}
