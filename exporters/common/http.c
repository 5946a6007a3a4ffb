/* http.c: the API of http_client.h in the core, over the HTTP module.
 *
 * The client itself (libcurl) is libstackshot-http.so, opened by the first
 * call that needs it; these functions forward to its table. They have
 * default visibility: modules (an exporter that is a module, like zorka)
 * call the client through the core too (loader/core.map exports ss_*). */
#include "agent/log.h"
#include "exporters/common/common.h"
#include "exporters/common/http_module.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define SS_API __attribute__((visibility("default")))

static _Atomic(const ss_http_module *) loaded;

static const ss_http_module *http_module(const char *who) {
    const ss_http_module *m = atomic_load_explicit(&loaded, memory_order_acquire);
    if (m)
        return m;
    m = ss_module_api("http", who);
    if (m && m->size < sizeof(ss_http_module)) {
        ss_error("%s: libstackshot-http.so is of another build; %s is off", who, who);
        m = NULL;
    }
    if (m)
        atomic_store_explicit(&loaded, m, memory_order_release);
    return m;
}

SS_API int ss_http_available(const char *who) { return http_module(who) ? 0 : -ENOPKG; }

SS_API ss_http_client *ss_http_client_new(const ss_http_tls *tls) {
    const ss_http_module *m = http_module("the HTTP client");
    return m ? m->client_new(tls) : NULL;
}

/* A client exists only if the module was loaded: `loaded` is set. */
SS_API void ss_http_client_free(ss_http_client *c) {
    if (c)
        atomic_load_explicit(&loaded, memory_order_acquire)->client_free(c);
}

SS_API int ss_http_perform(ss_http_client *c, const ss_http_request *req,
                           ss_http_response *resp) {
    return atomic_load_explicit(&loaded, memory_order_acquire)->perform(c, req, resp);
}

SS_API void ss_http_client_cancel(ss_http_client *c) {
    atomic_load_explicit(&loaded, memory_order_acquire)->cancel(c);
}

SS_API void ss_http_client_uncancel(ss_http_client *c) {
    atomic_load_explicit(&loaded, memory_order_acquire)->uncancel(c);
}
