/* zorka_decode.c: agd and trc bodies -> readable events (zkdump.h).
 *
 * The CBOR tokens come from libcbor's streaming decoder, one header at a
 * time, so every event knows its byte position and every integer the width
 * it was written with (one-byte tags are read here: see next()). On them
 * sit two readers:
 *
 *   Gen C (spec §3-§5) like zorka-common's TraceDataReader: a flat loop of
 *   tagged items; the tag is the low five bits of a one-byte tag (so
 *   "d8 NN" is tag 24, refused); 32-bit fields (symbol and method IDs,
 *   flags) refuse the 8-byte form and wrap a 4-byte value past 2^31;
 *   TraceEnd must be followed by BREAK; a stray top-level BREAK is skipped.
 *
 *   Gen B (spec §8) like zorka-tdb's readers: typed string definitions,
 *   tag 8 records with prolog and epilog words, tag 9 attribute maps.
 *
 * Beside them a small collector: sessions with the symbols and methods of
 * their agd, and for every Gen C record with a TraceBegin the span ZICO's
 * indexer would store (spec §5.5, with its quirks: the chunk's tstart is
 * the last tstart seen, calls the largest calls + 1, errors by 0x1000). */
#include "agent/buf.h"
#include "tools/stackshot-dump/zkdump.h"

#include <cbor.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_DEPTH 100000   /* open records at most (the flat reader has no limit) */
#define MAX_ATTRS 256      /* attributes kept per span */

/* ---- tokens -------------------------------------------------------------- */

typedef enum tk_type {
    TK_UINT, TK_NEGINT, TK_BYTES, TK_TEXT, TK_ARRAY, TK_INDEF_ARRAY, TK_MAP,
    TK_INDEF_MAP, TK_TAG, TK_FLOAT, TK_NULL, TK_UNDEF, TK_BOOL, TK_BREAK,
    TK_INDEF_STRING,
} tk_type;

typedef struct tk {
    tk_type t;
    uint64_t v;          /* integer value, length, tag */
    uint8_t width;       /* bytes of an integer's argument: 1, 2, 4, 8 */
    const uint8_t *p;    /* string data */
    size_t n;
    bool b;
    size_t pos;          /* where the item's head starts */
} tk;

typedef struct rd {
    const uint8_t *buf;
    size_t len, pos;
    char err[200];
    bool failed;
} rd;

static void cb_u8(void *c, uint8_t v) { *(tk *)c = (tk){.t = TK_UINT, .v = v, .width = 1}; }
static void cb_u16(void *c, uint16_t v) { *(tk *)c = (tk){.t = TK_UINT, .v = v, .width = 2}; }
static void cb_u32(void *c, uint32_t v) { *(tk *)c = (tk){.t = TK_UINT, .v = v, .width = 4}; }
static void cb_u64(void *c, uint64_t v) { *(tk *)c = (tk){.t = TK_UINT, .v = v, .width = 8}; }
static void cb_n8(void *c, uint8_t v) { *(tk *)c = (tk){.t = TK_NEGINT, .v = v, .width = 1}; }
static void cb_n16(void *c, uint16_t v) { *(tk *)c = (tk){.t = TK_NEGINT, .v = v, .width = 2}; }
static void cb_n32(void *c, uint32_t v) { *(tk *)c = (tk){.t = TK_NEGINT, .v = v, .width = 4}; }
static void cb_n64(void *c, uint64_t v) { *(tk *)c = (tk){.t = TK_NEGINT, .v = v, .width = 8}; }
static void cb_bytes(void *c, cbor_data p, size_t n) { *(tk *)c = (tk){.t = TK_BYTES, .p = p, .n = n}; }
static void cb_text(void *c, cbor_data p, size_t n) { *(tk *)c = (tk){.t = TK_TEXT, .p = p, .n = n}; }
static void cb_indef_string(void *c) { *(tk *)c = (tk){.t = TK_INDEF_STRING}; }
static void cb_array(void *c, size_t n) { *(tk *)c = (tk){.t = TK_ARRAY, .v = n}; }
static void cb_indef_array(void *c) { *(tk *)c = (tk){.t = TK_INDEF_ARRAY}; }
static void cb_map(void *c, size_t n) { *(tk *)c = (tk){.t = TK_MAP, .v = n}; }
static void cb_indef_map(void *c) { *(tk *)c = (tk){.t = TK_INDEF_MAP}; }
static void cb_tag(void *c, uint64_t v) { *(tk *)c = (tk){.t = TK_TAG, .v = v}; }
static void cb_float(void *c, float v) { (void)v, *(tk *)c = (tk){.t = TK_FLOAT}; }
static void cb_double(void *c, double v) { (void)v, *(tk *)c = (tk){.t = TK_FLOAT}; }
static void cb_null(void *c) { *(tk *)c = (tk){.t = TK_NULL}; }
static void cb_undef(void *c) { *(tk *)c = (tk){.t = TK_UNDEF}; }
static void cb_bool(void *c, bool b) { *(tk *)c = (tk){.t = TK_BOOL, .b = b}; }
static void cb_break(void *c) { *(tk *)c = (tk){.t = TK_BREAK}; }

static const struct cbor_callbacks callbacks = {
    .uint8 = cb_u8, .uint16 = cb_u16, .uint32 = cb_u32, .uint64 = cb_u64,
    .negint8 = cb_n8, .negint16 = cb_n16, .negint32 = cb_n32, .negint64 = cb_n64,
    .byte_string_start = cb_indef_string, .byte_string = cb_bytes,
    .string = cb_text, .string_start = cb_indef_string,
    .indef_array_start = cb_indef_array, .array_start = cb_array,
    .indef_map_start = cb_indef_map, .map_start = cb_map,
    .tag = cb_tag, .float2 = cb_float, .float4 = cb_float, .float8 = cb_double,
    .undefined = cb_undef, .null = cb_null, .boolean = cb_bool, .indef_break = cb_break,
};

static int fail(rd *r, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(rd *r, size_t pos, const char *fmt, ...) {
    if (r->failed)
        return -1;
    r->failed = true;
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "pos=%zu: %s", pos, why);
    return -1;
}

static bool at_end(const rd *r) { return r->pos >= r->len; }

static int next(rd *r, tk *t) {
    if (r->failed)
        return -1;
    if (at_end(r))
        return fail(r, r->pos, "unexpected end of the body");
    uint8_t first = r->buf[r->pos];
    if (first >= 0xc0 && first <= 0xd7) {
        /* a one-byte tag: Debian's libcbor 0.8 refuses 0xc6-0xd4 as
         * "unassigned", and Zorka's tags 6, 7 and 8 are among them */
        *t = (tk){.t = TK_TAG, .v = first & 0x1f, .pos = r->pos};
        r->pos++;
        return 0;
    }
    struct cbor_decoder_result res = cbor_stream_decode(r->buf + r->pos, r->len - r->pos,
                                                        &callbacks, t);
    if (res.status == CBOR_DECODER_NEDATA)
        return fail(r, r->pos, "truncated item (%zu more bytes needed)", res.required);
    if (res.status != CBOR_DECODER_FINISHED || res.read == 0)
        return fail(r, r->pos, "malformed CBOR (initial byte 0x%02x)", r->buf[r->pos]);
    t->pos = r->pos;
    r->pos += res.read;
    return 0;
}

/* Skip one whole item (its head already read as t). */
static int skip_rest(rd *r, const tk *t, int depth) {
    if (depth > 64)
        return fail(r, t->pos, "items nested too deep");
    uint64_t n = 0;
    bool indef = false;
    switch (t->t) {
    case TK_ARRAY: n = t->v; break;
    case TK_MAP: n = 2 * t->v; break;
    case TK_INDEF_ARRAY: case TK_INDEF_MAP: case TK_INDEF_STRING: indef = true; break;
    case TK_TAG: n = 1; break;
    default: return 0;
    }
    for (uint64_t i = 0; indef || i < n; i++) {
        tk c;
        if (next(r, &c))
            return -1;
        if (c.t == TK_BREAK) {
            if (indef)
                return 0;
            return fail(r, c.pos, "BREAK inside a definite item");
        }
        if (skip_rest(r, &c, depth + 1))
            return -1;
    }
    return 0;
}

/* ---- integers as the Java reader reads them ------------------------------- */

/* A long (64-bit field): any width; past 2^63 it wraps as Java's does. */
static int read_long(rd *r, int64_t *out, const char *what) {
    tk t;
    if (next(r, &t))
        return -1;
    if (t.t == TK_UINT)
        *out = (int64_t)t.v;
    else if (t.t == TK_NEGINT)
        *out = (int64_t)(~t.v); /* -1 - v, in two's complement */
    else
        return fail(r, t.pos, "%s: expected an integer", what);
    return 0;
}

/* An int (32-bit field): the 8-byte form is refused, a 4-byte value past
 * 2^31 wraps negative. */
static int read_int(rd *r, int32_t *out, const char *what) {
    tk t;
    if (next(r, &t))
        return -1;
    if (t.t != TK_UINT && t.t != TK_NEGINT)
        return fail(r, t.pos, "%s: expected an integer", what);
    if (t.width == 8)
        return fail(r, t.pos, "%s: 8-byte integer in a 32-bit field", what);
    uint32_t v = (uint32_t)t.v;
    *out = t.t == TK_UINT ? (int32_t)v : (int32_t)~v;
    return 0;
}

static int expect(rd *r, tk *t, tk_type type, const char *what) {
    if (next(r, t))
        return -1;
    if (t->t != type)
        return fail(r, t->pos, "%s", what);
    return 0;
}

/* ---- printing ----------------------------------------------------------- */

/* Text as it is, with control characters escaped so lines stay lines. */
static void put_text(ss_buf *out, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            ss_buf_printf(out, "\\x%02x", p[i]);
        else
            ss_buf_putc(out, (char)p[i]);
    }
}

static char *dup_text(const uint8_t *p, size_t n) {
    ss_buf b;
    ss_buf_init(&b);
    put_text(&b, p, n);
    if (!b.data)
        return strdup("");
    return b.data; /* owned by the caller */
}

/* ---- maps in java.util.HashMap's order ------------------------------------ */

/* The oracle printed maps as Java's HashMap iterates them: by bucket
 * ((h ^ h >>> 16) & (capacity - 1), the capacity the smallest power of two
 * from 16 that holds the entries at a load of 0.75), then in insertion
 * order. Printing in that order makes the expected files match byte for
 * byte. */
typedef struct kv {
    const char *k, *v;
    uint32_t hash;
    size_t idx, bucket;
} kv;

/* String.hashCode over the UTF-16 units of UTF-8 text. */
static uint32_t java_string_hash(const char *s) {
    uint32_t h = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp = *p++;
        int more = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        if (more)
            cp &= 0x3F >> more;
        for (; more && (*p & 0xC0) == 0x80; more--)
            cp = cp << 6 | (*p++ & 0x3F);
        if (cp > 0xFFFF) {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        } else {
            h = 31 * h + cp;
        }
    }
    return h;
}

static int by_bucket(const void *a, const void *b) {
    const kv *x = a, *y = b;
    if (x->bucket != y->bucket)
        return x->bucket < y->bucket ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void put_java_map(ss_buf *out, kv *e, size_t n) {
    size_t cap = 16;
    while (n * 4 > cap * 3)
        cap *= 2;
    for (size_t i = 0; i < n; i++) {
        e[i].idx = i;
        e[i].bucket = (e[i].hash ^ (e[i].hash >> 16)) & (cap - 1);
    }
    qsort(e, n, sizeof *e, by_bucket);
    ss_buf_putc(out, '{');
    for (size_t i = 0; i < n; i++)
        ss_buf_printf(out, "%s%s=%s", i ? ", " : "", e[i].k, e[i].v);
    ss_buf_putc(out, '}');
}

/* A scalar value (attribute values, exception messages) as the Java
 * reader's object decoder gives it, with its class name. */
static int read_value(rd *r, ss_buf *val, const char **type) {
    tk t;
    if (next(r, &t))
        return -1;
    switch (t.t) {
    case TK_TEXT:
        put_text(val, t.p, t.n);
        *type = "String";
        return 0;
    case TK_UINT:
    case TK_NEGINT:
        if (t.t == TK_UINT)
            ss_buf_printf(val, "%" PRId64, (int64_t)t.v);
        else
            ss_buf_printf(val, "%" PRId64, (int64_t)~t.v);
        *type = t.width == 8 ? "Long" : "Integer";
        return 0;
    case TK_BOOL:
        ss_buf_puts(val, t.b ? "true" : "false");
        *type = "Boolean";
        return 0;
    case TK_NULL:
        ss_buf_puts(val, "null");
        *type = "null";
        return 0;
    case TK_BYTES:
        ss_buf_printf(val, "<%zu bytes>", t.n);
        *type = "byte[]";
        return 0;
    case TK_FLOAT:
        return fail(r, t.pos, "floating point value (the Java reader refuses them)");
    case TK_ARRAY: case TK_INDEF_ARRAY: case TK_MAP: case TK_INDEF_MAP:
        return fail(r, t.pos, "array or map value (the Java reader misreads them, spec §2)");
    default:
        return fail(r, t.pos, "unexpected item in a value");
    }
}

/* ---- sessions (the collector's side) ---------------------------------------- */

typedef struct sym { uint32_t id; char *text; } sym;
typedef struct meth { int32_t id, cls, name, sig; } meth;

typedef struct session {
    char *sid;
    sym *syms;
    size_t n_syms, cap_syms;   /* open addressing on id; id 0 = free */
    meth *meths;
    size_t n_meths, cap_meths;
    struct session *next;
} session;

struct zkd {
    session *sessions;
};

static void free_session(session *s) {
    for (size_t i = 0; i < s->cap_syms; i++)
        free(s->syms[i].text);
    free(s->syms);
    free(s->meths);
    free(s->sid);
    free(s);
}

static session *get_session(zkd *d, const char *sid, bool fresh) {
    session **pp = &d->sessions;
    for (; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->sid, sid))
            break;
    if (*pp && fresh) {
        session *old = *pp;
        *pp = old->next;
        free_session(old);
    }
    if (*pp)
        return *pp;
    session *s = calloc(1, sizeof *s);
    if (!s || !(s->sid = strdup(sid))) {
        free(s);
        return NULL;
    }
    s->next = d->sessions;
    d->sessions = s;
    return s;
}

static size_t slot(uint32_t id, size_t cap) { return (id * 2654435761u) & (cap - 1); }

static int define_symbol(session *s, uint32_t id, const uint8_t *p, size_t n) {
    if (id == 0)
        return 0;
    if ((s->n_syms + 1) * 2 > s->cap_syms) {
        size_t cap = s->cap_syms ? s->cap_syms * 2 : 64;
        sym *tab = calloc(cap, sizeof *tab);
        if (!tab)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap_syms; i++) {
            if (!s->syms[i].id)
                continue;
            size_t j = slot(s->syms[i].id, cap);
            while (tab[j].id)
                j = (j + 1) & (cap - 1);
            tab[j] = s->syms[i];
        }
        free(s->syms);
        s->syms = tab;
        s->cap_syms = cap;
    }
    size_t j = slot(id, s->cap_syms);
    while (s->syms[j].id && s->syms[j].id != id)
        j = (j + 1) & (s->cap_syms - 1);
    if (s->syms[j].id)
        return 0; /* the first definition wins for the session */
    char *text = dup_text(p, n);
    if (!text)
        return -ENOMEM;
    s->syms[j] = (sym){id, text};
    s->n_syms++;
    return 0;
}

static const char *symbol(const session *s, int32_t id) {
    if (!s || id <= 0 || !s->cap_syms)
        return NULL;
    size_t j = slot((uint32_t)id, s->cap_syms);
    for (; s->syms[j].id; j = (j + 1) & (s->cap_syms - 1))
        if (s->syms[j].id == (uint32_t)id)
            return s->syms[j].text;
    return NULL;
}

static int define_method(session *s, int32_t id, int32_t c, int32_t m, int32_t g) {
    for (size_t i = 0; i < s->n_meths; i++)
        if (s->meths[i].id == id)
            return 0; /* first wins */
    if (s->n_meths == s->cap_meths) {
        size_t cap = s->cap_meths ? s->cap_meths * 2 : 64;
        meth *tab = realloc(s->meths, cap * sizeof *tab);
        if (!tab)
            return -ENOMEM;
        s->meths = tab;
        s->cap_meths = cap;
    }
    s->meths[s->n_meths++] = (meth){id, c, m, g};
    return 0;
}

static const meth *method(const session *s, int32_t id) {
    for (size_t i = 0; s && i < s->n_meths; i++)
        if (s->meths[i].id == id)
            return &s->meths[i];
    return NULL;
}

/* ---- spans (what the indexer stores) ---------------------------------------- */

typedef struct span {
    uint32_t depth;           /* depth of the record that carries it */
    int64_t tstart_own, tstart_last, clock, id, parent;
    int32_t ttype, mid;
    int64_t calls;
    uint32_t recs, errors;
    uint32_t n_attrs;
    char *keys[MAX_ATTRS], *vals[MAX_ATTRS];
} span;

typedef struct rec {
    int64_t tstart;
    int32_t mid;
    span *sp;                 /* the span this record carries, or NULL */
} rec;

typedef struct trc_state {
    zkd *d;
    session *sess;
    const zkd_request *rq;
    ss_buf *out;
    ss_buf chunks;            /* printed after the RES line */
    rec *recs;
    size_t depth, cap;
    span **spans;             /* open spans, outermost first */
    size_t n_spans, cap_spans;
    char index_err[160];      /* why the indexer would fail (500) */
} trc_state;

static void free_span(span *s) {
    for (uint32_t i = 0; i < s->n_attrs; i++) {
        free(s->keys[i]);
        free(s->vals[i]);
    }
    free(s);
}

static void span_attr(span *s, const char *key, const char *val) {
    for (uint32_t i = 0; i < s->n_attrs; i++)
        if (!strcmp(s->keys[i], key)) { /* a map: the last value stays */
            char *v = strdup(val);
            if (v) {
                free(s->vals[i]);
                s->vals[i] = v;
            }
            return;
        }
    if (s->n_attrs == MAX_ATTRS)
        return;
    char *k = strdup(key), *v = strdup(val);
    if (!k || !v) {
        free(k);
        free(v);
        return;
    }
    s->keys[s->n_attrs] = k;
    s->vals[s->n_attrs++] = v;
}

static const char *trace_id_text(const zkd_request *rq) {
    if (!rq->trace_id || !strcmp(rq->trace_id, "-"))
        return "null";
    for (const char *p = rq->trace_id; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return "<not printable>";
    return rq->trace_id;
}

/* a - b as Java's long arithmetic gives it (the collector's): wrapping,
 * where C's signed overflow is undefined (hostile input reaches here). */
static int64_t java_minus(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

static void print_chunk(trc_state *st, const span *s, int64_t tstop, int32_t flags) {
    const meth *m = method(st->sess, s->mid);
    const char *cls = m ? symbol(st->sess, m->cls) : NULL;
    const char *name = m ? symbol(st->sess, m->name) : NULL;
    const char *ttype = symbol(st->sess, s->ttype);
    if (!m) {
        snprintf(st->index_err, sizeof st->index_err,
                 "TraceBegin on a record whose method %" PRId32 " is undefined", s->mid);
        return;
    }
    const char *tid = trace_id_text(st->rq);
    char pid[24] = "null";
    if (s->parent)
        snprintf(pid, sizeof pid, "%016" PRIx64, (uint64_t)s->parent);
    ss_buf *o = &st->chunks;
    ss_buf_printf(o, "CHUNK ChunkMetadata(%s tid=%s,sid=%016" PRIx64 ",chn=0,pid=%s) ttype=%s "
                     "class=%s method=%s tstart=%" PRId64 " tstop=%" PRId64 " dur=%" PRId64
                     " tstamp=%" PRId64 " calls=%" PRId64 " recs=%" PRIu32 " errors=%" PRIu32
                     " flags=0x%x span=%016" PRIx64 " parent=%s trace=%s attrs=",
                  name ? name : "null", tid, (uint64_t)s->id, pid, ttype ? ttype : "null",
                  cls ? cls : "null", name ? name : "null", s->tstart_last, tstop,
                  java_minus(tstop, s->tstart_own), s->clock, s->calls, s->recs, s->errors,
                  (unsigned)flags, (uint64_t)s->id, pid, tid);
    kv e[MAX_ATTRS];
    for (uint32_t i = 0; i < s->n_attrs; i++)
        e[i] = (kv){.k = s->keys[i], .v = s->vals[i], .hash = java_string_hash(s->keys[i])};
    put_java_map(o, e, s->n_attrs);
    ss_buf_putc(o, '\n');
}

/* ---- Gen C: agent data ------------------------------------------------------ */

static int genc_string_def(rd *r, session *s, ss_buf *out) {
    tk t, text;
    int32_t id;
    if (expect(r, &t, TK_ARRAY, "string definition: expected an array") ||
        (t.v != 2 && fail(r, t.pos, "string definition: %" PRIu64 " items, not 2", t.v)) ||
        read_int(r, &id, "string definition id"))
        return -1;
    if (next(r, &text))
        return -1;
    if (text.t == TK_INDEF_STRING)
        return fail(r, text.pos, "indefinite-length text (the Java reader refuses it)");
    if (text.t != TK_TEXT)
        return fail(r, text.pos, "string definition: expected text");
    ss_buf_printf(out, "  stringRef id=%" PRId32 " s=", id);
    put_text(out, text.p, text.n);
    ss_buf_putc(out, '\n');
    return s && id > 0 ? define_symbol(s, (uint32_t)id, text.p, text.n) : 0;
}

static int genc_method_def(rd *r, session *s, ss_buf *out) {
    tk t;
    int32_t v[4];
    if (expect(r, &t, TK_ARRAY, "method definition: expected an array") ||
        (t.v != 4 && fail(r, t.pos, "method definition: %" PRIu64 " items, not 4", t.v)))
        return -1;
    for (int i = 0; i < 4; i++)
        if (read_int(r, &v[i], "method definition"))
            return -1;
    ss_buf_printf(out, "  methodRef id=%" PRId32 " c=%" PRId32 " m=%" PRId32 " s=%" PRId32 "\n",
                  v[0], v[1], v[2], v[3]);
    return s ? define_method(s, v[0], v[1], v[2], v[3]) : 0;
}

/* The tag of the item at r->pos as the Java reader sees it: -1 when the
 * item is not a tag (error said). */
static int read_tag(rd *r, size_t *at) {
    tk t;
    *at = r->pos;
    uint8_t first = r->buf[r->pos];
    if (next(r, &t))
        return -1;
    if (t.t != TK_TAG)
        return fail(r, t.pos, "expected a tag, found initial byte 0x%02x", first);
    return first & 0x1f; /* "d8 NN" is tag 24: invalid, as in the Java reader */
}

static int genc_agd(rd *r, session *s, ss_buf *out) {
    while (!at_end(r)) {
        size_t at;
        int tag = read_tag(r, &at);
        if (tag < 0)
            return -1;
        int rc;
        if (tag == 1)
            rc = genc_string_def(r, s, out);
        else if (tag == 2)
            rc = genc_method_def(r, s, out);
        else if (tag >= 3 && tag <= 8)
            return fail(r, at, "tag %d: this is not allowed in agent state data", tag);
        else
            return fail(r, at, "Invalid tag: %d", tag);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- Gen C: trace data --------------------------------------------------------- */

static int trace_start(rd *r, trc_state *st, size_t at) {
    tk t;
    int64_t tstart;
    int32_t mid;
    if (expect(r, &t, TK_INDEF_ARRAY, "trace record: expected an indefinite array (9f)") ||
        read_long(r, &tstart, "tstart") || read_int(r, &mid, "method id"))
        return -1;
    ss_buf_printf(st->out, "  traceStart pos=%zu tstart=%" PRId64 " mid=%" PRId32 "\n", at,
                  tstart, mid);
    if (st->depth == MAX_DEPTH)
        return fail(r, at, "more than %d open records", MAX_DEPTH);
    if (st->depth == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        rec *n = realloc(st->recs, cap * sizeof *n);
        if (!n)
            return -ENOMEM;
        st->recs = n;
        st->cap = cap;
    }
    st->recs[st->depth++] = (rec){tstart, mid, NULL};
    for (size_t i = 0; i < st->n_spans; i++) {
        st->spans[i]->recs++;
        st->spans[i]->tstart_last = tstart;
    }
    return 0;
}

static int trace_end(rd *r, trc_state *st, size_t at) {
    tk t;
    int64_t tstop, calls;
    int32_t flags = 0;
    if (expect(r, &t, TK_ARRAY, "TraceEnd: expected an array") ||
        ((t.v < 2 || t.v > 3) && fail(r, t.pos, "TraceEnd: %" PRIu64 " items", t.v)) ||
        read_long(r, &tstop, "tstop") || read_long(r, &calls, "calls") ||
        (t.v == 3 && read_int(r, &flags, "flags")))
        return -1;
    tk brk;
    size_t brk_at = r->pos;
    if (at_end(r) || next(r, &brk) || brk.t != TK_BREAK)
        return fail(r, brk_at, "TraceEnd not followed by BREAK");
    ss_buf_printf(st->out, "  traceEnd pos=%zu tstop=%" PRId64 " calls=%" PRId64 " flags=0x%x\n",
                  r->pos, tstop, calls, (unsigned)flags);
    (void)at;
    if (st->depth == 0)
        return 0; /* a TraceEnd with no open record: read, nothing indexed (§14.4) */
    rec *rc = &st->recs[--st->depth];
    for (size_t i = 0; i < st->n_spans; i++) {
        span *s = st->spans[i];
        if (calls + 1 > s->calls)
            s->calls = calls + 1;
        if (flags & 0x1000)
            s->errors++;
    }
    if (rc->sp) {
        st->n_spans--; /* the innermost: it is this record's */
        print_chunk(st, rc->sp, tstop, flags);
        free_span(rc->sp);
        rc->sp = NULL;
    }
    return 0;
}

static int trace_begin(rd *r, trc_state *st) {
    tk t;
    int64_t v[4] = {0, 0, 0, 0};
    if (expect(r, &t, TK_ARRAY, "TraceBegin: expected an array") ||
        ((t.v < 2 || t.v > 4) && fail(r, t.pos, "TraceBegin: %" PRIu64 " items", t.v)))
        return -1;
    int32_t ttype;
    if (read_long(r, &v[0], "clock") || read_int(r, &ttype, "trace type"))
        return -1;
    for (uint64_t i = 2; i < t.v; i++)
        if (read_long(r, &v[i], i == 2 ? "span id" : "parent id"))
            return -1;
    ss_buf_printf(st->out, "  traceBegin clock=%" PRId64 " ttype=%" PRId32 " span=%" PRId64
                           " parent=%" PRId64 "\n",
                  v[0], ttype, v[2], v[3]);
    if (st->depth == 0)
        return 0;
    rec *rc = &st->recs[st->depth - 1];
    if (rc->sp)
        return 0; /* a second begin on one record: the first span stays */
    span *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->depth = (uint32_t)st->depth;
    s->tstart_own = s->tstart_last = rc->tstart;
    s->clock = v[0];
    s->ttype = ttype;
    s->id = v[2];
    s->parent = v[3] ? v[3] : st->n_spans ? st->spans[st->n_spans - 1]->id : 0;
    s->mid = rc->mid;
    s->recs = 1;
    if (st->n_spans == st->cap_spans) {
        size_t cap = st->cap_spans ? st->cap_spans * 2 : 8;
        span **n = realloc(st->spans, cap * sizeof *n);
        if (!n) {
            free(s);
            return -ENOMEM;
        }
        st->spans = n;
        st->cap_spans = cap;
    }
    st->spans[st->n_spans++] = s;
    rc->sp = s;
    return 0;
}

static int trace_attr(rd *r, trc_state *st) {
    tk t;
    int32_t ttype = 0, id;
    if (expect(r, &t, TK_ARRAY, "attribute: expected an array") ||
        ((t.v < 2 || t.v > 3) && fail(r, t.pos, "attribute: %" PRIu64 " items", t.v)) ||
        (t.v == 3 && read_int(r, &ttype, "attribute trace type")) ||
        read_int(r, &id, "attribute id"))
        return -1;
    ss_buf val;
    ss_buf_init(&val);
    const char *type = "";
    if (read_value(r, &val, &type)) {
        ss_buf_free(&val);
        return -1;
    }
    const char *v = val.data ? val.data : "";
    if (t.v == 3)
        ss_buf_printf(st->out, "  traceUpAttr ttype=%" PRId32 " %" PRId32 "=%s (%s)\n", ttype, id,
                      v, type);
    else
        ss_buf_printf(st->out, "  traceAttr %" PRId32 "=%s (%s)\n", id, v, type);
    /* the span's map: 2 items on the innermost span, 3 items on every
     * enclosing span of that trace type; an undefined name is "<?>" */
    const char *name = symbol(st->sess, id);
    if (!name)
        name = id == 0 ? "<null>" : "<?>";
    for (size_t i = st->n_spans; i-- > 0;) {
        span *s = st->spans[i];
        if (t.v == 2) {
            span_attr(s, name, v);
            break;
        }
        if (s->ttype == ttype)
            span_attr(s, name, v);
    }
    ss_buf_free(&val);
    return 0;
}

static int trace_exception(rd *r, trc_state *st) {
    tk t;
    int64_t id, cause;
    int32_t cls;
    if (expect(r, &t, TK_ARRAY, "exception: expected an array") ||
        ((t.v < 5 || t.v > 6) && fail(r, t.pos, "exception: %" PRIu64 " items", t.v)) ||
        read_long(r, &id, "exception id") || read_int(r, &cls, "exception class"))
        return -1;
    ss_buf msg, line;
    ss_buf_init(&msg);
    ss_buf_init(&line);
    const char *type;
    int rc = read_value(r, &msg, &type) || read_long(r, &cause, "cause id") ? -1 : 0;
    if (!rc)
        ss_buf_printf(&line, "  exception id=%" PRId64 " class=%" PRId32 " msg=%s cause=%" PRId64
                             " stack=",
                      id, cls, msg.data ? msg.data : "", cause);
    tk st_tk;
    if (!rc && !next(r, &st_tk)) {
        if (st_tk.t == TK_NULL) {
            ss_buf_puts(&line, "null");
        } else if (st_tk.t == TK_ARRAY) {
            ss_buf_putc(&line, '[');
            for (uint64_t i = 0; !rc && i < st_tk.v; i++) {
                tk fr;
                if (expect(r, &fr, TK_ARRAY, "stack frame: expected an array") ||
                    (fr.v != 4 && fail(r, fr.pos, "stack frame: %" PRIu64 " items", fr.v))) {
                    rc = -1;
                    break;
                }
                for (int k = 0; k < 4; k++) {
                    int32_t x;
                    if (read_int(r, &x, "stack frame")) {
                        rc = -1;
                        break;
                    }
                    ss_buf_printf(&line, "%s%" PRId32, i || k ? ", " : "", x);
                }
            }
            ss_buf_putc(&line, ']');
        } else {
            rc = fail(r, st_tk.pos, "exception stack: expected an array or null");
        }
    } else {
        rc = -1;
    }
    if (!rc && t.v == 6) {
        tk m;
        if (next(r, &m) || (m.t != TK_MAP && m.t != TK_NULL)) {
            rc = fail(r, r->pos, "exception attributes: expected a map");
        } else if (m.t == TK_NULL) {
            ss_buf_puts(&line, " attrs=null");
        } else {
            ss_buf_puts(&line, " attrs={");
            for (uint64_t i = 0; !rc && i < m.v; i++) {
                int32_t k;
                ss_buf v;
                ss_buf_init(&v);
                if (read_int(r, &k, "exception attribute id") || read_value(r, &v, &type))
                    rc = -1;
                else
                    ss_buf_printf(&line, "%s%" PRId32 "=%s", i ? ", " : "", k, v.data ? v.data : "");
                ss_buf_free(&v);
            }
            ss_buf_putc(&line, '}');
        }
    } else if (!rc) {
        ss_buf_puts(&line, " attrs=null");
    }
    if (!rc) {
        ss_buf_append(st->out, line.data, line.len);
        ss_buf_putc(st->out, '\n');
    }
    ss_buf_free(&msg);
    ss_buf_free(&line);
    return rc;
}

static int genc_trc(rd *r, trc_state *st) {
    while (!at_end(r)) {
        if (r->buf[r->pos] == 0xff) { /* a stray BREAK: skipped silently */
            r->pos++;
            continue;
        }
        size_t at;
        int tag = read_tag(r, &at), rc;
        if (tag < 0)
            return -1;
        switch (tag) {
        case 1: /* read, not registered in trace data */
            rc = genc_string_def(r, NULL, st->out);
            break;
        case 2:
            rc = genc_method_def(r, NULL, st->out);
            break;
        case 3:
            rc = trace_start(r, st, at);
            break;
        case 4:
            rc = trace_end(r, st, at);
            break;
        case 5:
            rc = trace_begin(r, st);
            break;
        case 6:
            rc = trace_attr(r, st);
            break;
        case 7:
            rc = trace_exception(r, st);
            break;
        case 8: {
            int64_t id;
            rc = read_long(r, &id, "exception ref");
            if (!rc)
                ss_buf_printf(st->out, "  exceptionRef id=%" PRId64 "\n", id);
            break;
        }
        default:
            return fail(r, at, "Invalid tag: %d", tag);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- Gen B (zorka-tdb's readers) ------------------------------------------------ */

static int genb_value(rd *r, ss_buf *out) {
    tk t;
    if (next(r, &t))
        return -1;
    if (t.t == TK_TAG && t.v == 6) { /* a string reference */
        tk id;
        if (expect(r, &id, TK_UINT, "string reference: expected an id"))
            return -1;
        ss_buf_printf(out, "ref[%" PRIu64 "]", id.v);
        return 0;
    }
    switch (t.t) {
    case TK_TEXT: put_text(out, t.p, t.n); return 0;
    case TK_UINT: ss_buf_printf(out, "%" PRIu64, t.v); return 0;
    case TK_NEGINT: ss_buf_printf(out, "%" PRId64, (int64_t)~t.v); return 0;
    case TK_BOOL: ss_buf_puts(out, t.b ? "true" : "false"); return 0;
    case TK_NULL: ss_buf_puts(out, "null"); return 0;
    default:
        ss_buf_puts(out, "<item>");
        return skip_rest(r, &t, 0);
    }
}

/* {k=v, ...} of a definite or indefinite map, in HashMap order (a string
 * reference's hash is its id, as an Integer's). */
#define MAX_MAP 4096

static int genb_map(rd *r, ss_buf *out) {
    tk m;
    if (next(r, &m))
        return -1;
    if (m.t != TK_MAP && m.t != TK_INDEF_MAP)
        return fail(r, m.pos, "attributes: expected a map");
    kv *e = calloc(MAX_MAP, sizeof *e);
    ss_buf text; /* "k\0v\0" pairs; offsets until the end */
    ss_buf_init(&text);
    size_t offs[2 * MAX_MAP], n = 0;
    int rc = e ? 0 : -ENOMEM;
    for (uint64_t i = 0; !rc && (m.t == TK_INDEF_MAP || i < m.v); i++) {
        if (m.t == TK_INDEF_MAP && !at_end(r) && r->buf[r->pos] == 0xff) {
            r->pos++;
            break;
        }
        if (n == MAX_MAP) {
            rc = fail(r, r->pos, "a map of more than %d entries", MAX_MAP);
            break;
        }
        bool ref = !at_end(r) && r->buf[r->pos] == 0xc6;
        offs[2 * n] = text.len;
        if (genb_value(r, &text)) {
            rc = -1;
            break;
        }
        e[n].hash = ref ? (uint32_t)strtoul(text.data + offs[2 * n] + 4, NULL, 10) : 0;
        ss_buf_putc(&text, '\0');
        offs[2 * n + 1] = text.len;
        if (genb_value(r, &text)) {
            rc = -1;
            break;
        }
        ss_buf_putc(&text, '\0');
        n++;
    }
    if (!rc && text.failed)
        rc = -ENOMEM;
    if (!rc) {
        for (size_t i = 0; i < n; i++) {
            e[i].k = text.data + offs[2 * i];
            e[i].v = text.data + offs[2 * i + 1];
            if (e[i].k[0] != 'r' || strncmp(e[i].k, "ref[", 4) != 0)
                e[i].hash = java_string_hash(e[i].k);
        }
        put_java_map(out, e, n);
    }
    free(e);
    ss_buf_free(&text);
    return rc;
}

static uint64_t word(const uint8_t *p, bool le) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[le ? i : 7 - i] << (8 * i);
    return v;
}

static int genb_agd(rd *r, ss_buf *out) {
    while (!at_end(r)) {
        tk t, a;
        if (next(r, &t))
            return -1;
        if (t.t != TK_TAG)
            return fail(r, t.pos, "expected a tag");
        if (expect(r, &a, TK_ARRAY, "agent data: expected an array"))
            return -1;
        if (t.v == 1 && a.v == 3) {
            tk id, text, type;
            if (expect(r, &id, TK_UINT, "string id") || expect(r, &text, TK_TEXT, "string text") ||
                expect(r, &type, TK_UINT, "string type"))
                return -1;
            ss_buf_printf(out, "  str %" PRIu64 " type=%" PRIu64 " ", id.v, type.v);
            put_text(out, text.p, text.n);
            ss_buf_putc(out, '\n');
        } else if (t.v == 2 && a.v == 4) {
            tk v[4];
            for (int i = 0; i < 4; i++)
                if (expect(r, &v[i], TK_UINT, "method definition"))
                    return -1;
            ss_buf_printf(out, "  mth %" PRIu64 " %" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", v[0].v,
                          v[1].v, v[2].v, v[3].v);
        } else if (t.v == 3 && a.v == 2) { /* agent attribute (before May 2019) */
            ss_buf_puts(out, "  agentAttr ");
            if (genb_value(r, out))
                return -1;
            ss_buf_putc(out, '=');
            if (genb_value(r, out))
                return -1;
            ss_buf_putc(out, '\n');
        } else {
            return fail(r, t.pos, "Gen B agent data: tag %" PRIu64 " with %" PRIu64 " items",
                        t.v, a.v);
        }
    }
    return 0;
}

static int genb_trc(rd *r, ss_buf *out) {
    size_t depth = 0;
    static const char *const begin_names[] = {"TSTAMP", "SPAN", "PARENT"};
    while (!at_end(r)) {
        if (r->buf[r->pos] == 0xff) {
            r->pos++;
            if (depth == 0)
                continue;
            depth--;
            ss_buf_puts(out, "  end\n");
            continue;
        }
        tk t, b;
        if (next(r, &t))
            return -1;
        if (t.t != TK_TAG)
            return fail(r, t.pos, "expected a tag");
        switch (t.v) {
        case 0x08:
            if (expect(r, &b, TK_INDEF_ARRAY, "record: expected an indefinite array"))
                return -1;
            if (depth++ == MAX_DEPTH)
                return fail(r, t.pos, "records nested too deep");
            ss_buf_printf(out, "  start@%zu\n", t.pos);
            break;
        case 0x0a: case 0x0b: case 0x0c: case 0x0d: {
            bool le = t.v & 1, prolog = t.v < 0x0c;
            if (expect(r, &b, TK_BYTES, "prolog/epilog: expected a byte string"))
                return -1;
            if (b.n != 8 && !(b.n == 16 && !prolog))
                return fail(r, b.pos, "prolog/epilog of %zu bytes", b.n);
            uint64_t w = word(b.p, le);
            uint64_t ticks = w & 0xFFFFFFFFFFull, high = w >> 40;
            if (prolog) {
                ss_buf_printf(out, "  info TSTART=%" PRIu64 "\n  info METHOD=%" PRIu64 "\n", ticks,
                              high);
            } else {
                uint64_t calls = b.n == 16 ? word(b.p + 8, le) : high;
                ss_buf_printf(out, "  info TSTOP=%" PRIu64 "\n  info CALLS=%" PRIu64 "\n", ticks,
                              calls);
            }
            break;
        }
        case 0x21:
            if (expect(r, &b, TK_ARRAY, "TraceBegin: expected an array"))
                return -1;
            for (uint64_t i = 0; i < b.v; i++) {
                int64_t v;
                if (read_long(r, &v, "TraceBegin"))
                    return -1;
                if (i < 3)
                    ss_buf_printf(out, "  info %s=%" PRId64 "\n", begin_names[i], v);
            }
            break;
        case 0x09:
            ss_buf_puts(out, "  attr ");
            if (genb_map(r, out))
                return -1;
            ss_buf_putc(out, '\n');
            break;
        case 0x26: /* upward attribute: [trace type, {map}] */
            if (expect(r, &b, TK_ARRAY, "upward attribute: expected an array"))
                return -1;
            ss_buf_puts(out, "  upattr ");
            if (genb_value(r, out))
                return -1;
            ss_buf_putc(out, ' ');
            if (genb_map(r, out))
                return -1;
            ss_buf_putc(out, '\n');
            break;
        case 0x0f: case 0x23: {
            int64_t v;
            if (read_long(r, &v, "flags"))
                return -1;
            ss_buf_printf(out, "  info %s=%" PRId64 "\n", t.v == 0x0f ? "FLAGS" : "EXCEPTION_REF", v);
            break;
        }
        case 0x22: case 0x0e:
            ss_buf_printf(out, "  %s ", t.v == 0x22 ? "exception" : "traceInfo");
            if (genb_value(r, out))
                return -1;
            ss_buf_putc(out, '\n');
            break;
        default:
            return fail(r, t.pos, "Gen B trace data: unknown tag 0x%" PRIx64, t.v);
        }
    }
    if (depth)
        ss_buf_printf(out, "  note: %zu records left open at the end of the body\n", depth);
    return 0;
}

/* ---- requests ----------------------------------------------------------------- */

zkd *zkd_new(void) { return calloc(1, sizeof(zkd)); }

void zkd_free(zkd *d) {
    if (!d)
        return;
    for (session *s = d->sessions, *n; s; s = n) {
        n = s->next;
        free_session(s);
    }
    free(d);
}

static bool is_trc(const zkd_request *rq) {
    return rq->uri && strstr(rq->uri, "trc") != NULL;
}

/* Gen B: a typed string definition (c1 83) or an agent attribute (c3) in
 * agd; a tag 8 record (c8 9f) in trc. */
static bool gen_b(const zkd_request *rq) {
    if (rq->len < 2)
        return false;
    const uint8_t *p = rq->body;
    return is_trc(rq) ? p[0] == 0xc8 : (p[0] == 0xc1 && p[1] == 0x83) || (p[0] == 0xc3 && p[1] == 0x82);
}

/* Gen A and early Gen B sent their bodies as base64 text. */
static bool base64_text(const zkd_request *rq) {
    if (rq->len < 4)
        return false;
    for (size_t i = 0; i < rq->len; i++) {
        uint8_t c = rq->body[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r'))
            return false;
    }
    return true;
}

static void free_trc_state(trc_state *st) {
    for (size_t i = 0; i < st->depth; i++)
        if (st->recs[i].sp)
            free_span(st->recs[i].sp);
    free(st->recs);
    free(st->spans);
    ss_buf_free(&st->chunks);
}

static int genc_request(zkd *d, const zkd_request *rq, ss_buf *out) {
    const char *sid = rq->sid ? rq->sid : "-";
    const char *reset = rq->reset ? rq->reset : "-";
    bool trc = is_trc(rq);
    /* the header values come from a capture: escaped like any text */
    const char *fields[] = {"REQ ", rq->uri ? rq->uri : "?", " sid=", sid, " reset=", reset,
                            " tid=", rq->trace_id ? rq->trace_id : "-"};
    for (size_t i = 0; i < 8; i++)
        put_text(out, (const uint8_t *)fields[i], strlen(fields[i]));
    ss_buf_printf(out, " len=%zu\n", rq->len);
    rd r = {.buf = rq->body, .len = rq->len};
    int rc;
    if (!trc) {
        session *s = get_session(d, sid, !strcasecmp(reset, "true"));
        if (!s)
            return -ENOMEM;
        rc = genc_agd(&r, s, out);
        if (rc == -ENOMEM)
            return rc;
        if (rc)
            ss_buf_printf(out, "  error %s\nRES 500 %s\n", r.err, r.err);
        else
            ss_buf_puts(out, "RES 200 OK\n");
        return rc ? -1 : 0;
    }
    trc_state st = {.d = d, .sess = get_session(d, sid, false), .rq = rq, .out = out};
    ss_buf_init(&st.chunks);
    rc = genc_trc(&r, &st);
    if (rc == -ENOMEM) {
        free_trc_state(&st);
        return rc;
    }
    if (!rc && st.depth)
        ss_buf_printf(out, "  note: %zu records left open at the end of the body "
                           "(answered, never indexed: spec §14.4)\n", st.depth);
    if (rc)
        ss_buf_printf(out, "  error %s\nRES 500 %s\n", r.err, r.err);
    else if (st.index_err[0])
        ss_buf_printf(out, "RES 500 %s\n", st.index_err);
    else
        ss_buf_printf(out, "RES 200 OK\n%s", st.chunks.data ? st.chunks.data : "");
    free_trc_state(&st);
    return rc ? -1 : 0;
}

int zkd_request_print(zkd *d, const zkd_request *rq, ss_buf *out) {
    if (base64_text(rq)) {
        ss_buf_printf(out, "== %s %zu bytes\n  error: the body is base64 text (Gen A/B before "
                           "zorka 1.90.6); decode it first (a .b64 file is)\n",
                      is_trc(rq) ? "TRC" : "AGD", rq->len);
        return -1;
    }
    if (!gen_b(rq))
        return genc_request(d, rq, out);
    ss_buf_printf(out, "== %s %zu bytes\n", is_trc(rq) ? "TRC" : "AGD", rq->len);
    rd r = {.buf = rq->body, .len = rq->len};
    int rc = is_trc(rq) ? genb_trc(&r, out) : genb_agd(&r, out);
    if (rc == -ENOMEM)
        return rc;
    if (rc)
        ss_buf_printf(out, "  error %s\n", r.err);
    return rc ? -1 : 0;
}
