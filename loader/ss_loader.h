/* ss_loader.h: what the loader's files share (loader.c, loader_start.c,
 * loader_exec.c, loader_ns.c). */
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
/* Is this process a JVM (agent/process_jvm.c, compiled in here too)? */
bool ss_process_is_jvm(void);

/* loader_start.c: the preloaded start, armed for when the first round is
 * due, and what calls that need a single-threaded process do around it. */
void ss_start_arm(int argc, char **argv);
/* No start thread from here on (it is joined); a start under way ends
 * first. At exit, and before stackshot_start. */
void ss_start_disarm(void);
/* Armed (the start thread waits for the first round)? */
bool ss_start_armed(void);
/* The loader's at-fork child handler reaches the core (once installed). */
void ss_start_fork_handler(void);

enum { SS_QUIESCE_NONE = 0, SS_QUIESCE_ARMED, SS_QUIESCE_CORE };
/* Before a call that needs this process single-threaded (exec, unshare,
 * setns, clone of a new process): the start thread is joined, or the
 * running agent stops as at exit. Returns what to resume. */
int ss_start_quiesce(void);
/* After it (the call failed, or it does not end this image). */
void ss_start_resume(int token);
/* First thing in a child made by clone(): see loader_ns.c. */
void ss_start_child_of_clone(void);

#endif /* SS_LOADER_H */
