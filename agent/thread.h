/*
 * agent/thread.h: the agent's own threads ("stackshot-<role>", never sampled).
 */
#ifndef SS_AGENT_THREAD_H
#define SS_AGENT_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* Start a native agent thread named "stackshot-<role>" (truncated to the
 * kernel's 15 characters). It blocks every signal, so the host's signals
 * go to the host's threads and the sampler never signals it; threads it
 * creates inherit that mask. Its tid is registered as internal. */
int ss_thread_start(pthread_t *thread, const char *role,
                    void *(*fn)(void *), void *arg);

/* Join with a deadline (monotonic ns). Returns 0 when joined, -ETIMEDOUT
 * when the thread is still running (it is then detached). */
int ss_thread_join(pthread_t thread, uint64_t deadline_ns);

/* Register / look up internal threads by kernel tid (async-signal-safe
 * lookup). Agent threads started by other means (JVMTI) register too. */
void ss_internal_thread_add(pid_t tid);
void ss_internal_thread_remove(pid_t tid);
bool ss_internal_thread_is(pid_t tid);
/* How many of the registered threads (the agent's, gRPC's) the kernel has
 * not reaped yet, and of the agent's processes handed over as ending. */
unsigned ss_internal_threads_alive(void);
/* The agent's threads created from now on wait (1 s at most) for thread
 * `tid` of this process to end before they run (thread.c). */
void ss_internal_threads_after(pid_t tid);

/* A library of the agent (gRPC) starts threads of its own, lazily, that
 * its module registers only a moment later: until then a young thread with
 * the agent's signal mask may be one of them (the native sampler leaves
 * those out). Said by the module once; asked by the sampler. */
void ss_internal_threads_lazy(void);
bool ss_internal_threads_are_lazy(void);

pid_t ss_gettid(void); /* async-signal-safe */
/* The loader's mark for the agent's threads (ss_core_host.agent_thread_set):
 * set first on each thread started here, and around the creation. */
void ss_internal_threads_mark_with(bool (*mark)(bool on));
/* Sets the mark on the calling thread (a thread made otherwise than by
 * ss_thread_start: the JVMTI sampler); returns what was. */
bool ss_internal_thread_mark(bool on);

#pragma GCC visibility pop

/* The core's own (hidden from modules). */
void ss_internal_threads_reset(void);
/* A process of the agent's (the gRPC helper) ends: its pidfd is kept here
 * (and closed once it is reaped), so that ss_internal_threads_alive counts
 * it until init reaps it. */
void ss_internal_process_ending(int pidfd);

/* On an agent thread: if it runs real-time (the host made it so), every
 * registered agent thread goes back to SCHED_OTHER; true if it did. */
bool ss_internal_threads_keep_normal(void);
/* thread_creds.c, on the calling thread: do the agent's threads have
 * exactly its credentials (ids, groups, capabilities, no_new_privs,
 * seccomp)? Does one of them hold a capability it does not? */
bool ss_creds_same_as_caller(void);
bool ss_creds_exceed_caller(void);

#endif /* SS_AGENT_THREAD_H */
