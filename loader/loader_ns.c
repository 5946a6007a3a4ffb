/* loader_ns.c: the namespace calls that need a single-threaded process,
 * wrapped so that the agent's threads are not what makes them fail.
 *
 *   unshare(CLONE_NEWUSER) (and CLONE_THREAD, CLONE_SIGHAND, CLONE_VM)
 *     fails with EINVAL in a process with more than one thread;
 *   setns() into a user or mount namespace fails with EINVAL while
 *     another thread shares the filesystem context (every pthread does);
 *   clone() of a new process copies only the calling thread: a lock an
 *     agent thread held at that moment (the allocator's, say) stays held
 *     forever in the child, and glibc runs no at-fork handler for clone.
 *
 * Each wrapper quiesces the agent first (loader_start.c: the thread that
 * waits for the first round is joined, or the running agent stops as at
 * exit), calls libc's function, and resumes. A child made by clone runs
 * ss_start_child_of_clone before the host's function: it forgets the
 * agent's threads (only its own was copied) and starts nothing; if it
 * execs, the new program starts its own agent, knowing its real pid.
 *
 * clone() with CLONE_VM (threads, vfork-like children) shares our memory
 * and needs nothing: it passes straight through. clone3() has no glibc
 * wrapper in glibc 2.36 (callers use syscall(), which no library can
 * interpose), nor do raw clone/unshare system calls: see
 * docs/safety/guest.md. */
#include "loader/ss_loader.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <time.h>

#define SS_EXPORT __attribute__((visibility("default")))

/* Flags that make unshare() require a single-threaded process
 * (CLONE_NEWUSER implies CLONE_THREAD in the kernel). */
#define UNSHARE_SINGLE (CLONE_NEWUSER | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM)

typedef int (*unshare_fn)(int);
typedef int (*setns_fn)(int, int);
typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

/* After the agent stepped aside its threads (the start thread, or the
 * running agent's) are joined, but a joined thread leaves the thread group
 * a moment after pthread_join returns (the kernel wakes the joiner first):
 * until then the call fails with EINVAL as in a multi-threaded process.
 * Retried for a short while; a host that has threads of its own gets its
 * EINVAL 0.2 s late. */
#define ALONE_RETRY_NS 200000000L
#define ALONE_NAP_NS 50000L

static bool retry_alone(int token, int rc, long *waited_ns) {
    if (rc == 0 || errno != EINVAL || token == SS_QUIESCE_NONE || *waited_ns >= ALONE_RETRY_NS)
        return false;
    struct timespec nap = {.tv_sec = 0, .tv_nsec = ALONE_NAP_NS};
    nanosleep(&nap, NULL);
    *waited_ns += ALONE_NAP_NS;
    return true;
}

SS_EXPORT int unshare(int flags) {
    static unshare_fn fn;
    if (!fn && !(fn = (unshare_fn)ss_loader_next("unshare")))
        return -1;
    if (!(flags & UNSHARE_SINGLE))
        return fn(flags);
    int token = ss_start_quiesce(SS_ASIDE_ALONE);
    int rc;
    long waited = 0;
    do
        rc = fn(flags);
    while (retry_alone(token, rc, &waited));
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}

SS_EXPORT int setns(int fd, int nstype) {
    static setns_fn fn;
    if (!fn && !(fn = (setns_fn)ss_loader_next("setns")))
        return -1;
    /* 0: any type (the kernel reads it from the fd); a pidfd may name
     * several */
    if (nstype != 0 && !(nstype & (CLONE_NEWNS | CLONE_NEWUSER)))
        return fn(fd, nstype);
    int token = ss_start_quiesce(SS_ASIDE_ALONE);
    int rc;
    long waited = 0;
    do
        rc = fn(fd, nstype);
    while (retry_alone(token, rc, &waited));
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}

typedef struct clone_call {
    int (*fn)(void *);
    void *arg;
} clone_call;

/* Runs first in the child, on the stack the caller gave it. The call
 * record lives in the parent's frame, copied into the child's memory. */
static int clone_child(void *p) {
    clone_call *c = p;
    ss_start_child_of_clone();
    return c->fn(c->arg);
}

SS_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...) {
    static clone_fn real_clone;
    if (!real_clone && !(real_clone = (clone_fn)ss_loader_next("clone")))
        return -1;
    /* The optional arguments, read only as far as the flags say they were
     * given (each needs those before it). */
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = NULL;
    void *tls = NULL;
    pid_t *ctid = NULL;
    int want = flags & (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID) ? 3
               : flags & CLONE_SETTLS                             ? 2
               : flags & (CLONE_PARENT_SETTID | CLONE_PIDFD)      ? 1
                                                                  : 0;
    if (want >= 1)
        ptid = va_arg(ap, pid_t *);
    if (want >= 2)
        tls = va_arg(ap, void *);
    if (want >= 3)
        ctid = va_arg(ap, pid_t *);
    va_end(ap);

    if (flags & (CLONE_VM | CLONE_THREAD))
        return real_clone(fn, stack, flags, arg, ptid, tls, ctid);
    clone_call call = {fn, arg};
    int token = ss_start_quiesce(SS_ASIDE_ALONE);
    int rc = real_clone(clone_child, stack, flags, &call, ptid, tls, ctid);
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}
