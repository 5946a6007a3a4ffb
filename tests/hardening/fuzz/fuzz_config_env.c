/* fuzz_config_env.c: libFuzzer target, the configuration from the
 * environment. The input is records separated by '\n': the first byte of
 * a record picks the key (one of the keys ss_config_load reads), the rest
 * is its value. Then ss_config_load, twice: no crash, every setting within
 * its range, the same result both times. */
#include "agent/config.h"
#include "tests/hardening/fuzz/fuzz_config_common.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (size_t k = 0; k < FUZZ_N_CORE_KEYS; k++)
        unsetenv(fuzz_core_keys[k]);
    char *s = fuzz_cstring(data, size);
    for (char *rec = s; rec && *rec;) {
        char *nl = strchr(rec, '\n');
        if (nl)
            *nl = '\0';
        const char *key = fuzz_core_keys[(unsigned char)rec[0] % FUZZ_N_CORE_KEYS];
        setenv(key, rec + 1, 1);
        rec = nl ? nl + 1 : NULL;
    }
    ss_config_set_options(NULL);
    fuzz_load_and_check();
    free(s);
    return 0;
}
