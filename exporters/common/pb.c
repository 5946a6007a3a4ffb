/* pb.c: the protobuf writer of pb.h. */
#include "agent/buf.h"
#include "exporters/common/pb.h"

#include <string.h>

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t varint_put(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

void pb_varint(ss_buf *b, uint64_t v) {
    if (ss_buf_reserve(b, 10) != 0)
        return;
    b->len += varint_put((uint8_t *)b->data + b->len, v);
}

void pb_tag(ss_buf *b, uint32_t field, int wire_type) {
    pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

void pb_uint(ss_buf *b, uint32_t field, uint64_t v) {
    pb_tag(b, field, PB_VARINT);
    pb_varint(b, v);
}

void pb_uint_nz(ss_buf *b, uint32_t field, uint64_t v) {
    if (v)
        pb_uint(b, field, v);
}

void pb_sint_as_int(ss_buf *b, uint32_t field, int64_t v) {
    pb_uint(b, field, (uint64_t)v);
}

void pb_fixed64(ss_buf *b, uint32_t field, uint64_t v) {
    pb_tag(b, field, PB_I64);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    ss_buf_append(b, le, 8);
}

void pb_fixed32_nz(ss_buf *b, uint32_t field, uint32_t v) {
    if (!v)
        return;
    pb_tag(b, field, PB_I32);
    uint8_t le[4];
    for (int i = 0; i < 4; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    ss_buf_append(b, le, 4);
}

void pb_fixed64_nz(ss_buf *b, uint32_t field, uint64_t v) {
    if (v)
        pb_fixed64(b, field, v);
}

void pb_bytes(ss_buf *b, uint32_t field, const void *p, size_t n) {
    pb_tag(b, field, PB_LEN);
    pb_varint(b, n);
    if (n)
        ss_buf_append(b, p, n);
}

void pb_string(ss_buf *b, uint32_t field, const char *s) {
    pb_bytes(b, field, s, strlen(s));
}

void pb_string_nz(ss_buf *b, uint32_t field, const char *s) {
    if (s && *s)
        pb_string(b, field, s);
}

size_t pb_begin(ss_buf *b, uint32_t field) {
    pb_tag(b, field, PB_LEN);
    return b->len;
}

void pb_end(ss_buf *b, size_t mark) {
    if (b->failed || mark > b->len)
        return;
    size_t body = b->len - mark;
    size_t k = varint_size(body);
    if (ss_buf_reserve(b, k) != 0)
        return;
    uint8_t *p = (uint8_t *)b->data + mark;
    memmove(p + k, p, body);
    varint_put(p, body);
    b->len += k;
}

/* ---- reading ------------------------------------------------------ */

/* A base-128 varint of at most 10 bytes. */
static bool get_varint(pb_reader *r, uint64_t *v) {
    *v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p == r->end)
            return false;
        uint8_t c = *r->p++;
        *v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80))
            return true;
    }
    return false;
}

bool pb_next(pb_reader *r, uint32_t *field, int *wire_type, uint64_t *value, pb_reader *sub) {
    uint64_t tag;
    if (!get_varint(r, &tag) || tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
        return false;
    *field = (uint32_t)(tag >> 3);
    *wire_type = (int)(tag & 7);
    switch (*wire_type) {
    case PB_VARINT:
        return get_varint(r, value);
    case PB_I64:
    case PB_I32: {
        size_t w = *wire_type == PB_I64 ? 8 : 4;
        if (pb_left(r) < w)
            return false;
        r->p += w;
        return true;
    }
    case PB_LEN: {
        uint64_t len;
        if (!get_varint(r, &len) || len > pb_left(r))
            return false;
        sub->p = r->p;
        sub->end = r->p + len;
        r->p += len;
        return true;
    }
    default:
        return false;
    }
}
