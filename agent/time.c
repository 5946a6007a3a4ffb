/* time.c: the two clocks the agent uses, and waits on the monotonic one. */
#include "ss_agent.h"

#include <errno.h>
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
