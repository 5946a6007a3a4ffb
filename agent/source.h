/*
 * agent/source.h: a source of rounds, as the composition root (core/)
 * starts and stops it: the native sampler (samplers/) or the JVMTI
 * sampler (jvmti/). A source builds rounds (agent/round.h) and hands each
 * to the fan-out (ss_exporters_publish, agent/exporter.h).
 */
#ifndef SS_AGENT_SOURCE_H
#define SS_AGENT_SOURCE_H

#include "agent/config.h"

#include <stdint.h>

/* A source of rounds: the native sampler or the JVMTI sampler. */
typedef struct ss_source_ops {
    const char *name;
    int (*start)(const ss_config *cfg);
    void (*stop)(uint64_t deadline_ns);
    /* In a forked child, in the at-fork handler: what must not wait for
     * the child's own start (descriptors that name the parent's threads).
     * Without joining or locking. May be NULL. */
    void (*after_fork_child)(void);
    /* In a forked child, before start() is called again (on whichever
     * thread starts it, so not in the at-fork handler of a child that
     * exits or execs before its restart): forget the parent's threads and
     * state without joining or locking. main_pthread is the thread that
     * forked (pthread_self() there). May be NULL. */
    void (*fork_forget)(uint64_t main_pthread);
    /* In a forked child, in the at-fork handler, when the memory libdw and
     * libelf allocated in the parent did not come with the fork (a parent
     * that forks often: core/core_heap.c): what the source keeps of the
     * parent's must forget its libdw tables unread. May be NULL. */
    void (*fork_lost_libdw)(void);
} ss_source_ops;

#endif /* SS_AGENT_SOURCE_H */
