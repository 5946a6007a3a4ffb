/* module_api.c: qb_tls_* and qb_zip_file in the core, over the module
 * libstackshot-qubership.so (qb_module.h), opened by the first call: a
 * process that speaks plain TCP to the collector and zips no heap dump
 * never maps OpenSSL or minizip for them. A module that cannot be opened
 * is said once (ss_module_api); TLS then cannot be set up (the exporter
 * stays off rather than speak plain) and heap dumps stay unzipped on disk. */
#include "agent/log.h"
#include "exporters/qubership/dumps.h"
#include "exporters/qubership/qb_module.h"

#include "exporters/common/common.h"

#include <errno.h>
#include <stdio.h>

static const qb_module *module(const char *who) {
    const qb_module *m = ss_module_api("qubership", who);
    if (m && m->size < sizeof(qb_module)) {
        ss_error("%s: libstackshot-qubership.so is of another build", who);
        return NULL;
    }
    return m;
}

qb_tls_ctx *qb_tls_ctx_new(char *why, size_t n) {
    const qb_module *m = module("qubership");
    if (!m) {
        snprintf(why, n, "its module libstackshot-qubership.so is missing");
        return NULL;
    }
    return m->tls_ctx_new(why, n);
}

/* A context exists only when the module was opened: these find it again. */
void qb_tls_ctx_free(qb_tls_ctx *t) {
    if (t)
        module("qubership")->tls_ctx_free(t);
}

qb_tls *qb_tls_new(qb_tls_ctx *ctx, int fd, const char *host) {
    return module("qubership")->tls_new(ctx, fd, host);
}

int qb_tls_handshake(qb_tls *t, char *why, size_t n) {
    return module("qubership")->tls_handshake(t, why, n);
}

ssize_t qb_tls_send(qb_tls *t, const void *p, size_t n) {
    return module("qubership")->tls_send(t, p, n);
}

ssize_t qb_tls_recv(qb_tls *t, void *p, size_t n) {
    return module("qubership")->tls_recv(t, p, n);
}

short qb_tls_want(const qb_tls *t) { return module("qubership")->tls_want(t); }

void qb_tls_free(qb_tls *t, bool graceful) {
    if (t)
        module("qubership")->tls_free(t, graceful);
}

int qb_zip_file(const char *src, const char *entry, const char *dst, int level,
                _Atomic bool *stop, uint64_t *in_bytes, uint64_t *out_bytes) {
    const qb_module *m = module("qubership_dumps");
    if (!m)
        return -ENOPKG;
    return m->zip_file(src, entry, dst, level, stop, in_bytes, out_bytes);
}
