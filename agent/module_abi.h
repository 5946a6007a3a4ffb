/*
 * agent/module_abi.h: what a module (libstackshot-<name>.so, opened with
 * dlopen by core/module_dl.c) may use of the core. A module's
 * sources include this header and no other of agent/.
 *
 * The core exports (loader/core.map: ss_*) exactly the functions whose
 * headers below declare them with default visibility; every other
 * function of the core is hidden. The core is opened RTLD_LOCAL: the host
 * never sees these, only the core's own modules, which link against it.
 *
 * SS_MODULE_ABI is the version of this interface. The core and its
 * modules are built and installed together; a change that breaks a module
 * built against an older core (a field moved, a function's meaning
 * changed) increments it, and the entry symbol a module exports carries
 * it (ss_module_<name>_entry for 1, ss_module_<name>_entry_v<N> after),
 * the way ss_core_entry_v1 versions the loader's interface.
 */
#ifndef SS_AGENT_MODULE_ABI_H
#define SS_AGENT_MODULE_ABI_H

#define SS_MODULE_ABI 1

#include "agent/buf.h"            /* ss_buf */
#include "agent/config.h"         /* ss_config and the typed readers of keys */
#include "agent/exporter.h"       /* ss_exporter_ops: what an exporter module returns */
#include "agent/exporter_stats.h" /* the counters an exporter keeps */
#include "agent/grow.h"           /* ss_grow: header-only, no exported symbol */
#include "agent/kept_fd.h"        /* descriptors the agent keeps, checked before use */
#include "agent/log.h"            /* ss_log and its levels */
#include "agent/mem.h"            /* the account of memory queued */
#include "agent/round.h"          /* the round and its samples and frames */
#include "agent/round_loss.h"     /* rounds lost after they were consumed */
#include "agent/thread.h"         /* the agent's threads, internal threads */
#include "agent/time.h"           /* clocks, waits, shutdown deadlines */
#include "agent/version.h"        /* SS_NAME, SS_VERSION */
/* The headers of a layer above agent/ that the ABI gathers: the process
 * as /proc shows it (ss_process, ss_proc_list_tids, ss_proc_sigblk). */
#include "proc/process.h"
#include "proc/threads.h"

#endif /* SS_AGENT_MODULE_ABI_H */
