/* session.c: the stream writers of one collector connection (spec §4, §5).
 *
 * Each stream holds the bytes waiting for RCV_DATA (`pending`, phrase
 * headers included for the phrase streams) and counts the unframed bytes
 * of its current rolling file, which is what offsets in calls records and
 * trace tags refer to. Headers are written when a file opens, exactly as
 * the real agent writes them on rotation. */
#include "agent/buf.h"
#include "agent/grow.h"
#include "agent/mem.h"
#include "exporters/qubership/qb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    bool phrased;
    uint64_t local_limit;
} stream_defs[QB_NSTREAMS] = {
    [QB_TRACE] = {"trace", false, 100u << 20},  [QB_CALLS] = {"calls", false, 10u << 20},
    [QB_XML] = {"xml", false, 100u << 20},      [QB_SQL] = {"sql", false, 100u << 20},
    [QB_DICT] = {"dictionary", true, 0},        [QB_SUSPEND] = {"suspend", true, 0},
    [QB_PARAMS] = {"params", true, 0},
};

/* The tags this agent writes when it closes a root call (spec §4.5), all
 * inline strings; the params stream lists them (version 1 rows: name,
 * index, list, order, signature), as the real agent lists its own. */
static const char *const used_params[] = {
    "common.started", "node.name",        "java.thread",  "time.cpu",
    "time.wait",      "memory.allocated", "io.disk.read", "io.disk.written",
};

void qb_params_table(ss_buf *out) {
    ss_qb_put_u8(out, 1); /* format version */
    for (size_t i = 0; i < sizeof used_params / sizeof used_params[0]; i++) {
        ss_qb_put_cstring(out, used_params[i]);
        ss_qb_put_u8(out, 0);         /* not copied into calls records */
        ss_qb_put_u8(out, 0);         /* single value */
        ss_qb_put_varint(out, 1000);  /* the real agent's default order */
        ss_qb_put_cstring(out, "");   /* no signature function */
    }
}

void qb_session_init(qb_session *q, int64_t start_ms) {
    memset(q, 0, sizeof *q);
    for (int i = 0; i < QB_NSTREAMS; i++) {
        q->s[i].name = stream_defs[i].name;
        q->s[i].phrased = stream_defs[i].phrased;
        q->s[i].local_limit = stream_defs[i].local_limit;
        ss_qb_phraser_init(&q->s[i].ph);
        ss_buf_init(&q->s[i].pending);
    }
    qb_dict_init(&q->dict);
    /* The first words of every Java agent's dictionary; call.info must be
     * id 0 (readers treat tag 0 with "" as the call.info marker). */
    qb_dict_id(&q->dict, "call.info");
    qb_dict_id(&q->dict, "call.red");
    qb_dict_id(&q->dict, "call.idle");
    q->start_ms = start_ms;
    q->suspend_last_ms = start_ms;
}

void qb_session_reset(qb_session *q) {
    for (int i = 0; i < QB_NSTREAMS; i++) {
        qb_stream *s = &q->s[i];
        ss_buf_reset(&s->pending);
        ss_buf_reset(&s->ph.cur);
        s->file_bytes = 0;
        s->file_index = 0;
        s->closed = false;
        memset(s->handle, 0, sizeof s->handle);
    }
    q->dict.sent = 0;
    q->n_threads = 0;
    q->suspend_header_due = false;
    qb_session_account(q);
}

void qb_session_free(qb_session *q) {
    for (int i = 0; i < QB_NSTREAMS; i++) {
        ss_qb_phraser_free(&q->s[i].ph);
        ss_buf_free(&q->s[i].pending);
    }
    qb_dict_free(&q->dict);
    free(q->threads);
    ss_mem_release(q->charged);
    memset(q, 0, sizeof *q);
}

void qb_session_write(qb_session *q, int stream, const void *p, size_t n) {
    qb_stream *s = &q->s[stream];
    ss_buf_append(&s->pending, p, n);
    s->file_bytes += n;
}

int qb_session_record(qb_session *q, int stream, const void *p, size_t n) {
    qb_stream *s = &q->s[stream];
    int rc = ss_qb_phraser_add(&s->ph, p, n, &s->pending);
    if (rc == 0)
        s->file_bytes += n;
    return rc;
}

void qb_session_opened(qb_session *q, int stream, const uint8_t handle[16],
                       int64_t period_ms, int64_t size, int32_t seq, uint64_t now_ms) {
    qb_stream *s = &q->s[stream];
    memcpy(s->handle, handle, 16);
    s->rotation_period_ms = period_ms;
    s->required_size = size;
    /* file index = rolling sequence id + 1 (spec §5) */
    s->file_index = (uint32_t)seq + 1;
    s->file_bytes = 0;
    s->opened_ms = now_ms;
    ss_buf hdr;
    ss_buf_init(&hdr);
    switch (stream) {
    case QB_TRACE:
        ss_qb_put_be64(&hdr, (uint64_t)q->start_ms);
        qb_session_write(q, stream, hdr.data, hdr.len);
        break;
    case QB_CALLS:
        ss_qb_put_be64(&hdr, (uint64_t)SS_QB_CALLS_MAGIC << 32 | 4);
        ss_qb_put_be64(&hdr, now_ms);
        qb_session_write(q, stream, hdr.data, hdr.len);
        q->calls_base_ms = (int64_t)now_ms;
        q->n_threads = 0; /* the thread table is per file */
        break;
    case QB_SUSPEND:
        q->suspend_header_due = true; /* travels with the first record */
        break;
    case QB_PARAMS:
        qb_params_table(&hdr);
        qb_session_record(q, stream, hdr.data, hdr.len);
        ss_qb_phraser_flush(&s->ph, &s->pending);
        break;
    case QB_DICT:
        q->dict.sent = 0; /* the whole dictionary again, from id 0 */
        break;
    default:
        break;
    }
    ss_buf_free(&hdr);
}

void qb_session_dict_sync(qb_session *q) {
    ss_buf rec;
    ss_buf_init(&rec);
    while (q->dict.sent < q->dict.n) {
        ss_buf_reset(&rec);
        const char *w = q->dict.words[q->dict.sent];
        ss_qb_put_cstring(&rec, w);
        if (qb_session_record(q, QB_DICT, rec.data, rec.len) == -EMSGSIZE) {
            /* the agent's DICTIONARY_TAG_TRIM_SIZE: keep ids aligned */
            ss_buf_reset(&rec);
            ss_qb_put_varstring(&rec, w, 4000);
            qb_session_record(q, QB_DICT, rec.data, rec.len);
        }
        q->dict.sent++;
    }
    ss_buf_free(&rec);
}

void qb_session_write_call(qb_session *q, const qb_call *c) {
    ss_qb_call r;
    memset(&r, 0, sizeof r);
    r.time = (int32_t)(c->start_ms - q->calls_base_ms);
    q->calls_base_ms = c->start_ms;
    r.method = c->method;
    r.duration = c->duration_ms;
    r.calls = c->enters;
    uint32_t idx = 0;
    while (idx < q->n_threads && q->threads[idx] != c->thread_number)
        idx++;
    ss_buf name;
    ss_buf_init(&name);
    if (idx == q->n_threads) {
        if (ss_grow32((void **)&q->threads, &q->cap_threads, q->n_threads + 1, sizeof *q->threads,
                      64) != 0) {
            ss_buf_free(&name);
            return;
        }
        q->threads[q->n_threads++] = c->thread_number;
        const char *tn = c->thread_name ? c->thread_name : "";
        ss_qb_put_cstring(&name, tn);
        r.has_name = true;
        r.thread_name.units = ss_qb_utf16_units(tn, strlen(tn));
        r.thread_name.be16 = (const uint8_t *)name.data + name.len - (size_t)r.thread_name.units * 2;
    }
    r.thread_index = idx;
    r.trace_file_index = c->trace_file_index;
    r.buffer_offset = c->buffer_offset;
    r.record_index = c->record_index;
    r.cpu = c->cpu_ms;
    r.wait = c->wait_ms;
    r.memory = c->memory;
    r.file_read = c->file_read;
    r.file_written = c->file_written;
    ss_buf rec;
    ss_buf_init(&rec);
    ss_qb_write_call(&rec, &r, 4);
    qb_session_write(q, QB_CALLS, rec.data, rec.len);
    q->calls_written++;
    ss_buf_free(&rec);
    ss_buf_free(&name);
}

void qb_session_write_suspend(qb_session *q, int64_t end_ms, uint32_t duration_ms) {
    ss_buf rec;
    ss_buf_init(&rec);
    if (q->suspend_header_due) {
        ss_qb_put_be64(&rec, (uint64_t)q->suspend_last_ms);
        q->suspend_header_due = false;
    }
    int64_t delta = end_ms - q->suspend_last_ms;
    if (delta < 0)
        delta = 0; /* records are in time order; a clock step back clamps */
    ss_qb_put_varint(&rec, (uint32_t)delta);
    ss_qb_put_varint(&rec, duration_ms);
    q->suspend_last_ms += delta;
    qb_session_record(q, QB_SUSPEND, rec.data, rec.len);
    ss_buf_free(&rec);
}

void qb_session_flush_phrases(qb_session *q) {
    for (int i = 0; i < QB_NSTREAMS; i++)
        if (q->s[i].phrased)
            ss_qb_phraser_flush(&q->s[i].ph, &q->s[i].pending);
}

void qb_session_account(qb_session *q) {
    size_t n = 0;
    for (int i = 0; i < QB_NSTREAMS; i++)
        n += q->s[i].pending.cap + q->s[i].ph.cur.cap;
    if (n > q->charged)
        ss_mem_charge(n - q->charged);
    else
        ss_mem_release(q->charged - n);
    q->charged = n;
}

bool qb_session_rotation_due(const qb_session *q, int stream, uint64_t now_ms) {
    const qb_stream *s = &q->s[stream];
    if (s->file_index == 0 || stream == QB_DICT || stream == QB_PARAMS)
        return false;
    if (s->rotation_period_ms > 0 && now_ms - s->opened_ms >= (uint64_t)s->rotation_period_ms)
        return true;
    uint64_t limit = s->local_limit;
    if (s->required_size > 0 && (limit == 0 || (uint64_t)s->required_size < limit))
        limit = (uint64_t)s->required_size;
    return limit && s->file_bytes > limit;
}
