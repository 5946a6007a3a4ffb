/*
 * http_module.h: the HTTP client as a module. Private to exporters/common.
 *
 * libcurl (and OpenSSL with it) is mapped only by a process that speaks
 * HTTP to a backend: the client of http_client.h is the module
 * libstackshot-http.so (http_client.c, compiled there under the names of
 * http_module_names.h), and the core keeps the API of http_client.h as
 * thin functions (http.c) that open the module on first use and call
 * through this table. Callers do not change.
 */
#ifndef SS_HTTP_MODULE_H
#define SS_HTTP_MODULE_H

#include "exporters/common/http_client.h"

typedef struct ss_http_module {
    size_t size; /* sizeof(ss_http_module) of the module */
    ss_http_client *(*client_new)(const ss_http_tls *tls);
    void (*client_free)(ss_http_client *c);
    int (*perform)(ss_http_client *c, const ss_http_request *req, ss_http_response *resp);
    void (*cancel)(ss_http_client *c);
    void (*uncancel)(ss_http_client *c);
} ss_http_module;

/* Is the HTTP module there (opening it now)? 0, or -ENOPKG after one line
 * naming `who` ("otlp_logs"), the exporter that is then off. */
int ss_http_available(const char *who);

#endif
