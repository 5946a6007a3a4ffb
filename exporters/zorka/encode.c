/* encode.c: one trace -> the agd and trc bodies of spec §4 and §5, Gen C,
 * written with libcbor's encoders (this is the only file of the exporter
 * that uses libcbor).
 *
 * agd: string definitions c1 [id, text] and method definitions
 *      c2 [mid, class, method, signature], only those this session has
 *      not been sent yet, each string before the method that uses it.
 * trc: one record per trace record, as the default Zorka producer writes
 *      it (§5.1): c3 9f tstart mid, then on the root TraceBegin
 *      c5 [clock, ttype, spanId(, parentId)] and the trace's attributes
 *      c6 [name, text], then the record's own attributes (file, line), the
 *      child records, and c4 [tstop, calls(, flags)] ff.
 * Values are text, as the agent sends them (§5.6); integers are written
 * in their shortest form, which every reader accepts (§2). */
#include "agent/module_abi.h"
#include "exporters/zorka/zorka.h"

#include <cbor.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZK_TRACE_TYPE "stackshot" /* the trace type symbol of every trace */
#define ZK_FLAG_SENT 0x2000       /* SENT_MARK, on every submitted trace top (§5.4) */
#define ZK_MAX_TEXT 4096          /* bytes of one text value at most */

typedef struct enc {
    zk_session *s;
    ss_buf *agd, *trc;
    ss_buf scratch;
    bool oom;
} enc;

/* ---- CBOR items, appended -------------------------------------------------- */

static unsigned char *room(ss_buf *b, size_t n) {
    if (ss_buf_reserve(b, n) != 0)
        return NULL;
    return (unsigned char *)b->data + b->len;
}

static void put_uint(ss_buf *b, uint64_t v) {
    unsigned char *p = room(b, 9);
    if (p)
        b->len += cbor_encode_uint(v, p, 9);
}

static void put_int(ss_buf *b, int64_t v) {
    if (v >= 0) {
        put_uint(b, (uint64_t)v);
        return;
    }
    unsigned char *p = room(b, 9);
    if (p) /* major type 1 carries -1 - v */
        b->len += cbor_encode_negint((uint64_t)(-(v + 1)), p, 9);
}

static void put_tag(ss_buf *b, uint64_t tag) {
    unsigned char *p = room(b, 9);
    if (p)
        b->len += cbor_encode_tag(tag, p, 9);
}

static void put_array(ss_buf *b, size_t n) {
    unsigned char *p = room(b, 9);
    if (p)
        b->len += cbor_encode_array_start(n, p, 9);
}

static void put_indef_array(ss_buf *b) {
    unsigned char *p = room(b, 1);
    if (p)
        b->len += cbor_encode_indef_array_start(p, 1);
}

static void put_break(ss_buf *b) {
    unsigned char *p = room(b, 1);
    if (p)
        b->len += cbor_encode_break(p, 1);
}

/* A text item: valid UTF-8 (what a Java reader decodes and a strict CBOR
 * decoder accepts), at most ZK_MAX_TEXT bytes. */
static void put_text(enc *e, ss_buf *b, const char *s) {
    size_t n = 0;
    while (s[n] && (unsigned char)s[n] < 0x80)
        n++;
    if (!s[n] && n <= ZK_MAX_TEXT) { /* ASCII: as it is */
        unsigned char *p = room(b, 9);
        if (p) {
            b->len += cbor_encode_string_start(n, p, 9);
            ss_buf_append(b, s, n);
        }
        return;
    }
    ss_buf_reset(&e->scratch);
    zk_utf8_clean(s, ZK_MAX_TEXT, &e->scratch);
    if (e->scratch.failed) {
        e->oom = true;
        return;
    }
    unsigned char *p = room(b, 9);
    if (!p)
        return;
    b->len += cbor_encode_string_start(e->scratch.len, p, 9);
    ss_buf_append(b, e->scratch.data, e->scratch.len);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

/* The length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

void zk_utf8_clean(const char *s, size_t max, ss_buf *out) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p), used = 0;
    while (n) {
        size_t len = utf8_seq(p, n);
        const char *piece = len ? (const char *)p : "\xEF\xBF\xBD"; /* U+FFFD */
        size_t piece_len = len ? len : 3;
        if (used + piece_len > max)
            break;
        ss_buf_append(out, piece, piece_len);
        used += piece_len;
        p += len ? len : 1;
        n -= len ? len : 1;
    }
}

/* ---- definitions (agd) -------------------------------------------------- */

static uint32_t symbol(enc *e, const char *text) {
    bool define;
    uint32_t id = zk_session_symbol(e->s, text, &define);
    if (!id) {
        e->oom = true;
        return 0;
    }
    if (define) {
        put_tag(e->agd, 1);
        put_array(e->agd, 2);
        put_uint(e->agd, id);
        put_text(e, e->agd, text);
    }
    return id;
}

/* A string literal's symbol, through the session's shortcuts. */
static uint32_t literal(enc *e, const char *text) {
    static const char marker = 0;
    uint32_t id = zk_session_shortcut(e->s, text, &marker);
    if (id)
        return id;
    id = symbol(e, text);
    if (id)
        zk_session_remember(e->s, text, &marker, id);
    return id;
}

static uint32_t method(enc *e, const zk_rec *r, zk_method_names *names) {
    zk_names_of(r, names);
    /* the function and its module are interned: once numbered in this
     * session, they are the same method */
    uint32_t known = zk_session_shortcut(e->s, r->fn, r->map);
    if (known)
        return known;
    uint32_t cls = symbol(e, names->cls);
    uint32_t name = symbol(e, names->method);
    uint32_t sig = symbol(e, names->signature);
    bool define;
    uint32_t mid = zk_session_method(e->s, cls, name, sig, &define);
    if (!mid) {
        e->oom = true;
        return 0;
    }
    if (define) {
        put_tag(e->agd, 2);
        put_array(e->agd, 4);
        put_uint(e->agd, mid);
        put_uint(e->agd, cls);
        put_uint(e->agd, name);
        put_uint(e->agd, sig);
    }
    if (r->fn)
        zk_session_remember(e->s, r->fn, r->map, mid);
    return mid;
}

/* ---- records (trc) -------------------------------------------------------- */

static void attr(enc *e, const char *name, const char *value) {
    uint32_t id = literal(e, name); /* attribute names are literals */
    put_tag(e->trc, 6);
    put_array(e->trc, 2);
    put_uint(e->trc, id);
    put_text(e, e->trc, value);
}

static void hex(const uint8_t *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* TraceBegin and the trace's attributes, on the root record. */
static void begin(enc *e, const zk_process *p, const zk_trace *t) {
    uint32_t ttype = literal(e, ZK_TRACE_TYPE);
    int64_t parent = t->has_span ? be64(t->span_id) : 0;
    put_tag(e->trc, 5);
    put_array(e->trc, parent ? 4 : 3);
    put_uint(e->trc, t->start_ns / 1000000u); /* clock: ms since the epoch */
    put_uint(e->trc, ttype);
    put_int(e->trc, t->zorka_span);
    if (parent)
        put_int(e->trc, parent);
    char num[24];
    attr(e, "thread.name", t->thread_name);
    snprintf(num, sizeof num, "%" PRId64, t->thread_id);
    attr(e, "thread.id", num);
    attr(e, "thread.state", t->state);
    attr(e, "local.host", p->host);
    attr(e, "local.pid", p->pid);
    attr(e, "service.name", p->service);
    if (t->has_span) {
        char id[33];
        hex(t->trace_id, 16, id);
        attr(e, "trace.id", id);
        hex(t->span_id, 8, id);
        attr(e, "span.id", id);
    }
}

static void lines_text(const zk_rec *r, char *out, size_t n) {
    size_t used = 0;
    out[0] = '\0';
    for (uint8_t i = 0; i < r->n_lines && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%" PRId32, i ? "," : "", r->lines[i]);
    if (r->more_lines && used < n)
        snprintf(out + used, n - used, ",...");
}

static void open_record(enc *e, const zk_process *p, const zk_trace *t, const zk_rec *r) {
    zk_method_names names;
    uint32_t mid = method(e, r, &names);
    put_tag(e->trc, 3);
    put_indef_array(e->trc);
    put_uint(e->trc, t->start_ns + (uint64_t)r->first * t->interval_ns);
    put_uint(e->trc, mid);
    if (r->depth == 0)
        begin(e, p, t);
    if (names.file)
        attr(e, "file", names.file);
    if (r->n_lines) {
        char lines[64];
        lines_text(r, lines, sizeof lines);
        attr(e, "line", lines);
    }
}

static void close_record(enc *e, const zk_trace *t, const zk_rec *r) {
    put_tag(e->trc, 4);
    put_array(e->trc, r->depth == 0 ? 3 : 2);
    put_uint(e->trc, t->start_ns + (uint64_t)(r->first + r->samples) * t->interval_ns);
    put_uint(e->trc, r->samples); /* calls: the samples that saw the frame */
    if (r->depth == 0)
        put_uint(e->trc, ZK_FLAG_SENT);
    put_break(e->trc); /* closes the record's indefinite array */
}

static void encode_records(enc *e, const zk_process *p, const zk_trace *t, uint32_t *open) {
    uint32_t depth = 0;
    for (uint32_t i = 0; i < t->n_recs; i++) {
        const zk_rec *r = &t->recs[i];
        while (depth > r->depth)
            close_record(e, t, &t->recs[open[--depth]]);
        open_record(e, p, t, r);
        open[depth++] = i;
    }
    while (depth)
        close_record(e, t, &t->recs[open[--depth]]);
}

int zk_encode_trace(zk_session *s, const zk_process *p, const zk_trace *t, ss_buf *agd,
                    ss_buf *trc) {
    if (t->n_recs == 0)
        return -EINVAL;
    uint32_t max_depth = 0;
    for (uint32_t i = 0; i < t->n_recs; i++)
        if (t->recs[i].depth > max_depth)
            max_depth = t->recs[i].depth;
    uint32_t *open = malloc(((size_t)max_depth + 1) * sizeof *open);
    if (!open)
        return -ENOMEM;
    enc e = {.s = s, .agd = agd, .trc = trc};
    ss_buf_init(&e.scratch);
    size_t agd0 = agd->len, trc0 = trc->len;
    int rc = 0;
    /* twice at most: when the symbol IDs start again from 1 halfway
     * through, what was written with the old ones is written again (a
     * trace that alone needs more IDs than there are cannot be sent) */
    rc = -E2BIG;
    for (int attempt = 0; attempt < 2 && rc == -E2BIG; attempt++) {
        if (attempt)
            zk_session_reset(s); /* what the first attempt marked sent was not */
        uint32_t epoch = zk_session_epoch(s);
        agd->len = agd0;
        trc->len = trc0;
        e.oom = false;
        encode_records(&e, p, t, open);
        rc = e.oom || agd->failed || trc->failed ? -ENOMEM
             : epoch != zk_session_epoch(s)       ? -E2BIG
                                                  : 0;
    }
    free(open);
    ss_buf_free(&e.scratch);
    return rc;
}
