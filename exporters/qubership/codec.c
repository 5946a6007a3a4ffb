/* codec.c: primitive encodings of the Qubership streams (spec §2). */
#include "agent/buf.h"
#include "exporters/qubership/codec.h"

#include <errno.h>
#include <string.h>

/* ---- writers ------------------------------------------------------- */

void ss_qb_put_u8(ss_buf *b, uint8_t v) { ss_buf_append(b, &v, 1); }

void ss_qb_put_be32(ss_buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    ss_buf_append(b, x, 4);
}

void ss_qb_put_be64(ss_buf *b, uint64_t v) {
    ss_qb_put_be32(b, (uint32_t)(v >> 32));
    ss_qb_put_be32(b, (uint32_t)v);
}

void ss_qb_put_varlong(ss_buf *b, uint64_t v) {
    uint8_t x[10];
    size_t n = 0;
    while (v >= 0x80) {
        x[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    x[n++] = (uint8_t)v;
    ss_buf_append(b, x, n);
}

/* An int is written as its unsigned 32-bit value: a negative int takes
 * 5 bytes, the last at most 0x0F, as the Java writer does. */
void ss_qb_put_varint(ss_buf *b, uint32_t v) { ss_qb_put_varlong(b, v); }

void ss_qb_put_zigzag(ss_buf *b, int32_t v) {
    uint32_t u = ((uint32_t)v << 1) ^ (uint32_t)(v >> 31);
    ss_qb_put_varint(b, u);
}

uint32_t ss_qb_utf8_next(const unsigned char *s, size_t n, size_t *used) {
    unsigned char c = s[0];
    *used = 1;
    if (c < 0x80)
        return c;
    size_t need;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, cp = c & 0x07, min = 0x10000;
    } else {
        return 0xFFFD;
    }
    if (n < need + 1)
        return 0xFFFD;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0xFFFD;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* overlong forms, UTF-16 surrogates and values past U+10FFFF are invalid */
    if (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0xFFFD;
    *used = need + 1;
    return cp;
}

uint32_t ss_qb_utf16_units(const char *utf8, size_t len) {
    const unsigned char *s = (const unsigned char *)utf8;
    uint32_t units = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = ss_qb_utf8_next(s + i, len - i, &used);
        units += cp >= 0x10000 ? 2 : 1;
        i += used;
    }
    return units;
}

static void put_unit(ss_buf *b, uint32_t u) {
    uint8_t x[2] = {(uint8_t)(u >> 8), (uint8_t)u};
    ss_buf_append(b, x, 2);
}

void ss_qb_put_varstring(ss_buf *b, const char *utf8, size_t len) {
    const unsigned char *s = (const unsigned char *)utf8;
    ss_qb_put_varint(b, ss_qb_utf16_units(utf8, len));
    if (ss_buf_reserve(b, len * 2) != 0)
        return;
    for (size_t i = 0; i < len;) {
        size_t used;
        uint32_t cp = ss_qb_utf8_next(s + i, len - i, &used);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            put_unit(b, 0xD800 | (cp >> 10));
            put_unit(b, 0xDC00 | (cp & 0x3FF));
        } else {
            put_unit(b, cp);
        }
        i += used;
    }
}

void ss_qb_put_varstring_be16(ss_buf *b, const uint8_t *be16, uint32_t units) {
    ss_qb_put_varint(b, units);
    ss_buf_append(b, be16, (size_t)units * 2);
}

void ss_qb_put_field(ss_buf *b, const void *p, uint32_t len) {
    ss_qb_put_be32(b, len);
    ss_buf_append(b, p, len);
}

/* ---- phrase framing -------------------------------------------------- */

void ss_qb_phraser_init(ss_qb_phraser *p) { ss_buf_init(&p->cur); }
void ss_qb_phraser_free(ss_qb_phraser *p) { ss_buf_free(&p->cur); }

void ss_qb_phraser_flush(ss_qb_phraser *p, ss_buf *out) {
    if (p->cur.len == 0)
        return;
    ss_qb_put_be32(out, (uint32_t)p->cur.len);
    ss_buf_append(out, p->cur.data, p->cur.len);
    ss_buf_reset(&p->cur);
}

int ss_qb_phraser_add(ss_qb_phraser *p, const void *rec, size_t len, ss_buf *out) {
    if (len >= SS_QB_MAX_PHRASE)
        return -EMSGSIZE;
    /* The real agent commits once the committed bytes reach the soft limit
     * and never lets a record straddle two phrases. */
    if (p->cur.len + len >= SS_QB_MAX_PHRASE)
        ss_qb_phraser_flush(p, out);
    ss_buf_append(&p->cur, rec, len);
    if (p->cur.len >= SS_QB_PHRASE_SOFT)
        ss_qb_phraser_flush(p, out);
    return p->cur.failed || out->failed ? -ENOMEM : 0;
}

/* ---- reader ---------------------------------------------------------- */

static bool need(ss_qb_reader *r, size_t n) {
    if (r->err || r->len - r->pos < n) {
        r->err = -EBADMSG;
        return false;
    }
    return true;
}

uint8_t ss_qb_get_u8(ss_qb_reader *r) {
    if (!need(r, 1))
        return 0;
    return r->p[r->pos++];
}

uint32_t ss_qb_get_be32(ss_qb_reader *r) {
    if (!need(r, 4))
        return 0;
    const uint8_t *x = r->p + r->pos;
    r->pos += 4;
    return (uint32_t)x[0] << 24 | (uint32_t)x[1] << 16 | (uint32_t)x[2] << 8 | x[3];
}

uint64_t ss_qb_get_be64(ss_qb_reader *r) {
    uint64_t hi = ss_qb_get_be32(r);
    return hi << 32 | ss_qb_get_be32(r);
}

static uint64_t get_leb(ss_qb_reader *r, int max_bytes) {
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (!need(r, 1))
            return 0;
        uint8_t c = r->p[r->pos++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (!(c & 0x80))
            return v;
    }
    r->err = -EBADMSG; /* continuation bit on the last allowed byte */
    return 0;
}

/* Like the Java reader, the 5th byte's stray high bits are dropped. */
uint32_t ss_qb_get_varint(ss_qb_reader *r) { return (uint32_t)get_leb(r, 5); }
uint64_t ss_qb_get_varlong(ss_qb_reader *r) { return get_leb(r, 10); }

int32_t ss_qb_get_zigzag(ss_qb_reader *r) {
    uint32_t u = ss_qb_get_varint(r);
    return (int32_t)((u >> 1) ^ (0u - (u & 1)));
}

ss_qb_str ss_qb_get_varstring(ss_qb_reader *r) {
    ss_qb_str s = {NULL, 0};
    uint32_t units = ss_qb_get_varint(r);
    if (r->err || !need(r, (size_t)units * 2))
        return s;
    s.be16 = r->p + r->pos;
    s.units = units;
    r->pos += (size_t)units * 2;
    return s;
}

void ss_qb_skip(ss_qb_reader *r, size_t n) {
    if (need(r, n))
        r->pos += n;
}

static void put_utf8(ss_buf *out, uint32_t cp) {
    char x[4];
    size_t n;
    if (cp < 0x80) {
        x[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        x[0] = (char)(0xC0 | cp >> 6), x[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        x[0] = (char)(0xE0 | cp >> 12), x[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        x[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        x[0] = (char)(0xF0 | cp >> 18), x[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        x[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), x[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    }
    ss_buf_append(out, x, n);
}

void ss_qb_str_utf8(ss_qb_str s, ss_buf *out) {
    for (uint32_t i = 0; i < s.units; i++) {
        uint32_t u = (uint32_t)s.be16[2 * i] << 8 | s.be16[2 * i + 1];
        if (u >= 0xD800 && u <= 0xDBFF && i + 1 < s.units) {
            uint32_t lo = (uint32_t)s.be16[2 * i + 2] << 8 | s.be16[2 * i + 3];
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                put_utf8(out, 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00));
                i++;
                continue;
            }
        }
        put_utf8(out, u >= 0xD800 && u <= 0xDFFF ? 0xFFFD : u);
    }
}

bool ss_qb_str_eq(ss_qb_str s, const char *utf8) {
    size_t n = strlen(utf8);
    if (ss_qb_utf16_units(utf8, n) != s.units)
        return false;
    ss_buf b;
    ss_buf_init(&b);
    ss_qb_put_varstring(&b, utf8, n);
    /* skip the count varint that put_varstring wrote */
    size_t skip = b.len - (size_t)s.units * 2;
    bool eq = !b.failed && memcmp(b.data + skip, s.be16, (size_t)s.units * 2) == 0;
    ss_buf_free(&b);
    return eq;
}
