/* process.c: facts about the process being profiled. */
#include "ss_agent.h"

#include <fcntl.h>
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

/* Refresh what changes across fork (pid) and exec; keeps the runtime
 * fields a JVM agent filled in. */
void ss_process_refresh(void) {
    info.pid = getpid();
    info.ppid = getppid();
    ssize_t n = readlink("/proc/self/exe", info.exe_path, sizeof info.exe_path - 1);
    info.exe_path[n > 0 ? n : 0] = '\0';
    const char *slash = strrchr(info.exe_path, '/');
    const char *base = slash ? slash + 1 : info.exe_path;
    size_t len = strnlen(base, sizeof info.exe_name - 1);
    memcpy(info.exe_name, base, len);
    info.exe_name[len] = '\0';
    read_command_line(info.command_line, sizeof info.command_line);
    if (gethostname(info.host_name, sizeof info.host_name) != 0)
        info.host_name[0] = '\0';
    info.host_name[sizeof info.host_name - 1] = '\0';
    info.start_wall_ms = ss_wall_ns() / 1000000ull;
}

/* The rule: a process whose executable is the Java launcher ("java", or
 * any launcher of a JDK: the file lives in a JDK's bin/ next to lib/libjli.so)
 * is a JVM. The preload constructor stays out of it; the agent starts in
 * Agent_OnLoad (-agentpath) or Agent_OnAttach (jcmd JVMTI.agent_load). */
bool ss_process_is_jvm(void) {
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    const char *base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    if (strcmp(base, "java") == 0 || strcmp(base, "javaw") == 0)
        return true;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    char jli[1100];
    snprintf(jli, sizeof jli, "%s/../lib/libjli.so", exe);
    return access(jli, F_OK) == 0;
}
