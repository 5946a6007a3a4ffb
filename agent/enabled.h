/*
 * agent/enabled.h: is the agent turned on (agent/enabled.c, also compiled into
 * the loader, which includes only this header of agent/).
 */
#ifndef SS_AGENT_ENABLED_H
#define SS_AGENT_ENABLED_H

#include <stdbool.h>
#include <stddef.h>

/* Is the agent turned on (agent/enabled.c, also compiled into the
 * loader)? From the values of SPLUNK_PROFILER_ENABLED and OTEL_SDK_DISABLED
 * (NULL: unset). Anything but SS_ENABLED_ON and SS_ENABLED_OFF leaves the
 * agent off and puts the one line to say in why (without the "stackshot: "
 * prefix). */
typedef enum ss_enabled {
    SS_ENABLED_OFF = 0,      /* unset, blank or false: off, silently */
    SS_ENABLED_ON,           /* true (any case) */
    SS_ENABLED_BAD_VALUE,    /* anything else: off, one line */
    SS_ENABLED_SDK_DISABLED, /* true, but OTEL_SDK_DISABLED=true: off, one line */
} ss_enabled;
ss_enabled ss_enabled_decide(const char *enabled, const char *sdk_disabled, char *why,
                             size_t why_len);

/* Is this process a JVM that loads the agent through JVMTI (so the
 * preload constructor must stay out of its way)? */
bool ss_process_is_jvm(void);

#endif /* SS_AGENT_ENABLED_H */
