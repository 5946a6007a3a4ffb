/* loader_seccomp.c: a thread that enters seccomp's strict mode is never
 * signalled again.
 *
 * In strict mode (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT)) a thread may
 * make four system calls: read, write, _exit and rt_sigreturn. Any other
 * kills it, and the sampling handler makes one (a futex wake, so that the
 * sampler does not wait out its deadline): a host whose worker thread
 * computed in strict mode died of SIGSEGV at the agent's first round.
 * Sandboxes run untrusted computations that way, in a thread of their own.
 *
 * So prctl is wrapped, and before the call puts the thread in strict mode:
 *   - the thread is marked in the registry as one not to signal
 *     (loader_altstack.c): the sampler reads it before each signal it
 *     sends, counts the thread as not signalled, and still reads it when
 *     it is asleep (in read or write);
 *   - the thread blocks the agent's signal: a signal sent just before the
 *     mark was seen stays pending for good instead of being delivered in
 *     strict mode (the thread cannot change its mask again; nothing else
 *     takes a blocked signal);
 *   - a forked child's fork timer (agent/fork_timer.c: the core's restart
 *     or the loader's start, due on the forking thread) is held back the
 *     same way: on the sampling signal that block does it, on SIGURG the
 *     thread blocks SIGURG too when a handler of ours is on it (its tick
 *     would create a thread there: mmap, and strict mode kills).
 * A call that fails leaves both: the thread is only sampled less.
 *
 * Not covered: a thread that enters strict mode through a raw system call
 * (syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, ...), which glibc 2.36
 * has no wrapper for, or syscall(SYS_prctl, ...)). The native sampler
 * reads "Seccomp:" in the thread's status where it reads its signal mask
 * (every 16 rounds, and whenever the mask is in doubt): a thread seen in
 * strict mode is never signalled after that, but one that enters it
 * between two looks is signalled once more. See docs/safety/seccomp.md. */
#include "loader/ss_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/prctl.h>

#define SS_EXPORT __attribute__((visibility("default")))

typedef int (*prctl_fn)(int, unsigned long, unsigned long, unsigned long, unsigned long);

static void before_strict(void);

/* Is the handler on SIGURG ours, the loader's or the core's: a fork timer
 * armed in this process? */
static bool urg_ours(const ss_core_api *api) {
    struct sigaction cur;
    Dl_info handler, mine, core;
    if (sigaction(SIGURG, NULL, &cur) != 0 || !(cur.sa_flags & SA_SIGINFO) ||
        !dladdr((void *)cur.sa_sigaction, &handler) || !handler.dli_fbase)
        return false;
    if (dladdr((void *)&before_strict, &mine) && handler.dli_fbase == mine.dli_fbase)
        return true;
    return api && dladdr((const void *)api, &core) && handler.dli_fbase == core.dli_fbase;
}

/* Before the calling thread enters strict mode. */
static void before_strict(void) {
    int saved = errno;
    ss_altstack_never_signal_self();
    const ss_core_api *api = ss_loader_core();
    int sig = api && api->size >= offsetof(ss_core_api, sampling_signal) + sizeof api->sampling_signal &&
                      api->sampling_signal
                  ? api->sampling_signal()
                  : 0;
    sigset_t set;
    sigemptyset(&set);
    if (sig > 0)
        sigaddset(&set, sig);
    if (urg_ours(api))
        sigaddset(&set, SIGURG);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    errno = saved;
}

SS_EXPORT int prctl(int option, ...) {
    static prctl_fn fn;
    if (!fn && !(fn = (prctl_fn)ss_loader_next("prctl")))
        return -1;
    /* prctl takes up to four more arguments, whatever the option; the
     * ones not given are read as whatever the registers hold, as libc's
     * own prctl passes them to the kernel */
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long);
    unsigned long a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long);
    unsigned long a5 = va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_SECCOMP && a2 == SECCOMP_MODE_STRICT)
        before_strict();
    return fn(option, a2, a3, a4, a5);
}
