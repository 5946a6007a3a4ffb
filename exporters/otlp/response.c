/* response.c: what an OTLP Export answer says, from its bytes.
 *
 * ExportLogsServiceResponse and ExportProfilesServiceResponse (and the
 * trace and metric ones) have the same shape:
 *     partial_success = 1 { rejected_<items> = 1 int64; error_message = 2 string; }
 * so one pure decoder serves every exporter. The bytes come from the
 * network: the protobuf reader (common/pb.h) checks every length against
 * what is left before anything is read, and nothing is written beyond
 * `msg_len`. It is a libFuzzer target
 * (tests/hardening/fuzz/fuzz_otlp_response.c). */
#include "exporters/otlp/otlp.h"

#include <errno.h>
#include <string.h>

/* A string field as a C string: up to its first NUL, cut to msg_len - 1. */
static void copy_string(pb_reader sub, char *msg, size_t msg_len) {
    size_t n = pb_left(&sub);
    const uint8_t *nul = memchr(sub.p, 0, n);
    if (nul)
        n = (size_t)(nul - sub.p);
    if (n >= msg_len)
        n = msg_len - 1;
    memcpy(msg, sub.p, n);
    msg[n] = '\0';
}

/* partial_success's fields; repeated occurrences merge (the last value of
 * each field wins), as protobuf parsers do. */
static bool decode_partial(pb_reader s, int64_t *rejected, char *msg, size_t msg_len) {
    while (pb_more(&s)) {
        uint32_t num;
        int wt;
        pb_reader sub = {0};
        uint64_t v = 0;
        if (!pb_next(&s, &num, &wt, &v, &sub))
            return false;
        if (num == 1) {
            if (wt != PB_VARINT)
                return false;
            *rejected = (int64_t)v;
        } else if (num == 2) {
            if (wt != PB_LEN)
                return false;
            copy_string(sub, msg, msg_len);
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
    pb_reader s = pb_reader_of(p, n);
    bool ok = true;
    while (ok && pb_more(&s)) {
        uint32_t num;
        int wt;
        pb_reader sub = {0};
        uint64_t v = 0;
        if (!pb_next(&s, &num, &wt, &v, &sub))
            ok = false;
        else if (num == 1)
            ok = wt == PB_LEN && decode_partial(sub, rejected, msg, msg_len);
    }
    if (!ok) { /* a malformed answer says nothing about rejections */
        *rejected = 0;
        msg[0] = '\0';
        return -EINVAL;
    }
    return 0;
}

int ss_otlp_decode_status(const uint8_t *p, size_t n, int32_t *code, char *msg, size_t msg_len) {
    *code = 0;
    if (msg_len)
        msg[0] = '\0';
    if (!msg_len || (!p && n))
        return -EINVAL;
    pb_reader s = pb_reader_of(p, n);
    while (pb_more(&s)) {
        uint32_t num;
        int wt;
        pb_reader sub = {0};
        uint64_t v = 0;
        bool ok = pb_next(&s, &num, &wt, &v, &sub);
        if (ok && num == 1)
            ok = wt == PB_VARINT;
        else if (ok && num == 2)
            ok = wt == PB_LEN;
        if (!ok) {
            *code = 0;
            msg[0] = '\0';
            return -EINVAL;
        }
        if (num == 1)
            *code = (int32_t)v;
        else if (num == 2)
            copy_string(sub, msg, msg_len);
    }
    return 0;
}
