/* fork_timer.c: a forked child's thread without a thread at fork.
 *
 * A thread created in the child at fork, even one that only waits, costs
 * the child's exit a scheduling: exit_group kills the other threads, and
 * the parent's wait returns only once every one of them has run to its
 * end (an exec's de_thread waits the same way). A thread that has never
 * run yet (the common case on a host whose CPUs are busy) waits for a CPU
 * first. So a child creates no thread at fork: it arms a timer on the
 * forking thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID, after 2 ms and
 * then every 5 ms of CPU it uses; the kernel checks such timers at its
 * tick, while the thread runs) whose signal goes to that thread. A
 * CPU-time signal arrives while the thread is running, never in a sleep
 * (it would end nanosleep, poll or epoll_wait with EINTR, as a signal sent
 * to a sleeping thread would). Once the thread is due (100 ms after the
 * fork) the handler has it created, at a moment where that is safe:
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
 *  - the caller's lock is free (its spawn callback uses trylock).
 *
 * Otherwise the next tick tries again. The handler replaces the signal's
 * disposition until the thread exists, and puts it back then. Exit, exec
 * and stepping aside disarm it. A forking thread that never uses CPU
 * again (it only waits) leaves the child without an agent until then; a
 * child whose forking thread blocks that signal too. Sanitizer builds keep
 * the thread at fork (their runtimes' interceptors are no safe point).
 *
 * The loader uses it for the child of an armed process (its start thread,
 * loader/loader_start.c), the core for the child of a running agent (its
 * restart thread, core/lifecycle.c); each library has its own copy. */
#include "agent/fork_timer.h"

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
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_UNSAFE 24
typedef struct code_range {
    uintptr_t lo, hi;
} code_range;
/* Filled once in the parent (ss_fork_timer_scan), read by the child's handler. */
static code_range unsafe_code[MAX_UNSAFE];
static int n_unsafe;
static code_range own_code[4]; /* this library's code */
static int n_own;
static int scanned; /* 0 not yet, 1 usable, -1 not (malloc in the main program...) */
static _Atomic bool armed;
static int timer_sig;
static int timer_id;
static uint64_t timer_due_ns;
static ss_fork_timer_spawn timer_spawn;
static struct sigaction saved_action; /* the signal's disposition, put back after */
static sigset_t fork_mask;            /* the forking thread's mask at the fork */

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

void ss_fork_timer_scan(uintptr_t malloc_at) {
    if (scanned)
        return;
    scanned = -1;
    if (!malloc_at)
        return;
    scan_ctx c = {.malloc_at = malloc_at, .self_at = (uintptr_t)(void *)&ss_fork_timer_scan};
    dl_iterate_phdr(scan_module, &c);
    if (!c.malloc_in_main && !c.full && n_own > 0)
        scanned = 1;
}

bool ss_fork_timer_own_code(uintptr_t fn) { return in_ranges(own_code, n_own, fn); }

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

bool ss_fork_timer_armed(void) { return atomic_load(&armed); }

void ss_fork_timer_disarm(void) {
    if (!atomic_exchange(&armed, false))
        return;
    syscall(SYS_timer_delete, timer_id);
    sigaction(timer_sig, &saved_action, NULL);
}

void ss_fork_timer_forget(void) {
    if (atomic_exchange(&armed, false))
        sigaction(timer_sig, &saved_action, NULL);
}

void ss_fork_timer_cancel(void) {
    if (!atomic_load(&armed))
        return;
    int sig = timer_sig;
    ss_fork_timer_disarm();
    sigset_t pending, one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    struct timespec zero = {0, 0};
    while (sigpending(&pending) == 0 && sigismember(&pending, sig) &&
           sigtimedwait(&one, NULL, &zero) == sig)
        ;
}

static void timer_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    if (si->si_code != SI_TIMER || !atomic_load(&armed))
        return;
    int saved = errno;
    if (mono_ns() >= timer_due_ns && !in_ranges(unsafe_code, n_unsafe, interrupted_pc(ctx)) &&
        same_mask(&((const ucontext_t *)ctx)->uc_sigmask, &fork_mask))
        timer_spawn();
    errno = saved;
}

bool ss_fork_timer_arm(int sig, uint64_t due_ns, ss_fork_timer_spawn spawn) {
    if (scanned != 1 || sig <= 0 || !spawn || atomic_load(&armed))
        return false;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = timer_handler;
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
    pthread_sigmask(SIG_SETMASK, NULL, &fork_mask);
    timer_due_ns = due_ns;
    timer_spawn = spawn;
    if (sigaction(sig, &sa, &saved_action) != 0) {
        syscall(SYS_timer_delete, id);
        return false;
    }
    timer_sig = sig;
    timer_id = id;
    atomic_store(&armed, true);
    /* after 2 ms of the thread's CPU time, then every 5 ms: a thread that
     * computes all the time is interrupted about 20 times before its
     * thread is due, one that mostly waits finds it due at its first */
    struct itimerspec its = {.it_interval = {0, 5000000}, .it_value = {0, 2000000}};
    if (syscall(SYS_timer_settime, id, 0, &its, NULL) != 0) {
        ss_fork_timer_disarm();
        return false;
    }
    return true;
}

#else /* sanitizer builds, other architectures: the thread at fork */

void ss_fork_timer_scan(uintptr_t malloc_at) { (void)malloc_at; }
bool ss_fork_timer_own_code(uintptr_t fn) {
    (void)fn;
    return false;
}
bool ss_fork_timer_arm(int sig, uint64_t due_ns, ss_fork_timer_spawn spawn) {
    (void)sig;
    (void)due_ns;
    (void)spawn;
    return false;
}
bool ss_fork_timer_armed(void) { return false; }
void ss_fork_timer_disarm(void) {}
void ss_fork_timer_cancel(void) {}
void ss_fork_timer_forget(void) {}

#endif
