/* exec_loop.c: a chain of N images: each forks, and its child is busy
 * for a few milliseconds (sampled by the agent the child restarted after
 * the fork) and then execs the next image, while the parent waits. A
 * sampling signal still pending at an exec kills the next image (pending
 * signals survive exec, handlers do not): every link must exit 0.
 * Usage: ss_exec_loop <count> [busy-ms] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void busy_before_exec(double ms) {
    double end = now_ms() + ms;
    volatile unsigned long x = 0;
    while (now_ms() < end)
        x++;
}

int main(int argc, char **argv) {
    int left = argc > 1 ? atoi(argv[1]) : 50;
    const char *busy = argc > 2 ? argv[2] : "12";
    if (left <= 0) {
        puts("exec_loop: done");
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0) {
        busy_before_exec(atof(busy));
        char next[16];
        snprintf(next, sizeof next, "%d", left - 1);
        execl("/proc/self/exe", argv[0], next, busy, (char *)NULL);
        perror("exec_loop: execl");
        _exit(3);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid)
        return 4;
    if (WIFSIGNALED(st)) {
        fprintf(stderr, "exec_loop: link %d killed by signal %d\n", left, WTERMSIG(st));
        return 5;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 6;
}
