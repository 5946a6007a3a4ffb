/* codec_read.c: the reader of the Qubership streams' primitive encodings
 * (spec §2), the other half of exporters/qubership/codec.c. Only the
 * decoder (stackshot-dump), the tests and the fuzzers read streams: the
 * agent writes them, so this is not linked into it. */
#include "agent/buf.h"
#include "exporters/qubership/codec.h"
#include "tools/stackshot-dump/codec_read.h"

#include <errno.h>
#include <string.h>

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
