/*
 * agent/ms_keys.h: the keys in milliseconds that both halves read: the
 * loader (libstackshot.so, before the core is opened: when to start, how
 * long the host's exit waits) and the configuration (agent/config.c). One
 * parser and one range each, so the two never disagree on a value.
 * agent/ms_keys.c is compiled into the loader too: libc only, no lines
 * (a bad value is the configuration's to report, at start).
 */
#ifndef SS_AGENT_MS_KEYS_H
#define SS_AGENT_MS_KEYS_H

#include <stdint.h>

#define SS_INTERVAL_KEY "SPLUNK_PROFILER_CALL_STACK_INTERVAL"
#define SS_INTERVAL_DEFAULT_MS 1000u
#define SS_INTERVAL_MIN_MS 5u
#define SS_INTERVAL_MAX_MS 3600000u

#define SS_SHUTDOWN_KEY "STACKSHOT_SHUTDOWN_TIMEOUT"
#define SS_SHUTDOWN_DEFAULT_MS 2000u
#define SS_SHUTDOWN_MIN_MS 0u
#define SS_SHUTDOWN_MAX_MS 60000u

/* A decimal count of milliseconds (spaces around it allowed) within
 * [min, max] into *ms: 0; -ENOENT when v is NULL or blank, -EINVAL when
 * it is not an integer, -ERANGE when it is outside the range (*ms is then
 * left alone). */
int ss_ms_parse(const char *v, uint32_t min, uint32_t max, uint32_t *ms);

#endif /* SS_AGENT_MS_KEYS_H */
