/*
 * otlp_exporter.c: exporter "otlp_profiles": every export period one
 * ExportProfilesServiceRequest (otlp_encode.c), handed to the OTLP sender
 * of exporters/otlp (sender.h: the OTEL_EXPORTER_OTLP_PROFILES_* /
 * OTEL_EXPORTER_OTLP_* endpoint, headers, gzip, timeout, the shared retry
 * policy, the queue bounded by STACKSHOT_MAX_MEMORY).
 *
 *   STACKSHOT_PROFILES_VERSION  v1development (default) | v1experimental
 *   STACKSHOT_PROFILES_METHOD   gRPC method path; default follows the version
 *   STACKSHOT_PROFILES_TIMESTAMPS  true (default): one timestamp per observation
 *
 * "Records" in the counters are observations: one thread in one round.
 * Requests are not merged while they wait: a v1development request has
 * one dictionary that all its indices point into, and two requests one
 * after the other would merge their dictionaries, not append them.
 */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/version.h"
#include "exporters/otlp/sender.h"
#include "exporters/profiles/encode.h"
#include "exporters/profiles/period.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEV_METHOD "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
#define EXP_METHOD "/opentelemetry.proto.collector.profiles.v1experimental.ProfilesService/Export"
#define DEV_PATH "/v1development/profiles"
#define EXP_PATH "/v1experimental/profiles"
#define MAX_REQUEST (64u << 20)

typedef struct prof_state {
    ss_exporter_stats *stats;
    ss_period period;
    ss_otlp_sender *sender;
    ss_otlp_resource res;
    bool res_built;
    ss_prof_resource_attr *rattrs;
    ss_prof_request_opts opts;
    char method[256];
    ss_buf out;
    uint64_t period_first, period_last; /* the period's rounds (sender's numbers) */
} prof_state;

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
    /* the period's rounds (a flush inside consume comes before the new
     * round is added to the next period) */
    uint64_t lo = s->period_first, hi = s->period_last;
    s->period_first = s->period_last = 0;
    ss_otlp_sender_took(s->sender, 0, records);
    if (build_resource(s) != 0) {
        ss_otlp_sender_lost(s->sender, records, lo, hi);
        return;
    }
    ss_buf_reset(&s->out);
    int rc = ss_otlp_profiles_encode(a, &s->opts, &s->out);
    if (rc == -ENODATA) {
        /* 0 unless samples had no frames */
        ss_otlp_sender_lost(s->sender, records, records ? lo : 0, hi);
        return;
    }
    if (rc != 0 || s->out.len > MAX_REQUEST) {
        ss_warn("otlp_profiles: the period's request %s; %" PRIu64 " observations lost",
                rc ? "could not be encoded (out of memory)" : "exceeds 64 MiB", records);
        ss_otlp_sender_lost(s->sender, records, lo, hi);
        return;
    }
    ss_otlp_sender_push(s->sender, s->out.data, s->out.len, records,
                        ss_otlp_profiles_count(a, &s->opts), lo, hi);
}

static void prof_free(prof_state *s) {
    if (s->res_built)
        ss_otlp_resource_free(&s->res);
    free(s->rattrs);
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
    bool dev = s->opts.version == SS_OTLP_PROF_V1DEVELOPMENT;
    const ss_otlp_signal sig = {
        .who = "otlp_profiles",
        .signal = "PROFILES",
        .grpc_method = s->method,
        .http_path = dev ? DEV_PATH : EXP_PATH,
        .items = "profiles",
        .unimplemented = "with a profiles pipeline (an OpenTelemetry Collector needs "
                         "--feature-gates=+service.profilesSupport and a profiles pipeline), "
                         "or of another proto version (see STACKSHOT_PROFILES_VERSION)",
        .mergeable = false,
        .max_records = UINT32_MAX,
        .max_request = MAX_REQUEST,
    };
    int rc = ss_period_init(&s->period, cfg, "otlp_profiles", stats, prof_flush, s);
    if (rc == 0)
        rc = ss_otlp_sender_open(&s->sender, &sig, stats);
    if (rc != 0) {
        prof_free(s);
        return rc;
    }
    const ss_otlp_endpoint *ep = ss_otlp_sender_endpoint(s->sender);
    ss_debug("otlp_profiles: sending %s profiles every %llu s to %s%s (%s, %s%s)",
            dev ? "v1development" : "v1experimental",
            (unsigned long long)(s->period.period_ns / 1000000000ull), ep->url,
            ep->protocol == SS_OTLP_HTTP_PROTOBUF ? " over http/protobuf" : "", ep->target,
            ep->tls ? "TLS" : "plaintext",
            ep->compression == SS_OTLP_COMPRESS_GZIP ? ", gzip" : "");
    *state = s;
    return 0;
}

static void prof_consume(void *state, ss_round *r) {
    prof_state *s = state;
    ss_otlp_sender_took(s->sender, 1, 0);
    uint64_t round = ss_otlp_sender_round(s->sender);
    /* The resource waits for the first round: a JVM knows its runtime
     * facts (process.runtime.*) only by then. */
    if (build_resource(s) != 0) {
        ss_otlp_sender_took(s->sender, 0, r->n_threads);
        ss_otlp_sender_lost(s->sender, r->n_threads, round, round);
        return;
    }
    ss_period_consume(&s->period, r);
    if (!s->period_first)
        s->period_first = round;
    s->period_last = round;
    ss_otlp_sender_pump(s->sender);
}

static void prof_tick(void *state, uint64_t now) {
    prof_state *s = state;
    ss_period_tick(&s->period, now);
    ss_otlp_sender_tick(s->sender);
}

static void prof_close(void *state, uint64_t deadline_ns) {
    prof_state *s = state;
    ss_period_flush(&s->period);
    ss_otlp_sender_close(s->sender, deadline_ns);
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
