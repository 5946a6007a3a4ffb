/* load_common.h: what the load hosts share: clocks, naps and spinning
 * (tests/common/host_clock.h, as every test host), wall time, and the
 * host's own memory figures (from /proc/self/status), printed as
 * "load: <key> <value>" lines that load.js reads. */
#ifndef SS_LOAD_COMMON_H
#define SS_LOAD_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/host_clock.h"

static inline long long wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* kB of a /proc/self/status field ("VmRSS", "VmHWM"), -1 unknown */
static inline long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

/* "load: <key> <value>", one write so lines of threads never mix */
static inline void report(const char *key, long long value) {
    char line[128];
    int n = snprintf(line, sizeof line, "load: %s %lld\n", key, value);
    if (write(STDOUT_FILENO, line, (size_t)n) < 0)
        _exit(9);
}

static inline void report_memory(void) {
    report("rss_kb", status_kb("VmRSS"));
    report("hwm_kb", status_kb("VmHWM"));
}

/* seconds of the run: argv[1] if given, else $LOAD_SECONDS, else def */
static inline double run_seconds(int argc, char **argv, double def) {
    if (argc > 1 && atof(argv[1]) > 0)
        return atof(argv[1]);
    const char *e = getenv("LOAD_SECONDS");
    return e && atof(e) > 0 ? atof(e) : def;
}

#endif
