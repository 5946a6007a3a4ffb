/* logs_encode.c: a round as OTLP LogRecords, the Splunk call-stack way.
 *
 * One LogRecord per thread: the body is the thread's thread-dump text (the
 * text exporter's own formatter, so both outputs agree byte for byte), the
 * attributes say what it is (com.splunk.sourcetype=otel.profiling, the
 * period, the thread), and trace_id/span_id link it to the span the thread
 * was in. All records of a request share one ScopeLogs named
 * "otel.profiling": Splunk's collector routes profiling data by that scope
 * name alone, so nothing else may share it.
 *
 * The request is written field by field with the protobuf writer
 * (common/pb.h), record after record, each kept only while the request
 * stays within its byte limit (opentelemetry/proto/logs/v1/logs.proto and
 * collector/logs/v1/logs_service.proto give the field numbers). */
#include "agent/buf.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "exporters/otlp_logs/logs.h"
#include "exporters/common/pprof.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum {
    REQ_RESOURCE_LOGS = 1,
    RL_RESOURCE = 1, RL_SCOPE_LOGS = 2,
    SL_SCOPE = 1, SL_LOG_RECORDS = 2,
    LR_TIME = 1, LR_BODY = 5, LR_ATTRIBUTES = 6, LR_FLAGS = 8, LR_TRACE_ID = 9, LR_SPAN_ID = 10,
    LR_OBSERVED_TIME = 11, LR_EVENT_NAME = 12,
};

void ss_logs_encoder_init(ss_logs_encoder *e) {
    ss_buf_init(&e->text);
    ss_buf_init(&e->name);
    ss_buf_init(&e->shared);
    e->memo = ss_stack_memo_create(ss_mem_limit() / 8);
}

void ss_logs_encoder_free(ss_logs_encoder *e) {
    ss_buf_free(&e->text);
    ss_buf_free(&e->name);
    ss_buf_free(&e->shared);
    ss_stack_memo_destroy(e->memo);
    e->memo = NULL;
}

static size_t varint_size(size_t v) {
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

/* The request's size once the ScopeLogs (opened at sl) and the
 * ResourceLogs (at rl) are closed: each gains its length in front. */
static size_t closed_size(const ss_buf *b, size_t rl, size_t sl) {
    size_t scope_len = b->len - sl;
    size_t rl_len = b->len - rl + varint_size(scope_len);
    return b->len + varint_size(scope_len) + varint_size(rl_len);
}

/* ExportLogsServiceRequest{resource_logs{resource, scope_logs{scope, ...}}}
 * up to where the records go; *rl and *sl mark the two open messages. */
static void open_request(ss_buf *out, const ss_otlp_resource *res, size_t *rl, size_t *sl) {
    *rl = pb_begin(out, REQ_RESOURCE_LOGS);
    ss_otlp_put_resource(out, RL_RESOURCE, res);
    *sl = pb_begin(out, RL_SCOPE_LOGS);
    ss_otlp_put_scope(out, SL_SCOPE, SS_LOGS_SCOPE_NAME, SS_LOGS_SCOPE_VERSION);
}

static void close_request(ss_buf *out, size_t rl, size_t sl) {
    pb_end(out, sl);
    pb_end(out, rl);
}

/* The name as sent: valid UTF-8 (a copy with '?' for invalid bytes). */
static const char *utf8_name(ss_logs_encoder *e, const char *name) {
    if (!name)
        return "";
    size_t n = strlen(name);
    if (ss_utf8_valid(name, n))
        return name;
    ss_buf_reset(&e->name);
    ss_buf_append(&e->name, name, n + 1);
    if (e->name.failed)
        return "";
    ss_utf8_fix(e->name.data, n);
    return e->name.data;
}

/* The body of t's record into e->text: its metadata and state lines,
 * formatted, then its frame lines, kept from an earlier round when its
 * stack did not change (each part is whole lines: fixing invalid UTF-8
 * part by part gives what fixing the whole body gives). */
static void format_body(ss_logs_encoder *e, const ss_round *r, const ss_thread_sample *t) {
    ss_buf_reset(&e->text);
    ss_text_format_thread_head(r, t, &e->text);
    if (!e->text.failed)
        ss_utf8_fix(e->text.data, e->text.len);
    ss_text_format_frames_memo(r, t, e->memo, ss_utf8_fix, &e->text);
}

/* The span's attributes (OTEP 4947 thread context: "key=value" lines) as
 * attributes of the record; a line without '=' is left out. */
static void put_span_attrs(ss_buf *out, const char *s) {
    while (s && *s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (eq && eq > s) {
            char key[80];
            size_t kl = (size_t)(eq - s) < sizeof key - 1 ? (size_t)(eq - s) : sizeof key - 1;
            memcpy(key, s, kl);
            key[kl] = '\0';
            ss_utf8_fix(key, kl);
            ss_otlp_put_kv_str(out, LR_ATTRIBUTES, key, eq + 1, len - (size_t)(eq + 1 - s));
        }
        s += len + (nl ? 1 : 0);
    }
}

/* One LogRecord; its body is in e->text. */
static void put_record(ss_buf *out, ss_logs_encoder *e, const ss_round *r,
                       const ss_thread_sample *t, uint64_t observed_ns) {
    size_t m = pb_begin(out, SL_LOG_RECORDS);
    pb_fixed64_nz(out, LR_TIME, r->time_ns);
    ss_otlp_put_any_str(out, LR_BODY, e->text.data, e->text.len);
    ss_buf_append(out, e->shared.data, e->shared.len);
    ss_otlp_put_kv_int(out, LR_ATTRIBUTES, "thread.id", t->nid);
    const char *name = utf8_name(e, t->name);
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "thread.name", name, strlen(name));
    const char *state = ss_thread_state_name(t->state);
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "thread.state", state, strlen(state));
    if (t->has_span) {
        /* LogRecord.flags: bits 0-7 are the W3C trace flags (sampled) */
        pb_fixed32_nz(out, LR_FLAGS, t->trace_flags);
        pb_bytes(out, LR_TRACE_ID, t->trace_id, 16);
        pb_bytes(out, LR_SPAN_ID, t->span_id, 8);
        put_span_attrs(out, t->span_attrs);
    }
    pb_fixed64_nz(out, LR_OBSERVED_TIME, observed_ns);
    pb_string(out, LR_EVENT_NAME, SS_LOGS_SCOPE_NAME);
    pb_end(out, m);
}

int ss_logs_encode(ss_logs_encoder *e, const ss_otlp_resource *res, const ss_round *r,
                   uint32_t first, uint32_t max_records, size_t max_bytes,
                   uint64_t observed_ns, ss_buf *out, uint32_t *n_records,
                   uint32_t *n_dropped) {
    *n_records = *n_dropped = 0;
    ss_buf_reset(out);
    if (first >= r->n_threads)
        return 0;
    uint32_t n = r->n_threads - first;
    if (max_records && n > max_records)
        n = max_records;

    /* the attributes every record of the round carries, written once */
    ss_buf_reset(&e->shared);
    ss_otlp_put_kv_str(&e->shared, LR_ATTRIBUTES, "com.splunk.sourcetype", SS_LOGS_SOURCETYPE,
                       strlen(SS_LOGS_SOURCETYPE));
    ss_otlp_put_kv_int(&e->shared, LR_ATTRIBUTES, "source.event.period", r->interval_ms);
    ss_otlp_put_kv_str(&e->shared, LR_ATTRIBUTES, "source.event.name", "wall", 4);

    size_t rl, sl;
    open_request(out, res, &rl, &sl);
    uint32_t used = 0, kept = 0;
    for (; used < n; used++) {
        const ss_thread_sample *t = &r->threads[first + used];
        format_body(e, r, t);
        size_t mark = out->len;
        put_record(out, e, r, t, observed_ns);
        if (e->text.failed || e->shared.failed || out->failed)
            return -ENOMEM;
        if (closed_size(out, rl, sl) > max_bytes) {
            out->len = mark;
            if (kept > 0)
                break;      /* the next request takes it */
            (*n_dropped)++; /* alone too big: it never fits */
            continue;
        }
        kept++;
    }
    *n_records = kept;
    if (first + used >= r->n_threads)
        ss_stack_memo_sweep(e->memo); /* the round is encoded: keep its stacks only */
    if (kept == 0) {
        ss_buf_reset(out);
        return (int)used;
    }
    close_request(out, rl, sl);
    return out->failed ? -ENOMEM : (int)used;
}

/* ---- the "later format": one record per round, a pprof in the body ---- */

static int base64_append(ss_buf *out, const uint8_t *p, size_t n) {
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (ss_buf_reserve(out, (n + 2) / 3 * 4 + 1) != 0)
        return -ENOMEM;
    char *o = out->data + out->len;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[v >> 12 & 63];
        *o++ = tab[v >> 6 & 63];
        *o++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = tab[v >> 18];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = '=';
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
    return 0;
}

int ss_logs_encode_pprof(ss_logs_encoder *e, const ss_otlp_resource *res, ss_round *r,
                         uint64_t observed_ns, ss_buf *out) {
    ss_buf_reset(out);
    /* pprof (scratch: e->name), then gzip (e->shared), then base64 (e->text) */
    ss_buf *pprof = &e->name, *gz = &e->shared, *text = &e->text;
    ss_buf_reset(pprof);
    ss_buf_reset(gz);
    ss_buf_reset(text);
    int rc = ss_pprof_encode_rounds(&r, 1, SS_PPROF_WALL, pprof);
    if (rc == 0)
        rc = ss_gzip(pprof->data, pprof->len, gz);
    if (rc == 0 && base64_append(text, (const uint8_t *)gz->data, gz->len) != 0)
        rc = -ENOMEM;
    if (rc != 0)
        return rc;
    int64_t frames = 0;
    for (uint32_t i = 0; i < r->n_threads; i++)
        frames += r->threads[i].frame_count;

    size_t rl, sl;
    open_request(out, res, &rl, &sl);
    size_t m = pb_begin(out, SL_LOG_RECORDS);
    pb_fixed64_nz(out, LR_TIME, r->time_ns);
    ss_otlp_put_any_str(out, LR_BODY, text->data, text->len);
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "com.splunk.sourcetype", SS_LOGS_SOURCETYPE,
                       strlen(SS_LOGS_SOURCETYPE));
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "profiling.data.format", "pprof-gzip-base64", 17);
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "profiling.data.type", "cpu", 3);
    ss_otlp_put_kv_int(out, LR_ATTRIBUTES, "profiling.data.total.frame.count", frames);
    ss_otlp_put_kv_str(out, LR_ATTRIBUTES, "profiling.instrumentation.source", "continuous", 10);
    ss_otlp_put_kv_int(out, LR_ATTRIBUTES, "source.event.period", r->interval_ms);
    pb_fixed64_nz(out, LR_OBSERVED_TIME, observed_ns);
    pb_string(out, LR_EVENT_NAME, SS_LOGS_SCOPE_NAME);
    pb_end(out, m);
    close_request(out, rl, sl);
    return out->failed ? -ENOMEM : 0;
}
