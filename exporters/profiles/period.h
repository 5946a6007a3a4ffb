/*
 * period.h: the export period shared by the exporters of this folder
 * (private to exporters/profiles/).
 *
 * Rounds accumulate in an aggregate; a period ends when a round arrives
 * STACKSHOT_PROFILES_PERIOD seconds (default 60) or more after the period's
 * first round, when no round arrived for a period (tick), when the
 * aggregate reaches its memory limit, and at close. The owner's flush
 * callback then encodes and ships the aggregate, which is reset after it.
 */
#ifndef SS_PROFILES_PERIOD_H
#define SS_PROFILES_PERIOD_H

#include "agent/config.h"
#include "agent/exporter_stats.h"
#include "agent/round.h"
#include "exporters/common/aggregate.h"

typedef struct ss_period ss_period;
typedef void (*ss_period_flush_fn)(void *owner, ss_agg *a);

typedef struct ss_period {
    ss_agg *agg;
    uint64_t period_ns;
    uint64_t first_mono_ns; /* when the period's first round arrived */
    ss_period_flush_fn flush;
    void *owner;
    ss_exporter_stats *stats;
    const char *who; /* exporter name, for messages */
    bool warned_full;
} ss_period;

/* Reads STACKSHOT_PROFILES_PERIOD; memory limit: a quarter of STACKSHOT_MAX_MEMORY.
 * 0 or -ENOMEM. */
int ss_period_init(ss_period *p, const ss_config *cfg, const char *who,
                   ss_exporter_stats *stats, ss_period_flush_fn flush, void *owner);
void ss_period_consume(ss_period *p, const ss_round *r);
void ss_period_tick(ss_period *p, uint64_t mono_now_ns);
/* Flush what is held (if anything). */
void ss_period_flush(ss_period *p);
void ss_period_free(ss_period *p);

#endif
