/* fuzz_check.h: what the fuzz targets share. CHECK() aborts the target
 * (libFuzzer saves the input) when an invariant does not hold; it is for
 * the test programs only, never for the agent. */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__,       \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* The input as a C string (NUL bytes end it, as in an environment). */
static inline char *fuzz_cstring(const unsigned char *d, size_t n) {
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, d, n);
    s[n] = '\0';
    return s;
}

#endif
