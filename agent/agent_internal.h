/* agent_internal.h: what the files of agent/ share among themselves only. */
#ifndef SS_AGENT_INTERNAL_H
#define SS_AGENT_INTERNAL_H

#include "ss_agent.h"

void ss_exporters_forget(void);
void ss_internal_threads_reset(void);
void ss_log_after_fork(void); /* a forked child: the log file's lock */
void ss_mem_reset(void);
size_t ss_mem_peak(void);           /* the most held after a hand-over */
size_t ss_mem_peak_transient(void); /* the most ever charged at once */
void ss_mem_note_settled(void);     /* after a hand-over made room */
/* thread_creds.c, on the calling thread: do the agent's threads have
 * exactly its credentials (ids, groups, capabilities, no_new_privs,
 * seccomp)? Does one of them hold a capability it does not? */
bool ss_creds_same_as_caller(void);
bool ss_creds_exceed_caller(void);

#endif
