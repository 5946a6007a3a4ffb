/* module.c: open a module once, say once if it cannot be.
 *
 * A module is a library only some exporters need, with its heavy
 * dependencies (libstackshot-grpc.so: gRPC, abseil, libstdc++, OpenSSL),
 * kept out of the core so that a process exporting only to files maps
 * none of them. The core opens a module when an exporter that needs it
 * starts; the module links against the core (its ss_* API, loader/
 * core.map) and hands back one table of functions. */
#include "agent/exporter.h"
#include "agent/log.h"
#include "exporters/common/common.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_MODULES 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[32];
    const void *api; /* NULL: it failed, and that was said */
} modules[MAX_MODULES];
static int n_modules;

const ss_exporter_ops *ss_exporter_ops_of(const ss_exporter_def *def) {
    if (def->ops || !def->module)
        return def->ops;
    return ss_module_api(def->module, def->name);
}

const void *ss_module_api(const char *name, const char *user) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_modules; i++)
        if (strcmp(modules[i].name, name) == 0) {
            const void *api = modules[i].api;
            pthread_mutex_unlock(&lock);
            return api;
        }
    char why[512] = "";
    const void *api = ss_module_open(name, why, sizeof why);
    if (!api)
        ss_error("%s: cannot load its module libstackshot-%s.so (%s); %s is off", user, name,
                 why, user);
    if (n_modules < MAX_MODULES) {
        snprintf(modules[n_modules].name, sizeof modules[n_modules].name, "%s", name);
        modules[n_modules++].api = api;
    }
    pthread_mutex_unlock(&lock);
    return api;
}
