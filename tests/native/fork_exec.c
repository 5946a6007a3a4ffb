/* fork_exec.c: the parent forks; the child keeps running (in
 * child_work) and then execs this program again (execd_work). The agent
 * must keep sampling the parent, start afresh in the child, and start
 * again from the preload constructor after exec. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/host_clock.h"

/* durations are multiplied by argv[1] (sanitizer builds run slower) */
static double scale = 1.0;

__attribute__((noinline)) static void parent_work(void) { spin_for(1.6 * scale); }
__attribute__((noinline)) static void child_work(void) { spin_for(0.8 * scale); }
__attribute__((noinline)) static void execd_work(void) { spin_for(0.8 * scale); }

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "execd") == 0) {
        scale = atof(argv[2]);
        execd_work();
        return 0;
    }
    if (argc > 1 && atof(argv[1]) > 0)
        scale = atof(argv[1]);
    spin_for(0.3);
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        child_work();
        char arg[32];
        snprintf(arg, sizeof arg, "%g", scale);
        execl("/proc/self/exe", argv[0], "execd", arg, (char *)NULL);
        _exit(3);
    }
    parent_work();
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 4;
    printf("fork_exec: child %d\n", (int)pid);
    return 0;
}
