/* exporter.c: the "zorka" exporter: rounds -> Zorka traces -> a ZICO
 * collector over HTTP (zorka.h says which file does what).
 *
 * The exporter thread turns every round into traces (traces.c); every
 * STACKSHOT_ZORKA_PERIOD seconds (by the rounds' clock, or the wall clock
 * when rounds stop coming) it closes them all and hands them to the
 * sender's thread. At exit the last, partial period goes too, and the
 * sender has until the shutdown deadline to deliver.
 *
 * Accounting (the exit line): every trace closed is taken, and ends
 * exported (the collector answered 2xx to its trc), rejected (it kept
 * answering non-2xx until the retries ran out) or dropped (unreachable,
 * queue bound, shutdown deadline). */
#include "agent/module_abi.h"
#include "exporters/zorka/zorka.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ZK_DEFAULT_URL "http://127.0.0.1:8640"

typedef struct zk_state {
    ss_exporter_stats *stats;
    zk_builder *builder;
    zk_sender *sender;
    uint64_t period_ns;
    uint64_t period_end_ns;   /* wall clock (round time) at which the period closes */
    uint64_t interval_ns;
    size_t builder_cap;       /* open traces held at most, bytes */
    uint64_t rounds_consumed;
    uint64_t traces_taken, samples_taken;
    uint64_t early_closes;
} zk_state;

/* ---- configuration -------------------------------------------------------- */

static void read_url(zk_sender_config *c) {
    const char *key = "STACKSHOT_ZORKA_URL";
    const char *url = ss_config_str(key, ZK_DEFAULT_URL);
    bool http = !strncasecmp(url, "http://", 7), https = !strncasecmp(url, "https://", 8);
    size_t len = strlen(url);
    if ((!http && !https) || len >= sizeof c->base_url || strpbrk(url, " \t\r\n")) {
        char shown[256];
        ss_http_url_for_messages(url, shown, sizeof shown);
        ss_config_bad(key, shown, "not an http:// or https:// URL", "using " ZK_DEFAULT_URL);
        url = ZK_DEFAULT_URL;
        len = strlen(url);
    }
    while (len && url[len - 1] == '/')
        len--;
    snprintf(c->base_url, sizeof c->base_url, "%.*s", (int)len, url);
}

static void read_file_key(const char *key, char *out, size_t n) {
    snprintf(out, n, "%s", ss_config_str(key, ""));
}

static void read_config(zk_state *s, zk_sender_config *c, const ss_config *cfg) {
    read_url(c);
    s->period_ns = (uint64_t)ss_config_int("STACKSHOT_ZORKA_PERIOD", 10, 1, 3600) * 1000000000ull;
    c->timeout_ms = (uint32_t)ss_config_int("STACKSHOT_ZORKA_TIMEOUT", 10000, 100, 600000);
    c->retries = (uint32_t)ss_config_int("STACKSHOT_ZORKA_RETRIES", 10, 0, 30);
    c->retry_ms = 125; /* tracer.net.http.retry.time of the agent, doubled after each */
    size_t limit = cfg && cfg->max_memory ? (size_t)cfg->max_memory : ss_mem_limit();
    c->max_queued = limit / 4;
    s->builder_cap = limit / 4;
    read_file_key("STACKSHOT_ZORKA_CERTIFICATE", c->ca_file, sizeof c->ca_file);
    read_file_key("STACKSHOT_ZORKA_CLIENT_CERTIFICATE", c->cert_file, sizeof c->cert_file);
    read_file_key("STACKSHOT_ZORKA_CLIENT_KEY", c->key_file, sizeof c->key_file);
    bool https = !strncasecmp(c->base_url, "https://", 8);
    c->tls.insecure = ss_config_bool("STACKSHOT_ZORKA_INSECURE", false) && https;
    if (c->tls.insecure)
        ss_warn("zorka: STACKSHOT_ZORKA_INSECURE=true: the collector's certificate is not "
                "verified");
    if (!https && (c->ca_file[0] || c->cert_file[0]))
        ss_warn("zorka: %s is plain http: the TLS files given are not used", c->base_url);

    const ss_process_info *p = ss_process();
    static char service[256];
    const char *svc = ss_config_str("OTEL_SERVICE_NAME", "");
    snprintf(service, sizeof service, "%s", *svc ? svc : p->exe_name[0] ? p->exe_name : "unknown");
    c->process.service = service;
    c->process.host = p->host_name[0] ? p->host_name : "unknown";
    snprintf(c->process.pid, sizeof c->process.pid, "%d", (int)p->pid);
}

/* ---- ops -------------------------------------------------------------------- */

static void emit(void *owner, zk_trace *t) {
    zk_state *s = owner;
    s->traces_taken++;
    s->samples_taken += t->n_samples;
    zk_sender_push(s->sender, t);
}

static int zk_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    zk_state *s = calloc(1, sizeof *s);
    zk_sender_config *c = calloc(1, sizeof *c);
    if (!s || !c) {
        free(s);
        free(c);
        return -ENOMEM;
    }
    s->stats = stats;
    read_config(s, c, cfg);
    s->builder = zk_builder_new(emit, s);
    s->sender = s->builder ? zk_sender_start(c, stats) : NULL;
    free(c);
    if (!s->sender) {
        zk_builder_free(s->builder);
        free(s);
        return -ENOMEM;
    }
    *state = s;
    return 0;
}

static void close_period(zk_state *s) {
    zk_builder_close_all(s->builder);
}

static void zk_consume(void *state, ss_round *r) {
    zk_state *s = state;
    s->interval_ns = (uint64_t)(r->interval_ms ? r->interval_ms : 1000) * 1000000ull;
    if (s->period_end_ns == 0)
        s->period_end_ns = r->time_ns + s->period_ns;
    if (r->time_ns >= s->period_end_ns) {
        close_period(s);
        while (s->period_end_ns <= r->time_ns)
            s->period_end_ns += s->period_ns;
    }
    if (ss_mem_used() > ss_mem_limit()) {
        atomic_fetch_add(&s->stats->rounds_dropped, 1); /* over the memory cap */
        return;
    }
    s->rounds_consumed++;
    zk_builder_add_round(s->builder, r, s->rounds_consumed);
    if (zk_builder_bytes(s->builder) > s->builder_cap) {
        /* the open traces hold too much: the period ends early */
        if (s->early_closes++ == 0)
            ss_warn("zorka: open traces passed %zu bytes; closing the period early "
                    "(more, shorter traces)",
                    s->builder_cap);
        close_period(s);
    }
}

static void zk_tick(void *state, uint64_t mono_now_ns) {
    (void)mono_now_ns;
    zk_state *s = state;
    /* no round came for a while after the period's end: close it anyway */
    uint64_t now = ss_wall_ns();
    if (s->period_end_ns && now >= s->period_end_ns + s->interval_ns) {
        close_period(s);
        while (s->period_end_ns <= now)
            s->period_end_ns += s->period_ns;
    }
}

static void zk_close(void *state, uint64_t deadline_ns) {
    zk_state *s = state;
    close_period(s); /* the last, partial period */
    zk_sender_stop(s->sender, deadline_ns);
    /* for the exit's one accounting line (exporters/fanout.c); a record is a trace */
    atomic_store(&s->stats->rounds_consumed, s->rounds_consumed);
    atomic_store(&s->stats->records_taken, s->traces_taken);
    ss_debug("zorka: %" PRIu64 " traces taken hold %" PRIu64 " samples", s->traces_taken,
             s->samples_taken);
    zk_builder_free(s->builder);
    free(s);
}

const ss_exporter_ops ss_zorka_exporter = {
    .name = "zorka",
    .role = "zk",
    .tick_ms = 250,
    .open = zk_open,
    .consume = zk_consume,
    .tick = zk_tick,
    .close = zk_close,
};
