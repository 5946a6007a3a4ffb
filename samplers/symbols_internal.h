/* symbols_internal.h: what tests and benchmarks may see of the symbol
 * resolver beyond ss_samplers.h (private to samplers/, tests, bench). */
#ifndef SS_SYMBOLS_INTERNAL_H
#define SS_SYMBOLS_INTERNAL_H

#include "ss_samplers.h"

/* Most frames one address resolves to (inline chain + the function). */
#define SS_SYMBOLS_MAX_INLINE 8

/* Default cache size: addresses remembered before the cache is reset. */
#define SS_SYMBOLS_CACHE_ENTRIES 4096

typedef struct ss_symbols_counters {
    uint64_t hits;       /* served from the address cache */
    uint64_t misses;     /* resolved with libdw */
    uint64_t resets;     /* cache full: emptied and started again */
    uint64_t flushes;    /* cache emptied because modules were loaded/unloaded */
    uint64_t refreshes;  /* module list read again from /proc/self/maps */
    uint64_t entries;    /* addresses in the cache now */
} ss_symbols_counters;

/* A resolver whose cache holds at most `entries` addresses (rounded up to
 * a power of two, at least 16). NULL when out of memory. */
ss_symbols *ss_symbols_create_sized(size_t entries);

void ss_symbols_counters_get(const ss_symbols *s, ss_symbols_counters *out);

#endif /* SS_SYMBOLS_INTERNAL_H */
