/* fork_rounds.c: a parent whose rounds are long forks children at
 * moments that fall inside and outside them; each child lives 2 s.
 *
 * The parent keeps SPINNERS threads busy (every round signals them and
 * waits for their handlers) and PARKED threads asleep (every round reads
 * their /proc files), so a good part of each interval is spent inside a
 * round. Children are forked every 61 ms (not a multiple of any usual
 * interval) from the main thread, which spins between forks. A child
 * works for 2 s (short bursts, mostly asleep: the machine has few cores)
 * and exits; its rounds tell how soon its agent was sampling.
 *
 * Each child prints "fork_rounds: child <pid> at <ms>" (wall clock). Durations scale with
 * argv[1]; argv[2] is the number of children (default 16). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/host_clock.h"

#define SPINNERS 2
#define PARKED 200

static double scale = 1.0;
static volatile int stop;

/* "fork_rounds: child <pid> at <ms since the epoch>", one write */
static void say_forked(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char line[96];
    int n = snprintf(line, sizeof line, "fork_rounds: child %d at %lld\n", (int)getpid(),
                     (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    if (write(STDOUT_FILENO, line, (size_t)n) < 0)
        _exit(5);
}

__attribute__((noinline)) static void child_work(double secs) {
    double end = now() + secs;
    while (now() < end) {
        spin_for(0.001);
        nap(0.019);
    }
}

__attribute__((noinline)) static void *spinner(void *arg) {
    (void)arg;
    while (!stop) {
        spin_for(0.01);
        nap(0.005);
    }
    return NULL;
}

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void *parked(void *arg) {
    (void)arg;
    pthread_mutex_lock(&park_lock);
    while (!stop)
        pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && atof(argv[1]) > 0)
        scale = atof(argv[1]);
    int children = argc > 2 ? atoi(argv[2]) : 16;
    pthread_t t[SPINNERS + PARKED];
    for (int i = 0; i < SPINNERS + PARKED; i++)
        if (pthread_create(&t[i], NULL, i < SPINNERS ? spinner : parked, NULL) != 0)
            return 2;
    spin_for(1.0 * scale); /* the parent's own first rounds resolve its modules */
    int failed = 0;
    for (int c = 0; c < children; c++) {
        pid_t pid = fork();
        if (pid < 0)
            return 3;
        if (pid == 0) {
            say_forked();
            child_work(2.0 * scale);
            _exit(0);
        }
        spin_for(0.061 * scale);
    }
    int st;
    for (pid_t p; (p = wait(&st)) > 0;)
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    pthread_mutex_lock(&park_lock);
    stop = 1;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    for (int i = 0; i < SPINNERS + PARKED; i++)
        pthread_join(t[i], NULL);
    return failed ? 4 : 0;
}
