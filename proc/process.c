/* process.c: facts about the process being profiled. */
#include "proc/process.h"
#include "agent/config.h"
#include "agent/time.h"

#include <errno.h> /* program_invocation_short_name */
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static ss_process_info info;

const ss_process_info *ss_process(void) { return &info; }
ss_process_info *ss_process_mut(void) { return &info; }

static void read_command_line(char *out, size_t n) {
    out[0] = '\0';
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t r = read(fd, out, n - 1);
    close(fd);
    if (r <= 0)
        return;
    for (ssize_t i = 0; i < r; i++)
        if (out[i] == '\0')
            out[i] = ' ';
    while (r > 0 && out[r - 1] == ' ')
        r--;
    out[r] = '\0';
}

/* The pid the host sees: getpid() answers in the process's own PID
 * namespace (1 for a container's first process, or Chromium's sandboxed
 * zygote); /proc/self/status's NSpid lists the pid in every namespace from
 * the one /proc was mounted for (the host's, unless it was remounted)
 * inwards: the first is the real one. */
static pid_t outer_pid(pid_t own) {
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return own;
    char buf[4096];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0)
        return own;
    buf[r] = '\0';
    const char *p = strstr(buf, "\nNSpid:");
    if (!p)
        return own;
    long v = strtol(p + 7, NULL, 10);
    return v > 0 ? (pid_t)v : own;
}

/* The name the program was run by, as a user knows it: glibc's
 * program_invocation_short_name (argv[0]'s basename), not the resolved
 * executable (redis-server is a link to redis-check-rdb). Read at start:
 * a program that rewrites its title (redis) keeps a copy there. */
static char *const *program_name_ref;

void ss_process_set_program_name_ref(char *const *ref) { program_name_ref = ref; }

static void program_name(char *out, size_t n, const char *fallback) {
    const char *name = program_name_ref ? *program_name_ref : program_invocation_short_name;
    if (!name || !*name)
        name = fallback;
    /* a login shell's "-bash": the dash is not part of the name */
    if (name[0] == '-' && name[1])
        name++;
    size_t len = 0;
    for (; name[len] && len < n - 1; len++)
        out[len] = (name[len] == '/' || (unsigned char)name[len] < 0x20) ? '_' : name[len];
    out[len] = '\0';
}

/* Refresh what changes across fork (pid) and exec; keeps the runtime
 * fields a JVM agent filled in. */
void ss_process_refresh(void) {
    info.ns_pid = getpid();
    info.pid = outer_pid(info.ns_pid);
    info.ppid = getppid();
    ssize_t n = readlink("/proc/self/exe", info.exe_path, sizeof info.exe_path - 1);
    info.exe_path[n > 0 ? n : 0] = '\0';
    const char *slash = strrchr(info.exe_path, '/');
    const char *base = slash ? slash + 1 : info.exe_path;
    size_t len = strnlen(base, sizeof info.exe_name - 1);
    memcpy(info.exe_name, base, len);
    info.exe_name[len] = '\0';
    program_name(info.program_name, sizeof info.program_name, info.exe_name);
    read_command_line(info.command_line, sizeof info.command_line);
    if (gethostname(info.host_name, sizeof info.host_name) != 0)
        info.host_name[0] = '\0';
    info.host_name[sizeof info.host_name - 1] = '\0';
    info.start_wall_ms = ss_wall_ns() / 1000000ull;
}

bool ss_process_under_valgrind(void) {
    static int known; /* 0 unknown, 1 no, 2 yes */
    if (!known) {
        const char *pre = ss_env("LD_PRELOAD");
        known = pre && strstr(pre, "vgpreload") ? 2 : 1;
    }
    return known == 2;
}
