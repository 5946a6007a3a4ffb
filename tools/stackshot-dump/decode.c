/* decode.c: readers of the Qubership streams (spec §4) into records.
 *
 * Every loop consumes at least one byte per record, so the arrays grow at
 * most with the input; every count read from the input is checked against
 * the bytes left before anything is allocated for it. */
#include "agent/buf.h"
#include "tools/stackshot-dump/decode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const stream_names[] = {
    [SS_QB_UNKNOWN] = "unknown",   [SS_QB_DICTIONARY] = "dictionary",
    [SS_QB_POS_DICTIONARY] = "posDictionary",
    [SS_QB_PARAMS] = "params",     [SS_QB_SUSPEND] = "suspend",
    [SS_QB_CALLS] = "calls",       [SS_QB_TRACE] = "trace",
    [SS_QB_SQL] = "sql",           [SS_QB_XML] = "xml",
};

const char *ss_qb_stream_name(ss_qb_stream s) {
    return (unsigned)s < sizeof stream_names / sizeof stream_names[0] ? stream_names[s]
                                                                        : "unknown";
}

/* From a stream name, or a file name holding one between dots or slashes
 * ("u5min-service.calls.0.bin", "trace/000001"). "traces" counts as trace. */
ss_qb_stream ss_qb_stream_guess(const char *name) {
    static const struct {
        const char *word;
        ss_qb_stream s;
    } words[] = {
        {"posDictionary", SS_QB_POS_DICTIONARY}, {"dictionary", SS_QB_DICTIONARY},
        {"params", SS_QB_PARAMS},   {"suspend", SS_QB_SUSPEND}, {"calls", SS_QB_CALLS},
        {"traces", SS_QB_TRACE},    {"trace", SS_QB_TRACE},     {"sql", SS_QB_SQL},
        {"xml", SS_QB_XML},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        for (const char *p = strstr(name, words[i].word); p; p = strstr(p + 1, words[i].word)) {
            bool left = p == name || p[-1] == '.' || p[-1] == '/' || p[-1] == '-' || p[-1] == '_';
            char c = p[n];
            bool right = c == '\0' || c == '.' || c == '/' || c == '-' || c == '_';
            if (left && right)
                return words[i].s;
        }
    }
    return SS_QB_UNKNOWN;
}

bool ss_qb_stream_phrased(ss_qb_stream s) {
    return s == SS_QB_DICTIONARY || s == SS_QB_POS_DICTIONARY || s == SS_QB_PARAMS ||
           s == SS_QB_SUSPEND;
}

/* ---- phrases ------------------------------------------------------- */

bool ss_qb_looks_phrased(const uint8_t *data, size_t len) {
    size_t pos = 0;
    if (len == 0)
        return false;
    while (pos < len) {
        if (len - pos < 4)
            return false;
        uint32_t l = (uint32_t)data[pos] << 24 | (uint32_t)data[pos + 1] << 16 |
                     (uint32_t)data[pos + 2] << 8 | data[pos + 3];
        if (l < 1 || l >= SS_QB_MAX_PHRASE || l > len - pos - 4)
            return false;
        pos += 4 + l;
    }
    return true;
}

int ss_qb_unphrase(const uint8_t *data, size_t len, ss_buf *out, uint32_t **sizes,
                   size_t *n_sizes) {
    *sizes = NULL;
    *n_sizes = 0;
    if (!ss_qb_looks_phrased(data, len) && len != 0)
        return -EBADMSG;
    size_t cap = 0;
    for (size_t pos = 0; pos < len;) {
        uint32_t l = (uint32_t)data[pos] << 24 | (uint32_t)data[pos + 1] << 16 |
                     (uint32_t)data[pos + 2] << 8 | data[pos + 3];
        if (*n_sizes == cap) {
            cap = cap ? cap * 2 : 16;
            uint32_t *p = realloc(*sizes, cap * sizeof **sizes);
            if (!p)
                return -ENOMEM;
            *sizes = p;
        }
        (*sizes)[(*n_sizes)++] = l;
        ss_buf_append(out, data + pos + 4, l);
        pos += 4 + l;
    }
    return out->failed ? -ENOMEM : 0;
}

/* ---- growable arrays ------------------------------------------------ */

/* Make room for one more element; false when out of memory. */
static bool grow(void **arr, size_t n, size_t *cap, size_t elem) {
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

#define PUSH(f, arr, n, cap)                                                    \
    (grow((void **)&(f)->arr, (f)->n, &(cap), sizeof *(f)->arr)                \
         ? memset(&(f)->arr[(f)->n], 0, sizeof *(f)->arr), &(f)->arr[(f)->n++] \
         : NULL)

/* ---- per stream ---------------------------------------------------- */

static int decode_dictionary(ss_qb_file *f, ss_qb_reader *r, bool pos_ids) {
    size_t cap = 0;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        uint32_t id = pos_ids ? ss_qb_get_varint(r) : (uint32_t)f->n_words;
        ss_qb_str s = ss_qb_get_varstring(r);
        if (r->err)
            return f->err_offset = at, -EBADMSG;
        ss_qb_word *w = PUSH(f, words, n_words, cap);
        if (!w)
            return -ENOMEM;
        w->id = id;
        w->offset = (uint32_t)at;
        w->word = s;
    }
    return 0;
}

static int decode_params(ss_qb_file *f, ss_qb_reader *r) {
    size_t cap = 0;
    f->params_version = ss_qb_get_u8(r);
    if (r->err || f->params_version != 1)
        return f->err_offset = 0, -EBADMSG;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        ss_qb_param p;
        p.name = ss_qb_get_varstring(r);
        p.index = ss_qb_get_u8(r);
        p.list = ss_qb_get_u8(r);
        p.order = ss_qb_get_varint(r);
        p.signature = ss_qb_get_varstring(r);
        if (r->err)
            return f->err_offset = at, -EBADMSG;
        ss_qb_param *d = PUSH(f, params, n_params, cap);
        if (!d)
            return -ENOMEM;
        *d = p;
    }
    return 0;
}

static int decode_suspend(ss_qb_file *f, ss_qb_reader *r) {
    size_t cap = 0;
    f->suspend_base = (int64_t)ss_qb_get_be64(r);
    if (r->err)
        return f->err_offset = 0, -EBADMSG;
    int64_t t = f->suspend_base;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        uint32_t delta = ss_qb_get_varint(r);
        uint32_t dur = ss_qb_get_varint(r);
        if (r->err)
            return f->err_offset = at, -EBADMSG;
        ss_qb_suspend_rec *s = PUSH(f, suspends, n_suspends, cap);
        if (!s)
            return -ENOMEM;
        t += (int32_t)delta;
        s->delta = delta;
        s->duration = dur;
        s->end_ms = t;
    }
    return 0;
}

static void free_call(ss_qb_call *c) {
    for (uint32_t i = 0; i < c->n_params; i++)
        free(c->params[i].values);
    free(c->params);
    c->params = NULL;
    c->n_params = 0;
}

static int read_call_params(ss_qb_call *c, ss_qb_reader *r) {
    uint32_t n = ss_qb_get_varint(r);
    if (r->err || n > ss_qb_left(r) / 2) /* each param takes >= 2 bytes */
        return -EBADMSG;
    if (n == 0)
        return 0;
    c->params = calloc(n, sizeof *c->params);
    if (!c->params)
        return -ENOMEM;
    c->n_params = n;
    for (uint32_t i = 0; i < n; i++) {
        ss_qb_call_param *p = &c->params[i];
        p->id = ss_qb_get_varint(r);
        uint32_t count = ss_qb_get_varint(r);
        if (r->err || count > ss_qb_left(r)) /* each value takes >= 1 byte */
            return -EBADMSG;
        if (count) {
            p->values = calloc(count, sizeof *p->values);
            if (!p->values)
                return -ENOMEM;
        }
        p->count = count;
        for (uint32_t k = 0; k < count; k++)
            p->values[k] = ss_qb_get_varstring(r);
        if (r->err)
            return -EBADMSG;
    }
    return 0;
}

static int read_call(ss_qb_call *c, ss_qb_reader *r, uint32_t format, ss_qb_str **threads,
                     size_t *n_threads, size_t *cap_threads) {
    c->time = ss_qb_get_zigzag(r);
    c->method = ss_qb_get_varint(r);
    c->duration = ss_qb_get_varlong(r);
    c->calls = ss_qb_get_varint(r);
    if (format >= 1) {
        c->thread_index = ss_qb_get_varint(r);
        if (r->err || c->thread_index > *n_threads)
            return -EBADMSG;
        if (c->thread_index == *n_threads) {
            ss_qb_str name = ss_qb_get_varstring(r);
            if (r->err)
                return -EBADMSG;
            if (!grow((void **)threads, *n_threads, cap_threads, sizeof **threads))
                return -ENOMEM;
            (*threads)[(*n_threads)++] = name;
            c->has_name = true;
        }
        c->thread_name = (*threads)[c->thread_index];
        c->logs_written = ss_qb_get_varint(r);
        c->logs_diff = ss_qb_get_varint(r);
    }
    c->trace_file_index = ss_qb_get_varint(r);
    c->buffer_offset = ss_qb_get_varint(r);
    c->record_index = ss_qb_get_varint(r);
    if (format >= 2) {
        c->cpu = ss_qb_get_varlong(r);
        c->wait = ss_qb_get_varlong(r);
        c->memory = ss_qb_get_varlong(r);
    }
    if (format >= 3) {
        c->file_read = ss_qb_get_varlong(r);
        c->file_written = ss_qb_get_varlong(r);
        c->net_read = ss_qb_get_varlong(r);
        c->net_written = ss_qb_get_varlong(r);
    }
    if (format >= 4) {
        c->transactions = ss_qb_get_varint(r);
        c->queue_wait = ss_qb_get_varint(r);
    }
    if (r->err)
        return -EBADMSG;
    return read_call_params(c, r);
}

static int decode_calls(ss_qb_file *f, ss_qb_reader *r) {
    uint64_t first = ss_qb_get_be64(r);
    if (r->err)
        return f->err_offset = 0, -EBADMSG;
    if ((first >> 32) == SS_QB_CALLS_MAGIC) {
        f->calls_format = (uint32_t)first;
        f->calls_start = (int64_t)ss_qb_get_be64(r);
        if (r->err || f->calls_format > 4)
            return f->err_offset = 0, -EBADMSG;
    } else {
        f->calls_format = 0;
        f->calls_start = (int64_t)first;
    }
    ss_qb_str *threads = NULL;
    size_t n_threads = 0, cap_threads = 0, cap = 0;
    int64_t t = f->calls_start;
    int rc = 0;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        ss_qb_call *c = PUSH(f, calls, n_calls, cap);
        if (!c) {
            rc = -ENOMEM;
            break;
        }
        c->offset = (uint32_t)at;
        rc = read_call(c, r, f->calls_format, &threads, &n_threads, &cap_threads);
        if (rc) {
            free_call(c);
            f->n_calls--;
            f->err_offset = at;
            break;
        }
        t += c->time;
        c->start_ms = t;
    }
    free(threads);
    return rc;
}

static int read_event(ss_qb_event *e, ss_qb_reader *r) {
    uint8_t h = ss_qb_get_u8(r);
    e->type = h & 3;
    uint32_t low = (h & 0x7Fu) >> 2;
    if (h & 0x80) {
        uint32_t ext = ss_qb_get_varint(r);
        e->delta = (int32_t)(low | (ext << 5));
        e->extended = true;
    } else {
        e->delta = (int32_t)low;
    }
    switch (e->type) {
    case SS_QB_ENTER:
        e->id = ss_qb_get_varint(r);
        break;
    case SS_QB_TAG:
        e->id = ss_qb_get_varint(r);
        e->param_type = ss_qb_get_u8(r);
        if (e->param_type == SS_QB_PARAM_INLINE || e->param_type == SS_QB_PARAM_INDEX) {
            e->value = ss_qb_get_varstring(r);
        } else if (e->param_type == SS_QB_PARAM_BIG || e->param_type == SS_QB_PARAM_BIG_DEDUP) {
            e->file_index = ss_qb_get_varint(r);
            e->value_offset = ss_qb_get_varint(r);
        } else {
            return -EBADMSG; /* desynchronises every reader */
        }
        break;
    case SS_QB_FINISH:
        if (h != 0x03)
            return -EBADMSG;
        break;
    default:
        break;
    }
    return r->err ? -EBADMSG : 0;
}

static int decode_trace(ss_qb_file *f, ss_qb_reader *r) {
    size_t cap_chunks = 0, cap_events = 0;
    f->trace_start = (int64_t)ss_qb_get_be64(r);
    if (r->err)
        return f->err_offset = 0, -EBADMSG;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        ss_qb_chunk ch = {.offset = (uint32_t)at, .first_event = (uint32_t)f->n_events};
        ch.thread_id = (int64_t)ss_qb_get_be64(r);
        ch.real_time = (int64_t)ss_qb_get_be64(r);
        int32_t timer = 0; /* the agent's 32-bit timer domain */
        for (;;) {
            size_t ev_at = r->pos;
            ss_qb_event e = {0};
            if (read_event(&e, r) != 0) {
                f->err_offset = ev_at;
                return -EBADMSG;
            }
            if (e.type == SS_QB_FINISH)
                break;
            timer = (int32_t)((uint32_t)timer + (uint32_t)e.delta);
            e.time_ms = f->trace_start + timer;
            ss_qb_event *d = PUSH(f, events, n_events, cap_events);
            if (!d)
                return -ENOMEM;
            *d = e;
            ch.n_events++;
        }
        ss_qb_chunk *c = PUSH(f, chunks, n_chunks, cap_chunks);
        if (!c)
            return -ENOMEM;
        *c = ch;
    }
    return 0;
}

static int decode_values(ss_qb_file *f, ss_qb_reader *r) {
    size_t cap = 0;
    while (ss_qb_left(r)) {
        size_t at = r->pos;
        ss_qb_str s = ss_qb_get_varstring(r);
        if (r->err)
            return f->err_offset = at, -EBADMSG;
        ss_qb_value *v = PUSH(f, values, n_values, cap);
        if (!v)
            return -ENOMEM;
        v->offset = (uint32_t)at;
        v->value = s;
    }
    return 0;
}

/* A record never straddles two phrases: every phrase boundary must be a
 * record start (or the end). `starts` are record offsets, ascending. */
static bool boundaries_ok(const ss_qb_file *f, const uint32_t *starts, size_t n,
                          size_t first_record) {
    size_t pos = 0, k = 0;
    for (size_t i = 0; i + 1 < f->n_phrases; i++) {
        pos += f->phrases[i];
        while (k < n && starts[k] < pos)
            k++;
        bool at_start = k < n && starts[k] == pos;
        if (!at_start && !(pos <= first_record && k == 0))
            return false;
    }
    return true;
}

static int check_phrases(ss_qb_file *f) {
    if (!f->framed || f->n_phrases < 2)
        return 0;
    size_t n = f->type == SS_QB_SUSPEND ? f->n_suspends : f->n_words;
    if (f->type == SS_QB_PARAMS)
        return -EBADMSG; /* the table is one record: one phrase */
    uint32_t *starts = malloc((n ? n : 1) * sizeof *starts);
    if (!starts)
        return -ENOMEM;
    if (f->type == SS_QB_SUSPEND) {
        ss_qb_reader r; /* record offsets were not kept: walk again */
        ss_qb_reader_init(&r, f->payload.data, f->payload.len);
        ss_qb_skip(&r, 8);
        for (size_t i = 0; i < n; i++) {
            starts[i] = (uint32_t)r.pos;
            ss_qb_get_varint(&r);
            ss_qb_get_varint(&r);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            starts[i] = f->words[i].offset;
    }
    bool ok = boundaries_ok(f, starts, n, 0);
    free(starts);
    return ok ? 0 : -EBADMSG;
}

int ss_qb_decode(ss_qb_file *f, ss_qb_stream type, const uint8_t *data, size_t len,
                 int framing) {
    memset(f, 0, sizeof *f);
    f->type = type;
    ss_buf_init(&f->payload);
    bool phrased = ss_qb_stream_phrased(type);
    if (framing < 0)
        framing = phrased && ss_qb_looks_phrased(data, len);
    if (framing) {
        f->framed = true;
        int rc = ss_qb_unphrase(data, len, &f->payload, &f->phrases, &f->n_phrases);
        if (rc)
            return f->err = rc;
    } else {
        ss_buf_append(&f->payload, data, len);
    }
    if (f->payload.failed)
        return f->err = -ENOMEM;
    ss_qb_reader r;
    ss_qb_reader_init(&r, f->payload.data, f->payload.len);
    if (f->payload.len == 0 && type != SS_QB_UNKNOWN)
        return f->err = 0; /* a file opened that got no bytes: no records */
    int rc;
    switch (type) {
    case SS_QB_DICTIONARY: rc = decode_dictionary(f, &r, false); break;
    case SS_QB_POS_DICTIONARY: rc = decode_dictionary(f, &r, true); break;
    case SS_QB_PARAMS: rc = decode_params(f, &r); break;
    case SS_QB_SUSPEND: rc = decode_suspend(f, &r); break;
    case SS_QB_CALLS: rc = decode_calls(f, &r); break;
    case SS_QB_TRACE: rc = decode_trace(f, &r); break;
    case SS_QB_SQL:
    case SS_QB_XML: rc = decode_values(f, &r); break;
    default: rc = -EINVAL; break;
    }
    if (rc == 0)
        rc = check_phrases(f);
    return f->err = rc;
}

void ss_qb_file_free(ss_qb_file *f) {
    for (size_t i = 0; i < f->n_calls; i++)
        free_call(&f->calls[i]);
    free(f->calls);
    free(f->words);
    free(f->params);
    free(f->suspends);
    free(f->chunks);
    free(f->events);
    free(f->values);
    free(f->phrases);
    ss_buf_free(&f->payload);
    memset(f, 0, sizeof *f);
}

const ss_qb_event *ss_qb_trace_event_at(const ss_qb_file *trace, uint32_t offset,
                                        uint32_t record_index) {
    size_t lo = 0, hi = trace->n_chunks;
    while (lo < hi) { /* chunks are in file order: binary search by offset */
        size_t mid = lo + (hi - lo) / 2;
        if (trace->chunks[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == trace->n_chunks || trace->chunks[lo].offset != offset)
        return NULL;
    const ss_qb_chunk *c = &trace->chunks[lo];
    if (record_index >= c->n_events)
        return NULL;
    return &trace->events[c->first_event + record_index];
}
