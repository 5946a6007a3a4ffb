/* logs_exporter.c: the "otlp_logs" exporter: call stacks as OTLP logs, by
 * the Splunk profiling conventions.
 *
 * Each round is encoded at once into one or more requests (at most
 * STACKSHOT_LOGS_BATCH_SIZE records and 4 MiB each) and handed to the OTLP
 * sender (exporters/otlp/sender.h), which queues, merges, sends, retries
 * and accounts for them. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/otlp_logs/logs.h"
#include "exporters/otlp/sender.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct logs_state {
    ss_exporter_stats *stats;
    ss_otlp_sender *sender;
    ss_otlp_resource res;
    bool res_built;
    ss_logs_encoder enc;
    ss_buf out;
    uint32_t batch_size;
    bool pprof; /* STACKSHOT_LOGS_FORMAT=pprof: one record per round */
} logs_state;

static void logs_free(logs_state *s) {
    if (s->res_built)
        ss_otlp_resource_free(&s->res);
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
    s->batch_size = (uint32_t)ss_config_int("STACKSHOT_LOGS_BATCH_SIZE", SS_LOGS_DEFAULT_BATCH,
                                            1, 100000);
    const char *fmt = ss_config_str("STACKSHOT_LOGS_FORMAT", "text");
    if (strcmp(fmt, "pprof") == 0)
        s->pprof = true;
    else if (strcmp(fmt, "text") != 0)
        ss_config_bad("STACKSHOT_LOGS_FORMAT", fmt, "unknown format (text or pprof)",
                      "using text");
    const ss_otlp_signal sig = {
        .who = "otlp_logs",
        .signal = "LOGS",
        .grpc_method = SS_LOGS_METHOD,
        .http_path = SS_LOGS_HTTP_PATH,
        .items = "records",
        .unimplemented = "with a logs pipeline",
        .mergeable = true,
        .max_records = s->batch_size,
        .max_request = SS_LOGS_MAX_REQUEST,
    };
    int rc = ss_otlp_sender_open(&s->sender, &sig, stats);
    if (rc != 0) {
        logs_free(s);
        return rc;
    }
    const ss_otlp_endpoint *ep = ss_otlp_sender_endpoint(s->sender);
    ss_debug("otlp_logs: sending call stacks to %s%s (%s, %s%s, %u headers, timeout %u ms)",
            ep->url, ep->protocol == SS_OTLP_HTTP_PROTOBUF ? " over http/protobuf" : "",
            ep->target, ep->tls ? "TLS" : "plaintext",
            ep->compression == SS_OTLP_COMPRESS_GZIP ? ", gzip" : "",
            (unsigned)ep->n_headers, (unsigned)ep->timeout_ms);
    ss_debug("otlp_logs: OTLP wire of opentelemetry-proto %s, %s bodies, batches of %u",
             SS_OTLP_PROTO_TAG, s->pprof ? "pprof" : "text", (unsigned)s->batch_size);
    *state = s;
    return 0;
}

/* The pprof format: the round as one record (see ss_logs_encode_pprof).
 * `round`: the sender's number for r (ss_otlp_sender_round). */
static void consume_pprof(logs_state *s, ss_round *r, uint64_t round, uint64_t observed) {
    int rc = ss_logs_encode_pprof(&s->enc, &s->res, r, observed, &s->out);
    if (rc == -ENODATA)
        return; /* a round without threads: nothing to send */
    ss_otlp_sender_took(s->sender, 0, 1);
    if (rc != 0 || s->out.len > SS_LOGS_MAX_REQUEST) {
        ss_otlp_sender_lost(s->sender, 1, round, round);
        ss_warn("otlp_logs: round %" PRIu64 " could not be encoded as pprof (%s); lost",
                r->seq, rc ? strerror(-rc) : "too large");
        return;
    }
    ss_otlp_sender_push(s->sender, s->out.data, s->out.len, 1, 1, round, round);
}

static void consume_text(logs_state *s, ss_round *r, uint64_t round, uint64_t observed) {
    ss_otlp_sender_took(s->sender, 0, r->n_threads);
    uint32_t first = 0;
    while (first < r->n_threads) {
        uint32_t records, dropped;
        int used = ss_logs_encode(&s->enc, &s->res, r, first, s->batch_size,
                                  SS_LOGS_MAX_REQUEST, observed, &s->out, &records, &dropped);
        if (used < 0) {
            ss_otlp_sender_lost(s->sender, r->n_threads - first, round, round);
            ss_warn("otlp_logs: out of memory encoding round %" PRIu64 "; its records are lost",
                    r->seq);
            return;
        }
        if (dropped) {
            ss_otlp_sender_lost(s->sender, dropped, round, round);
            ss_warn("otlp_logs: %u call stacks of round %" PRIu64 " exceed %u bytes each; "
                    "dropped",
                    dropped, r->seq, SS_LOGS_MAX_REQUEST);
        }
        if (records)
            ss_otlp_sender_push(s->sender, s->out.data, s->out.len, records, records, round,
                                round);
        first += (uint32_t)used;
    }
}

static void logs_consume(void *state, ss_round *r) {
    logs_state *s = state;
    ss_otlp_sender_took(s->sender, 1, 0);
    uint64_t round = ss_otlp_sender_round(s->sender);
    /* The resource is built with the first round, not in open: a JVM agent
     * starts its exporters in Agent_OnLoad and learns the runtime's name
     * and version (process.runtime.*) only once the VM is initialised,
     * before its first round. */
    if (!s->res_built) {
        if (ss_otlp_resource_build(&s->res) != 0) {
            uint32_t lost = s->pprof ? 1 : r->n_threads; /* pprof: the round is the record */
            ss_otlp_sender_took(s->sender, 0, lost);
            ss_otlp_sender_lost(s->sender, lost, round, round);
            return;
        }
        s->res_built = true;
    }
    uint64_t observed = ss_wall_ns();
    if (s->pprof)
        consume_pprof(s, r, round, observed);
    else
        consume_text(s, r, round, observed);
    ss_otlp_sender_pump(s->sender);
}

static void logs_tick(void *state, uint64_t now) {
    (void)now;
    logs_state *s = state;
    ss_otlp_sender_tick(s->sender);
}

static void logs_close(void *state, uint64_t deadline_ns) {
    logs_state *s = state;
    ss_otlp_sender_close(s->sender, deadline_ns);
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
