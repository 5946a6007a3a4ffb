/* busy.c: a single-threaded program that says its pid and computes for
 * the given milliseconds (the program at the end of a wrapper chain).
 *
 * `ss_hosts_busy launch MS PROGRAM ARGS...`: a slow launcher instead. It
 * forks, the child waits MS milliseconds before it execs PROGRAM (as a
 * loaded machine may keep a shell's child from reaching its exec), and
 * the parent waits for the child and exits with its status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int launch(long ms, char **argv) {
    printf("ss_hosts_busy: launcher pid %d\n", (int)getpid());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 125;
    if (child == 0) {
        struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        while (nanosleep(&d, &d) != 0)
            ;
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static unsigned long work(unsigned long x) {
    for (int i = 0; i < 200000; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return x;
}

int main(int argc, char **argv) {
    if (argc > 3 && strcmp(argv[1], "launch") == 0)
        return launch(atol(argv[2]), argv + 3);
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    printf("ss_hosts_busy: pid %d\n", (int)getpid());
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 1;
    do {
        x = work(x);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    return 0;
}
