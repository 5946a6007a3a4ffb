/* test_fork_timer.c: a forked child's thread created late
 * (agent/fork_timer.c): which signal the timer takes, and that its `fire`
 * runs once due, only where the interrupted code is safe, and once. Run
 * in the test process itself (arming needs no fork: it is what a child's
 * at-fork handler calls). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/fork_timer.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* fork_timer_spin.c, a library of its own */
unsigned long ss_test_spin(unsigned long n);
void ss_test_host_handler(int sig, siginfo_t *si, void *ctx);

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Through libc's syscall(), not the vDSO: a tick taken on the way back
 * from the kernel finds the thread in glibc (no safe point), never in the
 * vDSO (one) while it spins in this program. */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Computes `ms` of this thread's CPU time in the spin library (safe) or
 * in this program (the agent's code: unsafe), checking the clock only
 * between long stretches (the vDSO is neither). */
static void spin_ms(unsigned ms, bool in_library) {
    uint64_t until = thread_cpu_ns() + (uint64_t)ms * 1000000ull;
    while (thread_cpu_ns() < until) {
        if (in_library) {
            ss_test_spin(2000000);
        } else {
            volatile unsigned long x = 1;
            for (unsigned long i = 0; i < 2000000; i++)
                x = x * 6364136223846793005ul + 1442695040888963407ul;
        }
    }
}

static int fired;
static uint64_t fired_at;

static bool fire(void) {
    fired++;
    fired_at = mono_ns();
    ss_fork_timer_disarm();
    return true;
}

static void handler_of_ours(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)si;
    (void)ctx;
}

static void set_action(int sig, void (*fn)(int, siginfo_t *, void *), bool dfl) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (dfl) {
        sa.sa_handler = SIG_DFL;
    } else {
        sa.sa_sigaction = fn;
        sa.sa_flags = SA_SIGINFO;
    }
    sigaction(sig, &sa, NULL);
}

static void *action_of(int sig) {
    struct sigaction cur;
    sigaction(sig, NULL, &cur);
    return (cur.sa_flags & SA_SIGINFO) ? (void *)cur.sa_sigaction : (void *)cur.sa_handler;
}

static int setup(void **state) {
    (void)state;
    ss_fork_timer_cancel(); /* a failed test's */
    fired = 0;
    set_action(SIGURG, NULL, true);
    set_action(SIGRTMIN + 5, NULL, true);
    return 0;
}

/* A sanitizer build has no timer: its children get their thread at fork. */
#define NEED_TIMER()                                                                               \
    do {                                                                                           \
        (void)state;                                                                               \
        if (!ss_fork_timer_scan())                                                                 \
            skip();                                                                                \
    } while (0)

static void test_takes_sigurg_when_default(void **state) {
    NEED_TIMER();
    int fallbacks[1] = {SIGRTMIN + 5};
    assert_true(ss_fork_timer_arm(mono_ns() + 3600000000000ull, fallbacks, 1, fire));
    assert_true(ss_fork_timer_armed());
    assert_ptr_not_equal(action_of(SIGURG), (void *)SIG_DFL);
    assert_ptr_equal(action_of(SIGRTMIN + 5), (void *)SIG_DFL); /* the fallback untouched */
    ss_fork_timer_cancel();
    assert_false(ss_fork_timer_armed());
    assert_ptr_equal(action_of(SIGURG), (void *)SIG_DFL); /* put back */
}

static void test_sigurg_handled_takes_our_sampler_signal(void **state) {
    NEED_TIMER();
    set_action(SIGURG, ss_test_host_handler, false);
    set_action(SIGRTMIN + 5, handler_of_ours, false); /* the sampler's */
    /* the first fallback's action is the default: not ours, skipped */
    int fallbacks[2] = {SIGRTMIN + 4, SIGRTMIN + 5};
    assert_true(ss_fork_timer_arm(mono_ns() + 3600000000000ull, fallbacks, 2, fire));
    assert_ptr_equal(action_of(SIGURG), (void *)ss_test_host_handler); /* untouched */
    assert_ptr_not_equal(action_of(SIGRTMIN + 5), (void *)handler_of_ours);
    assert_ptr_equal(action_of(SIGRTMIN + 4), (void *)SIG_DFL);
    ss_fork_timer_cancel();
    assert_ptr_equal(action_of(SIGRTMIN + 5), (void *)handler_of_ours); /* put back */
    set_action(SIGURG, NULL, true);
}

static void test_nothing_usable_not_armed(void **state) {
    NEED_TIMER();
    /* SIGURG the host's, no fallback of ours */
    set_action(SIGURG, ss_test_host_handler, false);
    int host_only[1] = {SIGRTMIN + 5};
    set_action(SIGRTMIN + 5, ss_test_host_handler, false);
    assert_false(ss_fork_timer_arm(mono_ns(), host_only, 1, fire));
    assert_false(ss_fork_timer_armed());
    assert_ptr_equal(action_of(SIGURG), (void *)ss_test_host_handler);
    set_action(SIGURG, NULL, true);
    set_action(SIGRTMIN + 5, NULL, true);
    /* SIGURG blocked by the thread, no fallback of ours */
    sigset_t urg, old;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    pthread_sigmask(SIG_BLOCK, &urg, &old);
    int fallbacks[1] = {SIGRTMIN + 5}; /* its action the default: not ours */
    assert_false(ss_fork_timer_arm(mono_ns(), fallbacks, 1, fire));
    assert_false(ss_fork_timer_armed());
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    assert_ptr_equal(action_of(SIGURG), (void *)SIG_DFL);
}

/* Due 50 ms from now: ticks before that do nothing, the first one after
 * it at a safe point fires, once. */
static void test_fires_once_when_due(void **state) {
    NEED_TIMER();
    uint64_t due = mono_ns() + 50000000ull;
    assert_true(ss_fork_timer_arm(due, NULL, 0, fire));
    for (int i = 0; i < 100 && !fired; i++)
        spin_ms(10, true);
    assert_int_equal(fired, 1);
    assert_true(fired_at >= due);
    assert_false(ss_fork_timer_armed());
    spin_ms(30, true); /* the timer is gone: no more */
    assert_int_equal(fired, 1);
    assert_ptr_equal(action_of(SIGURG), (void *)SIG_DFL);
}

/* Interrupting the agent's own code (this program holds it) is no safe
 * point: due at once, nothing fires there; in the library it does. */
static void test_never_fires_in_unsafe_code(void **state) {
    NEED_TIMER();
    assert_true(ss_fork_timer_arm(mono_ns(), NULL, 0, fire));
    spin_ms(150, false);
    assert_int_equal(fired, 0);
    for (int i = 0; i < 100 && !fired; i++)
        spin_ms(10, true);
    assert_int_equal(fired, 1);
}

/* A tick that comes while the thread's mask differs from the one at the
 * arming (inside a handler of the host's) does nothing. */
static void test_never_fires_under_another_mask(void **state) {
    NEED_TIMER();
    assert_true(ss_fork_timer_arm(mono_ns(), NULL, 0, fire));
    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &one, &old);
    spin_ms(100, true);
    assert_int_equal(fired, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (int i = 0; i < 100 && !fired; i++)
        spin_ms(10, true);
    assert_int_equal(fired, 1);
}

/* A fire that cannot take its lock (false) is asked again at the next
 * tick. */
static int refusals;
static bool fire_after_two(void) {
    if (refusals++ < 2)
        return false;
    return fire();
}

static void test_refused_fire_asked_again(void **state) {
    NEED_TIMER();
    refusals = 0;
    assert_true(ss_fork_timer_arm(mono_ns(), NULL, 0, fire_after_two));
    for (int i = 0; i < 100 && !fired; i++)
        spin_ms(10, true);
    assert_int_equal(fired, 1);
    assert_int_equal(refusals, 3);
}

/* A handler the host sets on the signal while the timer is armed stays
 * the host's when the timer goes. */
static void test_host_handler_set_since_kept(void **state) {
    NEED_TIMER();
    assert_true(ss_fork_timer_arm(mono_ns() + 3600000000000ull, NULL, 0, fire));
    set_action(SIGURG, ss_test_host_handler, false);
    ss_fork_timer_cancel();
    assert_false(ss_fork_timer_armed());
    assert_ptr_equal(action_of(SIGURG), (void *)ss_test_host_handler);
    set_action(SIGURG, NULL, true);
}

/* A child of a child still waiting: the handler put back, nothing armed. */
static void test_forget(void **state) {
    NEED_TIMER();
    assert_true(ss_fork_timer_arm(mono_ns() + 3600000000000ull, NULL, 0, fire));
    ss_fork_timer_forget();
    assert_false(ss_fork_timer_armed());
    assert_ptr_equal(action_of(SIGURG), (void *)SIG_DFL);
    /* the timer of this process (not forgotten by the kernel here) ticks
     * on SIGURG, whose default action drops it */
    spin_ms(20, true);
    assert_int_equal(fired, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_takes_sigurg_when_default, setup),
        cmocka_unit_test_setup(test_sigurg_handled_takes_our_sampler_signal, setup),
        cmocka_unit_test_setup(test_nothing_usable_not_armed, setup),
        cmocka_unit_test_setup(test_fires_once_when_due, setup),
        cmocka_unit_test_setup(test_never_fires_in_unsafe_code, setup),
        cmocka_unit_test_setup(test_never_fires_under_another_mask, setup),
        cmocka_unit_test_setup(test_refused_fire_asked_again, setup),
        cmocka_unit_test_setup(test_host_handler_set_since_kept, setup),
        cmocka_unit_test_setup(test_forget, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
