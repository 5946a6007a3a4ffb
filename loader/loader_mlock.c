/* loader_mlock.c: a process that locks its memory under a limit keeps
 * its whole limit.
 *
 * mlockall(MCL_CURRENT | MCL_FUTURE) locks every page mapped and every
 * mapping made after it, and counts them against RLIMIT_MEMLOCK (8 MiB
 * for a user by default), reservations without access included. Real-time
 * and security-minded services do it at start. The agent's memory then
 * counted as theirs: the loader's start thread's 1 MiB stack, and once the
 * agent started, its core and libraries, its threads' stacks and glibc's
 * malloc arenas for them (64 MiB of address space each), about 400 MiB of
 * locked address space in all. A user's process under the default limit
 * got a quarter of its own allocations (18 of 57 blocks of 100 KiB), and
 * the agent failed to load its core.
 *
 * So mlockall is wrapped. When the call asks for future mappings to be
 * locked and a limit applies (RLIMIT_MEMLOCK is finite and the process
 * lacks CAP_IPC_LOCK), the agent leaves the process before the call: the
 * start thread is joined and its stack unmapped (loader_start.c), or a
 * running agent stops as for a namespace call (its threads joined, what
 * it collected flushed); its alternate-stack cache is unmapped, the
 * calling thread's alternate stack released if it is ours, and threads
 * created after get none (loader_altstack.c). One line says so. It does
 * not come back in this process, nor in a child it forks (a program it
 * execs starts its own). A call that fails changes nothing: the agent
 * goes on.
 *
 * Without a limit (root, CAP_IPC_LOCK, an unlimited RLIMIT_MEMLOCK) the
 * agent stays, and its pages are locked with the rest (the process asked
 * for that). MCL_CURRENT alone locks what is mapped now, the agent's too:
 * the agent steps aside for the call the same way, and comes back after
 * (what it maps then is not locked).
 *
 * Not covered: an agent that was running leaves its address space behind
 * (its core, heap, its threads' cached stacks, and about 400 MB reserved
 * and never touched: malloc arenas, the range for shared debuginfo), which
 * MCL_CURRENT compares with the limit: the call then fails with ENOMEM
 * where it succeeds alone. A raw syscall(SYS_mlockall, ...) is not seen.
 * See docs/safety/guest.md. */
#include "loader/ss_loader.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

#ifndef CAP_IPC_LOCK
#define CAP_IPC_LOCK 14
#endif

typedef int (*mlockall_fn)(int);

/* Does RLIMIT_MEMLOCK bind this process? (It does not with CAP_IPC_LOCK.)
 * *limit: the limit in bytes. */
static bool limit_binds(unsigned long long *limit) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return false;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) == 0 && (data[0].effective & (1u << CAP_IPC_LOCK)))
        return false;
    *limit = (unsigned long long)rl.rlim_cur;
    return true;
}

/* Is the agent in this process at all (armed, running, or registering
 * threads)? */
static bool agent_here(void) { return ss_altstack_enabled() || ss_loader_core() || ss_start_armed(); }

SS_EXPORT int mlockall(int flags) {
    static mlockall_fn fn;
    if (!fn && !(fn = (mlockall_fn)ss_loader_next("mlockall")))
        return -1;
    unsigned long long limit = 0;
    if (!(flags & (MCL_CURRENT | MCL_FUTURE)) || !agent_here() || !limit_binds(&limit))
        return fn(flags);
    /* before the call, so that the agent's stacks neither count in the
     * address space MCL_CURRENT compares with the limit nor get locked */
    int token = ss_start_quiesce(SS_ASIDE_ALONE);
    bool future = flags & MCL_FUTURE;
    if (future)
        ss_altstack_leave();
    int rc = fn(flags);
    int saved = errno;
    if (rc != 0 || !future) {
        if (future)
            ss_altstack_come_back();
        ss_start_resume(token);
        errno = saved;
        return rc;
    }
    ss_start_leave(); /* a running core stays aside: its token is not given back */
    char msg[240];
    snprintf(msg, sizeof msg,
             "the process locks its future memory (mlockall MCL_FUTURE) under a limit of %llu KiB: "
             "the agent leaves it, so that its memory does not count against that limit",
             limit / 1024);
    ss_loader_say(msg);
    errno = saved;
    return rc;
}
