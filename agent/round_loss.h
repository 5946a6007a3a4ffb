/*
 * agent/round_loss.h: rounds lost after an exporter consumed them, counted once each.
 */
#ifndef SS_AGENT_ROUND_LOSS_H
#define SS_AGENT_ROUND_LOSS_H

#include "agent/exporter_stats.h"

#include <pthread.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* Rounds lost after they were consumed, for exporters whose data leaves
 * in units that are not rounds (OTLP requests, Zorka traces): a request
 * or trace carries data of the consumed rounds lo..hi (numbered 1, 2, ...
 * in the order the exporter consumed them); when it is dropped or
 * rejected, each of those rounds is counted once in stats->rounds_lost
 * (the fan-out's exit equation then reports it dropped, not delivered).
 * A round counts as lost when any of its data was. Rounds already counted
 * are remembered as a few spans: losses come in runs, and a request and
 * the next one share at most a boundary round. */
#define SS_ROUND_LOSS_SPANS 16
typedef struct ss_round_loss {
    pthread_mutex_t mu; /* marks may come from a sender thread and the exporter's */
    uint32_t n;
    struct {
        uint64_t lo, hi;
    } span[SS_ROUND_LOSS_SPANS]; /* disjoint, not adjacent, ascending */
} ss_round_loss;

void ss_round_loss_init(ss_round_loss *l);
void ss_round_loss_destroy(ss_round_loss *l);
/* Count the rounds lo..hi not counted yet into stats->rounds_lost; returns
 * how many were new. lo == 0 or lo > hi: nothing. */
uint64_t ss_round_loss_mark(ss_round_loss *l, ss_exporter_stats *stats, uint64_t lo, uint64_t hi);

#pragma GCC visibility pop

#endif /* SS_AGENT_ROUND_LOSS_H */
