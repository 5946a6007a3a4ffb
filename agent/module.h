/*
 * agent/module.h: opening and closing the core's modules,
 * libstackshot-<name>.so (docs/architecture.md). Declared here, below
 * every folder that opens one (exporters/ for gRPC and libcurl, samplers/
 * for libdw); defined by the composition root, once per build of the core:
 * core/module_dl.c (libstackshot-core.so: dlopen next to the core) and the
 * generated modules_linked.c (the static core of tests and benchmarks,
 * every module linked in).
 */
#ifndef SS_AGENT_MODULE_H
#define SS_AGENT_MODULE_H

#include <stdbool.h>
#include <stddef.h>

/* The module's table (what its ss_module_<name>_entry returns), opening it
 * if it is not open; NULL and *why on failure. */
const void *ss_module_open(const char *name, char *why, size_t why_len);

/* Close a module opened by ss_module_open, for a caller that knows none of
 * its code or memory is in use any more: its mappings and those of the
 * libraries only it needed go away. A module is opened once per
 * ss_module_open and closed once per ss_module_close; the static core
 * closes nothing. True when the module's code is gone from the process. */
bool ss_module_close(const char *name);

#endif /* SS_AGENT_MODULE_H */
