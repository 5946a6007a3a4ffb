/* vg_host.c: fork and exec under the agent, for the valgrind cases.
 *
 *   vg_host fork     spins, forks a child that spins and exits normally
 *                    (so its agent shuts down and valgrind checks it),
 *                    waits for it; exit 0 only if the child exited 0
 *   vg_host exec N   spins, then execs itself (argv[0], an absolute path:
 *                    under valgrind /proc/self/exe is the tool) with N-1,
 *                    down to 0: every image is sampled up to its exec */
#define _GNU_SOURCE
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

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "fork") == 0) {
        /* the agent starts when its first round is due and opens its core
         * then: under valgrind that takes a second or more */
        spin_for(2.5);
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
    fprintf(stderr, "usage: vg_host fork | exec N\n");
    return 2;
}
