/* fuzz_config_common.h: the invariants of a loaded ss_config, whatever the
 * input was: every number within the range its reader enforces, strings
 * terminated inside their arrays, loading twice gives the same result. */
#ifndef FUZZ_CONFIG_COMMON_H
#define FUZZ_CONFIG_COMMON_H

#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/log.h"
#include "tests/hardening/fuzz/fuzz_check.h"

#include <signal.h>

/* The keys ss_config_load reads (agent/config.c). */
static const char *const fuzz_core_keys[] = {
    "STACKSHOT_LOG_LEVEL", "SPLUNK_PROFILER_ENABLED", "SPLUNK_PROFILER_CALL_STACK_INTERVAL",
    "SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS", "STACKSHOT_OUTPUT_DIR", "STACKSHOT_EXPORTERS",
    "STACKSHOT_MAX_DEPTH", "STACKSHOT_MAX_MEMORY", "STACKSHOT_SIGNAL",
    "STACKSHOT_SHUTDOWN_TIMEOUT", "STACKSHOT_SIGNAL_TIMEOUT",
};
#define FUZZ_N_CORE_KEYS (sizeof fuzz_core_keys / sizeof fuzz_core_keys[0])

static inline void fuzz_check_config(const ss_config *c) {
    CHECK(c->interval_ms >= 5 && c->interval_ms <= 3600000);
    CHECK(c->max_depth >= 1 && c->max_depth <= 65536);
    CHECK(c->max_memory >= (1ull << 20) && c->max_memory <= (16ull << 30));
    CHECK((int)c->log_level >= SS_LOG_OFF && c->log_level <= SS_LOG_DEBUG);
    CHECK(c->signal >= 1 && c->signal <= SIGRTMAX);
    CHECK(c->signal != SIGKILL && c->signal != SIGSTOP && c->signal != SIGSEGV);
    CHECK(c->shutdown_ms <= 60000);
    CHECK(c->answer_ms >= 1 && c->answer_ms <= 10000);
    CHECK(memchr(c->output_dir, '\0', sizeof c->output_dir) != NULL);
    CHECK(c->output_dir[0] != '\0');
    uint32_t known = 0;
    for (int i = 0; ss_exporter_table[i].name; i++)
        known |= 1u << i;
    CHECK((c->exporters & ~known) == 0);
}

/* Load twice: same bytes (ss_config_load zeroes the struct first). */
static inline void fuzz_load_and_check(void) {
    static ss_config a, b;
    ss_config_load(&a);
    ss_config_load(&b);
    fuzz_check_config(&a);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

#endif
