/* grpc.c: the ss_grpc_* API of otlp.h, in the core, over the gRPC helper
 * process (grpc_remote.c) or, where it cannot be used, the gRPC module.
 *
 * gRPC, abseil, libstdc++ and OpenSSL are mapped only in a process that
 * exports over OTLP/gRPC: the client itself is libstackshot-grpc.so
 * (grpc_client.c), opened by the first ss_grpc_client_create. What needs
 * no gRPC stays here: status names, results, and the decoding of the
 * RetryInfo the module hands over raw (retry.c). */
#include "agent/buf.h"
#include "agent/log.h"
#include "exporters/otlp/grpc_module.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The handle callers hold: the module's client and the module's table. */
struct ss_grpc_handle {
    const ss_grpc_module *m;
    ss_grpc_client *c;
    char who[32];
};

/* The module once a client was made with it (read by ss_grpc_release). */
static const ss_grpc_module *_Atomic opened;

static const ss_grpc_module *grpc_module(const char *who) {
    const ss_grpc_module *m = ss_module_api("grpc", who);
    if (m && m->size < sizeof(ss_grpc_module)) {
        ss_error("%s: libstackshot-grpc.so is of another build; %s is off", who, who);
        return NULL;
    }
    return m;
}

void ss_grpc_release(void) {
    const ss_grpc_module *m = atomic_load(&opened);
    if (m)
        m->release();
}

const char *ss_grpc_status_name(int code) {
    static const char *const names[] = {
        "OK",        "CANCELLED",         "UNKNOWN",       "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
        "UNIMPLEMENTED", "INTERNAL",      "UNAVAILABLE",   "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code < 0 || code >= (int)(sizeof names / sizeof names[0]))
        return "UNKNOWN_CODE";
    return names[code];
}

void ss_grpc_result_init(ss_grpc_result *r) {
    memset(r, 0, sizeof *r);
    ss_buf_init(&r->response);
    ss_buf_init(&r->details);
}

void ss_grpc_result_free(ss_grpc_result *r) {
    ss_buf_free(&r->response);
    ss_buf_free(&r->details);
}

/* A call ended: a RetryInfo in its details sets the server's delay. */
static void decode_details(ss_grpc_result *r) {
    r->has_retry_delay = r->status != SS_GRPC_OK && r->details.len &&
                         ss_grpc_decode_retry_info((const uint8_t *)r->details.data,
                                                   r->details.len, &r->retry_delay_ns);
}

/* h's client made by the module in this process: 0, -ENOPKG (no module:
 * it said so) or -EIO (the client could not be made: it said why). */
static int use_module(struct ss_grpc_handle *h, const ss_otlp_endpoint *ep) {
    const ss_grpc_module *m = grpc_module(h->who);
    if (!m)
        return -ENOPKG;
    ss_grpc_client *c = m->client_create(ep);
    if (!c)
        return -EIO;
    h->m = m;
    h->c = c;
    atomic_store(&opened, m);
    return 0;
}

ss_grpc_client *ss_grpc_client_create(const ss_otlp_endpoint *ep, const char *who, int *err) {
    struct ss_grpc_handle *h = calloc(1, sizeof *h);
    if (!h) {
        *err = -ENOMEM;
        return NULL;
    }
    snprintf(h->who, sizeof h->who, "%s", who);
    h->m = &ss_grpc_remote;
    h->c = ss_grpc_remote_create(ep, who, err);
    if (!h->c && *err == -ENOEXEC) /* no helper here: the module */
        *err = use_module(h, ep);
    if (!h->c) {
        free(h);
        return NULL;
    }
    return (ss_grpc_client *)h;
}

static struct ss_grpc_handle *handle(ss_grpc_client *c) { return (struct ss_grpc_handle *)c; }

/* gRPC started in a process where the module was opened (this one, or a
 * parent before the fork): asking does not open it. A helper is not
 * asked: a forked child joins its parent's (grpc_remote.c). */
pid_t ss_grpc_started_in(const char *who) {
    (void)who;
    const ss_grpc_module *m = atomic_load(&opened);
    return m ? m->started_pid() : 0;
}

void ss_grpc_client_destroy(ss_grpc_client *c) {
    if (!c)
        return;
    handle(c)->m->client_destroy(handle(c)->c);
    free(c);
}

void ss_grpc_client_note_threads(ss_grpc_client *c) {
    handle(c)->m->note_threads(handle(c)->c);
}

/* The helper could not be started again (the host dropped its ids to a
 * user that may not run it, or chrooted where it is not): gRPC in the
 * process from now on, with the same endpoint. false: it stays as it is. */
static bool helper_to_module(struct ss_grpc_handle *h, const char *why) {
    ss_otlp_endpoint ep;
    if (ss_grpc_remote_endpoint(h->c, &ep) != 0)
        return false;
    ss_grpc_client *remote = h->c;
    int rc = use_module(h, &ep);
    ss_otlp_endpoint_free(&ep);
    if (rc != 0)
        return false;
    ss_info("%s: %s; gRPC runs in this process from now on", h->who, why);
    ss_grpc_remote.client_destroy(remote);
    return true;
}

ss_grpc_call *ss_grpc_call_start(ss_grpc_client *c, const char *method_path,
                                 const void *bytes, size_t len, uint64_t deadline_ns,
                                 ss_grpc_result *result) {
    ss_grpc_call *k =
        handle(c)->m->call_start(handle(c)->c, method_path, bytes, len, deadline_ns, result);
    if (!k && handle(c)->m == &ss_grpc_remote && ss_grpc_remote_unstartable(handle(c)->c) &&
        helper_to_module(handle(c), result->message)) {
        ss_grpc_result_free(result);
        ss_grpc_result_init(result);
        k = handle(c)->m->call_start(handle(c)->c, method_path, bytes, len, deadline_ns, result);
    }
    if (!k)
        decode_details(result);
    return k;
}

bool ss_grpc_call_poll(ss_grpc_client *c, ss_grpc_call *call, uint64_t wait_ns,
                       ss_grpc_result *result) {
    if (!handle(c)->m->call_poll(handle(c)->c, call, wait_ns, result))
        return false;
    decode_details(result);
    return true;
}

void ss_grpc_call_cancel(ss_grpc_client *c, ss_grpc_call *call, ss_grpc_result *result) {
    handle(c)->m->call_cancel(handle(c)->c, call, result);
}

int ss_grpc_unary(ss_grpc_client *c, const char *method_path, const void *bytes, size_t len,
                  uint64_t deadline_ns, ss_grpc_result *result) {
    ss_grpc_call *k = ss_grpc_call_start(c, method_path, bytes, len, deadline_ns, result);
    if (!k)
        return result->status;
    /* the call's deadline ends it */
    ss_grpc_call_poll(c, k, UINT64_MAX, result);
    return result->status;
}
