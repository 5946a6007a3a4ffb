/* preload.c: starting by itself in a native process (LD_PRELOAD).
 *
 * The constructor runs when the library is loaded. It does nothing at all
 * (no thread, no signal handler, no allocation) unless
 * SPLUNK_PROFILER_ENABLED is true, and nothing in a JVM, where the agent
 * starts from Agent_OnLoad / Agent_OnAttach instead (see ss_process_is_jvm).
 * The destructor runs at exit and flushes within the shutdown deadline. */
#include "agent_internal.h"
#include "../samplers/ss_samplers.h"
#include "stackshot.h"

#include <stdlib.h>
#include <strings.h>

static bool enabled_in_env(void) {
    const char *v = getenv("SPLUNK_PROFILER_ENABLED");
    return v && *v; /* the full parse (and its error line) is in ss_config_load */
}

__attribute__((constructor)) static void ss_preload_start(void) {
    if (!enabled_in_env() || ss_process_is_jvm())
        return;
    ss_config cfg;
    ss_config_load(&cfg);
    if (!cfg.enabled)
        return;
    ss_agent_start(&ss_native_source, &cfg);
}

__attribute__((destructor)) static void ss_preload_stop(void) { ss_agent_stop(); }

int stackshot_start(void) {
    if (ss_agent_running())
        return 0;
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    return ss_agent_start(&ss_native_source, &cfg);
}
