/* fork_timer_spin.c: a loop in a library of its own, where the fork
 * timer's handler may create a thread (test_fork_timer.c): not glibc, not
 * the agent's code (which the test program holds, linked statically); and
 * a signal handler of the host's. */
#include <signal.h>

unsigned long ss_test_spin(unsigned long n);
void ss_test_host_handler(int sig, siginfo_t *si, void *ctx);

unsigned long ss_test_spin(unsigned long n) {
    volatile unsigned long x = 1;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return x;
}

/* A handler of the host's (not in the agent's code). */
void ss_test_host_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)si;
    (void)ctx;
}
