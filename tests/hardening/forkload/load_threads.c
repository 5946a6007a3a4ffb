/* load_threads.c: 2,000 threads, 1,900 parked on a condition variable and
 * 100 busy (they run a little every 20 ms, so their stacks change and
 * they are signalled every round), for LOAD_SECONDS (default 4).
 * Prints "load: all_started_ms" once every thread exists and
 * "load: stopping_ms" before any leaves: every round in between must list
 * all 2,000 plus the main thread. */
#include "tests/hardening/forkload/load_common.h"

#include <pthread.h>
#include <sys/prctl.h>

#define N_THREADS 2000
#define N_BUSY 100

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int stop;

__attribute__((noinline)) static void parked_wait(void) {
    pthread_mutex_lock(&mu);
    while (!stop)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void *parked(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "parked");
    parked_wait();
    return NULL;
}

__attribute__((noinline)) static void busy_work(void) {
    while (!stop) {
        spin_for(0.0002);
        nap(0.02);
    }
}

static void *busy(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "busy");
    busy_work();
    return NULL;
}

int main(int argc, char **argv) {
    double secs = run_seconds(argc, argv, 4);
    static pthread_t th[N_THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    for (int i = 0; i < N_THREADS; i++) {
        int rc = pthread_create(&th[i], &attr, i < N_BUSY ? busy : parked, NULL);
        if (rc != 0) {
            fprintf(stderr, "load_threads: pthread_create #%d: %s\n", i, strerror(rc));
            return 2;
        }
    }
    nap(0.05); /* the last ones reach their wait */
    report("all_started_ms", wall_ms());
    nap(secs);
    report("stopping_ms", wall_ms());
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    report_memory();
    return 0;
}
