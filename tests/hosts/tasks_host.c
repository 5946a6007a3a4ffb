/* tasks_host.c: a host that uses every task its RLIMIT_NPROC allows
 * (tests/hosts/hosts.py, case "tasks").
 *
 * usage: tasks_host threads N L | fork L | spawn L
 *
 * Run as a user of its own (the limit counts every task of the user). It
 * waits until the agent's threads are there (when LD_PRELOAD is set), then
 * lowers its RLIMIT_NPROC to L at run time, as a service sized to its
 * limit does (L 0: left as it is, for a cgroup's pids.max), and:
 *   threads  creates N threads (each waits), prints "threads M" for the M
 *            made, exits 0 if M == N;
 *   fork     forks a child that lives 200 ms and exits 7, prints
 *            "fork status 7" (or "fork failed: <error>");
 *   spawn    posix_spawn's /bin/true, prints "spawn status 0" (or
 *            "spawn failed: <error>").
 * Exit 0 when the call(s) succeeded, 1 when one failed, 2 when the agent's
 * threads never came. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int agent_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "stackshot-", 10) == 0)
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int fds[2];

static void *waiter(void *arg) {
    (void)arg;
    char c;
    while (read(fds[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static int make_threads(int n) {
    if (pipe(fds) != 0)
        return 1;
    int made = 0;
    for (; made < n; made++) {
        pthread_t t;
        int rc = pthread_create(&t, NULL, waiter, NULL);
        if (rc != 0) {
            printf("pthread_create %d: %s\n", made + 1, strerror(rc));
            break;
        }
    }
    printf("threads %d\n", made);
    return made == n ? 0 : 1;
}

static int do_fork(void) {
    pid_t pid = fork();
    if (pid == 0) {
        nap_ms(200);
        _exit(7);
    }
    if (pid < 0) {
        printf("fork failed: %s\n", strerror(errno));
        return 1;
    }
    int st;
    waitpid(pid, &st, 0);
    printf("fork status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}

static int do_spawn(void) {
    pid_t pid;
    char *argv[] = {"true", NULL};
    int rc = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
    if (rc != 0) {
        printf("spawn failed: %s\n", strerror(rc));
        return 1;
    }
    int st;
    waitpid(pid, &st, 0);
    printf("spawn status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 64;
    const char *mode = argv[1];
    int last = argc - 1;
    long limit = atol(argv[last]);
    if (getenv("LD_PRELOAD")) {
        int i = 0;
        while (agent_threads() == 0 && i++ < 500)
            nap_ms(10);
        if (agent_threads() == 0) {
            printf("no agent thread\n");
            return 2;
        }
        nap_ms(350); /* a few rounds taken: what it collected is to be kept */
    }
    struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
    if (limit > 0 && setrlimit(RLIMIT_NPROC, &rl) != 0) {
        perror("setrlimit");
        return 64;
    }
    fflush(stdout);
    if (strcmp(mode, "threads") == 0 && argc == 4)
        return make_threads(atoi(argv[2]));
    if (strcmp(mode, "fork") == 0)
        return do_fork();
    if (strcmp(mode, "spawn") == 0)
        return do_spawn();
    return 64;
}
