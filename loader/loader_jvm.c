/* loader_jvm.c: a JVM that finds the loader in LD_PRELOAD profiles itself
 * through JVMTI.
 *
 * Preloaded into a JVM the loader does not start the native sampler: a
 * JVM's Java threads are sampled by the JVMTI agent, which only the JVM
 * can load (-agentpath). So, as OpenTelemetry's injector does for its Java
 * agent, the loader's constructor, which runs in the java launcher before
 * the JVM is created, appends -agentpath:<this library> to
 * JAVA_TOOL_OPTIONS, the variable every HotSpot JVM reads at its creation
 * (it says "Picked up JAVA_TOOL_OPTIONS: ..." on stderr, as for any use of
 * it). Once: not when the command line or one of the JVM's option
 * variables already loads this library (by path, or its file name), so
 * LD_PRELOAD alone profiles every process of a container, native or Java,
 * exactly once. The library is already mapped: the JVM's dlopen of the same
 * path returns it, and its Agent_OnLoad starts the agent. */
#include "loader/ss_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Does `opts` (a command-line argument, or an option variable's value)
 * load an agent from `self` (real path) or a file of the same name? */
static bool loads_us(const char *opts, const char *self, const char *name) {
    for (const char *p = opts; p && (p = strstr(p, "-agentpath:")) != NULL; p++) {
        const char *path = p + strlen("-agentpath:");
        size_t len = strcspn(path, "= \t\n");
        char given[PATH_MAX], real[PATH_MAX];
        if (len == 0 || len >= sizeof given)
            continue;
        memcpy(given, path, len);
        given[len] = '\0';
        if (realpath(given, real) && strcmp(real, self) == 0)
            return true;
        const char *base = strrchr(given, '/');
        if (strcmp(base ? base + 1 : given, name) == 0)
            return true;
    }
    return false;
}

static bool already_loaded(int argc, char **argv, const char *self, const char *name) {
    for (int i = 1; i < argc && argv[i]; i++)
        if (loads_us(argv[i], self, name))
            return true;
    static const char *const vars[] = {"JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (loads_us(getenv(vars[i]), self, name))
            return true;
    return false;
}

void ss_jvm_inject_agent(int argc, char **argv) {
    Dl_info info;
    char self[PATH_MAX];
    if (!dladdr((void *)ss_jvm_inject_agent, &info) || !info.dli_fname ||
        !realpath(info.dli_fname, self))
        return;
    const char *name = strrchr(self, '/');
    name = name ? name + 1 : self;
    if (already_loaded(argc, argv, self, name))
        return;
    if (strpbrk(self, " \t\n\"'")) {
        /* JAVA_TOOL_OPTIONS splits at white space */
        ss_loader_say("the agent's path has white space or quotes, which JAVA_TOOL_OPTIONS "
                      "cannot carry; this JVM is not profiled (give it -agentpath)");
        return;
    }
    const char *old = getenv("JAVA_TOOL_OPTIONS");
    size_t n = (old ? strlen(old) + 1 : 0) + strlen("-agentpath:") + strlen(self) + 1;
    char *opts = malloc(n);
    if (!opts)
        return;
    snprintf(opts, n, "%s%s-agentpath:%s", old ? old : "", old && *old ? " " : "", self);
    setenv("JAVA_TOOL_OPTIONS", opts, 1);
    free(opts); /* setenv copied it */
}
