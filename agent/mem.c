/* mem.c: one account for everything the agent holds in queues.
 *
 * The limit is advisory for the accounting itself (charging never fails);
 * the queues consult ss_mem_used() against ss_mem_limit() and drop their
 * oldest data when it is exceeded. */
#include "agent/mem.h"

#include <stdatomic.h>

static _Atomic size_t mem_used;
static _Atomic size_t mem_limit = 64u << 20;

/* Peaks, for the exit report and the load tests. A new round is charged
 * before the queues make room for it, so the charged total may pass the
 * limit for a moment (by about one round): `transient` is the most ever
 * charged, `settled` the most held once a hand-over had made room. */
static _Atomic size_t peak_transient, peak_settled;

static void raise_to(_Atomic size_t *peak, size_t now) {
    size_t p = atomic_load(peak);
    while (now > p && !atomic_compare_exchange_weak(peak, &p, now))
        ;
}

void ss_mem_charge(size_t n) { raise_to(&peak_transient, atomic_fetch_add(&mem_used, n) + n); }
void ss_mem_note_settled(void) { raise_to(&peak_settled, atomic_load(&mem_used)); }
size_t ss_mem_peak(void) { return atomic_load(&peak_settled); }
size_t ss_mem_peak_transient(void) { return atomic_load(&peak_transient); }
void ss_mem_release(size_t n) { atomic_fetch_sub(&mem_used, n); }
size_t ss_mem_used(void) { return atomic_load(&mem_used); }
size_t ss_mem_limit(void) { return atomic_load(&mem_limit); }
void ss_mem_set_limit(size_t limit) { atomic_store(&mem_limit, limit); }

/* A forked child starts with nothing queued. */
void ss_mem_reset(void) {
    atomic_store(&mem_used, 0);
    atomic_store(&peak_transient, 0);
    atomic_store(&peak_settled, 0);
}
