/* fork_timer.h: a forked child's thread, created later from a timer on the
 * forking thread's CPU clock instead of at fork (fork_timer.c). Compiled
 * into the loader (an armed process's child: its start thread) and into
 * the core (a running agent's child: its restart thread); each has its
 * own copy of the state. */
#ifndef SS_FORK_TIMER_H
#define SS_FORK_TIMER_H

#include <stdbool.h>
#include <stdint.h>

/* Called from the timer's signal handler once the thread is due, at a safe
 * point (see fork_timer.c). It takes its own lock with trylock (false: not
 * now, the next tick tries again), calls ss_fork_timer_disarm and creates
 * the thread. Async-signal context: nothing else. */
typedef bool (*ss_fork_timer_spawn)(void);

/* In the parent, in a normal context, before the first fork that may arm:
 * the code where the handler must not create a thread (libc, the dynamic
 * linker, this library, and the module of `malloc_at`, the process's
 * malloc). Once; later calls return at once. */
void ss_fork_timer_scan(uintptr_t malloc_at);

/* Is `fn` (a handler's address) in this library's code? (after the scan) */
bool ss_fork_timer_own_code(uintptr_t fn);

/* In the forked child's at-fork handler (one thread): the timer armed on
 * this thread's CPU clock with signal `sig` (its disposition replaced
 * until disarmed), `spawn` called from the first tick at or after
 * `due_ns` (CLOCK_MONOTONIC) at a safe point. false: not possible here
 * (no scan, a sanitizer build, the host's malloc in its main program, the
 * timer refused): the caller creates its thread at fork. */
bool ss_fork_timer_arm(int sig, uint64_t due_ns, ss_fork_timer_spawn spawn);

bool ss_fork_timer_armed(void);

/* Async-signal-safe: the timer deleted, the signal's disposition put back. */
void ss_fork_timer_disarm(void);

/* Not from the handler: disarmed, and a signal of the timer still pending
 * on this thread taken, so that none is left for an exec'd image (the
 * signal's default action would end it). */
void ss_fork_timer_cancel(void);

/* In the at-fork handler of a child whose parent was still waiting: the
 * parent's timer is not inherited, its handler is; put back. */
void ss_fork_timer_forget(void);

#endif
