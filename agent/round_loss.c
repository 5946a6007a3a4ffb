/* round_loss.c: rounds an exporter lost after consuming them, each counted
 * once (agent/round_loss.h). */
#include "agent/exporter_stats.h"
#include "agent/round_loss.h"

#include <string.h>

void ss_round_loss_init(ss_round_loss *l) {
    pthread_mutex_init(&l->mu, NULL);
    l->n = 0;
}

void ss_round_loss_destroy(ss_round_loss *l) { pthread_mutex_destroy(&l->mu); }

/* Rounds of lo..hi that span i covers. */
static uint64_t overlap(const ss_round_loss *l, uint32_t i, uint64_t lo, uint64_t hi) {
    uint64_t a = l->span[i].lo > lo ? l->span[i].lo : lo;
    uint64_t b = l->span[i].hi < hi ? l->span[i].hi : hi;
    return a <= b ? b - a + 1 : 0;
}

/* Insert lo..hi, merging every span it overlaps or touches. */
static void insert(ss_round_loss *l, uint64_t lo, uint64_t hi) {
    uint32_t i = 0;
    while (i < l->n && l->span[i].hi + 1 < lo)
        i++;
    uint32_t j = i; /* spans i..j-1 merge with lo..hi */
    while (j < l->n && l->span[j].lo <= hi + 1) {
        if (l->span[j].lo < lo)
            lo = l->span[j].lo;
        if (l->span[j].hi > hi)
            hi = l->span[j].hi;
        j++;
    }
    if (j == i) { /* nothing merged: make room at i */
        if (l->n == SS_ROUND_LOSS_SPANS) {
            /* forget the oldest span: no request still holds rounds that
             * old once sixteen later runs were lost */
            if (i == 0)
                return; /* older than everything remembered: counted, not kept */
            memmove(&l->span[0], &l->span[1], (size_t)(i - 1) * sizeof l->span[0]);
            i--;
        } else {
            memmove(&l->span[i + 1], &l->span[i], (size_t)(l->n - i) * sizeof l->span[0]);
            l->n++;
        }
    } else if (j > i + 1) { /* several merged into one */
        memmove(&l->span[i + 1], &l->span[j], (size_t)(l->n - j) * sizeof l->span[0]);
        l->n -= j - i - 1;
    }
    l->span[i].lo = lo;
    l->span[i].hi = hi;
}

uint64_t ss_round_loss_mark(ss_round_loss *l, ss_exporter_stats *stats, uint64_t lo, uint64_t hi) {
    if (lo == 0 || lo > hi)
        return 0;
    pthread_mutex_lock(&l->mu);
    uint64_t known = 0;
    for (uint32_t i = 0; i < l->n; i++)
        known += overlap(l, i, lo, hi);
    uint64_t fresh = hi - lo + 1 - known;
    insert(l, lo, hi);
    pthread_mutex_unlock(&l->mu);
    if (fresh)
        atomic_fetch_add(&stats->rounds_lost, fresh);
    return fresh;
}
