/* stderr_host.c: a host that does to its stderr what real programs do,
 * for check_stderr.py (docs/safety/guest.md, "The agent's lines").
 *
 *   stderr_host exit <ms>             runs <ms>, then exit(0)
 *   stderr_host exec <ms>             runs <ms>, then execs /bin/true
 *   stderr_host fork <ms> <child_ms>  runs <ms>, forks a child that runs
 *                                     <child_ms> and exit()s; waits for it
 *   stderr_host reassign <file> <ms>  once the agent runs: close(2), open
 *                                     <file> (it gets 2), write data <ms>
 *   stderr_host closeall <dir> <ms>   once the agent runs: close 2 and every
 *                                     fd >= 3, open <dir>/data.N (2, 3,
 *                                     ... 12), write data in each <ms>
 *   stderr_host early <file> <ms>     at once (before the agent starts):
 *                                     close(2), open <file> (it gets 2),
 *                                     write data <ms>
 *   stderr_host earlylog <file> <ms>  the same with a log of its own,
 *                                     opened O_WRONLY | O_APPEND, as its
 *                                     stderr (nginx's error log)
 *
 * The host checks its own behaviour and prints one line on stdout:
 * "host: ok ..." or "host: FAIL <why>". Its stderr must keep its flags
 * (no O_NONBLOCK put there by anyone but itself), and its data files must
 * hold exactly its own bytes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DATA 16

static char failure[512];
static int data_fd[MAX_DATA];
static char data_path[MAX_DATA][512];
static size_t data_len[MAX_DATA];
static int n_data;

static void fail(const char *fmt, const char *arg) {
    if (!failure[0])
        snprintf(failure, sizeof failure, fmt, arg);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* fd 2 as the host left it: no O_NONBLOCK (the agent must not put it on
 * the open file description it shares with us). */
static void check_stderr_flags(void) {
    int fl = fcntl(2, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        fail("%s", "fd 2 has O_NONBLOCK: the host's stderr flags were changed");
}

/* Busy for a while, checking fd 2's flags now and then. */
static void run_for(long ms) {
    double end = now_s() + (double)ms / 1000.0;
    while (now_s() < end) {
        check_stderr_flags();
        volatile unsigned long x = 0;
        for (int i = 0; i < 200000; i++)
            x += (unsigned long)i;
        sleep_ms(5);
    }
}

/* One of the agent's threads exists (the sampler runs). */
static bool agent_running(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "stackshot-sampl", 15) == 0)
            found = true;
        fclose(f);
    }
    closedir(d);
    return found;
}

/* Until the agent's sampler runs, and then 200 ms more: its first rounds
 * open the files they resolve symbols from (ELF, debuginfo, maps), each
 * for a moment at the lowest free number, a window the host's own
 * close-and-reopen would race with. After them a steady host's rounds
 * open nothing below the agent's high numbers. */
static bool wait_for_agent(void) {
    for (int i = 0; i < 1000; i++) { /* 10 s at most */
        if (agent_running()) {
            sleep_ms(200);
            return true;
        }
        sleep_ms(10);
    }
    return false;
}

/* A data file of the host's; `want` the descriptor it must get (-1: any). */
static void open_data(const char *path, int want) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        fail("cannot open %s", path);
        return;
    }
    if (want >= 0 && fd != want) {
        char why[600];
        snprintf(why, sizeof why, "%s opened as fd %d, not %d", path, fd, want);
        fail("%s", why);
    }
    if (n_data < MAX_DATA) {
        data_fd[n_data] = fd;
        snprintf(data_path[n_data], sizeof data_path[n_data], "%s", path);
        n_data++;
    }
}

static void write_data(int round) {
    for (int i = 0; i < n_data; i++) {
        char line[128];
        int n = snprintf(line, sizeof line, "host data: file %d round %d\n", i, round);
        if (write(data_fd[i], line, (size_t)n) != n)
            fail("%s", "a write of the host's data failed");
        data_len[i] += (size_t)n;
    }
}

/* Writes a line in every data file each 20 ms, <ms> long. */
static void write_data_for(long ms) {
    double end = now_s() + (double)ms / 1000.0;
    int round = 0;
    while (now_s() < end) {
        write_data(round++);
        sleep_ms(20);
    }
}

/* Reads every data file back: exactly the host's bytes, nothing of the
 * agent's. */
static void check_data(void) {
    for (int i = 0; i < n_data; i++) {
        int fd = open(data_path[i], O_RDONLY);
        char buf[1 << 16];
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n < 0) {
            fail("cannot read back %s", data_path[i]);
            continue;
        }
        buf[n] = '\0';
        if (memmem(buf, (size_t)n, "stackshot", 9))
            fail("the agent wrote into the host's data file %s", data_path[i]);
        else if ((size_t)n != data_len[i])
            fail("%s does not hold exactly the host's bytes", data_path[i]);
    }
}

static int finish(const char *what) {
    check_stderr_flags();
    if (failure[0])
        printf("host: FAIL %s\n", failure);
    else
        printf("host: ok %s\n", what);
    fflush(stdout);
    return failure[0] ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: see stderr_host.c\n");
        return 2;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "exit") == 0) {
        run_for(atol(argv[2]));
        exit(finish("exit"));
    }
    if (strcmp(mode, "exec") == 0) {
        run_for(atol(argv[2]));
        if (finish("exec /bin/true") != 0)
            return 1;
        execl("/bin/true", "true", (char *)NULL);
        printf("host: FAIL exec /bin/true: %s\n", strerror(errno));
        return 1;
    }
    if (strcmp(mode, "fork") == 0 && argc >= 4) {
        run_for(atol(argv[2]));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            run_for(atol(argv[3]));
            exit(failure[0] ? 1 : 0);
        }
        if (pid < 0) {
            fail("%s", "fork failed");
        } else {
            int status = 0;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail("%s", "the child did not exit 0");
        }
        exit(finish("fork"));
    }
    if (strcmp(mode, "reassign") == 0 && argc >= 4) {
        if (!wait_for_agent())
            fail("%s", "the agent did not start within 10 s");
        close(2);
        open_data(argv[2], 2);
        write_data_for(atol(argv[3]));
        check_data();
        return finish("reassign");
    }
    if (strcmp(mode, "closeall") == 0 && argc >= 4) {
        if (!wait_for_agent())
            fail("%s", "the agent did not start within 10 s");
        /* as daemons do: every descriptor but stdin and stdout */
        close(2);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        for (int i = 0; i < 11; i++) {
            char path[512];
            snprintf(path, sizeof path, "%s/data.%d", argv[2], i);
            open_data(path, i == 0 ? 2 : -1);
        }
        write_data_for(atol(argv[3]));
        check_data();
        return finish("closeall");
    }
    if (strcmp(mode, "earlylog") == 0 && argc >= 4) {
        /* its own log as its stderr, as nginx does with its error log */
        close(2);
        int fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (fd != 2)
            fail("%s", "the log did not get fd 2");
        double end = now_s() + (double)atol(argv[3]) / 1000.0;
        for (int i = 0; now_s() < end; i++) {
            dprintf(2, "host log line %d\n", i);
            sleep_ms(20);
        }
        if (!agent_running())
            fail("%s", "the agent was not running at the end");
        return finish("earlylog");
    }
    if (strcmp(mode, "early") == 0 && argc >= 4) {
        close(2);
        open_data(argv[2], 2);
        write_data_for(atol(argv[3]));
        if (!agent_running())
            fail("%s", "the agent was not running at the end");
        check_data();
        return finish("early");
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
