/* response.c: what an OTLP Export answer says, from its bytes.
 *
 * ExportLogsServiceResponse and ExportProfilesServiceResponse (and the
 * trace and metric ones) have the same shape:
 *     partial_success = 1 { rejected_<items> = 1 int64; error_message = 2 string; }
 * so one pure decoder serves every exporter. The bytes come from the
 * network: every length is checked against what is left before anything is
 * read, and nothing is written beyond `msg_len`. It is a libFuzzer target
 * (tests/hardening/fuzz/fuzz_otlp_response.c). */
#include "otlp.h"

#include <errno.h>
#include <string.h>

typedef struct span {
    const uint8_t *p, *end;
} span;

/* A base-128 varint of at most 10 bytes. */
static bool get_varint(span *s, uint64_t *v) {
    *v = 0;
    for (int i = 0; i < 10; i++) {
        if (s->p == s->end)
            return false;
        uint8_t c = *s->p++;
        *v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, wire type, and its payload (a length-
 * delimited field's bytes in *sub, a varint in *v). Fixed-width payloads
 * are skipped; groups and unknown wire types are malformed. */
static bool next_field(span *s, uint32_t *num, uint32_t *wt, span *sub, uint64_t *v) {
    uint64_t tag;
    if (!get_varint(s, &tag) || tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
        return false;
    *num = (uint32_t)(tag >> 3);
    *wt = (uint32_t)(tag & 7);
    switch (*wt) {
    case 0:
        return get_varint(s, v);
    case 1:
    case 5: {
        size_t w = *wt == 1 ? 8 : 4;
        if ((size_t)(s->end - s->p) < w)
            return false;
        s->p += w;
        return true;
    }
    case 2: {
        uint64_t len;
        if (!get_varint(s, &len) || len > (uint64_t)(s->end - s->p))
            return false;
        sub->p = s->p;
        sub->end = s->p + len;
        s->p += len;
        return true;
    }
    default:
        return false;
    }
}

/* partial_success's fields; repeated occurrences merge (the last value of
 * each field wins), as protobuf parsers do. */
static bool decode_partial(span s, int64_t *rejected, char *msg, size_t msg_len) {
    while (s.p < s.end) {
        uint32_t num, wt;
        span sub = {0};
        uint64_t v = 0;
        if (!next_field(&s, &num, &wt, &sub, &v))
            return false;
        if (num == 1) {
            if (wt != 0)
                return false;
            *rejected = (int64_t)v;
        } else if (num == 2) {
            if (wt != 2)
                return false;
            size_t n = (size_t)(sub.end - sub.p);
            const uint8_t *nul = memchr(sub.p, 0, n);
            if (nul) /* shown as a C string: up to its first NUL */
                n = (size_t)(nul - sub.p);
            if (n >= msg_len)
                n = msg_len - 1;
            memcpy(msg, sub.p, n);
            msg[n] = '\0';
        }
    }
    return true;
}

int ss_otlp_decode_partial_success(const uint8_t *p, size_t n, int64_t *rejected, char *msg,
                                   size_t msg_len) {
    *rejected = 0;
    if (msg_len)
        msg[0] = '\0';
    if (!msg_len || (!p && n))
        return -EINVAL;
    span s = {p, p + n};
    bool ok = true;
    while (ok && s.p < s.end) {
        uint32_t num, wt;
        span sub = {0};
        uint64_t v = 0;
        if (!next_field(&s, &num, &wt, &sub, &v))
            ok = false;
        else if (num == 1)
            ok = wt == 2 && decode_partial(sub, rejected, msg, msg_len);
    }
    if (!ok) { /* a malformed answer says nothing about rejections */
        *rejected = 0;
        msg[0] = '\0';
        return -EINVAL;
    }
    return 0;
}
