/* ss_loader.h: what the loader's files share (loader.c, loader_start.c,
 * loader_exec.c, loader_ns.c, loader_ids.c, loader_seccomp.c,
 * loader_mlock.c, loader_short.c). */
#ifndef SS_LOADER_H
#define SS_LOADER_H

#include "loader/ss_core_api.h"

/* The core's entry table once loaded, else NULL. Never loads it. */
const ss_core_api *ss_loader_core(void);
/* The core, opened on first need; NULL if it cannot be (said once). */
const ss_core_api *ss_loader_load_core(void);
/* In a forked child: the loader's lock again; false when the fork came
 * while the core was being opened (this child then never opens it). */
bool ss_loader_after_fork_child(void);
/* The next definition of `name` after the loader (libc's), for the
 * wrappers; NULL with errno ENOSYS if there is none. Looked up on first
 * use: the constructor does nothing while the agent is disabled. */
void *ss_loader_next(const char *name);
/* CLOCK_MONOTONIC in ns (loader_start.c). */
uint64_t ss_loader_mono_ns(void);
/* One line of the loader's own on stderr, never blocking ("stackshot: "
 * prefixed; lost when stderr cannot take it now). */
void ss_loader_say(const char *msg);
/* loader_jvm.c: in a JVM's launcher, have the JVM load this library as its
 * JVMTI agent (-agentpath in JAVA_TOOL_OPTIONS), unless it already does. */
void ss_jvm_inject_agent(int argc, char **argv);
/* Is this process a JVM (agent/process_jvm.c, compiled in here too)? */
bool ss_process_is_jvm(void);

/* loader_start.c: the preloaded start, armed for when the first round is
 * due, and what calls that need a single-threaded process do around it. */
void ss_start_arm(int argc, char **argv);
/* Is a preloaded start for this process (not a JVM, not a sandboxed
 * Chromium helper)? What ss_start_arm checks first. */
bool ss_start_wanted(int argc, char **argv);
/* No start thread from here on (it is joined); a start under way ends
 * first. At exit, and before stackshot_start. */
void ss_start_disarm(void);
/* The agent leaves this process for good (loader_mlock.c): no start
 * thread is armed again, here or in a forked child. After
 * ss_start_quiesce. */
void ss_start_leave(void);
/* Armed (the start thread waits for the first round)? */
bool ss_start_armed(void);
/* The loader's at-fork child handler reaches the core (once installed). */
void ss_start_fork_handler(void);

enum { SS_QUIESCE_NONE = 0, SS_QUIESCE_ARMED, SS_QUIESCE_CORE };
/* Before a call the agent's threads must not meet as they are (kind: one
 * of SS_ASIDE_* of ss_core_api.h): the start thread is joined, or the
 * running agent steps aside (api->step_aside). Returns what to resume. */
int ss_start_quiesce(int kind);
/* After it (the call failed, or it does not end this image). */
void ss_start_resume(int token);
/* First thing in a child made by clone(): see loader_ns.c. */
void ss_start_child_of_clone(void);

/* loader_altstack.c: an alternate signal stack for every host thread,
 * and the registry of threads that can take the signal. */
/* From the constructor when the agent is enabled for this process: the
 * main thread gets its stack, pthread_create and sigaltstack start
 * registering. */
void ss_altstack_enable(void);
bool ss_altstack_enabled(void);
/* The registry's answer for tid (SS_SIGNAL_ROOM_*). */
int ss_altstack_room(pid_t tid);
/* The calling thread is never to be signalled again (it enters seccomp's
 * strict mode: loader_seccomp.c). */
void ss_altstack_never_signal_self(void);
/* The agent leaves the process (loader_mlock.c): threads created from now
 * on get no alternate stack, the kept ones are unmapped and so is the
 * calling thread's (if ours). come_back undoes the first two, for a call
 * that failed (the caller is left unregistered: not signalled). */
void ss_altstack_leave(void);
void ss_altstack_come_back(void);
/* In a forked child: the registry holds the calling thread only. */
void ss_altstack_after_fork_child(void);

/* loader_short.c: a host short of threads or processes gets the agent's. */
/* The calling thread is the agent's (the start thread, the core's
 * threads, and threads they create), or is creating one: its calls are
 * never the host's. set returns what was. */
bool ss_agent_thread_set(bool on);
bool ss_agent_thread_is(void);
/* A host call (`call`: its name) failed with EAGAIN: if the agent has a
 * thread here it leaves the process (said in one line). True while the
 * threads it had may still be ending: the caller makes its call again,
 * while it fails and ss_short_retry_wait (a millisecond's wait) says so;
 * *state starts at 0 for each call. */
bool ss_short_of_tasks(const char *call);
bool ss_short_retry_wait(int *state);
/* The same for libjvm's thread creation: the core's agent leaves */
bool ss_short_of_tasks_jvm(const char *call);

/* loader_jvm_threads.c: libjvm's thread creation goes through the loader
 * (its pthread_create slot), once the agent samples the JVM. False if no
 * slot was found. */
bool ss_jvm_watch_threads(void);

#endif /* SS_LOADER_H */
