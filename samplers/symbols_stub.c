/* symbols_stub.c: TEMPORARY stand-in for symbols.c (the libdw resolver,
 * written by another engineer) so the native sampler links meanwhile.
 * Names come from dladdr (dynamic symbols only), no files or lines.
 * Delete this file when samplers/symbols.c lands. */
#include "ss_samplers.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

struct ss_symbols {
    uint64_t hits, misses;
};

ss_symbols *ss_symbols_create(void) { return calloc(1, sizeof(ss_symbols)); }
void ss_symbols_destroy(ss_symbols *s) { free(s); }

int ss_symbols_resolve(ss_symbols *s, uint64_t addr, bool return_address,
                       ss_frame *out, int max) {
    if (max < 1)
        return 0;
    s->misses++;
    Dl_info di;
    memset(&di, 0, sizeof di);
    uint64_t a = return_address ? addr - 1 : addr;
    const char *name = "unknown", *file = "unknown";
    if (dladdr((void *)(uintptr_t)a, &di)) {
        if (di.dli_sname)
            name = di.dli_sname;
        if (di.dli_fname) {
            const char *b = strrchr(di.dli_fname, '/');
            file = b ? b + 1 : di.dli_fname;
        }
    }
    memset(out, 0, sizeof *out);
    out->fn = ss_funcinfo_intern("global", name, file, NULL, SS_FRAME_NATIVE);
    out->addr = addr;
    return 1;
}

void ss_symbols_stats(const ss_symbols *s, uint64_t *hits, uint64_t *misses) {
    *hits = s->hits;
    *misses = s->misses;
}
