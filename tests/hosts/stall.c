/* stall.c: a preloaded library that holds a program back at its start or
 * at its exit, as a loaded machine may (hosts_timeout).
 *
 * Preloaded after the agent's loader (LD_PRELOAD=<this>:<libstackshot>),
 * its constructor runs after the loader's and its destructor before the
 * loader's: the agent's start thread is armed while the program stalls.
 *
 *   SS_STALL_COMM   only in a process of this name (/proc/self/comm), so
 *                   that the program a launcher runs is not held back
 *   SS_STALL_START  milliseconds asleep in the constructor: the program
 *                   has not reached main (a launcher has not forked yet)
 *   SS_STALL_EXIT   milliseconds asleep in the destructor: the program
 *                   has returned from main (a launcher has reaped its
 *                   child and is on its way out) */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ours(void) {
    const char *want = getenv("SS_STALL_COMM");
    char comm[32] = "";
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n <= 0)
        return 0;
    comm[n] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    return want && strcmp(want, comm) == 0;
}

static void stall(const char *key) {
    const char *v = getenv(key);
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0 || !ours())
        return;
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&d, &d) != 0)
        ;
}

__attribute__((constructor)) static void stall_start(void) { stall("SS_STALL_START"); }

__attribute__((destructor)) static void stall_exit(void) { stall("SS_STALL_EXIT"); }
