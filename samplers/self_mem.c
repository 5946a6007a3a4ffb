/* self_mem.c: reading this process's own memory without faulting.
 *
 * The walker reads stacks it does not own (a thread asleep may return
 * and unwind them at any moment), the unwinder reads the CFI of modules
 * that may be unloaded meanwhile: a plain load could fault. These reads
 * go through the kernel, which answers an error for memory that is gone.
 *
 * How: pread on /proc/thread-self/mem (else /proc/self/mem), opened once
 * (O_RDONLY|O_CLOEXEC). A process may always open its own mem file, and
 * pread and openat are calls every service needs: systemd's
 * SystemCallFilter=@system-service, Docker's and Kubernetes' default
 * profiles all allow them. process_vm_readv, the obvious call, is a
 * debugging call: hardened profiles deny it (EPERM: the sampler then
 * signals threads asleep, which wakes them early with EINTR) or kill the
 * process for it (SIGSYS: the host dies at the agent's first round).
 * thread-self first: the mem file is bound to the memory of the task it
 * was opened through, and a main thread that called pthread_exit has
 * none (its file reads nothing); the opener is the sampler, alive.
 *
 * The descriptor is kept with agent/kept_fd.h (a host may close every
 * descriptor and reuse the number: the identity is checked with fstat
 * before each read, and a number taken over is forgotten, never read or
 * closed, and the file opened again). A forked child's copy names the
 * parent's memory: it is closed in the child (by an at-fork handler, and
 * at the child's first read if the pid that opened it is not the
 * child's) and the child's own file opened.
 *
 * Without /proc (a chroot): process_vm_readv, but only while the process
 * has no seccomp filter (PR_GET_SECCOMP, the value /proc/self/status
 * shows as "Seccomp:", which cannot be read there), asked again before
 * each such read, as a host may install a filter at any moment. With a
 * filter the read fails (-EPERM): the walk fails as for any unreadable
 * stack, the thread is signalled instead; said once, counted.
 *
 * Differences from process_vm_readv: the mem file reads through
 * PROT_NONE mappings that may be read (guard pages, reserved ranges:
 * zeros, or a file's bytes) where process_vm_readv fails; the walker
 * checks what it reads against its mappings table anyway. And it copies
 * a page at a time through a kernel buffer: reads of a few bytes cost
 * the same, reads of tens of KiB about twice (docs/native.md has the
 * figures).
 *
 * Called from one thread at a time (the walker's: the sampler thread, or
 * the caller of ss_native_sample_once), never from a signal handler. */
#include "samplers/self_mem.h"

#include "agent/kept_fd.h"
#include "agent/log.h"
#include "agent/time.h"
#include "proc/threads.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#define REOPEN_NS 1000000000ull /* between attempts to open a missing mem file */

static ss_kept_fd mem = SS_KEPT_FD_NONE;
static pid_t mem_pid;              /* the process that opened it */
static uint64_t open_failed_at;    /* monotonic ns of the last failed open; 0: none */
static int open_errno;             /* why it failed */
static bool atfork_set;
static atomic_bool forked;         /* set in a forked child */
static bool filter_seen;           /* a seccomp filter is never removed */
static bool said_refused;
static _Atomic uint64_t n_proc, n_vm, n_refused, n_reopened;

/* In a forked child: the copy names the parent's memory. Closed at the
 * child's first read (its agent's start), not here: most children exit or
 * exec first (close-on-exec), and the check and the close are two system
 * calls of every fork of the host. Until then it holds the parent's
 * mm_struct (not its memory). A number the host took over meanwhile is
 * left alone (the identity check); mem_fd() opens the child's own. */
static void on_fork_child(void) { atomic_store_explicit(&forked, true, memory_order_relaxed); }

static int open_mem(void) {
    int fd = open("/proc/thread-self/mem", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static bool seccomp_filtered(void);

/* The mem file of this process, or -1 (open_errno says why). */
static int mem_fd(void) {
    if (atomic_load_explicit(&forked, memory_order_relaxed)) {
        /* the parent's file goes; a failed open of the parent's is not the
         * child's to wait out */
        atomic_store_explicit(&forked, false, memory_order_relaxed);
        if (mem.fd >= 0 && mem_pid != getpid())
            ss_kept_fd_close_inherited(&mem); /* the parent's copy: not our loss */
        open_failed_at = 0;
    }
    if (ss_proc_fds_tight() && !seccomp_filtered()) {
        /* a small RLIMIT_NOFILE (now, or lowered since): no descriptor
         * kept, process_vm_readv reads */
        if (mem.fd >= 0)
            ss_kept_fd_close(&mem);
        return -1;
    }
    int fd = ss_kept_fd_get(&mem);
    if (fd >= 0)
        return fd;
    uint64_t now = ss_mono_ns();
    if (open_failed_at && now - open_failed_at < REOPEN_NS)
        return -1;
    if (!atfork_set)
        atfork_set = pthread_atfork(NULL, NULL, on_fork_child) == 0;
    fd = ss_fd_move_high(open_mem());
    if (fd < 0 || ss_kept_fd_adopt(&mem, fd) != 0) {
        open_errno = fd < 0 ? -fd : EBADF;
        open_failed_at = now ? now : 1;
        return -1;
    }
    if (mem_pid)
        atomic_fetch_add_explicit(&n_reopened, 1, memory_order_relaxed);
    mem_pid = getpid();
    open_failed_at = 0;
    return mem.fd;
}

/* Asked before each process_vm_readv: a filter may come at any time. */
static bool seccomp_filtered(void) {
    if (!filter_seen)
        filter_seen = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0; /* -1: even that refused */
    return filter_seen;
}

static long read_vm(void *dst, uint64_t addr, size_t n) {
    if (seccomp_filtered()) {
        atomic_fetch_add_explicit(&n_refused, 1, memory_order_relaxed);
        if (!said_refused) {
            said_refused = true;
            ss_warn("this process's memory cannot be read: /proc/self/mem cannot be opened (%s) "
                    "and process_vm_readv is not used under the process's seccomp filter; "
                    "threads asleep are sampled with a signal",
                    strerror(open_errno));
        }
        return -EPERM;
    }
    atomic_fetch_add_explicit(&n_vm, 1, memory_order_relaxed);
    struct iovec local = {dst, n};
    struct iovec remote = {(void *)(uintptr_t)addr, n};
    ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return r < 0 ? -errno : (long)r;
}

long ss_uw_read_memory(void *dst, uint64_t addr, size_t n) {
    if (n == 0)
        return 0;
    /* pread takes a signed offset: user addresses are far below 2^63 */
    if (addr > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX - addr)
        return -EFAULT;
    int fd = mem_fd();
    if (fd < 0)
        return read_vm(dst, addr, n);
    atomic_fetch_add_explicit(&n_proc, 1, memory_order_relaxed);
    ssize_t r = pread(fd, dst, n, (off_t)addr);
    if (r < 0)
        return -errno;
    return r == 0 ? -EIO : (long)r; /* 0: no memory behind the file */
}

void ss_self_mem_stats(ss_self_mem_counts *c) {
    c->proc_mem = atomic_load_explicit(&n_proc, memory_order_relaxed);
    c->vm_readv = atomic_load_explicit(&n_vm, memory_order_relaxed);
    c->refused = atomic_load_explicit(&n_refused, memory_order_relaxed);
    c->reopened = atomic_load_explicit(&n_reopened, memory_order_relaxed);
}
