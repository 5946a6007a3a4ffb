/*
 * agent/lifecycle.h: the agent's start and stop. Declared here, below every
 * layer that asks (the JVMTI sampler asks whether the agent runs);
 * defined by the composition root, core/lifecycle.c.
 */
#ifndef SS_AGENT_LIFECYCLE_H
#define SS_AGENT_LIFECYCLE_H

#include "agent/config.h"
#include "agent/source.h"

#include <stdbool.h>
#include <stdint.h>


/* Start the agent with a source: load config (already loaded by the
 * caller when cfg is not NULL), start exporters, start the source. */
int ss_agent_start(const ss_source_ops *source, const ss_config *cfg);
/* Stop the source, flush exporters within the shutdown deadline. */
void ss_agent_stop(void);
bool ss_agent_running(void);
/* Around an exec by this process (loader/loader_exec.c): begin stops the
 * agent as at exit (flushing within the shutdown deadline) and returns
 * whether it was running here; after a failed exec, ss_agent_exec_failed
 * starts it again. */
bool ss_agent_exec_begin(void);
void ss_agent_exec_failed(void);
/* In a child with only the calling thread (fork: restart = true, the
 * agent starts again after a moment; clone: false, nothing starts). Run
 * by the core's own at-fork handler, or by the loader's when it has one
 * (ss_agent_set_loader_forks: the core then registers none).
 * libdw_inherited: what libdw and libelf allocated in the parent came
 * with the fork (false: a parent that forks often, core/core_heap.c). */
void ss_agent_fork_child(bool restart, bool libdw_inherited);
void ss_agent_set_loader_forks(bool yes);
/* Running, or a forked child's restart is due. */
bool ss_agent_active(void);

#endif /* SS_AGENT_LIFECYCLE_H */
