/* exporter.c: the "qubership" exporter: rounds -> Qubership profiler
 * streams -> the collector on TCP port 1715 (specs/qubership-wire.md).
 *
 * Everything runs on the exporter thread: samples collect per window
 * (STACKSHOT_QUBERSHIP_WINDOW seconds, the agent's 5 s flush cycle by
 * default); at the window's end they become trace chunks and calls
 * records, pauses become suspend records, new words go to the dictionary,
 * and every stream is sent and flushed in the real agent's order with a
 * bounded wait for the acks. A failure drops the connection and what was
 * pending (counted), and the next attempt comes after the reconnect delay
 * with everything re-sent from the start: dictionary from id 0, params,
 * new files. A blacklist reply stops the exporter for good. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qb_state {
    ss_exporter_stats *stats;
    qb_session q;
    qb_map *map;
    qb_client c;
    qb_suspend *susp;
    char host[256];
    int port, tls_port;
    char node[320];  /* POD_NAME or the host name: node.name */
    char pod[400];   /* <node>_<agent start ms> */
    char service[256];
    char ns[256];
    uint32_t window_ms, reconnect_ms, interval_ms;
    uint32_t io_budget_ms; /* a cycle's I/O at most: the shutdown timeout (>= 500 ms) */
    bool connected, blacklisted;
    uint64_t next_attempt_ns;
    int64_t window_end_ms;
    uint64_t failures;
    uint64_t rounds_consumed, records_taken; /* for the accounting line at close */
    uint64_t window_rounds; /* rounds in the open window: lost with it if it cannot be sent */
} qb_state;

static uint64_t wall_ms(void) { return ss_wall_ns() / 1000000u; }

static void copy_str(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src ? src : "");
}

static void read_config(qb_state *s, const ss_config *cfg) {
    const ss_process_info *p = ss_process();
    copy_str(s->host, sizeof s->host, ss_config_str("REMOTE_DUMP_HOST", ""));
    s->port = (int)ss_config_int("REMOTE_DUMP_PORT_PLAIN", 1715, 1, 65535);
    /* the Java agent speaks TLS to REMOTE_DUMP_PORT_SSL when it is set */
    s->tls_port = (int)ss_config_int("REMOTE_DUMP_PORT_SSL", 0, 0, 65535);
    if (s->tls_port)
        s->port = s->tls_port;
    s->window_ms = (uint32_t)ss_config_int("STACKSHOT_QUBERSHIP_WINDOW", 5, 1, 3600) * 1000u;
    s->reconnect_ms = (uint32_t)ss_config_int("STACKSHOT_QUBERSHIP_RECONNECT", 10000, 100, 3600000);
    uint32_t timeout = (uint32_t)ss_config_int("STACKSHOT_QUBERSHIP_TIMEOUT", 30000, 100, 600000);
    qb_client_init(&s->c, timeout, s->stats);
    s->interval_ms = cfg ? cfg->interval_ms : 1000;
    s->io_budget_ms = cfg && cfg->shutdown_ms > 500 ? cfg->shutdown_ms : 500;
    /* The Java agent's names: POD_NAME or the host name, "_" and the agent
     * start in epoch ms (unique per process: pod.c); MICROSERVICE_NAME; the
     * namespace as diagtools finds it. */
    qb_pod pod;
    qb_pod_get(&pod);
    copy_str(s->node, sizeof s->node, pod.server);
    copy_str(s->pod, sizeof s->pod, pod.name);
    const char *svc = ss_config_str("MICROSERVICE_NAME", "");
    copy_str(s->service, sizeof s->service,
             *svc ? svc : p->exe_name[0] ? p->exe_name : "unknown");
    qb_namespace(s->ns, sizeof s->ns);
}

static int qb_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    qb_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->stats = stats;
    qb_pod pod;
    qb_pod_get(&pod); /* the trace and suspend base: the pod name's ms */
    qb_session_init(&s->q, pod.start_ms);
    read_config(s, cfg);
    if (!s->host[0]) {
        ss_error("qubership: REMOTE_DUMP_HOST is not set; the qubership exporter needs a collector");
        qb_session_free(&s->q);
        ss_buf_free(&s->c.out);
        free(s);
        return -EDESTADDRREQ;
    }
    if (s->tls_port) {
        char why[300] = "";
        s->c.tls_ctx = qb_tls_ctx_new(why, sizeof why);
        if (!s->c.tls_ctx) {
            ss_error("qubership: TLS to %s:%d cannot be set up (%s); the qubership exporter "
                     "stays off rather than speak without it",
                     s->host, s->port, why);
            qb_session_free(&s->q);
            ss_buf_free(&s->c.out);
            free(s);
            return -EPROTO;
        }
    }
    s->map = qb_map_create(s->node);
    if (!s->map) {
        qb_tls_ctx_free(s->c.tls_ctx);
        qb_session_free(&s->q);
        ss_buf_free(&s->c.out);
        free(s);
        return -ENOMEM;
    }
    uint32_t threshold =
        (uint32_t)ss_config_int("STACKSHOT_QUBERSHIP_SUSPEND_THRESHOLD", 5, 0, 60000);
    if (threshold > 0) {
        s->susp = qb_suspend_start(threshold, 2);
        if (!s->susp)
            ss_warn("qubership: cannot start the pause detector; the suspend stream stays empty");
    }
    s->next_attempt_ns = 0; /* no delay before the first attempt */
    *state = s;
    return 0;
}

/* A connection or a cycle failed with rc: one attempt per reconnect delay,
 * and one line when the collector starts failing or fails in a new way
 * (refused, failing, stalled); the repeats at debug. */
static void disconnect(qb_state *s, const char *why, int rc) {
    qb_client_close(&s->c, false, 0);
    s->connected = false;
    qb_session_reset(&s->q);
    s->next_attempt_ns = ss_mono_ns() + (uint64_t)s->reconnect_ms * 1000000u;
    atomic_fetch_add(&s->stats->failures, 1);
    s->failures++;
    ss_backend_state st = ss_backend_state_of_rc(rc ? rc : -EPIPE);
    ss_backend_state was = ss_backend_state_at(&s->c.backend, ss_mono_ns());
    ss_backend_call_end(&s->c.backend, st);
    ss_log(was == st ? SS_LOG_DEBUG : SS_LOG_WARN, "qubership: %s:%d: %s; reconnecting in %u ms",
           s->host, s->port, why, s->reconnect_ms);
}

/* Open (or rotate to) a new rolling file of one stream. */
static int open_stream(qb_state *s, int i, int32_t seq, uint64_t deadline) {
    qb_init_reply r;
    int rc = qb_client_init_stream(&s->c, s->q.s[i].name, seq, i == QB_DICT && seq == 0, &r,
                                   deadline);
    if (rc == 0)
        qb_session_opened(&s->q, i, r.handle, r.rotation_period_ms, r.required_size, r.seq,
                          wall_ms());
    return rc;
}

/* Send a stream's pending bytes, then REQUEST_ACK_FLUSH `flushes` times. */
static int send_stream(qb_state *s, int i, int flushes, uint64_t deadline) {
    qb_stream *st = &s->q.s[i];
    int rc = 0;
    if (st->pending.len) {
        rc = qb_client_send(&s->c, st->handle, st->pending.data, st->pending.len, deadline);
        ss_buf_reset(&st->pending);
    }
    for (int k = 0; k < flushes && rc == 0; k++)
        rc = qb_client_flush(&s->c, deadline);
    return rc;
}

static void try_connect(qb_state *s, uint64_t deadline) {
    if (s->connected || s->blacklisted || ss_mono_ns() < s->next_attempt_ns)
        return;
    qb_session_reset(&s->q);
    ss_backend_call_start(&s->c.backend);
    int rc = qb_client_connect(&s->c, s->host, s->port, s->pod, s->service, s->ns, deadline);
    if (rc == -EACCES) {
        s->blacklisted = true;
        qb_client_close(&s->c, false, 0);
        ss_error("qubership: %s:%d: the collector blacklisted namespace %s; "
                 "remote dumping stopped for the life of the process",
                 s->host, s->port, s->ns);
        return;
    }
    for (int i = 0; i < QB_NSTREAMS && rc == 0; i++)
        rc = open_stream(s, i, 0, deadline);
    /* params: the table, then one explicit flush and three from closing */
    if (rc == 0)
        rc = send_stream(s, QB_PARAMS, 4, deadline);
    if (rc) {
        disconnect(s, s->c.err[0] ? s->c.err : strerror(-rc), rc);
        return;
    }
    ss_backend_call_end(&s->c.backend, SS_BACKEND_HEALTHY);
    s->q.s[QB_PARAMS].closed = true;
    s->connected = true;
    if (s->failures)
        ss_info("qubership: connected again to %s:%d as %s", s->host, s->port, s->pod);
    else
        ss_info("qubership: connected to %s:%d as %s", s->host, s->port, s->pod);
}

/* Rotation (spec §5): the tail and 0x11 twice (three times for a phrase
 * stream), then INIT with the old index as the requested sequence id. */
static int rotate_due(qb_state *s, uint64_t deadline) {
    uint64_t now = wall_ms();
    for (int i = 0; i < QB_NSTREAMS; i++) {
        if (s->q.s[i].closed || !qb_session_rotation_due(&s->q, i, now))
            continue;
        if (s->q.s[i].phrased)
            ss_qb_phraser_flush(&s->q.s[i].ph, &s->q.s[i].pending);
        int rc = send_stream(s, i, s->q.s[i].phrased ? 3 : 2, deadline);
        if (rc == 0)
            rc = open_stream(s, i, (int32_t)s->q.s[i].file_index, deadline);
        if (rc)
            return rc;
    }
    return 0;
}

static void drop_pending(qb_state *s) {
    for (int i = 0; i < QB_NSTREAMS; i++) {
        ss_buf_reset(&s->q.s[i].pending);
        ss_buf_reset(&s->q.s[i].ph.cur);
    }
}

/* The end of a window: everything collected becomes stream bytes and is
 * sent, in the agent's stream order, each stream flushed. */
static void cycle(qb_state *s, uint64_t deadline) {
    try_connect(s, deadline);
    int rc = 0;
    if (s->connected)
        ss_backend_call_start(&s->c.backend);
    if (s->connected && (rc = rotate_due(s, deadline)) != 0)
        disconnect(s, s->c.err, rc);
    qb_map_stats st = {0};
    s->q.calls_written = 0;
    qb_map_close_window(s->map, &s->q, &st);
    if (s->susp) {
        qb_pause p[256];
        uint64_t lost = 0;
        size_t n;
        while ((n = qb_suspend_take(s->susp, p, 256, &lost)) > 0) {
            for (size_t i = 0; i < n; i++)
                qb_session_write_suspend(&s->q, p[i].end_ms, p[i].duration_ms);
            if (n < 256)
                break;
        }
        s->records_taken += lost; /* pauses the detector could not keep */
        atomic_fetch_add(&s->stats->records_dropped, lost);
    }
    qb_session_dict_sync(&s->q);
    qb_session_flush_phrases(&s->q);
    uint64_t calls = s->q.calls_written;
    s->records_taken += calls;
    if (s->connected) {
        static const int order[] = {QB_TRACE, QB_CALLS, QB_XML, QB_SQL, QB_DICT, QB_SUSPEND};
        for (size_t k = 0; k < sizeof order / sizeof order[0] && rc == 0; k++)
            rc = send_stream(s, order[k], 1, deadline);
        if (rc)
            disconnect(s, s->c.err, rc);
    }
    if (s->connected) {
        ss_backend_call_end(&s->c.backend, SS_BACKEND_HEALTHY);
        atomic_fetch_add(&s->stats->records_exported, calls);
    } else {
        /* lost: no collector, or the connection failed while sending; so
         * are the window's rounds, which the fan-out counted as delivered */
        atomic_fetch_add(&s->stats->records_dropped, calls);
        atomic_fetch_add(&s->stats->rounds_lost, s->window_rounds);
        drop_pending(s);
    }
    s->window_rounds = 0;
    qb_session_account(&s->q);
}

static uint64_t cycle_deadline(const qb_state *s) {
    /* A cycle may take at most one window's time for its I/O, and never
     * longer than the shutdown timeout: the exit cannot interrupt a cycle
     * (it waits for this thread to come back from consume or tick), so a
     * collector that accepts and then says nothing would otherwise hold
     * this thread, and the rounds queued behind it, past the exit's
     * deadline (they were abandoned there, unaccounted for). */
    uint64_t ms = s->window_ms < s->io_budget_ms ? s->window_ms : s->io_budget_ms;
    return ss_mono_ns() + ms * 1000000u;
}

static void qb_consume(void *state, ss_round *r) {
    qb_state *s = state;
    if (s->blacklisted) {
        atomic_fetch_add(&s->stats->rounds_lost, 1);
        return;
    }
    int64_t ms = (int64_t)(r->time_ns / 1000000u);
    if (r->interval_ms)
        s->interval_ms = r->interval_ms;
    if (s->window_end_ms == 0)
        s->window_end_ms = ms + s->window_ms;
    if (ms >= s->window_end_ms) {
        cycle(s, cycle_deadline(s));
        while (s->window_end_ms <= ms)
            s->window_end_ms += s->window_ms;
    }
    if (ss_mem_used() > ss_mem_limit()) {
        atomic_fetch_add(&s->stats->rounds_lost, 1); /* over the memory cap */
        return;
    }
    s->rounds_consumed++;
    s->window_rounds++;
    qb_map_add_round(s->map, &s->q, r);
}

static void qb_tick(void *state, uint64_t mono_now_ns) {
    qb_state *s = state;
    if (s->blacklisted)
        return;
    /* no round came for a while after the window's end: close it anyway */
    if (s->window_end_ms && (int64_t)wall_ms() >= s->window_end_ms + (int64_t)s->interval_ms) {
        cycle(s, cycle_deadline(s));
        s->window_end_ms += s->window_ms;
        if (s->window_end_ms < (int64_t)wall_ms())
            s->window_end_ms = (int64_t)wall_ms() + s->window_ms;
    } else if (!s->connected && mono_now_ns >= s->next_attempt_ns) {
        try_connect(s, cycle_deadline(s));
    }
}

static void qb_close(void *state, uint64_t deadline_ns) {
    qb_state *s = state;
    if (s->susp) {
        qb_suspend_stop(s->susp);
        s->susp = NULL;
    }
    /* A process that exits before the first tick (or between reconnect
     * attempts, when the next one is due) still gets its last window out:
     * connect now, within the shutdown deadline. */
    uint64_t now = ss_mono_ns();
    if (!s->blacklisted && !s->connected && s->window_rounds && now >= s->next_attempt_ns &&
        ss_backend_exit_until(&s->c.backend, now, deadline_ns) > now)
        try_connect(s, deadline_ns);
    if (!s->blacklisted && s->connected) {
        cycle(s, deadline_ns); /* the last, partial window */
        /* close every stream as the agent does: tail, then 0x11 twice
         * (three times for a phrase stream); then CLOSE */
        int rc = 0;
        for (int i = 0; i < QB_NSTREAMS && rc == 0 && s->connected; i++)
            if (!s->q.s[i].closed)
                rc = send_stream(s, i, s->q.s[i].phrased ? 3 : 2, deadline_ns);
        qb_client_close(&s->c, rc == 0, deadline_ns);
    } else {
        qb_map_stats st = {0};
        s->q.calls_written = 0;
        qb_map_close_window(s->map, &s->q, &st);
        s->records_taken += s->q.calls_written;
        atomic_fetch_add(&s->stats->records_dropped, s->q.calls_written);
        atomic_fetch_add(&s->stats->rounds_lost, s->window_rounds);
        s->window_rounds = 0;
        qb_client_close(&s->c, false, 0);
    }
    /* for the exit's one accounting line (exporters/fanout.c) */
    atomic_store(&s->stats->rounds_consumed, s->rounds_consumed);
    atomic_store(&s->stats->records_taken, s->records_taken);
    ss_buf_free(&s->c.out);
    qb_tls_ctx_free(s->c.tls_ctx);
    qb_map_destroy(s->map);
    qb_session_free(&s->q);
    free(s);
}

const ss_exporter_ops ss_qubership_exporter = {
    .name = "qubership",
    .role = "qb",
    .tick_ms = 250,
    .open = qb_open,
    .consume = qb_consume,
    .tick = qb_tick,
    .close = qb_close,
};
