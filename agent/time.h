/*
 * agent/time.h: the clocks and waits the agent uses.
 */
#ifndef SS_AGENT_TIME_H
#define SS_AGENT_TIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

uint64_t ss_wall_ns(void);  /* CLOCK_REALTIME, nanoseconds since the epoch */
uint64_t ss_mono_ns(void);  /* CLOCK_MONOTONIC, nanoseconds */
void ss_sleep_ns(uint64_t ns);
/* A condition variable whose timed waits run on ss_mono_ns's clock, and
 * such a wait until deadline_ns (monotonic): pthread_cond_timedwait's
 * result. */
void ss_cond_init_mono(pthread_cond_t *cv);
/* CLOCK_REALTIME deadlines, for the waits that take no other clock
 * (pthread_mutex_timedlock, pthread_timedjoin_np): `ns` from now, and the
 * instant that is the monotonic deadline_ns. */
struct timespec ss_realtime_in(uint64_t ns);
struct timespec ss_realtime_at(uint64_t mono_deadline_ns);
/* "YYYY-MM-DDTHH:MM:SS" in UTC, without libc's time zone code (time.c). */
void ss_utc_format(uint64_t secs, char out[20]);
int ss_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns);

/* An exporter's last sends at exit end this much before its shutdown
 * deadline: an eighth of the time left, at most 200 ms, kept for ending
 * the call in flight and closing its transport. */
uint64_t ss_shutdown_send_until(uint64_t deadline_ns);

#pragma GCC visibility pop

#endif /* SS_AGENT_TIME_H */
