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
    /* In a forked child, before start() is called again: forget the
     * parent's threads and state without joining or locking. May be NULL. */
    void (*after_fork_child)(void);
} ss_source_ops;

#endif /* SS_AGENT_SOURCE_H */
