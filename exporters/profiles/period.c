/* period.c: export periods over an aggregate (period.h). */
#include "agent/config.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/profiles/period.h"

#include <errno.h>
#include <string.h>

int ss_period_init(ss_period *p, const ss_config *cfg, const char *who,
                   ss_exporter_stats *stats, ss_period_flush_fn flush, void *owner) {
    memset(p, 0, sizeof *p);
    int64_t secs = ss_config_int("STACKSHOT_PROFILES_PERIOD", 60, 1, 86400);
    p->period_ns = (uint64_t)secs * 1000000000ull;
    size_t limit = cfg && cfg->max_memory ? (size_t)(cfg->max_memory / 4) : (size_t)64 << 20;
    if (limit < ((size_t)1 << 20))
        limit = (size_t)1 << 20;
    p->agg = ss_agg_create(limit);
    if (!p->agg)
        return -ENOMEM;
    p->flush = flush;
    p->owner = owner;
    p->stats = stats;
    p->who = who;
    return 0;
}

void ss_period_flush(ss_period *p) {
    if (!ss_agg_empty(p->agg) || p->agg->rounds)
        p->flush(p->owner, p->agg);
    ss_agg_reset(p->agg);
    p->first_mono_ns = 0;
}

void ss_period_consume(ss_period *p, const ss_round *r) {
    ss_agg *a = p->agg;
    if (a->rounds && r->time_ns >= a->start_ns + p->period_ns)
        ss_period_flush(p);
    int rc = ss_agg_add_round(a, r);
    if (rc == -ENOSPC) {
        /* Full before the period ended: ship what we have, start afresh. */
        if (!p->warned_full) {
            ss_warn("%s: profile period reached its memory limit (%zu bytes) after %llu rounds;"
                    " exporting early",
                    p->who, a->limit, (unsigned long long)a->rounds);
            p->warned_full = true;
        }
        ss_period_flush(p);
        rc = ss_agg_add_round(a, r);
    }
    if (rc != 0) {
        ss_warn("%s: out of memory aggregating round %llu; the period's data is dropped",
                p->who, (unsigned long long)r->seq);
        atomic_fetch_add(&p->stats->records_dropped, a->n_obs + r->n_threads);
        ss_agg_reset(a);
        p->first_mono_ns = 0;
        return;
    }
    if (!p->first_mono_ns)
        p->first_mono_ns = ss_mono_ns();
}

void ss_period_tick(ss_period *p, uint64_t mono_now_ns) {
    /* Rounds stopped coming (the source paused): do not sit on data. */
    if (p->first_mono_ns && mono_now_ns >= p->first_mono_ns + p->period_ns + p->period_ns / 4)
        ss_period_flush(p);
}

void ss_period_free(ss_period *p) {
    ss_agg_destroy(p->agg);
    p->agg = NULL;
}
