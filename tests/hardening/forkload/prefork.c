/* prefork.c: hosts that fork, run with libstackshot.so preloaded.
 *
 *   prefork tree  : a pre-forking server. The parent starts two worker
 *                   threads, then forks 8 workers; each forks 2 more
 *                   (16 grandchildren). Every child does busy + sleeping
 *                   work for ~3 s and exits; the parent keeps working
 *                   until all are reaped, then 1 s more, and exits last.
 *   prefork storm : a fork storm, 200 forks per second for 2 s; each
 *                   child either _exits at once or execs /bin/true.
 *
 * Prints "prefork: pid <p> role <parent|worker|grandchild>" for every
 * process (stdout, one write each) so the harness knows the tree, and
 * exits non-zero if any child failed. Durations scale with argv[2]. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/host_clock.h"

static double scale = 1.0;

static void say(const char *role) {
    char line[96];
    int n = snprintf(line, sizeof line, "prefork: pid %d role %s\n", (int)getpid(), role);
    if (write(STDOUT_FILENO, line, (size_t)n) < 0)
        _exit(9);
}

/* busy and sleeping in turns, so some rounds signal and some reuse; 24
 * children share two cores, so mostly sleeping */
__attribute__((noinline)) static void child_work(double secs) {
    double end = now() + secs;
    while (now() < end) {
        spin_for(0.005);
        nap(0.045);
    }
}

__attribute__((noinline)) static void parent_work(double secs) {
    double end = now() + secs;
    while (now() < end) {
        spin_for(0.02);
        nap(0.03);
    }
}

static volatile int stop_threads;

static void *parent_thread(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "parent-worker");
    while (!stop_threads)
        parent_work(0.2);
    return NULL;
}

/* wait for every child; 0 when all exited 0 */
static int reap(const pid_t *pids, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "prefork: child %d failed (status %#x)\n", (int)pids[i], st);
            bad = 1;
        }
    }
    return bad;
}

static int worker(void) {
    say("worker");
    prctl(PR_SET_NAME, "worker");
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] < 0)
            return 2;
        if (kids[i] == 0) {
            say("grandchild");
            prctl(PR_SET_NAME, "grandchild");
            child_work(3.0 * scale);
            exit(0);
        }
    }
    child_work(3.0 * scale);
    return reap(kids, 2);
}

static int tree(void) {
    say("parent");
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, parent_thread, NULL);
    parent_work(1.0 * scale); /* rounds before the forks */
    pid_t kids[8];
    for (int i = 0; i < 8; i++) {
        kids[i] = fork();
        if (kids[i] < 0)
            return 2;
        if (kids[i] == 0)
            exit(worker());
        nap(0.01);
    }
    int bad = reap(kids, 8);
    parent_work(1.0 * scale); /* rounds after the forks */
    stop_threads = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    return bad;
}

static int storm(void) {
    say("parent");
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, parent_thread, NULL);
    parent_work(0.5 * scale);
    int forks = 0, bad = 0;
    struct timespec w0, w1;
    clock_gettime(CLOCK_REALTIME, &w0);
    double start = now(), end = start + 2.0, worst = 0, total = 0;
    while (now() < end) {
        double t0 = now();
        pid_t pid = fork();
        if (pid > 0) {
            double took = now() - t0;
            total += took;
            if (took > worst)
                worst = took;
        }
        if (pid < 0) {
            bad = 1;
            break;
        }
        if (pid == 0) {
            if (forks % 2 && !getenv("PREFORK_NO_EXEC"))
                execl("/bin/true", "true", (char *)NULL);
            _exit(0);
        }
        forks++;
        int st;
        while (waitpid(-1, &st, WNOHANG) > 0)
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                bad = 1;
        /* 200 per second, on absolute deadlines */
        double next = start + forks / 200.0;
        if (next > now())
            nap(next - now());
    }
    int st;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    double took = now() - start;
    clock_gettime(CLOCK_REALTIME, &w1);
    printf("prefork: storm from %lld to %lld ms\n",
           (long long)w0.tv_sec * 1000 + w0.tv_nsec / 1000000,
           (long long)w1.tv_sec * 1000 + w1.tv_nsec / 1000000);
    printf("prefork: storm %d forks in %.2f s (%.0f/s), fork() took %.2f ms on average, "
           "%.2f ms at worst\n",
           forks, took, forks / took, forks ? total / forks * 1e3 : 0.0, worst * 1e3);
    fflush(stdout);
    parent_work(1.0 * scale);
    stop_threads = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    return bad;
}

/* 60 children forked 20 ms apart while the parent is sampled (every 10 ms
 * in the test: a fork often lands inside a round), each busy for 0.4 s:
 * every child must take rounds of its own and exit at once. */
static int many(void) {
    say("parent");
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, parent_thread, NULL);
    parent_work(0.3 * scale);
    enum { N = 60 };
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
        kids[i] = fork();
        if (kids[i] < 0)
            return 2;
        if (kids[i] == 0) {
            say("child");
            prctl(PR_SET_NAME, "child");
            double t0 = now();
            child_work(0.4 * scale);
            exit(now() - t0 > 5.0 * scale ? 3 : 0);
        }
        nap(0.02);
    }
    int bad = reap(kids, N);
    stop_threads = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    return bad;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "many") == 0)
        return many();
    if (argc > 2 && atof(argv[2]) > 0)
        scale = atof(argv[2]);
    if (argc > 1 && strcmp(argv[1], "storm") == 0)
        return storm();
    return tree();
}
