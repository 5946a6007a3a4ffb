/* time.c: the two clocks the agent uses. */
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
