/* symbols_dw_module.c: libstackshot-dw.so, the module that links libdw and
 * libelf: its entry returns the table of their functions the resolver
 * calls (samplers/symbols_dw.h). Nothing else: the resolver's code stays
 * in the core, and the module is opened and closed by symbols_dw.c. */
#define SS_DW_DIRECT
#include "samplers/symbols_dw.h"

static const ss_dw_api table = {
#define SS_DW_FN(f) .f = f,
    SS_DW_FUNCTIONS
#undef SS_DW_FN
};

__attribute__((visibility("default"))) const void *ss_module_dw_entry(void) { return &table; }
