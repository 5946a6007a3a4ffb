/* vg_host.c: fork and exec under the agent, for the valgrind cases.
 *
 *   vg_host fork     spins until the agent has written its first round,
 *                    forks a child that spins and exits normally (so its
 *                    agent shuts down and valgrind checks it), waits for
 *                    it; exit 0 only if the child exited 0
 *   vg_host exec N   spins, then execs itself (argv[0], an absolute path:
 *                    under valgrind /proc/self/exe is the tool) with N-1,
 *                    down to 0: every image is sampled up to its exec
 *   vg_host wait     spins, then the main thread waits in timed joins
 *                    (futex waits) for a worker that spins 3 s: the
 *                    shape of an exit that joins threads. Under valgrind
 *                    the sampler cannot walk a sleeping thread (/proc
 *                    gives valgrind's own SP and PC) and signals it, so
 *                    the handler runs on main's alternate stack in the
 *                    middle of its wait (see valgrind.supp); exit 0 only
 *                    if the join succeeded */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_for(double secs) {
    double end = now() + secs;
    volatile unsigned long x = 0;
    while (now() < end)
        for (int i = 0; i < 10000; i++)
            x += (unsigned long)i;
}

/* Has the agent written a round to our file yet (STACKSHOT_OUTPUT_DIR,
 * <program>.<pid>.txt)? Then it has started and its exporter has opened
 * its output. */
static int round_written(const char *prog) {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    char path[4096], line[256];
    if (!dir)
        return 0;
    const char *base = strrchr(prog, '/');
    snprintf(path, sizeof path, "%s/%s.%d.txt", dir, base ? base + 1 : prog, (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strncmp(line, "Full thread dump stackshot round", 32) == 0;
    fclose(f);
    return found;
}

static void *spin_worker(void *arg) {
    spin_for(*(const double *)arg);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "fork") == 0) {
        /* the agent starts when its first round is due and opens its core
         * then: under valgrind that takes a second or more, and on a
         * loaded machine more than the 2.5 s this waited before. A fork
         * that falls inside the agent's start or its exporter's first
         * write leaves the child the parent's half-built sampler or
         * retention list, referenced only from a thread the child does
         * not have ("definitely lost", 0.5-1 MB: 5 runs of 80, 8 at a
         * time). This case is the child of a running agent: it waits for
         * the first round in the file (2 minutes at most). */
        spin_for(2.5);
        for (int i = 0; i < 1200 && !round_written(argv[0]); i++)
            spin_for(0.1);
        spin_for(0.3);
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            spin_for(1.0);
            exit(0);
        }
        spin_for(1.0);
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 4;
        printf("vg_host: fork ok\n");
        return 0;
    }
    if (strcmp(mode, "exec") == 0 && argc > 2) {
        int left = atoi(argv[2]);
        /* the agent starts when its first round is due, and opens its core
         * then: under valgrind that alone takes a second or more */
        spin_for(2.5);
        if (left <= 0) {
            printf("vg_host: exec chain done\n");
            return 0;
        }
        char next[16];
        snprintf(next, sizeof next, "%d", left - 1);
        char *args[] = {argv[0], "exec", next, NULL};
        execv(argv[0], args);
        perror("execv");
        return 3;
    }
    if (strcmp(mode, "wait") == 0) {
        spin_for(2.5);
        static const double work = 3.0;
        pthread_t t;
        if (pthread_create(&t, NULL, spin_worker, (void *)&work) != 0)
            return 2;
        /* 50 ms at a time: a thread whose CPU clock has not moved since
         * its last sample is not looked at again (its stack is reused),
         * so one long wait would be signalled about once */
        int rc = ETIMEDOUT, waits = 0;
        while (rc == ETIMEDOUT && waits < 2400) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 50 * 1000 * 1000;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            rc = pthread_timedjoin_np(t, NULL, &until);
            waits++;
        }
        if (rc != 0)
            return 5;
        printf("vg_host: wait ok (%d timed joins)\n", waits);
        return 0;
    }
    fprintf(stderr, "usage: vg_host fork | exec N | wait\n");
    return 2;
}
