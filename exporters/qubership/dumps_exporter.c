/* dumps_exporter.c: the "qubership_dumps" exporter: what diagtools does
 * for a Qubership agent, done by the agent itself (specs/qubership-dumps.md).
 *
 *   - every DIAGNOSTIC_DUMP_INTERVAL (1m): a thread dump of the latest
 *     round (td.c) and a top dump of the process's threads (top.c),
 *     uploaded as <ts>.td.txt and <ts>.top.txt;
 *   - JVM: heap dumps on OutOfMemoryError (the flags set at start through
 *     the VM, jvmti/heapdump.c), found at once (ResourceExhausted) or by a
 *     scan of NC_DIAGNOSTIC_LOGS_FOLDER every DIAGNOSTIC_SCAN_INTERVAL,
 *     zipped and uploaded (heap.c);
 *   - the TCP collector's commands td, top and heap (commands.c): a dump
 *     at once; a heap dump in a JVM (a native process has none: failure).
 *
 * It runs whenever the qubership exporter does (registry.c), or alone as
 * STACKSHOT_EXPORTERS=qubership_dumps. This thread only keeps the latest
 * round and formats the texts, which is quick; the uploads run on the
 * uploader thread (upload.c), so that a slow collector never holds rounds
 * here. The first dumps come one interval after the start, as diagtools'
 * ticker fires. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/qubership/dumps.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct dumps_state {
    ss_exporter_stats *stats;
    qb_diag_cfg cfg;
    qb_pod pod;
    ss_round *latest;
    qb_top *top;
    qb_uploader *up;
    qb_upload_stats ust;
    uint64_t next_dump_ns, next_scan_ns;
    uint64_t exhausted_seen;
    bool heap; /* a JVM whose heap dumps are wanted */
} dumps_state;

static void heap_setup(dumps_state *s) {
    const ss_jvm_services *jvm = ss_process()->jvm;
    if (!jvm || !s->cfg.heap)
        return;
    s->heap = true;
    char why[1500] = "";
    int rc = jvm->heap_dump_on_oom ? jvm->heap_dump_on_oom(s->cfg.logs_dir, why, sizeof why)
                                   : -ENOTSUP;
    if (rc < 0)
        ss_warn("qubership_dumps: heap dumps on OutOfMemoryError: %s", why);
    else /* said when it means dumps that are not uploaded; else debug */
        ss_log(rc > 0 ? SS_LOG_INFO : SS_LOG_DEBUG, "qubership_dumps: %s", why);
    if (jvm->exhausted)
        s->exhausted_seen = jvm->exhausted();
}

static int dumps_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    (void)cfg;
    dumps_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->stats = stats;
    qb_diag_cfg_load(&s->cfg);
    qb_pod_get(&s->pod);
    if (!s->pod.dir_valid)
        ss_warn("qubership_dumps: pod name %s does not match the dumps collector's pod pattern "
                "(lowercase letters and digits in parts joined by '-', at least two parts): its "
                "dumps are stored but never indexed; set POD_NAME to the Kubernetes pod name",
                s->pod.name);
    s->top = qb_top_create();
    s->up = qb_uploader_start(&s->cfg, s->pod.name);
    if (!s->top || !s->up) {
        qb_top_destroy(s->top);
        if (s->up)
            qb_uploader_stop(s->up, ss_mono_ns(), &s->ust);
        free(s);
        return -ENOMEM;
    }
    uint64_t now = ss_mono_ns();
    s->next_dump_ns = now + s->cfg.dump_ms * 1000000ull;
    s->next_scan_ns = now + s->cfg.scan_ms * 1000000ull;
    heap_setup(s);
    qb_commands_serve(true);
    ss_debug("qubership_dumps: every %llu ms to %s/diagnostic/%s/.../%s/ (thread dumps %s, "
             "top dumps %s, heap dumps %s)",
             (unsigned long long)s->cfg.dump_ms, s->cfg.base, s->cfg.ns, s->pod.name,
             s->cfg.td ? "on" : "off", s->cfg.top ? "on" : "off", s->heap ? "on" : "off");
    *state = s;
    return 0;
}

static void dumps_consume(void *state, ss_round *r) {
    dumps_state *s = state;
    ss_round_ref(r);
    if (s->latest)
        ss_round_unref(s->latest);
    s->latest = r;
}

/* Hand a td (or top) text to the uploader; false when there is nothing
 * to dump (no round yet). */
static bool dump(dumps_state *s, int kind, const uint8_t *cmd) {
    ss_buf b;
    ss_buf_init(&b);
    time_t made = time(NULL);
    if (kind == QB_CMD_TD) {
        if (!s->latest)
            return false;
        made = (time_t)(s->latest->time_ns / 1000000000ull);
        qb_td_format(s->latest, &b);
    } else {
        qb_top_format(s->top, &b);
    }
    qb_uploader_text(s->up, kind, &b, made, cmd);
    ss_buf_free(&b);
    return true;
}

static void run_commands(dumps_state *s) {
    qb_command c[16];
    size_t n = qb_commands_take(c, 16);
    for (size_t i = 0; i < n; i++) {
        const ss_jvm_services *jvm = ss_process()->jvm;
        bool started = false;
        if (c[i].what == QB_CMD_HEAP) {
            if (jvm && jvm->dump_heap) {
                qb_uploader_heap_dump(s->up, c[i].id);
                started = true;
            }
        } else {
            started = dump(s, c[i].what, c[i].id);
        }
        ss_info("qubership_dumps: the collector asks for a %s dump: %s",
                c[i].what == QB_CMD_TD ? "thread" : c[i].what == QB_CMD_TOP ? "top" : "heap",
                started ? "taking it" : c[i].what == QB_CMD_HEAP ? "not a JVM, failed"
                                                                 : "no round yet, failed");
        if (!started)
            qb_commands_done(c[i].id, false);
    }
}

/* The fan-out's counters, from the uploader's: records are dumps. */
static void publish_stats(dumps_state *s) {
    qb_upload_stats *u = &s->ust;
    atomic_store(&s->stats->records_exported, u->td_sent + u->top_sent + u->heap_sent);
    /* a td or top that failed is not retried: dropped */
    atomic_store(&s->stats->records_dropped,
                 u->td_dropped + u->top_dropped + u->td_failed + u->top_failed);
    atomic_store(&s->stats->failures, u->td_failed + u->top_failed + u->heap_failed);
    atomic_store(&s->stats->bytes_sent, u->bytes);
}

static void dumps_tick(void *state, uint64_t now) {
    dumps_state *s = state;
    qb_uploader_stats(s->up, &s->ust);
    publish_stats(s);
    run_commands(s);
    if (now >= s->next_dump_ns) {
        /* the top first: the td's hand-over may start the uploader thread,
         * which a top read just after would list still with this thread's
         * name and nice (the td is the round's, without agent threads) */
        if (s->cfg.top)
            dump(s, QB_CMD_TOP, NULL);
        if (s->cfg.td)
            dump(s, QB_CMD_TD, NULL);
        uint64_t step = s->cfg.dump_ms * 1000000ull;
        s->next_dump_ns += step;
        if (s->next_dump_ns <= now) /* late (a stopped process): skip the missed ones */
            s->next_dump_ns = now + step;
    }
    if (!s->heap)
        return;
    const ss_jvm_services *jvm = ss_process()->jvm;
    uint64_t exhausted = jvm->exhausted ? jvm->exhausted() : 0;
    if (exhausted != s->exhausted_seen || now >= s->next_scan_ns) {
        s->exhausted_seen = exhausted;
        qb_uploader_scan(s->up);
        s->next_scan_ns = now + s->cfg.scan_ms * 1000000ull;
    }
}

static void dumps_close(void *state, uint64_t deadline_ns) {
    dumps_state *s = state;
    qb_commands_serve(false);
    qb_uploader_stop(s->up, deadline_ns, &s->ust);
    publish_stats(s);
    qb_upload_stats *u = &s->ust;
    /* said when a dump was lost or an upload failed; else debug */
    bool lost = u->td_failed || u->td_dropped || u->top_failed || u->top_dropped || u->heap_failed;
    ss_log(lost ? SS_LOG_INFO : SS_LOG_DEBUG,
           "qubership_dumps: accounting: thread dumps %llu taken: %llu uploaded, %llu failed, "
           "%llu dropped; top dumps %llu taken: %llu uploaded, %llu failed, %llu dropped; heap "
           "dumps %llu zipped, %llu uploaded, %llu failed attempts",
           (unsigned long long)u->td_taken, (unsigned long long)u->td_sent,
           (unsigned long long)u->td_failed, (unsigned long long)u->td_dropped,
           (unsigned long long)u->top_taken, (unsigned long long)u->top_sent,
           (unsigned long long)u->top_failed, (unsigned long long)u->top_dropped,
           (unsigned long long)u->heap_found, (unsigned long long)u->heap_sent,
           (unsigned long long)u->heap_failed);
    qb_top_destroy(s->top);
    if (s->latest)
        ss_round_unref(s->latest);
    free(s);
}

const ss_exporter_ops ss_qubership_dumps_exporter = {
    .name = "qubership_dumps",
    .role = "qbd",
    .tick_ms = 250,
    .open = dumps_open,
    .consume = dumps_consume,
    .tick = dumps_tick,
    .close = dumps_close,
};
