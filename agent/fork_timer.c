/* fork_timer.c: a forked child's thread of ours, created late.
 *
 * A thread created in the child at fork, even one that only waits, costs
 * the child's exit a scheduling: exit_group kills the other threads, and
 * the parent's wait returns only once every one of them has run to its
 * end. A thread that has never run yet (the common case on a host whose
 * CPUs are busy) waits for a CPU first; and its creation maps a stack and
 * writes pages the fork shared. So a forked child creates no thread of
 * ours at fork, neither the core's restart thread (a child of a running
 * agent, core/lifecycle.c) nor the loader's start thread (a child of a
 * process whose start is armed, loader/loader_start.c): it arms a timer on
 * the forking thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID, after 2 ms
 * and then every 5 ms of CPU it uses; the kernel checks such timers at its
 * tick, while the thread runs) whose signal goes to that thread. A
 * CPU-time signal arrives while the thread is running, never in a sleep
 * (it would end nanosleep, poll or epoll_wait with EINTR, as a signal sent
 * to a sleeping thread would): the same window as the sampler's own
 * signal, which only goes to threads read running. Once the thread is due
 * the handler has it created (the caller's `fire`), at a moment where that
 * is safe:
 *
 *  - the interrupted instruction is not in glibc (libc.so, the dynamic
 *    linker), in this agent's code, nor in the module that defines the
 *    process's malloc: pthread_create allocates and takes glibc's locks
 *    (the stack cache, malloc's arenas), which only code there can hold;
 *    a host whose malloc is its main program (jemalloc linked in: Redis)
 *    keeps the thread at fork;
 *  - the thread's signal mask is the one it had at the fork: inside a
 *    handler of the host (its signal blocked) the code it interrupted may
 *    hold those locks;
 *  - the caller's lock is free (`fire` takes it with a trylock).
 *
 * Otherwise the next tick tries again. The signal is SIGURG where its
 * action is the default, ignore: a child that resets every signal's action
 * (a daemon, code on its way to exec) and then computes is not killed by
 * a tick, and a tick left pending at exec is dropped. Where SIGURG is
 * taken (a Go runtime preempts with it), the core uses its sampler's
 * signal (its handler, ours, replaced by this one until the thread exists
 * and put back then); the loader creates its thread at fork. Exit, exec
 * and stepping aside disarm it. A forking thread that never uses CPU again
 * (it only waits) leaves the child without its thread until it does.
 * Sanitizer builds keep the thread at fork (their runtimes' interceptors
 * are no safe point). */
#include "agent/fork_timer.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FORK_TIMER 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FORK_TIMER 0
#endif
#endif
#if !defined(FORK_TIMER) && (defined(__x86_64__) || defined(__aarch64__))
#define FORK_TIMER 1
#endif
#ifndef FORK_TIMER
#define FORK_TIMER 0
#endif

#if FORK_TIMER
#define MAX_UNSAFE 24
typedef struct code_range {
    uintptr_t lo, hi;
} code_range;
/* Filled once in the parent (ss_fork_timer_scan), read by the child's handler. */
static code_range unsafe_code[MAX_UNSAFE];
static int n_unsafe;
static code_range own_code[4]; /* this library's code: its handlers */
static int n_own;
/* 0 not yet, 1 usable, -1 not (malloc in the main program...); set once
 * the ranges are written (another thread may scan: the loader's start
 * thread, while the host forks) */
static _Atomic int scanned;
static atomic_flag scanning = ATOMIC_FLAG_INIT;
static _Atomic bool armed;
static int timer_sig;
static int timer_id;
static uint64_t due_at;
static ss_fork_timer_fire fire_fn;
static struct sigaction saved; /* the signal's action before, put back after */
static sigset_t fork_mask;     /* the forking thread's mask at the fork */

typedef struct scan_ctx {
    uintptr_t malloc_at, self_at;
    int index;
    bool malloc_in_main, full;
} scan_ctx;

static bool in_ranges(const code_range *r, int n, uintptr_t pc) {
    for (int i = 0; i < n; i++)
        if (pc - r[i].lo < r[i].hi - r[i].lo)
            return true;
    return false;
}

static bool unsafe_module(const char *name) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "ld-linux", 8) == 0 ||
           strncmp(base, "ld64.so", 7) == 0 || strncmp(base, "libpthread", 10) == 0 ||
           strncmp(base, "libstackshot", 12) == 0;
}

static int scan_module(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    scan_ctx *c = arg;
    bool is_main = c->index++ == 0;
    bool has_malloc = false, has_self = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        has_malloc |= c->malloc_at - lo < hi - lo;
        has_self |= c->self_at - lo < hi - lo;
    }
    if (has_malloc && is_main)
        c->malloc_in_main = true;
    if (!has_malloc && !has_self && !unsafe_module(info->dlpi_name ? info->dlpi_name : ""))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        code_range r = {info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz};
        if (n_unsafe == MAX_UNSAFE) {
            c->full = true;
            return 0;
        }
        unsafe_code[n_unsafe++] = r;
        if (has_self && n_own < 4)
            own_code[n_own++] = r;
    }
    return 0;
}

/* The process's malloc is found in the global scope (the main program's
 * handle), not in ours: the core defines a malloc of its own. */
bool ss_fork_timer_scan(void) {
    int was = atomic_load_explicit(&scanned, memory_order_acquire);
    if (was)
        return was == 1;
    if (atomic_flag_test_and_set(&scanning))
        return false; /* under way on another thread */
    void *main_handle = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
    void *m = main_handle ? dlsym(main_handle, "malloc") : NULL;
    if (main_handle)
        dlclose(main_handle);
    scan_ctx c = {.malloc_at = (uintptr_t)m, .self_at = (uintptr_t)(void *)&ss_fork_timer_scan};
    if (m)
        dl_iterate_phdr(scan_module, &c);
    bool usable = m && !c.malloc_in_main && !c.full && n_own > 0;
    atomic_store_explicit(&scanned, usable ? 1 : -1, memory_order_release);
    return usable;
}

static uintptr_t interrupted_pc(const void *ctx) {
    const ucontext_t *uc = ctx;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#else
    return (uintptr_t)uc->uc_mcontext.pc;
#endif
}

static bool same_mask(const sigset_t *a, const sigset_t *b) {
    for (int sig = 1; sig < 65; sig++)
        if (sigismember(a, sig) != sigismember(b, sig))
            return false;
    return true;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void tick(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    if (si->si_code != SI_TIMER || !atomic_load(&armed))
        return;
    int saved_errno = errno;
    /* the clock last: where the vDSO cannot read it, it is a system call */
    if (same_mask(&((const ucontext_t *)ctx)->uc_sigmask, &fork_mask) &&
        !in_ranges(unsafe_code, n_unsafe, interrupted_pc(ctx)) && mono_ns() >= due_at)
        fire_fn();
    errno = saved_errno;
}

/* May a tick come on `sig`: not blocked by the calling thread, and its
 * action the default (SIGURG's: ignore) or a handler of this library's. */
static bool usable_signal(int sig, bool default_ok, const sigset_t *mask) {
    struct sigaction cur;
    if (sig <= 0 || sigismember(mask, sig) == 1 || sigaction(sig, NULL, &cur) != 0)
        return false;
    if (!(cur.sa_flags & SA_SIGINFO))
        return default_ok && cur.sa_handler == SIG_DFL;
    return in_ranges(own_code, n_own, (uintptr_t)(void *)cur.sa_sigaction);
}

bool ss_fork_timer_arm(uint64_t due_ns, const int *fallbacks, int n_fallbacks,
                       ss_fork_timer_fire fire) {
    if (atomic_load_explicit(&scanned, memory_order_acquire) != 1 || atomic_load(&armed))
        return false;
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, NULL, &mask);
    int sig = usable_signal(SIGURG, true, &mask) ? SIGURG : -1;
    for (int i = 0; sig < 0 && i < n_fallbacks; i++)
        if (usable_signal(fallbacks[i], false, &mask))
            sig = fallbacks[i];
    if (sig < 0)
        return false;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = tick;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigfillset(&sa.sa_mask);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = sig;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    int id = -1;
    if (syscall(SYS_timer_create, CLOCK_THREAD_CPUTIME_ID, &ev, &id) != 0)
        return false;
    fork_mask = mask;
    if (sigaction(sig, &sa, &saved) != 0) {
        syscall(SYS_timer_delete, id);
        return false;
    }
    timer_sig = sig;
    timer_id = id;
    due_at = due_ns;
    fire_fn = fire;
    atomic_store(&armed, true);
    /* after 2 ms of the thread's CPU time, then every 5 ms: a thread that
     * computes all the time is interrupted about 20 times before a thread
     * due 100 ms later is, one that mostly waits finds it due at its first */
    struct itimerspec its = {.it_interval = {0, 5000000}, .it_value = {0, 2000000}};
    if (syscall(SYS_timer_settime, id, 0, &its, NULL) != 0) {
        ss_fork_timer_disarm();
        return false;
    }
    return true;
}

bool ss_fork_timer_armed(void) { return atomic_load(&armed); }

/* The action before the arming, put back unless the host has set one of
 * its own since (on SIGURG: a child that asks for out-of-band data). */
static void put_back(int sig) {
    struct sigaction cur;
    if (sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == tick)
        sigaction(sig, &saved, NULL);
}

void ss_fork_timer_disarm(void) {
    if (!atomic_exchange(&armed, false))
        return;
    syscall(SYS_timer_delete, timer_id);
    put_back(timer_sig);
}

void ss_fork_timer_cancel(void) {
    if (!atomic_load(&armed))
        return;
    int sig = timer_sig;
    ss_fork_timer_disarm();
    /* SIGURG's default action drops it in any image; and a pending SIGURG
     * may be the host's own (out-of-band data): left alone */
    if (sig == SIGURG)
        return;
    sigset_t pending, one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    struct timespec zero = {0, 0};
    while (sigpending(&pending) == 0 && sigismember(&pending, sig) &&
           sigtimedwait(&one, NULL, &zero) == sig)
        ;
}

void ss_fork_timer_forget(void) {
    if (atomic_exchange(&armed, false))
        put_back(timer_sig);
    /* forked while another thread scanned: that thread is not here */
    if (atomic_load(&scanned) == 0)
        atomic_flag_clear(&scanning);
}
#else
bool ss_fork_timer_scan(void) { return false; }
bool ss_fork_timer_arm(uint64_t due_ns, const int *fallbacks, int n_fallbacks,
                       ss_fork_timer_fire fire) {
    (void)due_ns;
    (void)fallbacks;
    (void)n_fallbacks;
    (void)fire;
    return false;
}
bool ss_fork_timer_armed(void) { return false; }
void ss_fork_timer_disarm(void) {}
void ss_fork_timer_cancel(void) {}
void ss_fork_timer_forget(void) {}
#endif
