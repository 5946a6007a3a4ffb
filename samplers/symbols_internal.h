/* symbols_internal.h: what tests and benchmarks may see of the symbol
 * resolver beyond ss_samplers.h (private to samplers/, tests, bench). */
#ifndef SS_SYMBOLS_INTERNAL_H
#define SS_SYMBOLS_INTERNAL_H

#include "agent/round.h"
#include "samplers/ss_samplers.h"

#include <sys/types.h>

/* Most frames one address resolves to (inline chain + the function). */
#define SS_SYMBOLS_MAX_INLINE 8

/* Default cache size: addresses remembered before the cache is reset. */
#define SS_SYMBOLS_CACHE_ENTRIES 4096

typedef struct ss_symbols_counters {
    uint64_t hits;       /* served from the address cache (or a span) */
    uint64_t span_hits;  /* of those, an address new to the cache in a known run of code */
    uint64_t misses;     /* resolved with libdw */
    uint64_t resets;     /* cache full: emptied and started again */
    uint64_t flushes;    /* cache emptied because modules were loaded/unloaded */
    uint64_t refreshes;  /* module list read again from /proc/self/maps */
    uint64_t entries;    /* addresses in the cache now */
    uint64_t dwarf_modules; /* modules whose DWARF libdw has read */
    uint64_t trimmed;       /* bytes of compressed DWARF dropped from the mappings */
    uint64_t releases;      /* libdw's tables dropped after no miss for a while */
    uint64_t reloads;       /* a miss after a release opened modules again */
} ss_symbols_counters;

/* A resolver whose cache holds at most `entries` addresses (rounded up to
 * a power of two, at least 16). NULL when out of memory. */
ss_symbols *ss_symbols_create_sized(size_t entries);

void ss_symbols_counters_get(const ss_symbols *s, ss_symbols_counters *out);

/* How long no lookup may miss before libdw's tables are released (0:
 * never); doubled by each reload. Default 5 s. */
void ss_symbols_set_idle(ss_symbols *s, uint64_t idle_ns);

/* Runs of code that resolve alike (symbols.c, "spans"): on by default;
 * off, every new address is resolved by libdw (a reference for tests). */
void ss_symbols_set_spans(ss_symbols *s, bool on);

/* ---- symbols_maps.c: /proc/self/maps to libdwfl, by load ------------- */

/* A second mapping of a file far from its load (node's remapped builtins):
 * an address a in [start, end) is the file's a + delta in the load. */
typedef struct ss_remap {
    uint64_t start, end;
    uint64_t delta;
    char *path;
    const ss_mapping *map; /* interned on first use */
} ss_remap;

typedef struct Dwfl Dwfl;
/* Report every load of /proc/self/maps to dwfl (between dwfl_report_begin
 * and dwfl_report_end) and return the remaps (free with ss_remaps_free).
 * 0 or -errno. */
int ss_maps_report(Dwfl *dwfl, ss_remap **remaps, size_t *n);
void ss_remaps_free(ss_remap *r, size_t n);

/* ---- symbols_debuginfo.c: separate debuginfo, local files only ------ */

/* libdwfl's find_debuginfo callback: the build-id tree under
 * /usr/lib/debug, then .gnu_debuglink next to the file, in its .debug/
 * and under /usr/lib/debug (build id or CRC checked); dwz altlinks the
 * same way. Never debuginfod. An open fd and *name (malloc'd), or -1. */
typedef struct Dwfl_Module Dwfl_Module;
int ss_find_debuginfo(Dwfl_Module *mod, void **user, const char *modname, uint64_t base,
                      const char *file, const char *link, uint32_t crc, char **name);

/* Once libdw has read a module's DWARF: drop the pages of its compressed
 * sections from the mapping of the file (libdw works on its decompressed
 * copy). Bytes dropped. */
size_t ss_debuginfo_trim(Dwfl_Module *mod);

/* ---- symbols_perfmap.c: JIT code named in /tmp/perf-<pid>.map --------- */

typedef struct ss_perfmap ss_perfmap;
ss_perfmap *ss_perfmap_create(pid_t pid);
void ss_perfmap_destroy(ss_perfmap *m);
/* Read what was appended since last time (at most every 200 ms): true
 * when names were added (cached unknown addresses may now have one). */
bool ss_perfmap_refresh(ss_perfmap *m, uint64_t now_ns);
/* The name of the code containing addr, or NULL. */
const char *ss_perfmap_lookup(const ss_perfmap *m, uint64_t addr);
size_t ss_perfmap_entries(const ss_perfmap *m);

#endif /* SS_SYMBOLS_INTERNAL_H */
