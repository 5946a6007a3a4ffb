/* logs_exporter.c: the "otlp_logs" exporter: call stacks as OTLP logs over
 * gRPC, by the Splunk profiling conventions.
 *
 * Each round is encoded at once into one or more requests (at most
 * STACKSHOT_LOGS_BATCH_SIZE records and 4 MiB each) that wait in a FIFO of
 * packed bytes until the backend takes them. The FIFO is charged to the
 * agent's memory account; past STACKSHOT_MAX_MEMORY its oldest requests go,
 * counted. One call is in flight at a time; consume and tick (every
 * 100 ms) start the next when one is due and look at the one in flight
 * for at most POLL_NS, so this exporter thread never waits on the network
 * or sleeps through a backoff inside consume: a failed call only sets a
 * gate that later ticks respect. */
#include "logs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pending {
    struct pending *next;
    uint32_t records;
    size_t len, charged;
    uint8_t *bytes;
} pending;

typedef struct logs_state {
    ss_exporter_stats *stats;
    ss_otlp_endpoint ep;
    ss_grpc_client *client;
    ss_otlp_resource res;
    bool res_built;
    ss_logs_encoder enc;
    ss_buf out;
    ss_retry_policy policy;
    ss_retry_state retry;   /* of the request at the head */
    uint64_t not_before_ns; /* backoff gate (monotonic) */
    ss_grpc_call *inflight; /* the call sending the head, or NULL */
    uint32_t batch_size;
    bool pprof; /* STACKSHOT_LOGS_FORMAT=pprof: one record per round */
    pending *head, *tail;
    size_t n_pending;
    uint64_t rnd;
    int last_status;        /* to log a change of state once, not every call */
    uint64_t rounds_consumed, records_taken; /* for the accounting line at close */
    bool unimplemented_told, partial_told, cap_told;
} logs_state;

static uint64_t next_rnd(logs_state *s) {
    /* xorshift64: jitter only, not security */
    s->rnd ^= s->rnd << 13;
    s->rnd ^= s->rnd >> 7;
    s->rnd ^= s->rnd << 17;
    return s->rnd;
}

/* ---- the FIFO ------------------------------------------------------ */

static void pop_head(logs_state *s) {
    pending *p = s->head;
    s->head = p->next;
    if (!s->head)
        s->tail = NULL;
    s->n_pending--;
    ss_mem_release(p->charged);
    free(p->bytes);
    free(p);
    s->retry = (ss_retry_state){0};
}

static void drop_head(logs_state *s) {
    atomic_fetch_add(&s->stats->records_dropped, s->head->records);
    pop_head(s);
}

/* Drop the request after the head (the head is being sent). */
static void drop_second(logs_state *s) {
    pending *p = s->head->next;
    s->head->next = p->next;
    if (s->tail == p)
        s->tail = s->head;
    s->n_pending--;
    atomic_fetch_add(&s->stats->records_dropped, p->records);
    ss_mem_release(p->charged);
    free(p->bytes);
    free(p);
}

/* While the backend is behind (two requests wait already: the head, sent
 * or backing off, and one more), a new request joins the newest waiting
 * one up to the batch limits: two serialized ExportLogsServiceRequests one
 * after the other are one request holding the ResourceLogs of both
 * (protobuf appends repeated fields). Without this, a backlog drains one
 * round per call, and a backend whose calls take longer than a round's
 * interval (a remote collector, a slow link) would never be caught up
 * with after an outage. The head (the request a call is sending or will
 * retry) is never touched, so a backend that keeps up still gets one
 * request per round. True when b was taken. */
static bool merge_into_tail(logs_state *s, const ss_buf *b, uint32_t records) {
    pending *t = s->tail;
    if (!t || t == s->head || t->records + records > s->batch_size ||
        t->len + b->len > SS_LOGS_MAX_REQUEST)
        return false;
    uint8_t *grown = realloc(t->bytes, t->len + b->len);
    if (!grown)
        return false;
    t->bytes = grown;
    memcpy(t->bytes + t->len, b->data, b->len);
    t->len += b->len;
    t->records += records;
    t->charged += b->len;
    ss_mem_charge(b->len);
    return true;
}

static int push(logs_state *s, const ss_buf *b, uint32_t records) {
    if (merge_into_tail(s, b, records))
        return 0;
    pending *p = malloc(sizeof *p);
    uint8_t *bytes = malloc(b->len ? b->len : 1);
    if (!p || !bytes) {
        free(p);
        free(bytes);
        return -ENOMEM;
    }
    p->next = NULL;
    p->records = records;
    p->len = b->len;
    p->charged = sizeof *p + b->len;
    p->bytes = bytes;
    memcpy(p->bytes, b->data, b->len);
    ss_mem_charge(p->charged);
    if (s->tail)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
    s->n_pending++;
    return 0;
}

/* Past the memory cap the oldest requests go; the newest always stays. */
static void enforce_cap(logs_state *s) {
    size_t limit = ss_mem_limit();
    while (s->n_pending > 1 && ss_mem_used() > limit) {
        /* the head stays while a call sends it, and the newest always */
        if (s->inflight && s->n_pending < 3)
            break;
        if (!s->cap_told) {
            ss_warn("otlp_logs: the backend is not taking data; dropping the oldest "
                    "batches to stay within STACKSHOT_MAX_MEMORY (%zu bytes)",
                    limit);
            s->cap_told = true;
        }
        if (s->inflight)
            drop_second(s);
        else
            drop_head(s);
    }
}

/* ---- one attempt --------------------------------------------------- */

static void on_response(logs_state *s, const ss_grpc_result *res, uint32_t records) {
    uint64_t rejected = 0;
    int64_t n;
    char msg[200];
    /* the answer's bytes, decoded by the fuzzed pure decoder (response.c) */
    if (ss_otlp_decode_partial_success((const uint8_t *)res->response.data, res->response.len,
                                       &n, msg, sizeof msg) == 0) {
        rejected = n > 0 ? ((uint64_t)n > records ? records : (uint64_t)n) : 0;
        if (rejected || msg[0]) {
            ss_log(s->partial_told ? SS_LOG_DEBUG : SS_LOG_WARN,
                   "otlp_logs: the backend accepted a batch partially: %" PRIu64
                   " of %u records rejected (%s); not retried",
                   rejected, records, msg[0] ? msg : "no message");
            s->partial_told = true;
        }
    }
    atomic_fetch_add(&s->stats->records_rejected, rejected);
    atomic_fetch_add(&s->stats->records_exported, records - rejected);
}

static void tell_failure(logs_state *s, const ss_grpc_result *res, const char *what) {
    if (res->status == SS_GRPC_UNIMPLEMENTED) {
        if (!s->unimplemented_told)
            ss_error("otlp_logs: %s (%s) answers UNIMPLEMENTED to LogsService/Export: it is "
                     "not an OTLP/gRPC receiver with a logs pipeline (check the port: 4317 "
                     "is OTLP/gRPC, 4318 OTLP/HTTP, which this agent does not speak); "
                     "dropping the data",
                     s->ep.url, s->ep.target);
        s->unimplemented_told = true;
        s->last_status = res->status;
        return;
    }
    ss_log(res->status == s->last_status ? SS_LOG_DEBUG : SS_LOG_WARN,
           "otlp_logs: export to %s failed: %s%s%s; %s", s->ep.url,
           ss_grpc_status_name(res->status), res->message[0] ? ": " : "", res->message,
           what);
    s->last_status = res->status;
}

/* The head's call ended with *res: count it, pop or drop the head, or
 * schedule a retry. Returns true when the FIFO may go on at once. */
static bool head_done(logs_state *s, ss_grpc_result *res) {
    pending *p = s->head;
    int st = res->status;
    if (st == SS_GRPC_OK) {
        if (s->last_status != SS_GRPC_OK)
            ss_info("otlp_logs: delivering to %s again", s->ep.url);
        s->last_status = SS_GRPC_OK;
        atomic_fetch_add(&s->stats->bytes_sent, p->len);
        on_response(s, res, p->records);
        pop_head(s);
        return true;
    }
    atomic_fetch_add(&s->stats->failures, 1);
    uint64_t delay;
    char what[96];
    bool retryable = ss_otlp_retryable(st, res->has_retry_delay);
    if (retryable &&
        ss_retry_next(&s->policy, &s->retry, res->retry_delay_ns, next_rnd(s), &delay)) {
        snprintf(what, sizeof what, "retrying in %" PRIu64 " ms", delay / 1000000);
        tell_failure(s, res, what);
        atomic_fetch_add(&s->stats->retries, 1);
        s->not_before_ns = ss_mono_ns() + delay;
        return false;
    }
    if (retryable)
        snprintf(what, sizeof what, "giving up after %u attempts; dropping the batch",
                 (unsigned)s->retry.attempts);
    else
        snprintf(what, sizeof what, "dropping the batch");
    tell_failure(s, res, what);
    drop_head(s);
    return true;
}

/* Start the head's call; its deadline is the export timeout, capped by
 * cap_ns (shutdown) when given. False when it failed at once (handled). */
static bool start_head(logs_state *s, uint64_t cap_ns) {
    pending *p = s->head;
    uint64_t now = ss_mono_ns();
    uint64_t deadline = s->ep.timeout_ms ? now + (uint64_t)s->ep.timeout_ms * 1000000ull : 0;
    if (cap_ns && (!deadline || deadline > cap_ns))
        deadline = cap_ns;
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    s->inflight = ss_grpc_call_start(s->client, SS_LOGS_METHOD, p->bytes, p->len, deadline,
                                     &res);
    if (!s->inflight)
        head_done(s, &res);
    ss_grpc_result_free(&res);
    return s->inflight != NULL;
}

/* Wait at most wait_ns for the call in flight. True when it ended (and
 * the FIFO may go on). */
static bool poll_inflight(logs_state *s, uint64_t wait_ns) {
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    if (!ss_grpc_call_poll(s->client, s->inflight, wait_ns, &res)) {
        ss_grpc_result_free(&res);
        return false;
    }
    s->inflight = NULL;
    bool go_on = head_done(s, &res);
    ss_grpc_result_free(&res);
    return go_on;
}

/* A call answered within this is handled at once (loopback takes about a
 * millisecond); a slower one is looked at again by the next tick, so the
 * exporter thread never waits long for the network. */
#define POLL_NS 20000000ull

/* Send what is due, oldest first, one call at a time, until something
 * must wait (a call still in flight, or a backoff). */
static void pump(logs_state *s) {
    for (;;) {
        if (s->inflight) {
            if (!poll_inflight(s, POLL_NS))
                return;
            continue;
        }
        if (!s->head || ss_mono_ns() < s->not_before_ns)
            return;
        start_head(s, 0);
    }
}

/* ---- the exporter -------------------------------------------------- */

/* Give up what is held: the call in flight is cancelled, every request
 * still queued is counted as dropped. */
static void abandon(logs_state *s) {
    if (s->inflight) {
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        ss_grpc_call_cancel(s->client, s->inflight, &res);
        ss_grpc_result_free(&res);
        s->inflight = NULL;
    }
    while (s->head)
        drop_head(s);
}

static void logs_free(logs_state *s) {
    abandon(s);
    ss_grpc_client_destroy(s->client);
    if (s->res_built)
        ss_otlp_resource_free(&s->res);
    ss_otlp_endpoint_free(&s->ep);
    ss_logs_encoder_free(&s->enc);
    ss_buf_free(&s->out);
    free(s);
}

static int logs_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    (void)cfg;
    logs_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->stats = stats;
    ss_logs_encoder_init(&s->enc);
    ss_buf_init(&s->out);
    s->rnd = ss_mono_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    s->policy = ss_retry_policy_load();
    s->batch_size = (uint32_t)ss_config_int("STACKSHOT_LOGS_BATCH_SIZE", SS_LOGS_DEFAULT_BATCH,
                                            1, 100000);
    const char *fmt = ss_config_str("STACKSHOT_LOGS_FORMAT", "text");
    if (strcmp(fmt, "pprof") == 0)
        s->pprof = true;
    else if (strcmp(fmt, "text") != 0)
        ss_config_bad("STACKSHOT_LOGS_FORMAT", fmt, "unknown format (text or pprof)",
                      "using text");
    int rc = ss_otlp_endpoint_load(&s->ep, "LOGS");
    if (rc == 0)
        s->client = ss_grpc_client_create(&s->ep, "otlp_logs", &rc);
    if (rc != 0) {
        logs_free(s);
        return rc;
    }
    ss_info("otlp_logs: sending call stacks to %s (%s, %s%s, %u headers, timeout %u ms)",
            s->ep.url, s->ep.target, s->ep.tls ? "TLS" : "plaintext",
            s->ep.compression == SS_OTLP_COMPRESS_GZIP ? ", gzip" : "",
            (unsigned)s->ep.n_headers, (unsigned)s->ep.timeout_ms);
    ss_debug("otlp_logs: OTLP wire of opentelemetry-proto %s, %s bodies, batches of %u",
             SS_OTLP_PROTO_TAG, s->pprof ? "pprof" : "text", (unsigned)s->batch_size);
    *state = s;
    return 0;
}

/* The pprof format: the round as one record (see ss_logs_encode_pprof). */
static void consume_pprof(logs_state *s, ss_round *r, uint64_t observed) {
    int rc = ss_logs_encode_pprof(&s->enc, &s->res, r, observed, &s->out);
    if (rc == -ENODATA)
        return; /* a round without threads: nothing to send */
    s->records_taken++;
    if (rc != 0 || s->out.len > SS_LOGS_MAX_REQUEST || push(s, &s->out, 1) != 0) {
        atomic_fetch_add(&s->stats->records_dropped, 1);
        ss_warn("otlp_logs: round %" PRIu64 " could not be encoded as pprof (%s); lost",
                r->seq, rc ? strerror(-rc) : "too large or out of memory");
        return;
    }
    enforce_cap(s);
    pump(s);
}

static void logs_consume(void *state, ss_round *r) {
    logs_state *s = state;
    s->rounds_consumed++;
    if (!s->pprof)
        s->records_taken += r->n_threads;
    /* The resource is built with the first round, not in open: a JVM agent
     * starts its exporters in Agent_OnLoad and learns the runtime's name
     * and version (process.runtime.*) only once the VM is initialised,
     * before its first round. */
    if (!s->res_built) {
        if (ss_otlp_resource_build(&s->res) != 0) {
            /* pprof: the round is the record */
            s->records_taken += s->pprof ? 1 : 0;
            atomic_fetch_add(&s->stats->records_dropped, s->pprof ? 1 : r->n_threads);
            return;
        }
        s->res_built = true;
    }
    uint64_t observed = ss_wall_ns();
    if (s->pprof) {
        consume_pprof(s, r, observed);
        return;
    }
    uint32_t first = 0;
    while (first < r->n_threads) {
        uint32_t records, dropped;
        int used = ss_logs_encode(&s->enc, &s->res, r, first, s->batch_size,
                                  SS_LOGS_MAX_REQUEST, observed, &s->out, &records, &dropped);
        if (used < 0 || (records && push(s, &s->out, records) != 0)) {
            atomic_fetch_add(&s->stats->records_dropped, r->n_threads - first);
            ss_warn("otlp_logs: out of memory encoding round %" PRIu64 "; its records are lost",
                    r->seq);
            break;
        }
        if (dropped) {
            atomic_fetch_add(&s->stats->records_dropped, dropped);
            ss_warn("otlp_logs: %u call stacks of round %" PRIu64 " exceed %u bytes each; "
                    "dropped",
                    dropped, r->seq, SS_LOGS_MAX_REQUEST);
        }
        first += (uint32_t)used;
    }
    enforce_cap(s);
    pump(s);
}

static void logs_tick(void *state, uint64_t now) {
    (void)now;
    logs_state *s = state;
    ss_grpc_client_note_threads(s->client);
    enforce_cap(s);
    pump(s);
}

/* Deliver what is still held before the deadline: the usual rules
 * (backoff, server delays, retries), each call's deadline capped by the
 * shutdown deadline; what cannot go in time is counted as dropped. */
/* The part of the shutdown time kept for cancelling the call in flight
 * and closing the channel after the last send: without it, a starved
 * machine let the exit's deadline pass in gRPC's cleanup and the exporter
 * was abandoned with its counters incomplete. */
static uint64_t send_until(uint64_t deadline_ns) {
    uint64_t now = ss_mono_ns();
    if (deadline_ns <= now)
        return deadline_ns;
    uint64_t keep = (deadline_ns - now) / 8;
    return deadline_ns - (keep < 200000000ull ? keep : 200000000ull);
}

static void logs_close(void *state, uint64_t deadline_ns) {
    logs_state *s = state;
    deadline_ns = send_until(deadline_ns);
    while (s->head) {
        uint64_t now = ss_mono_ns();
        if (now + 1000000 >= deadline_ns)
            break;
        if (s->inflight) {
            poll_inflight(s, deadline_ns - now);
            continue;
        }
        if (now < s->not_before_ns) {
            if (s->not_before_ns >= deadline_ns)
                break;
            ss_sleep_ns(s->not_before_ns - now);
            continue;
        }
        start_head(s, deadline_ns);
    }
    if (s->head) {
        size_t lost = 0;
        for (pending *p = s->head; p; p = p->next)
            lost += p->records;
        ss_warn("otlp_logs: %zu records not delivered before the shutdown deadline", lost);
    }
    abandon(s);
    ss_info("otlp_logs: accounting: %" PRIu64 " rounds consumed, %" PRIu64
            " records taken: %" PRIu64 " exported, %" PRIu64 " dropped, %" PRIu64 " rejected",
            s->rounds_consumed, s->records_taken, atomic_load(&s->stats->records_exported),
            atomic_load(&s->stats->records_dropped), atomic_load(&s->stats->records_rejected));
    logs_free(s);
}

const ss_exporter_ops ss_otlp_logs_exporter = {
    .name = "otlp_logs",
    .role = "otlpl",
    .tick_ms = 100,
    .open = logs_open,
    .consume = logs_consume,
    .tick = logs_tick,
    .close = logs_close,
};
