/*
 * http_client.h: the HTTP/1.1 client every HTTP exporter uses (OTLP over
 * HTTP, Zorka/ZICO, Qubership dump uploads), over libcurl's multi
 * interface, so that a call can be cut at its deadline or cancelled from
 * another thread at once.
 *
 * One client is one kept-alive connection (libcurl's connection cache of
 * size one): requests to the same host and port reuse it until the server
 * closes it or a call is cut (a cut call closes its connection; the next
 * one connects again). It is used by one thread at a time, an agent thread
 * (ss_thread_start blocks every signal there, so a write to a closed
 * socket cannot deliver SIGPIPE to the host).
 *
 * What it guarantees:
 *   - every call returns by its deadline (or at once when cancelled); a
 *     name lookup still running then is abandoned, never waited for;
 *   - https verifies the server's certificate and name unless `insecure`;
 *     TLS 1.2 at least; client certificates (PEM) for mutual TLS;
 *   - no redirect is followed (a 3xx is an answer like any other), no
 *     proxy from the environment is used, only http and https are spoken;
 *   - resp->error never holds a header value, a URL's credentials or its
 *     query: messages of libcurl that quote them are scrubbed;
 *   - libcurl's global initialisation runs once per process (the first
 *     ss_http_client_new), is never undone, and a client created in a
 *     forked child works. OpenSSL is asked first for no exit-time cleanup
 *     (its atexit handler would run before the core's destructor, which
 *     flushes the exporters over https). A client made before fork() must not be used or
 *     freed in the child (freeing would close the parent's TLS session on
 *     the shared socket): forget it there and create another.
 */
#ifndef SS_HTTP_CLIENT_H
#define SS_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/buf.h"

typedef struct ss_http_tls {
    bool insecure;          /* https without verifying the server (OTLP *_INSECURE=true on https) */
    const char *ca_file;    /* trusted roots, PEM; NULL: the system's */
    const char *cert_file;  /* client certificate, PEM; NULL: none */
    const char *key_file;   /* its private key, PEM */
} ss_http_tls;

/* One client = one kept-alive connection, used by one thread at a time.
 * Create it on the thread (and in the process: after fork, create anew)
 * that uses it. NULL when out of memory or libcurl unusable. The TLS
 * settings' strings are copied. */
typedef struct ss_http_client ss_http_client;
ss_http_client *ss_http_client_new(const ss_http_tls *tls /* NULL: defaults */);
void ss_http_client_free(ss_http_client *c);

/* A streamed body: fill buf, return the bytes written, 0 at the end, or -errno. */
typedef ssize_t (*ss_http_body_fn)(void *arg, void *buf, size_t n);

typedef struct ss_http_request {
    const char *method;          /* "POST", "PUT" (any other: sent as given; "GET" has no body) */
    const char *url;             /* http:// or https:// */
    const char *const *headers;  /* "Name: value" strings, NULL-terminated; may be NULL */
    const void *body;            /* the body in memory ... */
    size_t body_len;
    ss_http_body_fn body_fn;     /* ... or streamed (body == NULL) */
    void *body_arg;
    int64_t body_size;           /* streamed: its length, or -1 for chunked transfer */
    uint32_t connect_timeout_ms; /* 0: 10 s */
    uint64_t deadline_ns;        /* monotonic (ss_mono_ns); the whole call; 0: none */
    size_t max_response;         /* response body bytes kept at most (the rest discarded) */
} ss_http_request;

typedef struct ss_http_response {
    int status;                  /* HTTP status; 0 when there was no answer */
    int64_t retry_after_ms;      /* Retry-After (delta seconds or HTTP date); -1 absent */
    ss_buf body;                 /* the caller frees it (ss_buf_free) */
    char error[160];             /* when it failed: one phrase; never a header value,
                                    a URL's credentials or its query */
} ss_http_response;

/* Blocks the calling (exporter) thread until an answer, the deadline or a
 * cancel. 0: an HTTP answer came (any status, see resp->status);
 * otherwise -ETIMEDOUT, -ECANCELED, -ECONNREFUSED, -ECONNRESET, -EPROTO
 * (TLS failure, not HTTP), -ENOMEM, ... with resp->error saying more.
 * Also: -EHOSTUNREACH (name not resolved, no route), -EBADMSG (the answer
 * is not HTTP), -EINVAL (bad URL or request), a body_fn's own -errno, -EIO
 * (a streamed body shorter than body_size). resp is initialised here
 * (the caller need not clear it) and its body must be freed in every case.
 * A streamed body cannot be rewound: when a kept-alive connection turns
 * out closed after part of it was read, the call fails with -ECONNRESET
 * (an in-memory body is re-sent on a new connection). */
int ss_http_perform(ss_http_client *c, const ss_http_request *req, ss_http_response *resp);

/* Any thread, any time: the perform running now (or the next one) returns
 * -ECANCELED promptly. For shutdown. The cancel sticks: every later
 * perform returns -ECANCELED at once, until ss_http_client_uncancel. Must
 * not race with ss_http_client_free. */
void ss_http_client_cancel(ss_http_client *c);
/* On the client's thread: let performs run again after a cancel. */
void ss_http_client_uncancel(ss_http_client *c);

/* The URL as a message may show it: "user:password@" becomes "***@", the
 * query and the fragment are cut off. Needs no libcurl. */
void ss_http_url_for_messages(const char *url, char *out, size_t n);

#endif /* SS_HTTP_CLIENT_H */
