/* enabled.c: is the agent turned on? One rule, compiled into the core and
 * into the loader (libc only), which decides from it whether to open the
 * core at all.
 *
 * SPLUNK_PROFILER_ENABLED turns the agent on with `true` (any case), as
 * the documentation says, and nothing else: `false`, blank or unset is
 * off without a word; any other value (yes, 1, on, a typo) is off with one
 * line, since guessing "on" would profile a process nobody asked to.
 *
 * OTEL_SDK_DISABLED=true (the OpenTelemetry specification's switch for
 * every SDK signal: only `true`, any case, counts) turns it off even then:
 * in OpenTelemetry's SDKs the profiler rides on the SDK, which that switch
 * disables, so a process that says "no OpenTelemetry here" gets none. */
#include "agent/enabled.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* v without the blanks around it, in out (cut at n - 1 bytes). */
static const char *trimmed(const char *v, char *out, size_t n) {
    while (*v && isspace((unsigned char)*v))
        v++;
    size_t len = strlen(v);
    while (len && isspace((unsigned char)v[len - 1]))
        len--;
    if (len >= n)
        len = n - 1;
    memcpy(out, v, len);
    out[len] = '\0';
    return out;
}

ss_enabled ss_enabled_decide(const char *enabled, const char *sdk_disabled, char *why,
                             size_t why_len) {
    char v[64];
    if (why_len)
        why[0] = '\0';
    if (!enabled || !*trimmed(enabled, v, sizeof v) || strcasecmp(v, "false") == 0)
        return SS_ENABLED_OFF;
    if (strcasecmp(v, "true") != 0) {
        snprintf(why, why_len,
                 "SPLUNK_PROFILER_ENABLED=%.40s: only true turns the agent on; "
                 "the agent stays off", v);
        return SS_ENABLED_BAD_VALUE;
    }
    char s[64];
    if (sdk_disabled && strcasecmp(trimmed(sdk_disabled, s, sizeof s), "true") == 0) {
        snprintf(why, why_len,
                 "OTEL_SDK_DISABLED=true: OpenTelemetry is disabled in this process, "
                 "which turns the agent off too (SPLUNK_PROFILER_ENABLED=true is overridden)");
        return SS_ENABLED_SDK_DISABLED;
    }
    return SS_ENABLED_ON;
}
