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
