/* transport_grpc.c: OTLP/gRPC export calls for the sender, over the gRPC
 * client (grpc.c, the module libstackshot-grpc.so).
 *
 * Retryable, by the OTLP specification: CANCELLED, DEADLINE_EXCEEDED,
 * ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS, and RESOURCE_EXHAUSTED
 * when the status carries a RetryInfo, whose delay is the floor. */
#include "agent/buf.h"
#include "exporters/otlp/transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct grpc_transport {
    ss_grpc_client *client;
    ss_grpc_call *call; /* the call in flight, or NULL */
    const char *method;
} grpc_transport;

void ss_otlp_outcome_init(ss_otlp_outcome *o) {
    memset(o, 0, sizeof *o);
    ss_buf_init(&o->body);
}

void ss_otlp_outcome_free(ss_otlp_outcome *o) { ss_buf_free(&o->body); }

static void outcome(const ss_grpc_result *g, ss_otlp_outcome *o) {
    o->ok = g->status == SS_GRPC_OK;
    o->code = g->status;
    o->retryable = ss_otlp_retryable(g->status, g->has_retry_delay);
    o->server_delay_ns = g->has_retry_delay ? g->retry_delay_ns : 0;
    o->unimplemented = g->status == SS_GRPC_UNIMPLEMENTED;
    snprintf(o->what, sizeof o->what, "%s%s%s", ss_grpc_status_name(g->status),
             g->message[0] ? ": " : "", g->message);
    if (o->ok)
        ss_buf_append(&o->body, g->response.data, g->response.len);
}

static int grpc_open(void **out, const ss_otlp_endpoint *ep, const ss_otlp_signal *sig) {
    grpc_transport *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    int rc = 0;
    t->client = ss_grpc_client_create(ep, sig->who, &rc);
    if (!t->client) {
        free(t);
        return rc;
    }
    t->method = sig->grpc_method;
    *out = t;
    return 0;
}

static void grpc_cancel(void *p, ss_otlp_outcome *o) {
    grpc_transport *t = p;
    if (!t->call)
        return;
    ss_grpc_result g;
    ss_grpc_result_init(&g);
    ss_grpc_call_cancel(t->client, t->call, &g);
    outcome(&g, o);
    ss_grpc_result_free(&g);
    t->call = NULL;
}

static void grpc_close(void *p) {
    grpc_transport *t = p;
    if (t->call) {
        ss_otlp_outcome o;
        ss_otlp_outcome_init(&o);
        grpc_cancel(t, &o);
        ss_otlp_outcome_free(&o);
    }
    ss_grpc_client_destroy(t->client);
    free(t);
}

static bool grpc_start(void *p, const void *bytes, size_t len, uint64_t deadline_ns,
                       ss_otlp_outcome *o) {
    grpc_transport *t = p;
    ss_grpc_result g;
    ss_grpc_result_init(&g);
    t->call = ss_grpc_call_start(t->client, t->method, bytes, len, deadline_ns, &g);
    if (!t->call)
        outcome(&g, o);
    ss_grpc_result_free(&g);
    return t->call != NULL;
}

static bool grpc_poll(void *p, uint64_t wait_ns, ss_otlp_outcome *o) {
    grpc_transport *t = p;
    ss_grpc_result g;
    ss_grpc_result_init(&g);
    bool ended = ss_grpc_call_poll(t->client, t->call, wait_ns, &g);
    if (ended) {
        t->call = NULL;
        outcome(&g, o);
    }
    ss_grpc_result_free(&g);
    return ended;
}

static void grpc_tick(void *p) {
    grpc_transport *t = p;
    ss_grpc_client_note_threads(t->client);
}

const ss_otlp_transport ss_otlp_transport_grpc = {
    .protocol = "grpc",
    .open = grpc_open,
    .close = grpc_close,
    .start = grpc_start,
    .poll = grpc_poll,
    .cancel = grpc_cancel,
    .tick = grpc_tick,
};
