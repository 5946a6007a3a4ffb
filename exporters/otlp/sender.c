/* sender.c: the one OTLP sender (sender.h).
 *
 * Requests wait in a FIFO of bytes charged to the agent's memory account.
 * One call is in flight at a time: push and tick start the next when one
 * is due and look at the one in flight for at most POLL_NS, so the
 * exporter thread never waits on the network and never sleeps through a
 * backoff there: a failed call only sets a gate that later ticks respect.
 * The request a call is sending (the head) is never touched until the
 * call ends. */
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "agent/round_loss.h"
#include "agent/time.h"
#include "exporters/otlp/transport.h"
#include "exporters/common/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pending {
    struct pending *next;
    uint64_t records, items;
    uint64_t round_lo, round_hi; /* the consumed rounds whose data it holds */
    size_t len, charged;
    uint8_t *bytes;
} pending;

struct ss_otlp_sender {
    ss_otlp_signal sig;
    ss_exporter_stats *stats;
    ss_otlp_endpoint ep;
    const ss_otlp_transport *tr;
    void *t;
    bool inflight;           /* the head is being sent */
    ss_retry_policy policy;
    ss_retry_state retry;    /* of the head */
    uint64_t not_before_ns;  /* backoff gate (monotonic) */
    pending *head, *tail;
    size_t n_pending;
    uint64_t rnd;
    int last_code;           /* to tell a change of state once, not every call */
    bool failing;            /* the last call failed */
    ss_backend backend;      /* what its last calls said: what an exit gives it */
    bool unimplemented_told, partial_told, unreadable_told, cap_told;
    uint64_t rounds_consumed, records_taken; /* the accounting line */
    ss_round_loss lost;                      /* rounds whose data did not all arrive */
};

/* A call answered within this is handled at once (loopback takes about a
 * millisecond); a slower one is looked at again by the next tick. */
#define POLL_NS 20000000ull

static uint64_t next_rnd(ss_otlp_sender *s) {
    /* xorshift64: jitter only, not security */
    s->rnd ^= s->rnd << 13;
    s->rnd ^= s->rnd >> 7;
    s->rnd ^= s->rnd << 17;
    return s->rnd;
}

/* ---- the FIFO ------------------------------------------------------ */

static void free_pending(pending *p) {
    ss_mem_release(p->charged);
    free(p->bytes);
    free(p);
}

static void pop_head(ss_otlp_sender *s) {
    pending *p = s->head;
    s->head = p->next;
    if (!s->head)
        s->tail = NULL;
    s->n_pending--;
    free_pending(p);
    s->retry = (ss_retry_state){0};
}

/* `records` records of the rounds round_lo..round_hi are given up. */
static void lose(ss_otlp_sender *s, uint64_t records, uint64_t round_lo, uint64_t round_hi) {
    atomic_fetch_add(&s->stats->records_dropped, records);
    ss_round_loss_mark(&s->lost, s->stats, round_lo, round_hi);
}

static void drop_head(ss_otlp_sender *s) {
    lose(s, s->head->records, s->head->round_lo, s->head->round_hi);
    pop_head(s);
}

/* Drop the request after the head (the head is being sent). */
static void drop_second(ss_otlp_sender *s) {
    pending *p = s->head->next;
    s->head->next = p->next;
    if (s->tail == p)
        s->tail = s->head;
    s->n_pending--;
    lose(s, p->records, p->round_lo, p->round_hi);
    free_pending(p);
}

/* While the backend is behind (two requests wait already: the head, sent
 * or backing off, and one more), a new request joins the newest waiting
 * one up to the limits, when the signal's requests merge by concatenation
 * (protobuf appends repeated fields: two ExportLogsServiceRequests one
 * after the other are one request holding the ResourceLogs of both).
 * Without this a backlog drains one request per call, and a backend whose
 * calls take longer than a round's interval would never catch up after an
 * outage. The head is never touched, so a backend that keeps up still
 * gets one request per push. True when the bytes were taken. */
static bool merge_into_tail(ss_otlp_sender *s, const void *bytes, size_t len,
                            uint64_t records, uint64_t items, uint64_t round_lo,
                            uint64_t round_hi) {
    pending *t = s->tail;
    if (!s->sig.mergeable || !t || t == s->head || t->records + records > s->sig.max_records ||
        t->len + len > s->sig.max_request)
        return false;
    uint8_t *grown = realloc(t->bytes, t->len + len);
    if (!grown)
        return false;
    t->bytes = grown;
    memcpy(t->bytes + t->len, bytes, len);
    t->len += len;
    t->records += records;
    t->items += items;
    if (round_lo && (!t->round_lo || round_lo < t->round_lo))
        t->round_lo = round_lo;
    if (round_hi > t->round_hi)
        t->round_hi = round_hi;
    t->charged += len;
    ss_mem_charge(len);
    return true;
}

static int enqueue(ss_otlp_sender *s, const void *bytes, size_t len, uint64_t records,
                   uint64_t items, uint64_t round_lo, uint64_t round_hi) {
    if (merge_into_tail(s, bytes, len, records, items, round_lo, round_hi))
        return 0;
    pending *p = malloc(sizeof *p);
    uint8_t *copy = malloc(len ? len : 1);
    if (!p || !copy) {
        free(p);
        free(copy);
        return -ENOMEM;
    }
    memcpy(copy, bytes, len);
    *p = (pending){.records = records, .items = items, .round_lo = round_lo,
                   .round_hi = round_hi, .len = len, .charged = sizeof *p + len,
                   .bytes = copy};
    ss_mem_charge(p->charged);
    if (s->tail)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
    s->n_pending++;
    return 0;
}

/* Past the memory cap the oldest requests go; the newest always stays, and
 * the head while a call sends it. Said once per outage. */
static void enforce_cap(ss_otlp_sender *s) {
    size_t limit = ss_mem_limit();
    while (s->n_pending > 1 && ss_mem_used() > limit) {
        if (s->inflight && s->n_pending < 3)
            break;
        if (!s->cap_told)
            ss_warn("%s: the backend is not taking data; dropping the oldest batches to stay "
                    "within STACKSHOT_MAX_MEMORY (%zu bytes)",
                    s->sig.who, limit);
        s->cap_told = true;
        if (s->inflight)
            drop_second(s);
        else
            drop_head(s);
    }
}

/* ---- one call ------------------------------------------------------ */

/* Partial success, counted in records: the backend counts its items (log
 * records, profiles); a request's records are rejected in the share of
 * its items that were (all of them for logs, where items are records).
 * An OK whose body is not an Export*ServiceResponse: the backend took the
 * batch, so its records count as exported, but the call counts as a
 * failure (the answer broke the protocol), said once. */
static void count_delivered(ss_otlp_sender *s, const ss_otlp_outcome *o, const pending *p) {
    int64_t n;
    char msg[200];
    uint64_t rejected = 0;
    if (ss_otlp_decode_partial_success((const uint8_t *)o->body.data, o->body.len, &n, msg,
                                       sizeof msg) == 0) {
        uint64_t items = n > 0 ? ((uint64_t)n > p->items ? p->items : (uint64_t)n) : 0;
        if (items && p->items)
            rejected = items == p->items ? p->records
                                         : (p->records * items + p->items - 1) / p->items;
        if (items || msg[0]) {
            ss_log(s->partial_told ? SS_LOG_DEBUG : SS_LOG_WARN,
                   "%s: the backend accepted a batch partially: %" PRIu64 " of %" PRIu64
                   " %s rejected (%s); not retried",
                   s->sig.who, items, p->items, s->sig.items, msg[0] ? msg : "no message");
            s->partial_told = true;
        }
    } else {
        atomic_fetch_add(&s->stats->failures, 1);
        ss_log(s->unreadable_told ? SS_LOG_DEBUG : SS_LOG_WARN,
               "%s: %s answered OK with a body that is not an OTLP export response (%zu "
               "bytes); the batch is counted as delivered",
               s->sig.who, s->ep.url, o->body.len);
        s->unreadable_told = true;
    }
    atomic_fetch_add(&s->stats->records_rejected, rejected);
    atomic_fetch_add(&s->stats->records_exported, p->records - rejected);
    if (rejected) /* records counted above; the rounds are not whole */
        ss_round_loss_mark(&s->lost, s->stats, p->round_lo, p->round_hi);
    atomic_fetch_add(&s->stats->bytes_sent, p->len);
}

static void tell_failure(ss_otlp_sender *s, const ss_otlp_outcome *o, const char *what) {
    if (o->unimplemented) {
        if (!s->unimplemented_told && strcmp(s->tr->protocol, "grpc") == 0)
            ss_error("%s: %s (%s) answers UNIMPLEMENTED to %s: it is not an OTLP/gRPC receiver "
                     "%s (check the port: 4317 is OTLP/gRPC, 4318 OTLP/HTTP); dropping the data",
                     s->sig.who, s->ep.url, s->ep.target, s->sig.grpc_method,
                     s->sig.unimplemented);
        else if (!s->unimplemented_told)
            ss_error("%s: %s answers %s: it is not an OTLP/HTTP receiver %s (check the port "
                     "and the path: 4318 is OTLP/HTTP, 4317 OTLP/gRPC); dropping the data",
                     s->sig.who, s->ep.url, o->what, s->sig.unimplemented);
        s->unimplemented_told = true;
    } else {
        ss_log(s->failing && o->code == s->last_code ? SS_LOG_DEBUG : SS_LOG_WARN,
               "%s: export to %s failed: %s; %s", s->sig.who, s->ep.url, o->what, what);
    }
    s->last_code = o->code;
    s->failing = true;
}

/* What a failed call says of the backend: a deadline is a stall, the rest
 * a failure (gRPC and libcurl say "refused" in words only; the exit treats
 * both alike). */
static ss_backend_state outcome_state(const ss_otlp_outcome *o) {
    if (strstr(o->what, "DEADLINE") || strstr(o->what, "imed out") || strstr(o->what, "imeout"))
        return SS_BACKEND_STALLED;
    if (strstr(o->what, "refused") || strstr(o->what, "onnect"))
        return SS_BACKEND_REFUSED;
    return SS_BACKEND_FAILING;
}

/* The head's call ended with *o: count it, pop or drop the head, or set a
 * retry. True when the FIFO may go on at once. */
static bool head_done(ss_otlp_sender *s, const ss_otlp_outcome *o) {
    if (o->ok) {
        if (s->failing)
            ss_info("%s: delivering to %s again", s->sig.who, s->ep.url);
        s->failing = false;
        ss_backend_call_end(&s->backend, SS_BACKEND_HEALTHY);
        s->cap_told = false;
        count_delivered(s, o, s->head);
        pop_head(s);
        return true;
    }
    atomic_fetch_add(&s->stats->failures, 1);
    ss_backend_call_end(&s->backend, outcome_state(o));
    uint64_t delay;
    char what[96];
    if (o->retryable &&
        ss_retry_next(&s->policy, &s->retry, o->server_delay_ns, next_rnd(s), &delay)) {
        snprintf(what, sizeof what, "retrying in %" PRIu64 " ms", delay / 1000000);
        tell_failure(s, o, what);
        atomic_fetch_add(&s->stats->retries, 1);
        s->not_before_ns = ss_mono_ns() + delay;
        return false;
    }
    if (o->retryable)
        snprintf(what, sizeof what, "giving up after %u attempts; dropping the batch",
                 (unsigned)s->retry.attempts);
    else
        snprintf(what, sizeof what, "dropping the batch");
    tell_failure(s, o, what);
    drop_head(s);
    return true;
}

/* Start the head's call: its deadline is the export timeout, capped by
 * cap_ns (shutdown) when given. */
static void start_head(ss_otlp_sender *s, uint64_t cap_ns) {
    pending *p = s->head;
    uint64_t now = ss_mono_ns();
    uint64_t deadline = s->ep.timeout_ms ? now + (uint64_t)s->ep.timeout_ms * 1000000ull : 0;
    if (cap_ns && (!deadline || deadline > cap_ns))
        deadline = cap_ns;
    ss_otlp_outcome o;
    ss_otlp_outcome_init(&o);
    ss_backend_call_start(&s->backend);
    s->inflight = s->tr->start(s->t, p->bytes, p->len, deadline, &o);
    if (!s->inflight)
        head_done(s, &o);
    ss_otlp_outcome_free(&o);
}

/* Wait at most wait_ns for the call in flight; true when it ended and the
 * FIFO may go on. */
static bool poll_inflight(ss_otlp_sender *s, uint64_t wait_ns) {
    ss_otlp_outcome o;
    ss_otlp_outcome_init(&o);
    bool go_on = false;
    if (s->tr->poll(s->t, wait_ns, &o)) {
        s->inflight = false;
        go_on = head_done(s, &o);
    }
    ss_otlp_outcome_free(&o);
    return go_on;
}

/* Send what is due, oldest first, one call at a time, until something
 * must wait (a call still in flight, or a backoff). */
static void pump(ss_otlp_sender *s) {
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

/* ---- the API ------------------------------------------------------- */

/* A forked child inherits gRPC's state but none of its threads: gRPC
 * cannot be used there (its own fork support would make the host's fork()
 * wait for gRPC). With STACKSHOT_OTLP_FORK_ENDPOINT the child sends over
 * OTLP/HTTP instead, on a transport of its own; said once per process.
 * Without it the gRPC client says why the child's export is off. */
static void use_http_in_forked_child(ss_otlp_sender *s) {
    static _Atomic pid_t told_in;
    pid_t parent = ss_grpc_started_in(s->sig.who), self = getpid();
    if (!parent || parent == self || ss_otlp_endpoint_fork_http(&s->ep, s->sig.http_path) != 0)
        return;
    if (atomic_exchange(&told_in, self) != self)
        ss_info("otlp: gRPC was started in pid %d and cannot be used in this forked child (pid "
                "%d); sending over http/protobuf to %s (STACKSHOT_OTLP_FORK_ENDPOINT)",
                (int)parent, (int)self, s->ep.url);
}

int ss_otlp_sender_open(ss_otlp_sender **out, const ss_otlp_signal *sig,
                        ss_exporter_stats *stats) {
    ss_otlp_sender *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->sig = *sig;
    s->stats = stats;
    ss_round_loss_init(&s->lost);
    s->rnd = ss_mono_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    s->policy = ss_retry_policy_load();
    ss_backend_init(&s->backend);
    int rc = ss_otlp_endpoint_load_path(&s->ep, sig->signal, sig->http_path);
    if (rc == 0 && s->ep.protocol == SS_OTLP_GRPC)
        use_http_in_forked_child(s);
    s->tr = s->ep.protocol == SS_OTLP_HTTP_PROTOBUF ? &ss_otlp_transport_http
                                                     : &ss_otlp_transport_grpc;
    if (rc == 0)
        rc = s->tr->open(&s->t, &s->ep, &s->sig);
    if (rc != 0) {
        ss_otlp_endpoint_free(&s->ep);
        ss_round_loss_destroy(&s->lost);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

const ss_otlp_endpoint *ss_otlp_sender_endpoint(const ss_otlp_sender *s) { return &s->ep; }

void ss_otlp_sender_push(ss_otlp_sender *s, const void *bytes, size_t len, uint64_t records,
                         uint64_t items, uint64_t round_lo, uint64_t round_hi) {
    if (enqueue(s, bytes, len, records, items, round_lo, round_hi) != 0) {
        lose(s, records, round_lo, round_hi);
        ss_warn("%s: out of memory queueing a request; its %" PRIu64 " records are lost",
                s->sig.who, records);
    }
    enforce_cap(s);
}

void ss_otlp_sender_pump(ss_otlp_sender *s) { pump(s); }

void ss_otlp_sender_took(ss_otlp_sender *s, uint64_t rounds, uint64_t records) {
    s->rounds_consumed += rounds;
    s->records_taken += records;
}

uint64_t ss_otlp_sender_round(const ss_otlp_sender *s) { return s->rounds_consumed; }

void ss_otlp_sender_lost(ss_otlp_sender *s, uint64_t records, uint64_t round_lo,
                         uint64_t round_hi) {
    lose(s, records, round_lo, round_hi);
}

void ss_otlp_sender_tick(ss_otlp_sender *s) {
    if (s->tr->tick)
        s->tr->tick(s->t);
    enforce_cap(s);
    pump(s);
}

/* What an exit may spend on the backend is what its last calls earned it
 * (exporters/common/backend.h): a healthy one up to the shutdown deadline,
 * one never heard from the unproven budget from its call's start, a
 * refused, failing or stalled one nothing (its data are dropped and
 * counted at once). A call that fails during the exit is not retried. */
void ss_otlp_sender_close(ss_otlp_sender *s, uint64_t deadline_ns) {
    deadline_ns = ss_shutdown_send_until(deadline_ns);
    uint64_t start = ss_mono_ns();
    ss_backend_state state = ss_backend_state_at(&s->backend, start);
    deadline_ns = ss_backend_exit_until(&s->backend, start, deadline_ns);
    while (s->head) {
        uint64_t now = ss_mono_ns();
        if (now + 1000000 >= deadline_ns || s->failing)
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
    if (s->inflight) {
        ss_otlp_outcome o;
        ss_otlp_outcome_init(&o);
        s->tr->cancel(s->t, &o);
        ss_otlp_outcome_free(&o);
        s->inflight = false;
    }
    if (s->head) {
        uint64_t lost = 0;
        for (pending *p = s->head; p; p = p->next)
            lost += p->records;
        /* why: as its last call said, else as the exit found it */
        if (s->failing)
            state = SS_BACKEND_FAILING;
        ss_warn("%s: %" PRIu64 " records not delivered before the shutdown deadline%s",
                s->sig.who, lost, ss_backend_exit_why(state));
    }
    while (s->head)
        drop_head(s);
    /* for the exit's one accounting line (exporters/fanout.c) */
    atomic_store(&s->stats->rounds_consumed, s->rounds_consumed);
    atomic_store(&s->stats->records_taken, s->records_taken);
    s->tr->close(s->t);
    ss_otlp_endpoint_free(&s->ep);
    ss_round_loss_destroy(&s->lost);
    free(s);
}
