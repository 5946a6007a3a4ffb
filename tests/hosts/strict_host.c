#define _GNU_SOURCE
/* strict_host.c: a sandbox's shape: worker threads that put themselves in
 * seccomp's strict mode (read, write, _exit and rt_sigreturn only) and
 * compute there for about two seconds (a count measured on the clock
 * before, as a machine's speed goes; a calibration slowed by a loaded
 * machine still leaves a second or so), then write their result and end
 * with a raw _exit; the main thread joins them. `strict_host prctl` enters strict
 * mode through prctl, `strict_host syscall` through the seccomp system
 * call (no glibc wrapper). `strict_host fork`: the main thread computes
 * 300 ms (a preloaded agent starts), forks 10 children that _exit at once
 * (a process that forks often), then one that enters strict mode through
 * prctl right after the fork and computes about a second there (where a
 * forked child's agent would create its thread), writes "child done" and
 * ends with a raw _exit; the parent prints "child exit N" (or "child
 * signal N") and exits 0 when the child exited 0. Used by hosts.py (case
 * strict). */
#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int use_syscall;

/* The calibration's loop; worker() has its own (its stacks must end in
 * worker(), and the symbols show inlined functions as frames). */
static unsigned long count_to(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++)
        x += i;
    return x;
}

/* How many turns of count_to's loop take about a second here. */
static unsigned long turns_per_second(void) {
    struct timespec a, b;
    unsigned long n = 20000000ul;
    clock_gettime(CLOCK_MONOTONIC, &a);
    count_to(n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    return s > 0 ? (unsigned long)((double)n / s) : 1500000000ul;
}

static void *worker(void *arg) {
    const char *name = arg;
    pthread_setname_np(pthread_self(), name);
    unsigned long turns = 2 * turns_per_second();
    if (use_syscall)
        syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, NULL);
    else
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT);
    /* from here: read, write, _exit, rt_sigreturn */
    /* about two seconds of computing; no clock: where the vDSO cannot read
     * the clock source it makes the system call, which would kill us */
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < turns; i++)
        x += i;
    char line[64];
    size_t n = strlen(name);
    memcpy(line, name, n);
    memcpy(line + n, " done\n", 6);
    write(1, line, n + 6);
    syscall(SYS_exit, 0);
    return NULL;
}

/* The child of `strict_host fork`: strict mode at once, then a second of
 * computing (no clock, no call but write and the raw _exit). */
static void strict_child(unsigned long turns) {
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT);
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < turns; i++)
        x += i;
    write(1, "child done\n", 11);
    syscall(SYS_exit, 0);
}

static int forking_host(void) {
    unsigned long turns = turns_per_second();
    count_to(turns * 3 / 10);
    for (int i = 0; i < 10; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        if (p > 0)
            waitpid(p, NULL, 0);
    }
    fflush(stdout);
    pid_t p = fork();
    if (p < 0)
        return 2;
    if (p == 0)
        strict_child(turns);
    int st = 0;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return 2; /* no child to wait for: not an exit to report */
    if (WIFEXITED(st))
        printf("child exit %d\n", WEXITSTATUS(st));
    else
        printf("child signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fork") == 0)
        return forking_host();
    use_syscall = argc > 1 && strcmp(argv[1], "syscall") == 0;
    static char names[2][16] = {"sx-worker-1", "sx-worker-2"};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, names[i]) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("main done\n");
    return 0;
}
