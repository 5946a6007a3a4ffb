/* proc_threads.c: thread facts from /proc/self/task and the CPU clocks.
 *
 * Every reader opens one small file, reads it into a stack buffer and
 * closes it: no stdio, no allocation, so a round with a thousand threads
 * does not churn the heap of the process it samples. */
#include "proc_threads.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Read /proc/self/task/<tid>/<file> into buf, NUL-terminated. Returns the
 * length or -errno. */
static ssize_t read_task_file(pid_t tid, const char *file, char *buf, size_t n) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len + 1 < n) {
        ssize_t r = read(fd, buf + len, n - 1 - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

static int cmp_tid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

int ss_proc_list_tids(pid_t **tids, size_t *cap) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -errno;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        if (n == *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            pid_t *p = realloc(*tids, nc * sizeof *p);
            if (!p) {
                closedir(d);
                return -ENOMEM;
            }
            *tids = p;
            *cap = nc;
        }
        (*tids)[n++] = (pid_t)atoi(e->d_name);
    }
    closedir(d);
    /* readdir gives kernel order; sort so every round lists threads alike */
    qsort(*tids, n, sizeof **tids, cmp_tid);
    return (int)n;
}

int ss_proc_read_stat(pid_t tid, ss_proc_stat *out) {
    char buf[1024];
    ssize_t len = read_task_file(tid, "stat", buf, sizeof buf);
    if (len < 0)
        return (int)len;
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
    out->nice = (int32_t)field[19];
    out->start_ticks = (uint64_t)field[22];
    return 0;
}

int ss_proc_read_comm(pid_t tid, char *buf, size_t n) {
    ssize_t len = read_task_file(tid, "comm", buf, n);
    if (len < 0)
        return (int)len;
    if (len > 0 && buf[len - 1] == '\n')
        buf[len - 1] = '\0';
    return 0;
}

int ss_proc_blocks_signal(pid_t tid, int sig) {
    char buf[2048];
    ssize_t len = read_task_file(tid, "status", buf, sizeof buf);
    if (len < 0)
        return (int)len;
    const char *p = strstr(buf, "\nSigBlk:");
    if (!p)
        return -EINVAL;
    unsigned long long mask = strtoull(p + 8, NULL, 16);
    return (mask >> (sig - 1)) & 1u ? 1 : 0;
}

long ss_proc_read_syscall(pid_t tid) {
    char buf[256];
    ssize_t len = read_task_file(tid, "syscall", buf, sizeof buf);
    if (len <= 0 || buf[0] < '0' || buf[0] > '9')
        return -1; /* "running", or not readable */
    return strtol(buf, NULL, 10);
}

int ss_proc_read_io(pid_t tid, uint64_t *read_bytes, uint64_t *write_bytes) {
    char buf[512];
    ssize_t len = read_task_file(tid, "io", buf, sizeof buf);
    if (len < 0)
        return (int)len;
    const char *r = strstr(buf, "\nread_bytes:");
    const char *w = strstr(buf, "\nwrite_bytes:");
    if (!r || !w)
        return -EINVAL;
    *read_bytes = strtoull(r + 12, NULL, 10);
    *write_bytes = strtoull(w + 13, NULL, 10);
    return 0;
}

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
