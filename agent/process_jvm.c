/* process_jvm.c: is this process a JVM? Compiled into the core and into
 * the loader (libc only), which asks before arming a preloaded start. */
#include "agent/enabled.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
