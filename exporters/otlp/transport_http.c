/* transport_http.c: OTLP/HTTP (http/protobuf) export calls for the sender,
 * over the HTTP client of exporters/common (http_client.h, the module
 * libstackshot-http.so).
 *
 * A request is POSTed to the signal's URL with Content-Type
 * application/x-protobuf (and Content-Encoding gzip when compression is
 * on), the configured headers, and the user agent. The answer, by the
 * OTLP/HTTP specification: 2xx delivered, its body the Export response
 * (partial success); 429, 502, 503 and 504 retried, after Retry-After when
 * the server sends one; every other status dropped, 404 told as a missing
 * receiver; the body of a failure is a google.rpc.Status whose message is
 * shown. A call that gets no answer (refused, reset, timed out, TLS, not
 * HTTP) is retried like gRPC's UNAVAILABLE.
 *
 * ss_http_perform blocks, so calls run on a worker thread of this
 * transport ("stackshot-ohttp"): start hands it the request, poll waits
 * for its answer at most as long as the sender wants, cancel cuts the call
 * through ss_http_client_cancel. The client is created on that thread,
 * which alone uses it. */
#include "agent/buf.h"
#include "agent/log.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "agent/version.h"
#include "exporters/otlp/transport.h"
#include "exporters/common/http_module.h"
#include "exporters/common/http_redact.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ANSWER (64u << 10)     /* answer body bytes kept */
#define CANCEL_WAIT_NS 100000000ull /* how long a cut call may take to end */
#define MAX_HEADERS 64

typedef enum { IDLE, QUEUED, RUNNING, DONE, QUIT } call_state;

typedef struct http_transport {
    const ss_otlp_endpoint *ep;
    const char *who;
    char url[1024];
    char **header_lines;          /* "Name: value", NULL-terminated */
    char **header_values;         /* the values alone, for scrubbing messages */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    call_state state;             /* under mu */
    bool cut;                     /* the call in flight was cancelled (under mu) */
    int create_rc;                /* the worker's client: 0 or -errno (under mu) */
    bool created;
    ss_http_client *client;       /* the worker's */
    ss_buf body;                  /* the request being sent (a copy, maybe gzipped) */
    uint64_t deadline_ns;
    int rc;                       /* the call's result ... */
    ss_http_response resp;        /* ... and answer */
    bool abandoned;               /* a call that did not end when cut: leave it all */
} http_transport;

/* ---- the worker ------------------------------------------------------ */

static void *worker_main(void *arg) {
    http_transport *t = arg;
    ss_http_tls tls = {.insecure = t->ep->skip_verify,
                       .ca_file = t->ep->ca_file,
                       .cert_file = t->ep->cert_file,
                       .key_file = t->ep->key_file};
    ss_http_client *client = ss_http_client_new(t->ep->tls ? &tls : NULL);
    pthread_mutex_lock(&t->mu);
    t->client = client;
    t->create_rc = client ? 0 : -EIO;
    t->created = true;
    pthread_cond_broadcast(&t->cv);
    while (client) {
        while (t->state != QUEUED && t->state != QUIT)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->state == QUIT)
            break;
        t->state = RUNNING;
        bool cut = t->cut;
        pthread_mutex_unlock(&t->mu);
        if (!cut)
            ss_http_client_uncancel(client); /* a cancel of an earlier call */
        ss_http_request req = {.method = "POST",
                               .url = t->url,
                               .headers = (const char *const *)t->header_lines,
                               .body = t->body.data,
                               .body_len = t->body.len,
                               .deadline_ns = t->deadline_ns,
                               .max_response = MAX_ANSWER};
        int rc = ss_http_perform(client, &req, &t->resp);
        pthread_mutex_lock(&t->mu);
        t->rc = rc;
        if (t->state == RUNNING)
            t->state = DONE;
        pthread_cond_broadcast(&t->cv);
    }
    bool abandoned = t->abandoned;
    pthread_mutex_unlock(&t->mu);
    if (client && !abandoned)
        ss_http_client_free(client);
    return NULL;
}

/* ---- the answer ------------------------------------------------------ */

/* What a failure's body says (a google.rpc.Status), without anything of
 * the request's header values (a hostile server may echo a token). */
static void status_message(const http_transport *t, const ss_buf *body, char *msg, size_t n) {
    int32_t code;
    msg[0] = '\0';
    if (ss_otlp_decode_status((const uint8_t *)body->data, body->len, &code, msg, n) != 0)
        msg[0] = '\0';
    ss_utf8_fix(msg, strlen(msg));
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = ' ';
    ss_http_scrub(msg, n, t->url, (const char *const *)t->header_values);
}

static void outcome(const http_transport *t, int rc, ss_http_response *resp,
                    ss_otlp_outcome *o) {
    if (rc != 0) {
        /* no HTTP answer: refused, reset, timed out, TLS, not HTTP */
        o->code = rc;
        o->retryable = rc != -EINVAL && rc != -ECANCELED;
        snprintf(o->what, sizeof o->what, "%s", resp->error[0] ? resp->error : strerror(-rc));
        return;
    }
    int st = resp->status;
    o->code = st;
    if (st >= 200 && st < 300) {
        o->ok = true;
        ss_buf_append(&o->body, resp->body.data, resp->body.len);
        snprintf(o->what, sizeof o->what, "HTTP %d", st);
        return;
    }
    o->retryable = st == 429 || st == 502 || st == 503 || st == 504;
    o->unimplemented = st == 404;
    if (o->retryable && resp->retry_after_ms >= 0)
        o->server_delay_ns = (uint64_t)resp->retry_after_ms * 1000000ull;
    char msg[200];
    status_message(t, &resp->body, msg, sizeof msg);
    snprintf(o->what, sizeof o->what, "HTTP %d%s%s", st, msg[0] ? ": " : "", msg);
}

/* ---- the transport --------------------------------------------------- */

static void free_lines(char **lines) {
    for (char **l = lines; l && *l; l++)
        free(*l);
    free(lines);
}

/* "Name: value" lines: the endpoint's headers, then ours. */
static int make_headers(http_transport *t) {
    const ss_otlp_endpoint *ep = t->ep;
    size_t n = ep->n_headers < MAX_HEADERS ? ep->n_headers : MAX_HEADERS;
    t->header_lines = calloc(n + 5, sizeof(char *));
    t->header_values = calloc(n + 1, sizeof(char *));
    if (!t->header_lines || !t->header_values)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const ss_otlp_header *h = &ep->headers[i];
        size_t len = strlen(h->key) + strlen(h->value) + 3;
        if (!(t->header_lines[k] = malloc(len)) || !(t->header_values[i] = strdup(h->value)))
            return -ENOMEM;
        snprintf(t->header_lines[k++], len, "%s: %s", h->key, h->value);
    }
    static const char *const ours[] = {"Content-Type: application/x-protobuf",
                                       "User-Agent: " SS_NAME "/" SS_VERSION};
    for (size_t i = 0; i < 2; i++)
        if (!(t->header_lines[k++] = strdup(ours[i])))
            return -ENOMEM;
    if (ep->compression == SS_OTLP_COMPRESS_GZIP &&
        !(t->header_lines[k++] = strdup("Content-Encoding: gzip")))
        return -ENOMEM;
    return 0;
}

static void http_free(http_transport *t) {
    if (t->header_values)
        for (char **v = t->header_values; *v; v++)
            memset(*v, 0, strlen(*v)); /* tokens */
    free_lines(t->header_lines);
    free_lines(t->header_values);
    ss_buf_free(&t->body);
    ss_buf_free(&t->resp.body);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

static int http_open(void **out, const ss_otlp_endpoint *ep, const ss_otlp_signal *sig) {
    int rc = ss_http_available(sig->who);
    if (rc != 0)
        return rc;
    http_transport *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->ep = ep;
    t->who = sig->who;
    snprintf(t->url, sizeof t->url, "%s", ep->http_url);
    ss_buf_init(&t->body);
    ss_buf_init(&t->resp.body);
    pthread_mutex_init(&t->mu, NULL);
    ss_cond_init_mono(&t->cv);
    if (make_headers(t) != 0) {
        http_free(t);
        return -ENOMEM;
    }
    rc = ss_thread_start(&t->thread, "ohttp", worker_main, t);
    if (rc != 0) {
        ss_error("%s: cannot start its HTTP thread (%s)", sig->who, strerror(-rc));
        http_free(t);
        return rc;
    }
    pthread_mutex_lock(&t->mu);
    while (!t->created)
        pthread_cond_wait(&t->cv, &t->mu);
    rc = t->create_rc;
    pthread_mutex_unlock(&t->mu);
    if (rc != 0) {
        ss_error("%s: cannot create an HTTP client for %s", sig->who, ep->url);
        pthread_join(t->thread, NULL);
        http_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static bool http_start(void *p, const void *bytes, size_t len, uint64_t deadline_ns,
                       ss_otlp_outcome *o) {
    http_transport *t = p;
    ss_buf_reset(&t->body);
    int rc = t->ep->compression == SS_OTLP_COMPRESS_GZIP ? ss_gzip(bytes, len, &t->body)
                                                          : ss_buf_append(&t->body, bytes, len);
    if (rc != 0 || t->body.failed) {
        o->code = -ENOMEM;
        o->retryable = true;
        snprintf(o->what, sizeof o->what, "out of memory preparing the request");
        return false;
    }
    pthread_mutex_lock(&t->mu);
    t->deadline_ns = deadline_ns;
    t->cut = false;
    t->state = QUEUED;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return true;
}

/* Under mu, the call DONE: its outcome, the transport idle again. */
static void take_answer(http_transport *t, ss_otlp_outcome *o) {
    outcome(t, t->rc, &t->resp, o);
    ss_buf_free(&t->resp.body);
    ss_buf_init(&t->resp.body);
    t->state = IDLE;
}

static bool http_poll(void *p, uint64_t wait_ns, ss_otlp_outcome *o) {
    http_transport *t = p;
    uint64_t until = wait_ns == UINT64_MAX ? UINT64_MAX : ss_mono_ns() + wait_ns;
    pthread_mutex_lock(&t->mu);
    while (t->state != DONE && ss_mono_ns() < until)
        ss_cond_wait_until(&t->cv, &t->mu,
                           until == UINT64_MAX ? ss_mono_ns() + 1000000000ull : until);
    bool ended = t->state == DONE;
    if (ended)
        take_answer(t, o);
    pthread_mutex_unlock(&t->mu);
    return ended;
}

static void http_cancel(void *p, ss_otlp_outcome *o) {
    http_transport *t = p;
    pthread_mutex_lock(&t->mu);
    if (t->state == QUEUED || t->state == RUNNING) {
        t->cut = true;
        if (t->client)
            ss_http_client_cancel(t->client);
        uint64_t until = ss_mono_ns() + CANCEL_WAIT_NS;
        while (t->state != DONE && ss_mono_ns() < until)
            ss_cond_wait_until(&t->cv, &t->mu, until);
    }
    if (t->state == DONE) {
        take_answer(t, o);
    } else if (t->state != IDLE) {
        /* the worker is still inside the call: it and the transport are
         * left to it (a leak at exit, never a wait past the deadline) */
        t->abandoned = true;
        o->code = -ECANCELED;
        snprintf(o->what, sizeof o->what, "cancelled");
    }
    pthread_mutex_unlock(&t->mu);
}

static void http_close(void *p) {
    http_transport *t = p;
    ss_otlp_outcome o;
    ss_otlp_outcome_init(&o);
    http_cancel(t, &o);
    ss_otlp_outcome_free(&o);
    pthread_mutex_lock(&t->mu);
    bool abandoned = t->abandoned;
    if (!abandoned)
        t->state = QUIT;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (abandoned) {
        pthread_detach(t->thread);
        return;
    }
    if (ss_thread_join(t->thread, ss_mono_ns() + CANCEL_WAIT_NS) == 0)
        http_free(t);
    /* else: detached by ss_thread_join, and left to it */
}

const ss_otlp_transport ss_otlp_transport_http = {
    .protocol = "http/protobuf",
    .open = http_open,
    .close = http_close,
    .start = http_start,
    .poll = http_poll,
    .cancel = http_cancel,
    .tick = NULL,
};
