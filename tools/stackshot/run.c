/*
 * run.c: `stackshot run [options] [--] program args...`
 *
 * Sets the agent's keys in the environment and execs the program in this
 * very process (no extra process, so its exit status is ours): a native
 * program gets libstackshot.so prepended to LD_PRELOAD; a JVM (java, javaw,
 * or a launcher with ../lib/libjli.so next to it, the rule the loader uses
 * to tell a JVM) gets -agentpath:<lib> appended to JAVA_TOOL_OPTIONS,
 * because a JVM's agent starts from Agent_OnLoad, not from the preload.
 *
 * --duration is the agent's STACKSHOT_DURATION: sampling ends, the program
 * runs on (what async-profiler's -d does to its session).
 */
#include "tools/stackshot/stackshot.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char run_help[] =
    "usage: stackshot run [options] [--] PROGRAM [ARGS...]\n"
    "Run PROGRAM with the stackshot agent: a native program through LD_PRELOAD, a JVM\n"
    "(java, javaw, or a JDK launcher) through -agentpath in JAVA_TOOL_OPTIONS.\n"
    "SPLUNK_PROFILER_ENABLED=true is set; the options set the agent's keys:\n"
    "  -i, --interval MS        SPLUNK_PROFILER_CALL_STACK_INTERVAL (ms between rounds)\n"
    "  -e, --exporters LIST     STACKSHOT_EXPORTERS (otlp_logs, otlp_profiles, text, pprof,\n"
    "                           flamegraph, qubership, zorka, ...)\n"
    "  -o, --output DIR         STACKSHOT_OUTPUT_DIR (local files)\n"
    "      --endpoint URL       OTEL_EXPORTER_OTLP_ENDPOINT\n"
    "      --service NAME       OTEL_SERVICE_NAME\n"
    "      --log-level LEVEL    STACKSHOT_LOG_LEVEL\n"
    "  -s, --set KEY=VALUE      any other key of stackshot(7)\n"
    "  -d, --duration TIME      STACKSHOT_DURATION: stop sampling after TIME (30, 30s,\n"
    "                           500ms, 2m); the program runs on\n"
    "      --lib PATH           libstackshot.so to use (default: next to this command,\n"
    "                           or $STACKSHOT_LIB)\n"
    "The exit status is the program's (128+n if signal n ended it); 127: not found,\n"
    "126: not executable, 2: bad usage, 1: the agent library is missing.\n";

/* PROGRAM as execvp would find it, into out; false if not found. */
static bool resolve(const char *prog, char *out, size_t n) {
    if (strchr(prog, '/')) {
        snprintf(out, n, "%s", prog);
        return access(out, F_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", prog);
        if (access(out, X_OK) == 0)
            return true;
        path += len + (path[len] == ':');
    }
    return false;
}

/* The loader's rule (agent/process_jvm.c): java/javaw, or libjli.so in
 * ../lib/ next to the executable (every JDK launcher: jshell, jar...). */
static bool is_jvm(const char *resolved) {
    const char *base = strrchr(resolved, '/');
    base = base ? base + 1 : resolved;
    if (!strcmp(base, "java") || !strcmp(base, "javaw"))
        return true;
    char real[PATH_MAX], jli[PATH_MAX + 32];
    if (!realpath(resolved, real))
        return false;
    char *slash = strrchr(real, '/');
    if (!slash)
        return false;
    *slash = '\0';
    snprintf(jli, sizeof jli, "%s/../lib/libjli.so", real);
    return access(jli, F_OK) == 0;
}

static int prepend_env(const char *name, const char *item, char sep, bool append) {
    const char *old = getenv(name);
    size_t need = strlen(item) + (old ? strlen(old) : 0) + 2;
    char *v = malloc(need);
    if (!v)
        return -1;
    if (old && *old)
        snprintf(v, need, append ? "%2$s%3$c%1$s" : "%1$s%3$c%2$s", item, old, sep);
    else
        snprintf(v, need, "%s", item);
    int rc = setenv(name, v, 1);
    free(v);
    return rc;
}

int ss_cmd_run(int argc, char **argv) {
    ss_cmd_settings s = {0};
    int i = 1;
    int rc = ss_cmd_parse(argc, argv, &i, &s, "", "run");
    if (rc == 3) {
        fputs(run_help, stdout);
        return 0;
    }
    if (rc)
        return rc;
    if (i >= argc) {
        fputs("stackshot run: a program to run is needed (see stackshot run --help)\n", stderr);
        return 2;
    }
    char lib[PATH_MAX];
    if (ss_cmd_find_lib(&s, lib, sizeof lib))
        return 1;
    char **prog = argv + i;
    char resolved[PATH_MAX];
    if (!resolve(prog[0], resolved, sizeof resolved)) {
        fprintf(stderr, "stackshot run: %s: command not found\n", prog[0]);
        return 127;
    }
    setenv("SPLUNK_PROFILER_ENABLED", "true", 1);
    for (int k = 0; k < s.n; k++)
        setenv(s.key[k], s.value[k], 1);
    if (is_jvm(resolved)) {
        /* JAVA_TOOL_OPTIONS is split at white space */
        if (strpbrk(lib, " \t\n")) {
            fprintf(stderr, "stackshot run: %s: a JVM cannot take an agent path with spaces "
                            "in JAVA_TOOL_OPTIONS; use --lib with another path\n", lib);
            return 1;
        }
        char opt[PATH_MAX + 16];
        snprintf(opt, sizeof opt, "-agentpath:%s", lib);
        if (prepend_env("JAVA_TOOL_OPTIONS", opt, ' ', true))
            return 1;
    } else if (prepend_env("LD_PRELOAD", lib, ':', false)) {
        return 1;
    }
    execvp(prog[0], prog);
    int e = errno;
    fprintf(stderr, "stackshot run: %s: %s\n", prog[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}
