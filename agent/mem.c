/* mem.c: one account for everything the agent holds in queues.
 *
 * The limit is advisory for the accounting itself (charging never fails);
 * the queues consult ss_mem_used() against ss_mem_limit() and drop their
 * oldest data when it is exceeded. */
#include "agent_internal.h"

static _Atomic size_t mem_used;
static _Atomic size_t mem_limit = 64u << 20;

static _Atomic size_t mem_peak; /* the most ever charged at once */

void ss_mem_charge(size_t n) {
    size_t now = atomic_fetch_add(&mem_used, n) + n;
    size_t peak = atomic_load(&mem_peak);
    while (now > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, now))
        ;
}
size_t ss_mem_peak(void) { return atomic_load(&mem_peak); }
void ss_mem_release(size_t n) { atomic_fetch_sub(&mem_used, n); }
size_t ss_mem_used(void) { return atomic_load(&mem_used); }
size_t ss_mem_limit(void) { return atomic_load(&mem_limit); }
void ss_mem_set_limit(size_t limit) { atomic_store(&mem_limit, limit); }

/* A forked child starts with nothing queued. */
void ss_mem_reset(void) {
    atomic_store(&mem_used, 0);
    atomic_store(&mem_peak, 0);
}
