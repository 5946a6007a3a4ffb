/* http_module.c: the entry of libstackshot-http.so, the HTTP client module:
 * the table of http_module.h over the client of http_client.c (compiled in
 * the module under the names of http_module_names.h, like this file). */
#include "agent/module_abi.h"
#include "exporters/common/http_module.h"

static const ss_http_module module = {
    .size = sizeof(ss_http_module),
    .client_new = ss_http_client_new,
    .client_free = ss_http_client_free,
    .perform = ss_http_perform,
    .cancel = ss_http_client_cancel,
    .uncancel = ss_http_client_uncancel,
};

__attribute__((visibility("default"))) const void *ss_module_http_entry(void) {
    return &module;
}
