/* fork_storm.c: a parent that forks often. It computes for a moment (its
 * first rounds resolve its modules: the agent's libdw tables are held),
 * then forks QUICK children that exit at once (more than 20 forks within
 * a second: from then on its children do not inherit those tables,
 * core/core_heap.c) and LONG children that live 2 s and work, at a
 * 100 ms interval sampled by agents of their own that start cold.
 *
 * Each long child prints "fork_storm: child <pid>". argv[1] scales the
 * durations. Exit status 0 when every child exited 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/host_clock.h"

#define QUICK 30
#define LONG 4

__attribute__((noinline)) static void child_work(double secs) {
    double end = now() + secs;
    while (now() < end) {
        spin_for(0.002);
        nap(0.018);
    }
}

int main(int argc, char **argv) {
    double scale = argc > 1 && atof(argv[1]) > 0 ? atof(argv[1]) : 1.0;
    spin_for(0.8 * scale);
    for (int c = 0; c < QUICK + LONG; c++) {
        pid_t pid = fork();
        if (pid < 0)
            return 3;
        if (pid == 0) {
            if (c < QUICK)
                _exit(0);
            printf("fork_storm: child %d\n", (int)getpid());
            fflush(stdout);
            child_work(2.0 * scale);
            _exit(0);
        }
    }
    int st, failed = 0;
    for (pid_t p; (p = wait(&st)) > 0;)
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    return failed ? 4 : 0;
}
