/* many_threads.c: argv[2] threads (default 1000) parked in
 * parked_in_many() for argv[1] seconds. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_cond_t all_parked = PTHREAD_COND_INITIALIZER;
static int done, parked;

__attribute__((noinline)) static void parked_in_many(void) {
    pthread_mutex_lock(&m);
    parked++;
    pthread_cond_broadcast(&all_parked);
    while (!done)
        pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
}

static void *worker(void *arg) {
    (void)arg;
    parked_in_many();
    return NULL;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    int n = argc > 2 ? atoi(argv[2]) : 1000;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024);
    int made = 0;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[made], &a, worker, NULL) == 0)
            made++;
    /* the run starts when every thread is parked (thread start-up is slow
     * under sanitizers) */
    pthread_mutex_lock(&m);
    while (parked < made)
        pthread_cond_wait(&all_parked, &m);
    pthread_mutex_unlock(&m);
    /* sleep to a deadline: a signal (the sampler's) ends usleep early */
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)secs;
    end.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
        ;
    pthread_mutex_lock(&m);
    done = 1;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    printf("many_threads: %d threads\n", made);
    free(t);
    return made == n ? 0 : 1;
}
