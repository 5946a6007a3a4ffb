/* fuzz_config_options.c: libFuzzer target, the JVMTI option string
 * ("key=value,key=value", agent/config.c ss_config_set_options). The input
 * is the option string. Invariants: no crash; every value the parser
 * hands out for a key is, in the input, right after that key and '=' (no
 * byte invented, none read outside the string); parsing the same string
 * again gives the same values; the core configuration loaded from it is
 * within its ranges. */
#include "agent/config.h"
#include "tests/hardening/fuzz/fuzz_config_common.h"

#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

static const char *const keys[] = {
    "SPLUNK_PROFILER_ENABLED", "STACKSHOT_EXPORTERS", "STACKSHOT_MAX_MEMORY",
    "STACKSHOT_SIGNAL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "STACKSHOT_LOG_LEVEL", "STACKSHOT_OUTPUT_DIR",
    "SPLUNK_PROFILER_CALL_STACK_INTERVAL", "STACKSHOT_MAX_DEPTH",
};
#define N_KEYS (sizeof keys / sizeof keys[0])

/* Is "key=value" in s, key compared without case? */
static int has_pair(const char *s, const char *key, const char *value) {
    size_t kl = strlen(key), vl = strlen(value);
    for (const char *p = s; *p; p++)
        if (strncasecmp(p, key, kl) == 0 && p[kl] == '=' && strncmp(p + kl + 1, value, vl) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t k = 0; k < N_KEYS; k++)
        unsetenv(keys[k]);
    for (size_t k = 0; k < FUZZ_N_CORE_KEYS; k++)
        unsetenv(fuzz_core_keys[k]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstring(data, size);
    char *seen[N_KEYS];
    int problems = ss_config_set_options(s);
    CHECK(problems >= 0);
    for (size_t k = 0; k < N_KEYS; k++) {
        const char *v = ss_config_raw(keys[k]);
        seen[k] = v ? strdup(v) : NULL;
        if (v) {
            CHECK(strlen(v) <= size);
            CHECK(has_pair(s, keys[k], v));
        }
    }
    fuzz_load_and_check();
    /* deterministic: the same string, the same values */
    CHECK(ss_config_set_options(s) == problems);
    for (size_t k = 0; k < N_KEYS; k++) {
        const char *v = ss_config_raw(keys[k]);
        CHECK(!v == !seen[k]);
        CHECK(!v || strcmp(v, seen[k]) == 0);
        free(seen[k]);
    }
    ss_config_set_options(NULL);
    free(s);
    return 0;
}
