/* preload.c: starting by itself in a native process (LD_PRELOAD).
 *
 * The library the host loads is the loader (loader/loader.c): it has no
 * dependency but libc and loads this core only when the agent is enabled
 * (or asked for by -agentpath / stackshot_start). Once the core is loaded
 * and its allocator handed over, the loader calls ss_preload_autostart,
 * which does what the preload constructor did before the split: nothing
 * unless SPLUNK_PROFILER_ENABLED is true, and nothing in a JVM, where the
 * agent starts from Agent_OnLoad / Agent_OnAttach instead (see
 * ss_process_is_jvm).
 *
 * The destructor stays here, in the core: the dynamic linker finalizes an
 * object before its dependencies, so the agent flushes (within the
 * shutdown deadline) while gRPC and the other libraries it uses are still
 * alive. */
#include "agent/config.h"
#include "agent/enabled.h"
#include "agent/lifecycle.h"
#include "samplers/ss_samplers.h"
#include "loader/ss_core_api.h"
#include "include/stackshot.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

static bool enabled_in_env(void) {
    const char *v = ss_env("SPLUNK_PROFILER_ENABLED");
    return v && *v; /* the full parse (and its error line) is in ss_config_load */
}

void ss_preload_autostart(void) {
    if (!enabled_in_env() || ss_process_is_jvm())
        return;
    ss_config cfg;
    ss_config_load(&cfg);
    if (!cfg.enabled)
        return;
    cfg.start_deferred = true; /* the loader waited one interval before opening us */
    ss_agent_start(&ss_native_source, &cfg);
}

__attribute__((destructor)) static void ss_preload_stop(void) { ss_agent_stop(); }

int stackshot_start(void) {
    if (ss_agent_running())
        return 0;
    ss_config cfg;
    ss_config_load(&cfg);
    if (cfg.nothing_to_run)
        return -EINVAL; /* said in its lines */
    cfg.enabled = true;
    return ss_agent_start(&ss_native_source, &cfg);
}
