/* load_churn.c: threads created and destroyed at 10,000 per second (four
 * creator threads, 2,500 each, on absolute deadlines), for LOAD_SECONDS
 * (default 20). Each short-lived thread does a few microseconds of work.
 * Prints the rate achieved and the longest a creator waited between two
 * creations beyond its schedule (a stall the agent would cause). */
#include "tests/hardening/forkload/load_common.h"

#include <pthread.h>
#include <sys/prctl.h>

#define CREATORS 4
#define PER_CREATOR_HZ 2500.0

static double secs;

typedef struct creator {
    long made;
    double worst_late; /* seconds behind schedule, at worst */
    double worst_gap;  /* longest time between two creations */
} creator;

static void *short_lived(void *arg) {
    volatile unsigned long x = (unsigned long)arg;
    for (int i = 0; i < 2000; i++)
        x += (unsigned long)i;
    return NULL;
}

__attribute__((noinline)) static void *create_loop(void *arg) {
    creator *c = arg;
    prctl(PR_SET_NAME, "creator");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    double start = now(), end = start + secs, last = start;
    while (now() < end) {
        pthread_t t;
        if (pthread_create(&t, &attr, short_lived, c) == 0) {
            pthread_join(t, NULL);
            c->made++;
        }
        double at = now();
        if (at - last > c->worst_gap)
            c->worst_gap = at - last;
        last = at;
        double due = start + c->made / PER_CREATOR_HZ;
        double late = now() - due;
        if (late > c->worst_late && c->made > 100)
            c->worst_late = late;
        if (late < 0)
            nap(-late);
        last = now();
    }
    return NULL;
}

int main(int argc, char **argv) {
    secs = run_seconds(argc, argv, 20);
    static creator cs[CREATORS];
    pthread_t th[CREATORS];
    double t0 = now();
    for (int i = 0; i < CREATORS; i++)
        pthread_create(&th[i], NULL, create_loop, &cs[i]);
    long made = 0;
    double worst = 0, gap = 0;
    for (int i = 0; i < CREATORS; i++) {
        pthread_join(th[i], NULL);
        made += cs[i].made;
        if (cs[i].worst_late > worst)
            worst = cs[i].worst_late;
        if (cs[i].worst_gap > gap)
            gap = cs[i].worst_gap;
    }
    double took = now() - t0;
    report("threads_made", made);
    report("rate_per_s", (long long)(made / took));
    report("worst_late_ms", (long long)(worst * 1000));
    report("worst_gap_us", (long long)(gap * 1e6));
    report_memory();
    return 0;
}
