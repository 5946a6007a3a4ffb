/*
 * transport.h: how the sender (sender.c) makes one export call, whatever
 * the protocol: gRPC (transport_grpc.c, over the gRPC module) or
 * http/protobuf (transport_http.c, over the HTTP client module). Private
 * to exporters/otlp.
 *
 * One call at a time: start it, poll it, cancel it. Each transport turns
 * its protocol's answer into an ss_otlp_outcome: delivered or not, worth
 * retrying or not, after what the server asked, and one phrase for the
 * messages.
 */
#ifndef SS_OTLP_TRANSPORT_H
#define SS_OTLP_TRANSPORT_H

#include "agent/buf.h"
#include "exporters/otlp/sender.h"

typedef struct ss_otlp_outcome {
    bool ok;                  /* delivered; body holds the Export answer */
    bool retryable;
    bool unimplemented;       /* no such service there (gRPC UNIMPLEMENTED, HTTP 404) */
    uint64_t server_delay_ns; /* RetryInfo / Retry-After; 0 none */
    int code;                 /* to tell a repeated failure from a new one */
    char what[320];           /* "UNAVAILABLE: warming up", "HTTP 503 (...)" */
    ss_buf body;
} ss_otlp_outcome;

void ss_otlp_outcome_init(ss_otlp_outcome *o);
void ss_otlp_outcome_free(ss_otlp_outcome *o);

typedef struct ss_otlp_transport {
    const char *protocol; /* "grpc", "http/protobuf" */
    /* 0, or -errno after one line (-ENOPKG: its module is missing). */
    int (*open)(void **t, const ss_otlp_endpoint *ep, const ss_otlp_signal *sig);
    void (*close)(void *t);
    /* Start a call with a copy of the bytes, deadline_ns monotonic (0:
     * none). False when it ended at once (*o filled). */
    bool (*start)(void *t, const void *bytes, size_t len, uint64_t deadline_ns,
                  ss_otlp_outcome *o);
    /* Wait at most wait_ns for the call; true when it ended (*o filled). */
    bool (*poll)(void *t, uint64_t wait_ns, ss_otlp_outcome *o);
    /* End the call in flight at once (as far as the transport can). */
    void (*cancel)(void *t, ss_otlp_outcome *o);
    /* Periodic housekeeping (the transport's own threads); may be NULL. */
    void (*tick)(void *t);
} ss_otlp_transport;

extern const ss_otlp_transport ss_otlp_transport_grpc;
extern const ss_otlp_transport ss_otlp_transport_http;

#endif /* SS_OTLP_TRANSPORT_H */
