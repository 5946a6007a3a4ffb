/* mapping.c: sampled stacks -> trace chunks and calls records.
 *
 * The Java agent traces every method enter and exit; a sampler only sees
 * stacks, one per thread per round. Per thread and per window, the samples
 * become one trace chunk whose events follow the stacks: frames that
 * appear ENTER, frames that disappear EXIT, at the sample's millisecond.
 * The bottom frame is the "root call". It closes when the bottom frame
 * changes, or at the window's end (the last sample's time plus the
 * interval, the time that sample stands for); closing writes the closing
 * sequence of spec §4.5 (call.info marker, the tags, the root EXIT) and a
 * calls record pointing at the root ENTER. A long-running root therefore
 * appears as one call per window. CPU, wait, I/O and allocation of each
 * sample (its delta since the previous round) count for the root on the
 * stack at that sample. A thread whose stack did not change and that used
 * no CPU during the whole window writes nothing. */
#include "agent/buf.h"
#include "agent/grow.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "exporters/qubership/qb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qb_sample {
    int64_t ms;
    uint32_t first, depth;  /* method ids in the pool, root first */
    uint64_t cpu_ns, wait_ns, rd, wr, alloc;
    bool active;            /* used CPU since the previous round */
} qb_sample;

typedef struct qb_thread {
    int64_t number;
    char *name;
    qb_sample *samples;
    uint32_t n, cap;
    uint32_t *ids;
    uint32_t n_ids, cap_ids;
    uint32_t *last;         /* the stack at the end of the previous window */
    uint32_t last_depth, last_cap;
    bool has_last;
    uint32_t empty_windows; /* windows without a sample: the thread is gone */
    uint64_t prev_cpu, prev_wait, prev_rd, prev_wr, prev_alloc;
    uint32_t interval_ms;
} qb_thread;

struct qb_map {
    qb_thread *t;
    uint32_t n, cap;
    char *node;
    size_t charged;
};

/* The writer of one chunk. */
typedef struct chunk_writer {
    qb_session *q;
    ss_buf buf;
    int32_t prev_timer;
    uint32_t n_events;
    uint32_t *cur;
    uint32_t depth, cap;
    /* the open root */
    int64_t root_start;
    uint32_t root_index, enters;
    uint64_t cpu_ns, wait_ns, rd, wr, alloc;
    uint32_t offset, file_index;
    const qb_thread *th;
    const char *node;
    uint32_t calls;
} chunk_writer;

qb_map *qb_map_create(const char *node_name) {
    qb_map *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->node = strdup(node_name ? node_name : "");
    if (!m->node) {
        free(m);
        return NULL;
    }
    return m;
}

static void thread_free(qb_thread *t) {
    free(t->name);
    free(t->samples);
    free(t->ids);
    free(t->last);
}

static size_t thread_bytes(const qb_thread *t) {
    return sizeof *t + (size_t)t->cap * sizeof *t->samples +
           ((size_t)t->cap_ids + t->last_cap) * sizeof(uint32_t);
}

/* Keep ss_mem in step with what the map holds. */
static void account(qb_map *m) {
    size_t n = (size_t)m->cap * sizeof *m->t;
    for (uint32_t i = 0; i < m->n; i++)
        n += thread_bytes(&m->t[i]);
    if (n > m->charged)
        ss_mem_charge(n - m->charged);
    else
        ss_mem_release(m->charged - n);
    m->charged = n;
}

size_t qb_map_bytes(const qb_map *m) { return m->charged; }

void qb_map_destroy(qb_map *m) {
    if (!m)
        return;
    for (uint32_t i = 0; i < m->n; i++)
        thread_free(&m->t[i]);
    free(m->t);
    free(m->node);
    ss_mem_release(m->charged);
    free(m);
}

static qb_thread *find_thread(qb_map *m, int64_t number) {
    for (uint32_t i = 0; i < m->n; i++)
        if (m->t[i].number == number)
            return &m->t[i];
    if (ss_grow32((void **)&m->t, &m->cap, m->n + 1, sizeof *m->t, 32) != 0)
        return NULL;
    qb_thread *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    t->number = number;
    t->prev_cpu = t->prev_wait = t->prev_rd = t->prev_wr = t->prev_alloc = SS_UNKNOWN_U64;
    return t;
}

static bool reserve_u32(uint32_t **arr, uint32_t *cap, uint32_t need) {
    return ss_grow32((void **)arr, cap, need, sizeof **arr, 64) == 0;
}

/* The growth of a cumulative counter since the previous round (0 when
 * either value is unknown, or the counter went backwards). */
static uint64_t grew(uint64_t *prev, uint64_t cur) {
    uint64_t d = cur != SS_UNKNOWN_U64 && *prev != SS_UNKNOWN_U64 && cur >= *prev ? cur - *prev : 0;
    *prev = cur;
    return d;
}

static void add_sample(qb_map *m, qb_session *q, const ss_round *r, const ss_thread_sample *ts) {
    qb_thread *t = find_thread(m, ts->number);
    if (!t)
        return;
    if (!t->name || strcmp(t->name, ts->name ? ts->name : "") != 0) {
        char *n = strdup(ts->name ? ts->name : "");
        if (n) {
            free(t->name);
            t->name = n;
        }
    }
    if (ss_grow32((void **)&t->samples, &t->cap, t->n + 1, sizeof *t->samples, 8) != 0)
        return;
    if (!reserve_u32(&t->ids, &t->cap_ids, t->n_ids + ts->frame_count))
        return;
    qb_sample *s = &t->samples[t->n];
    memset(s, 0, sizeof *s);
    s->ms = (int64_t)(r->time_ns / 1000000u);
    s->first = t->n_ids;
    const ss_frame *f = ss_thread_frames(r, ts);
    for (uint32_t k = ts->frame_count; k-- > 0;) { /* frames are leaf first */
        uint32_t id = qb_dict_method(&q->dict, &f[k]);
        if (id != QB_NO_ID)
            t->ids[t->n_ids + s->depth++] = id;
    }
    t->n_ids += s->depth;
    /* CPU from the cumulative counter when known (not every sampler
     * fills cpu_delta_ns), else the sampler's delta */
    s->cpu_ns = ts->cpu_ns != SS_UNKNOWN_U64 ? grew(&t->prev_cpu, ts->cpu_ns) : ts->cpu_delta_ns;
    s->active = s->cpu_ns > 0 || ts->on_cpu;
    s->wait_ns = grew(&t->prev_wait, ts->wait_ns);
    s->rd = grew(&t->prev_rd, ts->io_read_bytes);
    s->wr = grew(&t->prev_wr, ts->io_write_bytes);
    s->alloc = grew(&t->prev_alloc, ts->alloc_bytes);
    t->interval_ms = r->interval_ms;
    t->empty_windows = 0;
    t->n++;
}

void qb_map_add_round(qb_map *m, qb_session *q, const ss_round *r) {
    for (uint32_t i = 0; i < r->n_threads; i++)
        add_sample(m, q, r, &r->threads[i]);
    account(m);
}

/* ---- events ------------------------------------------------------------ */

/* Event header (spec §4.5): type in bits 0-1, the low 5 bits of the delta
 * in bits 2-6, and when the delta does not fit, bit 7 and delta >> 5 as a
 * varint. */
static void put_header(chunk_writer *w, int type, int64_t ms) {
    int32_t timer = (int32_t)(ms - w->q->start_ms); /* the agent's 32-bit timer */
    int32_t d = (int32_t)((uint32_t)timer - (uint32_t)w->prev_timer);
    w->prev_timer = timer;
    if (d >= 0 && d <= 31) {
        ss_qb_put_u8(&w->buf, (uint8_t)(type | d << 2));
    } else {
        ss_qb_put_u8(&w->buf, (uint8_t)(0x80 | type | ((uint32_t)d & 0x1F) << 2));
        ss_qb_put_varint(&w->buf, (uint32_t)(d >> 5));
    }
    w->n_events++;
}

static void enter(chunk_writer *w, uint32_t id, int64_t ms) {
    put_header(w, SS_QB_ENTER, ms);
    ss_qb_put_varint(&w->buf, id);
    w->cur[w->depth++] = id;
    w->enters++;
}

static void leave(chunk_writer *w, int64_t ms) {
    put_header(w, SS_QB_EXIT, ms);
    w->depth--;
}

static void tag(chunk_writer *w, const char *name, const char *value, int64_t ms) {
    put_header(w, SS_QB_TAG, ms);
    ss_qb_put_varint(&w->buf, qb_dict_id(&w->q->dict, name));
    ss_qb_put_u8(&w->buf, SS_QB_PARAM_INLINE);
    ss_qb_put_cstring(&w->buf, value);
}

static void tag_num(chunk_writer *w, const char *name, uint64_t v, int64_t ms) {
    if (v == 0)
        return; /* the agent writes these tags only when not 0 */
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    tag(w, name, num, ms);
}

/* The closing sequence of a root call (spec §4.5) and its calls record. */
static void close_root(chunk_writer *w, int64_t ms) {
    while (w->depth > 1)
        leave(w, ms);
    uint32_t method = w->cur[0];
    tag(w, "call.info", "", ms);
    uint64_t duration = (uint64_t)(ms - w->root_start);
    /* recorded: more than one enter, or longer than 20 ms */
    bool recorded = w->enters > 1 || duration > 20;
    if (recorded) {
        char started[24];
        snprintf(started, sizeof started, "%" PRId64, w->root_start);
        tag(w, "common.started", started, ms);
        tag(w, "node.name", w->node, ms);
        tag(w, "java.thread", w->th->name ? w->th->name : "", ms);
        tag_num(w, "time.cpu", w->cpu_ns / 1000000u, ms);
        tag_num(w, "time.wait", w->wait_ns / 1000000u, ms);
        tag_num(w, "memory.allocated", w->alloc, ms);
        tag_num(w, "io.disk.read", w->rd, ms);
        tag_num(w, "io.disk.written", w->wr, ms);
    }
    leave(w, ms);
    if (!recorded)
        return;
    qb_call c = {
        .start_ms = w->root_start,
        .method = method,
        .duration_ms = duration,
        .enters = w->enters,
        .thread_number = w->th->number,
        .thread_name = w->th->name,
        .trace_file_index = w->file_index,
        .buffer_offset = w->offset,
        .record_index = w->root_index,
        .cpu_ms = w->cpu_ns / 1000000u,
        .wait_ms = w->wait_ns / 1000000u,
        .memory = w->alloc,
        .file_read = w->rd,
        .file_written = w->wr,
    };
    qb_session_write_call(w->q, &c);
    w->calls++;
}

static void apply_sample(chunk_writer *w, const qb_thread *t, const qb_sample *s) {
    const uint32_t *ids = t->ids + s->first;
    uint32_t p = 0;
    while (p < w->depth && p < s->depth && w->cur[p] == ids[p])
        p++;
    if (p == 0 && w->depth > 0)
        close_root(w, s->ms);
    while (w->depth > p)
        leave(w, s->ms);
    for (uint32_t k = p; k < s->depth; k++) {
        if (w->depth == 0) {
            w->root_start = s->ms;
            w->root_index = w->n_events;
            w->enters = 0;
            w->cpu_ns = w->wait_ns = w->rd = w->wr = w->alloc = 0;
        }
        enter(w, ids[k], s->ms);
    }
    if (w->depth > 0) {
        w->cpu_ns += s->cpu_ns;
        w->wait_ns += s->wait_ns;
        w->rd += s->rd;
        w->wr += s->wr;
        w->alloc += s->alloc;
    }
}

static bool same_stack(const qb_thread *t, const qb_sample *s) {
    return t->has_last && s->depth == t->last_depth &&
           memcmp(t->ids + s->first, t->last, (size_t)s->depth * sizeof *t->last) == 0;
}

static bool idle(const qb_thread *t) {
    for (uint32_t i = 0; i < t->n; i++)
        if (t->samples[i].active || !same_stack(t, &t->samples[i]))
            return false;
    return true;
}

static void write_chunk(qb_map *m, qb_session *q, qb_thread *t, qb_map_stats *st) {
    uint32_t max_depth = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->samples[i].depth > max_depth)
            max_depth = t->samples[i].depth;
    chunk_writer w;
    memset(&w, 0, sizeof w);
    w.q = q;
    w.th = t;
    w.node = m->node;
    w.offset = (uint32_t)q->s[QB_TRACE].file_bytes;
    w.file_index = q->s[QB_TRACE].file_index;
    w.cur = malloc(((size_t)max_depth + 1) * sizeof *w.cur);
    if (!w.cur)
        return;
    ss_buf_init(&w.buf);
    ss_qb_put_be64(&w.buf, (uint64_t)t->number);
    ss_qb_put_be64(&w.buf, (uint64_t)t->samples[0].ms); /* realTime */
    for (uint32_t i = 0; i < t->n; i++)
        apply_sample(&w, t, &t->samples[i]);
    const qb_sample *last = &t->samples[t->n - 1];
    if (w.depth > 0)
        close_root(&w, last->ms + (t->interval_ms ? t->interval_ms : 1));
    ss_qb_put_u8(&w.buf, SS_QB_FINISH);
    qb_session_write(q, QB_TRACE, w.buf.data, w.buf.len);
    st->chunks++;
    st->calls += w.calls;
    ss_buf_free(&w.buf);
    free(w.cur);
}

/* Remember the window's last stack, for the idle test of the next one. */
static void keep_last(qb_thread *t) {
    const qb_sample *s = &t->samples[t->n - 1];
    if (!reserve_u32(&t->last, &t->last_cap, s->depth ? s->depth : 1)) {
        t->has_last = false;
        return;
    }
    memcpy(t->last, t->ids + s->first, (size_t)s->depth * sizeof *t->last);
    t->last_depth = s->depth;
    t->has_last = true;
}

void qb_map_close_window(qb_map *m, qb_session *q, qb_map_stats *st) {
    for (uint32_t i = 0; i < m->n;) {
        qb_thread *t = &m->t[i];
        if (t->n == 0) {
            if (++t->empty_windows >= 2) { /* exited: forget it */
                thread_free(t);
                m->t[i] = m->t[--m->n];
                continue;
            }
            i++;
            continue;
        }
        if (idle(t))
            st->idle++;
        else
            write_chunk(m, q, t, st);
        keep_last(t);
        t->n = 0;
        t->n_ids = 0;
        i++;
    }
    account(m);
}
