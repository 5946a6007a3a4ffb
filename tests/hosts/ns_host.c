/* ns_host.c: a single-threaded host that makes the calls needing a
 * single-threaded process while the agent runs (libstackshot.so
 * preloaded, a short interval): unshare(CLONE_NEWUSER), setns() back
 * into the user namespace it came from... of a child, and clone() of a
 * child that counts its own threads (Chromium's sandbox does the same
 * with /proc/self/task) and reports its pid as the kernel sees it.
 *
 * usage: ns_host <ms before> <ms after>
 * Prints one line per step; exit 0 when every call succeeded. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void spin_ms(long ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

/* Threads of this process, counted as Chromium does: the link count of
 * /proc/self/task is 2 + the number of threads. */
static int threads(void) {
    struct stat st;
    if (stat("/proc/self/task", &st) != 0)
        return -1;
    return (int)st.st_nlink - 2;
}

static char child_stack[256 * 1024] __attribute__((aligned(16)));

static int child_main(void *arg) {
    (void)arg;
    int n = threads();
    printf("ns_host: clone child %d has %d thread(s)\n", (int)syscall(SYS_getpid), n);
    fflush(stdout);
    return n == 1 ? 0 : 3;
}

int main(int argc, char **argv) {
    long before = argc > 1 ? atol(argv[1]) : 500, after = argc > 2 ? atol(argv[2]) : 500;
    spin_ms(before); /* the agent starts and samples meanwhile */
    printf("ns_host: %d thread(s) before unshare\n", threads());
    int userns = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
    if (unshare(CLONE_NEWUSER) != 0) {
        printf("ns_host: unshare(CLONE_NEWUSER) failed: %s\n", strerror(errno));
        return 1;
    }
    printf("ns_host: unshare(CLONE_NEWUSER) ok\n");
    spin_ms(after / 2);
    /* back into the namespace we came from needs privileges we gave up:
     * EPERM is the kernel's answer; EINVAL would be our threads' fault */
    if (setns(userns, CLONE_NEWUSER) != 0 && errno != EPERM) {
        printf("ns_host: setns failed: %s\n", strerror(errno));
        return 1;
    }
    printf("ns_host: setns answered as for a single-threaded process\n");
    fflush(stdout); /* the clone child would print a copy of what is buffered */
    pid_t pid = clone(child_main, child_stack + sizeof child_stack, SIGCHLD, NULL);
    if (pid < 0) {
        printf("ns_host: clone failed: %s\n", strerror(errno));
        return 1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("ns_host: clone child failed (status %#x)\n", status);
        return 1;
    }
    spin_ms(after / 2); /* the agent samples again */
    printf("ns_host: done\n");
    return 0;
}
