/* fork_timer.h: a forked child's thread of ours, created late, from a timer
 * on the forking thread's CPU clock, at a moment where creating one is safe
 * (agent/fork_timer.c says why and when). Compiled into the loader (a child
 * of a process whose start is armed) and into the core (a child of a
 * running agent): each library has its own timer and state. */
#ifndef SS_FORK_TIMER_H
#define SS_FORK_TIMER_H

#include <stdbool.h>
#include <stdint.h>

/* Called from the timer's handler, once due, at a safe point. It takes
 * its own lock with a trylock (false: not now, the next tick tries again)
 * and, holding it, calls ss_fork_timer_disarm and creates its thread. */
typedef bool (*ss_fork_timer_fire)(void);

/* In the parent, in a normal context, once (false while another thread
 * scans): where a handler must not create a thread (glibc, the dynamic linker, this agent's libraries, the
 * module of the process's malloc). false: the timer cannot be used in
 * this process (malloc in the main program, too many ranges, a sanitizer
 * build, another architecture); children get their thread at fork. */
bool ss_fork_timer_scan(void);

/* In the forked child (one thread, its at-fork handler): arms the timer
 * for the calling thread, due at CLOCK_MONOTONIC `due_ns`. The signal is
 * SIGURG where its action is the default (ignored: a host that resets
 * every action before it computes is not killed by a tick) and the
 * thread does not block it, else the first of `fallbacks` whose handler
 * is this library's (the sampler's signal). false: not armed, the caller
 * creates its thread now. */
bool ss_fork_timer_arm(uint64_t due_ns, const int *fallbacks, int n_fallbacks,
                       ss_fork_timer_fire fire);

bool ss_fork_timer_armed(void);

/* Async-signal-safe: the timer deleted, the signal's action put back
 * (unless the host set one of its own since).
 * Under the caller's lock, or with one thread (an at-fork handler). */
void ss_fork_timer_disarm(void);

/* Not from the handler: disarmed, and a tick still pending on this thread
 * (it blocks the signal) taken, so that an exec'd image never gets it. */
void ss_fork_timer_cancel(void);

/* A child of a child still waiting (timers are not inherited, the
 * handler is), or of a clone(): the action put back, nothing armed; a
 * scan the fork cut short may be made again. */
void ss_fork_timer_forget(void);

#endif
