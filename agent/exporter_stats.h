/*
 * agent/exporter_stats.h: the counters every exporter keeps.
 */
#ifndef SS_AGENT_EXPORTER_STATS_H
#define SS_AGENT_EXPORTER_STATS_H

#include <stdatomic.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* Counters every exporter keeps; summed up at exit in the one accounting
 * line (info when something was lost, else debug) and printed on every
 * round at debug level. */
typedef struct ss_exporter_stats {
    _Atomic uint64_t rounds_in;       /* rounds handed to the exporter */
    _Atomic uint64_t rounds_dropped;  /* dropped from its queue (memory cap) */
    _Atomic uint64_t rounds_lost;     /* handed to consume, but their data never reached
                                         the backend (reported as dropped, not delivered) */
    _Atomic uint64_t records_exported;/* records the backend accepted */
    _Atomic uint64_t records_dropped; /* records given up (non-retryable, too big, shutdown) */
    _Atomic uint64_t records_rejected;/* rejected by the backend (partial success) */
    _Atomic uint64_t retries;         /* export attempts retried */
    _Atomic uint64_t failures;        /* failed attempts */
    _Atomic uint64_t bytes_sent;
    /* What the exporter says it consumed and took (set at its close, for
     * the exit's accounting line; 0 and 0: consumed = delivered, records
     * taken = exported + dropped + rejected). */
    _Atomic uint64_t rounds_consumed;
    _Atomic uint64_t records_taken;
} ss_exporter_stats;

#pragma GCC visibility pop

#endif /* SS_AGENT_EXPORTER_STATS_H */
