/* module_dl.c: modules of libstackshot-core.so, opened with dlopen.
 *
 * libstackshot-<name>.so is looked for next to the core (the directory of
 * the file this function is in, which may be named by STACKSHOT_CORE). It
 * is opened like the core: RTLD_LOCAL, so nothing of it reaches the host's
 * scope, and RTLD_DEEPBIND when the core was, so it and its libraries bind
 * to their own tree before the host's symbols. The module lists the core
 * as its first dependency (the core already loaded, matched by its
 * soname): the core's malloc family and its ss_* API (loader/core.map) are
 * what the module's tree binds to.
 *
 * The first module opened registers an exit handler that stops the agent.
 * The core's own destructor runs in the dynamic loader's finalisation,
 * after the libraries a module brought in were finalised (they were loaded
 * later) and after the exit handlers their constructors registered (C++
 * static destructors): flushing through gRPC then would use a library
 * already torn down. An exit handler registered after them runs before
 * them. */
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "exporters/common/common.h"
#include "loader/ss_core_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void stop_at_exit(void) { ss_agent_stop(); }

/* The directory of the core: where this function was loaded from. */
static int core_dir(char *out, size_t n) {
    Dl_info info;
    if (!dladdr((void *)&ss_module_open, &info) || !info.dli_fname)
        return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash)
        return snprintf(out, n, ".") < (int)n ? 0 : -1;
    int len = snprintf(out, n, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
    return len > 0 && (size_t)len < n ? 0 : -1;
}

const void *ss_module_open(const char *name, char *why, size_t why_len) {
    static bool exit_handler;
    char dir[PATH_MAX], path[PATH_MAX + 64], sym[96];
    if (core_dir(dir, sizeof dir) != 0) {
        snprintf(why, why_len, "the core's own path is unknown");
        return NULL;
    }
    snprintf(path, sizeof path, "%s/libstackshot-%s.so", dir, name);
    int flags = RTLD_NOW | RTLD_LOCAL | (ss_core_deepbind() ? RTLD_DEEPBIND : 0);
    void *h = dlopen(path, flags);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : path);
        return NULL;
    }
    snprintf(sym, sizeof sym, "ss_module_%s_entry", name);
    const void *(*entry)(void) = (const void *(*)(void))dlsym(h, sym);
    const void *api = entry ? entry() : NULL;
    if (!api) {
        snprintf(why, why_len, "%s: no %s", path, sym);
        return NULL; /* not closed: its constructors ran */
    }
    if (!exit_handler && atexit(stop_at_exit) == 0)
        exit_handler = true;
    ss_debug("module %s loaded (%s)", name, path);
    return api;
}

int ss_module_helper_path(const char *name, char *out, size_t n) {
    char dir[PATH_MAX];
    if (core_dir(dir, sizeof dir) != 0)
        return -ENOENT;
    int len = snprintf(out, n, "%s/stackshot-%s-helper", dir, name);
    if (len < 0 || (size_t)len >= n)
        return -ENAMETOOLONG;
    return access(out, X_OK) == 0 ? 0 : -errno;
}
