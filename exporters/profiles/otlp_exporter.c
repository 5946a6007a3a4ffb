/*
 * otlp_exporter.c: exporter "otlp_profiles": every export period one
 * ExportProfilesServiceRequest (otlp_encode.c) over the gRPC client of
 * exporters/otlp (otlp.h), with the OTEL_EXPORTER_OTLP_PROFILES_* /
 * OTEL_EXPORTER_OTLP_* endpoint, headers, gzip, timeout and the shared
 * retry policy.
 *
 *   STACKSHOT_PROFILES_VERSION  v1development (default) | v1experimental
 *   STACKSHOT_PROFILES_METHOD   gRPC method path; default follows the version
 *   STACKSHOT_PROFILES_TIMESTAMPS  true (default): one timestamp per observation
 *
 * Requests wait in a short FIFO (at most 4; the oldest is dropped and
 * counted) while the backend is down. "Records" in the counters are
 * observations: one thread in one round.
 */
#include "../otlp/otlp.h"
#include "encode.h"
#include "period.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DEV_METHOD "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define EXP_METHOD "/opentelemetry.proto.collector.profiles.v1experimental.ProfilesService/Export"
#define MAX_PENDING 4
#define MAX_REQUEST (64u << 20)

typedef struct pending {
    struct pending *next;
    uint64_t records;
    size_t len;
    uint8_t bytes[];
} pending;

typedef struct prof_state {
    ss_exporter_stats *stats;
    ss_period period;
    ss_otlp_endpoint ep;
    ss_grpc_client *client;
    ss_otlp_resource res;
    bool res_built;
    ss_prof_resource_attr *rattrs;
    ss_prof_request_opts opts;
    char method[256];
    ss_buf out;
    ss_retry_policy policy;
    ss_retry_state retry;
    uint64_t not_before_ns;
    ss_grpc_call *inflight; /* the call sending the head, or NULL */
    pending *head, *tail;
    int n_pending;
    uint64_t rnd;
    int last_status;
    bool unimplemented_told, partial_told;
    bool backlog_told; /* "dropping the oldest" said in this outage */
    uint64_t rounds_consumed, records_taken; /* for the accounting line at close */
} prof_state;

static uint64_t next_rnd(prof_state *s) {
    s->rnd ^= s->rnd << 13;
    s->rnd ^= s->rnd >> 7;
    s->rnd ^= s->rnd << 17;
    return s->rnd;
}

static void pop_head(prof_state *s, bool dropped) {
    pending *p = s->head;
    if (dropped)
        atomic_fetch_add(&s->stats->records_dropped, p->records);
    s->head = p->next;
    if (!s->head)
        s->tail = NULL;
    s->n_pending--;
    ss_mem_release(sizeof *p + p->len);
    free(p);
    s->retry = (ss_retry_state){0};
}

/* Drop the period after the head (the head is in flight; MAX_PENDING >= 2). */
static void drop_second(prof_state *s) {
    pending *p = s->head->next;
    s->head->next = p->next;
    if (s->tail == p)
        s->tail = s->head;
    s->n_pending--;
    atomic_fetch_add(&s->stats->records_dropped, p->records);
    ss_mem_release(sizeof *p + p->len);
    free(p);
}

/* ExportProfilesServiceResponse{partial_success=1{rejected_profiles=1,
 * error_message=2}}: the shared, fuzzed decoder of exporters/otlp
 * (response.c); a malformed answer says nothing (0, ""). */
static void partial_success(const uint8_t *p, size_t n, int64_t *rejected, char *msg,
                            size_t msg_len) {
    ss_otlp_decode_partial_success(p, n, rejected, msg, msg_len);
}

static void tell_failure(prof_state *s, const ss_grpc_result *res, const char *what) {
    if (res->status == SS_GRPC_UNIMPLEMENTED) {
        if (!s->unimplemented_told)
            ss_error("otlp_profiles: %s answers UNIMPLEMENTED to %s: no profiles pipeline there "
                     "(an OpenTelemetry Collector needs --feature-gates=+service.profilesSupport "
                     "and a profiles pipeline), or another proto version (see "
                     "STACKSHOT_PROFILES_VERSION); dropping the data",
                     s->ep.url, s->method);
        s->unimplemented_told = true;
        s->last_status = res->status;
        return;
    }
    ss_log(res->status == s->last_status ? SS_LOG_DEBUG : SS_LOG_WARN,
           "otlp_profiles: export to %s failed: %s%s%s; %s", s->ep.url,
           ss_grpc_status_name(res->status), res->message[0] ? ": " : "", res->message, what);
    s->last_status = res->status;
}

/* The head's call ended with *res: count it, pop or drop the head, or
 * schedule a retry. True when the FIFO may go on at once. */
static bool head_done(prof_state *s, const ss_grpc_result *res) {
    pending *p = s->head;
    int st = res->status;
    bool go_on = true;
    if (st == SS_GRPC_OK) {
        if (s->last_status != SS_GRPC_OK)
            ss_info("otlp_profiles: delivering to %s again", s->ep.url);
        s->last_status = SS_GRPC_OK;
        s->backlog_told = false;
        atomic_fetch_add(&s->stats->bytes_sent, p->len);
        int64_t rejected;
        char msg[200];
        partial_success((const uint8_t *)res->response.data, res->response.len, &rejected, msg,
                        sizeof msg);
        if (rejected > 0 || msg[0]) {
            ss_log(s->partial_told ? SS_LOG_DEBUG : SS_LOG_WARN,
                   "otlp_profiles: the backend rejected %" PRId64 " profiles (%s); not retried",
                   rejected, msg[0] ? msg : "no message");
            s->partial_told = true;
        }
        if (rejected > 0)
            atomic_fetch_add(&s->stats->records_rejected, p->records);
        else
            atomic_fetch_add(&s->stats->records_exported, p->records);
        pop_head(s, false);
    } else {
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
            go_on = false;
        } else {
            snprintf(what, sizeof what, "dropping the profiles of the period");
            tell_failure(s, res, what);
            pop_head(s, true);
        }
    }
    return go_on;
}

/* Start the head's call; its deadline is the export timeout, capped by
 * cap_ns (shutdown) when given. The call runs in gRPC's threads: this
 * exporter thread only looks at it (poll_inflight), so a backend that
 * never answers holds neither the rounds queued behind it nor the exit. */
static bool start_head(prof_state *s, uint64_t cap_ns) {
    pending *p = s->head;
    uint64_t now = ss_mono_ns();
    uint64_t deadline = s->ep.timeout_ms ? now + (uint64_t)s->ep.timeout_ms * 1000000ull : 0;
    if (cap_ns && (!deadline || deadline > cap_ns))
        deadline = cap_ns;
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    s->inflight = ss_grpc_call_start(s->client, s->method, p->bytes, p->len, deadline, &res);
    if (!s->inflight)
        head_done(s, &res);
    ss_grpc_result_free(&res);
    return s->inflight != NULL;
}

/* Wait at most wait_ns for the call in flight; true when it ended and the
 * FIFO may go on. */
static bool poll_inflight(prof_state *s, uint64_t wait_ns) {
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

/* A loopback answer takes a millisecond or so; a slower one is looked at
 * again by the next tick or round. */
#define POLL_NS 20000000ull

static void pump(prof_state *s) {
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

/* End the call in flight, if any (its period stays queued). */
static void cancel_inflight(prof_state *s) {
    if (!s->inflight)
        return;
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    ss_grpc_call_cancel(s->client, s->inflight, &res);
    ss_grpc_result_free(&res);
    s->inflight = NULL;
}

static int build_resource(prof_state *s) {
    if (s->res_built)
        return 0;
    if (ss_otlp_resource_build(&s->res) != 0)
        return -ENOMEM;
    s->res_built = true;
    s->rattrs = calloc(s->res.n_attrs ? s->res.n_attrs : 1, sizeof *s->rattrs);
    if (!s->rattrs)
        return -ENOMEM;
    for (size_t i = 0; i < s->res.n_attrs; i++) {
        const ss_attr *a = &s->res.attrs[i];
        s->rattrs[i] = (ss_prof_resource_attr){a->key, a->type == SS_ATTR_STRING ? a->str : NULL,
                                               a->i};
    }
    s->opts.resource = s->rattrs;
    s->opts.n_resource = s->res.n_attrs;
    return 0;
}

/* The period is over: encode it and queue the request. */
static void prof_flush(void *owner, ss_agg *a) {
    prof_state *s = owner;
    uint64_t records = a->n_obs;
    s->records_taken += records;
    if (build_resource(s) != 0) {
        atomic_fetch_add(&s->stats->records_dropped, records);
        return;
    }
    ss_buf_reset(&s->out);
    int rc = ss_otlp_profiles_encode(a, &s->opts, &s->out);
    if (rc == -ENODATA) {
        atomic_fetch_add(&s->stats->records_dropped, records); /* 0 unless samples had no frames */
        return;
    }
    if (rc != 0 || s->out.len > MAX_REQUEST) {
        ss_warn("otlp_profiles: the period's request %s; %" PRIu64 " observations lost",
                rc ? "could not be encoded (out of memory)" : "exceeds 64 MiB", records);
        atomic_fetch_add(&s->stats->records_dropped, records);
        return;
    }
    pending *p = malloc(sizeof *p + s->out.len);
    if (!p) {
        atomic_fetch_add(&s->stats->records_dropped, records);
        return;
    }
    p->next = NULL;
    p->records = records;
    p->len = s->out.len;
    memcpy(p->bytes, s->out.data, s->out.len);
    ss_mem_charge(sizeof *p + p->len);
    if (s->tail)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
    s->n_pending++;
    while (s->n_pending > MAX_PENDING) {
        /* told once per outage (the counters have every drop) */
        ss_log(s->backlog_told ? SS_LOG_DEBUG : SS_LOG_WARN,
               "otlp_profiles: %d periods wait for %s; dropping the oldest (and so on, "
               "counted, until it takes data again)",
               s->n_pending, s->ep.url);
        s->backlog_told = true;
        if (s->inflight)
            drop_second(s); /* the head is being sent */
        else
            pop_head(s, true);
    }
}

static void prof_free(prof_state *s) {
    cancel_inflight(s);
    while (s->head)
        pop_head(s, true);
    ss_grpc_client_destroy(s->client);
    if (s->res_built)
        ss_otlp_resource_free(&s->res);
    free(s->rattrs);
    ss_otlp_endpoint_free(&s->ep);
    ss_period_free(&s->period);
    ss_buf_free(&s->out);
    free(s);
}

static int prof_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    prof_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->stats = stats;
    ss_buf_init(&s->out);
    s->rnd = ss_mono_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    s->policy = ss_retry_policy_load();
    const char *v = ss_config_str("STACKSHOT_PROFILES_VERSION", "v1development");
    if (strcasecmp(v, "v1experimental") == 0) {
        s->opts.version = SS_OTLP_PROF_V1EXPERIMENTAL;
    } else {
        if (strcasecmp(v, "v1development") != 0)
            ss_config_bad("STACKSHOT_PROFILES_VERSION", v,
                          "not v1development or v1experimental", "using v1development");
        s->opts.version = SS_OTLP_PROF_V1DEVELOPMENT;
    }
    const char *def = s->opts.version == SS_OTLP_PROF_V1EXPERIMENTAL ? EXP_METHOD : DEV_METHOD;
    const char *m = ss_config_str("STACKSHOT_PROFILES_METHOD", def);
    if (m[0] != '/' || strlen(m) >= sizeof s->method || strchr(m + 1, '/') == NULL) {
        ss_config_bad("STACKSHOT_PROFILES_METHOD", m, "not a gRPC method path (/package.Service/Method)",
                      "using the default");
        m = def;
    }
    snprintf(s->method, sizeof s->method, "%s", m);
    s->opts.timestamps = ss_config_bool("STACKSHOT_PROFILES_TIMESTAMPS", true);
    s->opts.scope_name = SS_NAME;
    s->opts.scope_version = SS_VERSION;
    int rc = ss_period_init(&s->period, cfg, "otlp_profiles", stats, prof_flush, s);
    if (rc == 0)
        rc = ss_otlp_endpoint_load(&s->ep, "PROFILES");
    if (rc == 0)
        s->client = ss_grpc_client_create(&s->ep, "otlp_profiles", &rc);
    if (rc != 0) {
        prof_free(s);
        return rc;
    }
    ss_info("otlp_profiles: sending %s profiles every %llu s to %s (%s, %s%s)",
            s->opts.version == SS_OTLP_PROF_V1EXPERIMENTAL ? "v1experimental" : "v1development",
            (unsigned long long)(s->period.period_ns / 1000000000ull), s->ep.url, s->ep.target,
            s->ep.tls ? "TLS" : "plaintext",
            s->ep.compression == SS_OTLP_COMPRESS_GZIP ? ", gzip" : "");
    *state = s;
    return 0;
}

static void prof_consume(void *state, ss_round *r) {
    prof_state *s = state;
    s->rounds_consumed++;
    /* The resource waits for the first round: a JVM knows its runtime
     * facts (process.runtime.*) only by then. */
    if (build_resource(s) != 0) {
        s->records_taken += r->n_threads;
        atomic_fetch_add(&s->stats->records_dropped, r->n_threads);
        return;
    }
    ss_period_consume(&s->period, r);
    pump(s);
}

static void prof_tick(void *state, uint64_t now) {
    prof_state *s = state;
    ss_grpc_client_note_threads(s->client);
    ss_period_tick(&s->period, now);
    pump(s);
}

/* The part of the shutdown time kept for cancelling the call in flight
 * and closing the channel after the last send (see logs_exporter.c). */
static uint64_t send_until(uint64_t deadline_ns) {
    uint64_t now = ss_mono_ns();
    if (deadline_ns <= now)
        return deadline_ns;
    uint64_t keep = (deadline_ns - now) / 8;
    return deadline_ns - (keep < 200000000ull ? keep : 200000000ull);
}

static void prof_close(void *state, uint64_t deadline_ns) {
    prof_state *s = state;
    deadline_ns = send_until(deadline_ns);
    ss_period_flush(&s->period);
    while (s->head) {
        uint64_t now = ss_mono_ns();
        if (now + 1000000 >= deadline_ns)
            break;
        if (now < s->not_before_ns) {
            if (s->not_before_ns >= deadline_ns)
                break;
            ss_sleep_ns(s->not_before_ns - now);
            continue;
        }
        if (s->inflight) {
            poll_inflight(s, deadline_ns - now);
            continue;
        }
        start_head(s, deadline_ns);
    }
    cancel_inflight(s);
    if (s->head)
        ss_warn("otlp_profiles: %d periods not delivered before the shutdown deadline",
                s->n_pending);
    while (s->head)
        pop_head(s, true);
    ss_info("otlp_profiles: accounting: %" PRIu64 " rounds consumed, %" PRIu64
            " records taken: %" PRIu64 " exported, %" PRIu64 " dropped, %" PRIu64 " rejected",
            s->rounds_consumed, s->records_taken, atomic_load(&s->stats->records_exported),
            atomic_load(&s->stats->records_dropped), atomic_load(&s->stats->records_rejected));
    prof_free(s);
}

const ss_exporter_ops ss_otlp_profiles_exporter = {
    .name = "otlp_profiles",
    .role = "otlpp",
    .tick_ms = 200,
    .open = prof_open,
    .consume = prof_consume,
    .tick = prof_tick,
    .close = prof_close,
};
