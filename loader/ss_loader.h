/* ss_loader.h: what the loader's files share (loader.c, loader_exec.c). */
#ifndef SS_LOADER_H
#define SS_LOADER_H

#include "loader/ss_core_api.h"

/* The core's entry table once loaded, else NULL. Never loads it. */
const ss_core_api *ss_loader_core(void);

#endif /* SS_LOADER_H */
