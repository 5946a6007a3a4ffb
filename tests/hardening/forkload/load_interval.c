/* load_interval.c: an ordinary host (4 busy-ish threads, 4 idle ones)
 * sampled every 10 ms for LOAD_SECONDS (default 60; 600 for the full
 * run). The point is the agent over time: no hang, no growth, every
 * round accounted for. Prints its memory at a quarter of the run and at
 * the end, so growth shows: the peak (VmHWM) too, since the resolver
 * gives libdw's tables back when no new address came for a while and
 * takes them again at the next one (the threads' exit is one), so the
 * resident size at a given moment goes down and up again; a leak raises
 * the peak. */
#include "tests/hardening/forkload/load_common.h"

#include <pthread.h>
#include <sys/prctl.h>

static volatile int stop;

__attribute__((noinline)) static void work_a(void) { spin_for(0.002); }
__attribute__((noinline)) static void work_b(void) { spin_for(0.003); }

static void *busyish(void *arg) {
    prctl(PR_SET_NAME, "busyish");
    long i = (long)arg;
    while (!stop) {
        if (i++ % 2)
            work_a();
        else
            work_b();
        nap(0.01);
    }
    return NULL;
}

static void *idle(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "idle");
    while (!stop)
        nap(0.2);
    return NULL;
}

int main(int argc, char **argv) {
    double secs = run_seconds(argc, argv, 60);
    pthread_t th[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, i < 4 ? busyish : idle, (void *)i);
    nap(secs / 4);
    report("quarter_rss_kb", status_kb("VmRSS"));
    report("quarter_hwm_kb", status_kb("VmHWM"));
    nap(secs - secs / 4);
    stop = 1;
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    report_memory();
    return 0;
}
