/* host_clock.h: time helpers the test host programs share (programs the
 * tests run with the agent preloaded). Header-only: each host is one file
 * and one executable. spin_for is never inlined, so a sampled stack names
 * it. */
#ifndef STACKSHOT_TESTS_HOST_CLOCK_H
#define STACKSHOT_TESTS_HOST_CLOCK_H

#include <errno.h>
#include <time.h>

/* seconds on the monotonic clock */
static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* busy for secs seconds */
__attribute__((noinline, unused)) static void spin_for(double secs) {
    double end = now() + secs;
    volatile unsigned long x = 0;
    while (now() < end)
        for (int i = 0; i < 10000; i++)
            x += (unsigned long)i;
}

/* asleep for secs seconds, whatever signals come */
__attribute__((unused)) static void nap(double secs) {
    struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

#endif
