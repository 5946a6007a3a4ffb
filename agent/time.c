/* time.c: the two clocks the agent uses, and waits on the monotonic one. */
#include "agent/time.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ss_wall_ns(void) { return clock_ns(CLOCK_REALTIME); }
uint64_t ss_mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

void ss_sleep_ns(uint64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Without the time kept, a starved machine let the deadline pass in gRPC's
 * cleanup (the exporter was abandoned with its counters incomplete), and a
 * cancelled libcurl call inside a TLS handshake (one long step) left a
 * thread in OpenSSL while the process ran its exit handlers. */
uint64_t ss_shutdown_send_until(uint64_t deadline_ns) {
    uint64_t now = ss_mono_ns();
    if (deadline_ns <= now)
        return deadline_ns;
    uint64_t keep = (deadline_ns - now) / 8;
    return deadline_ns - (keep < 200000000ull ? keep : 200000000ull);
}

/* pthread_mutex_timedlock and pthread_timedjoin_np take CLOCK_REALTIME
 * deadlines only: `ns` from now, on that clock. */
struct timespec ss_realtime_in(uint64_t ns) {
    uint64_t abs = clock_ns(CLOCK_REALTIME) + ns;
    return (struct timespec){.tv_sec = (time_t)(abs / 1000000000ull),
                             .tv_nsec = (long)(abs % 1000000000ull)};
}

struct timespec ss_realtime_at(uint64_t mono_deadline_ns) {
    uint64_t now = ss_mono_ns();
    return ss_realtime_in(mono_deadline_ns > now ? mono_deadline_ns - now : 0);
}

void ss_cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

int ss_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns) {
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    return pthread_cond_timedwait(cv, mu, &ts);
}

/* "YYYY-MM-DDTHH:MM:SS" (UTC) of `secs` since the epoch, in `out` (at
 * least 20 bytes). Not gmtime_r: its first call in a process runs tzset,
 * which strdup's the zone file's name with the host's malloc, and on an
 * agent thread glibc's malloc gives the thread an arena of its own (64 MiB
 * of address space, which counts against an RLIMIT_AS). Days to a civil
 * date: the proleptic Gregorian calendar, by 400-year eras. */
void ss_utc_format(uint64_t secs, char out[20]) {
    int64_t days = (int64_t)(secs / 86400u);
    unsigned sod = (unsigned)(secs % 86400u);
    days += 719468; /* from 0000-03-01 */
    int64_t era = days / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    unsigned d = doy - (153 * mp + 2) / 5 + 1;
    unsigned m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = (int64_t)yoe + era * 400 + (m <= 2);
    snprintf(out, 20, "%04u-%02u-%02uT%02u:%02u:%02u", (unsigned)(y % 10000), m % 100, d % 100,
             sod / 3600, sod / 60 % 60, sod % 60);
}
