/*
 * agent/config.h: configuration: the core keys (ss_config) and typed, table-driven
 * readers of environment keys, the JVMTI option string taking precedence.
 */
#ifndef SS_AGENT_CONFIG_H
#define SS_AGENT_CONFIG_H

#include "agent/log.h"

#include <stdbool.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* The core keys, parsed once at start (ss_config_load). Exporters read
 * their own keys through the typed readers below. */
typedef struct ss_config {
    bool enabled;              /* SPLUNK_PROFILER_ENABLED */
    uint32_t interval_ms;      /* SPLUNK_PROFILER_CALL_STACK_INTERVAL */
    bool include_internal;     /* SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS */
    char output_dir[1024];     /* STACKSHOT_OUTPUT_DIR */
    uint32_t exporters;        /* STACKSHOT_EXPORTERS: bit i = ss_exporter_table[i] */
    uint32_t max_depth;        /* STACKSHOT_MAX_DEPTH */
    uint64_t max_memory;       /* STACKSHOT_MAX_MEMORY, bytes */
    ss_log_level log_level;    /* STACKSHOT_LOG_LEVEL */
    int signal;                /* STACKSHOT_SIGNAL */
    uint32_t shutdown_ms;      /* STACKSHOT_SHUTDOWN_TIMEOUT */
    uint32_t answer_ms;        /* STACKSHOT_SIGNAL_TIMEOUT */
    /* Not a key: the start was already put off by one interval (the
     * loader's start thread waits that long), so the first round is
     * taken at once rather than one more interval later. */
    bool start_deferred;
    /* Not a key: every exporter named was a mistake (an unknown name, an
     * unusable destination), each said in one line; the agent does not
     * start (enabled is false), not even by stackshot_start(). */
    bool nothing_to_run;
} ss_config;

/* Install the JVMTI option string ("key=value,key=value"), which takes
 * precedence over the environment. Unknown keys and malformed pairs print
 * one line each. Returns the number of problems found. NULL clears. */
int ss_config_set_options(const char *options);

/* The value of KEY: from the option string if set there, else from the
 * environment, else NULL. The pointer stays valid until the options change. */
const char *ss_config_raw(const char *key);
/* An environment variable: from the environment saved at load by the
 * loader (ss_env_set_snapshot, NULL-terminated "KEY=value" strings), else
 * getenv. */
const char *ss_env(const char *key);
void ss_env_set_snapshot(char *const *env);

/* Typed readers. Each prints one line for a bad value
 * ("stackshot: KEY=value: why; using <default>") and returns the default. */
bool ss_config_bool(const char *key, bool def);
int64_t ss_config_int(const char *key, int64_t def, int64_t min, int64_t max);
uint64_t ss_config_size(const char *key, uint64_t def, uint64_t min, uint64_t max);
const char *ss_config_str(const char *key, const char *def);

/* Report a bad value in the one standard shape. `fallback` says what the
 * agent does instead ("using 1000", "exporter disabled"). */
void ss_config_bad(const char *key, const char *value, const char *why,
                   const char *fallback);

/* Parse all core keys into *cfg. Never fails: bad values fall back. */
void ss_config_load(ss_config *cfg);

/* Is `key` one this agent knows (for the option string check)? */
bool ss_config_known_key(const char *key);


/* Parse a signal spec ("SIGPROF", "PROF", "SIGRTMIN+5", "SIGRTMAX-2", "34").
 * Returns the signal number or -1. */
int ss_parse_signal(const char *s);

#pragma GCC visibility pop

/* The core's own (hidden from modules). */
/* That environment whole (the snapshot, else environ): what a helper
 * process the agent starts is given. */
char *const *ss_env_all(void);

#endif /* SS_AGENT_CONFIG_H */
