/* ms_keys.c: one parser for the keys in milliseconds (agent/ms_keys.h),
 * compiled into the loader and the core. */
#include "agent/ms_keys.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int ss_ms_parse(const char *v, uint32_t min, uint32_t max, uint32_t *ms) {
    if (!v)
        return -ENOENT;
    while (isspace((unsigned char)*v))
        v++;
    if (!*v)
        return -ENOENT;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v)
        return -EINVAL;
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || n < (long long)min || n > (long long)max)
        return -ERANGE;
    *ms = (uint32_t)n;
    return 0;
}
