/* fuzz_otlp_response.c: libFuzzer target, what an OTLP/gRPC backend sends
 * back (network input). The first input byte picks:
 *   0 grpc-status-details-bin: google.rpc.Status with RetryInfo
 *     (ss_grpc_decode_retry_info, exporters/otlp/retry.c);
 *   1 an Export answer's partial_success (ss_otlp_decode_partial_success,
 *     exporters/otlp/response.c), checked against protobuf-c's generated
 *     decoder of ExportLogsServiceResponse (what otlp_logs uses): when both
 *     accept the bytes they agree; the message buffer is sized from the
 *     input so that any write past it is an ASan report;
 *   2 round trips: a Status carrying RetryInfo{Duration} and a partial
 *     success built from the input's numbers, decoded back to them;
 *   3 the protobuf reader itself (pb_next, exporters/common/pb.c, under
 *     every decoder above): a walk of nested messages that only moves
 *     forward and stays inside its input, and the google.rpc.Status
 *     decoder of OTLP/HTTP error bodies (ss_otlp_decode_status).
 * Invariants: no crash, no read past the input, deterministic, a delay of
 * at most a year, values as encoded. */
#include "exporters/otlp/otlp.h"
#include "tests/hardening/fuzz/fuzz_check.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#define SEC 1000000000ull

static void fuzz_retry_info(const uint8_t *d, size_t n) {
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees over-reads */
    memcpy(copy, d, n);
    uint64_t a = 0, b = 0;
    bool fa = ss_grpc_decode_retry_info(copy, n, &a);
    bool fb = ss_grpc_decode_retry_info(copy, n, &b);
    CHECK(fa == fb);
    if (fa)
        CHECK(a == b && a < (86400ull * 365 + 1) * SEC);
    free(copy);
}

/* How many times field 1 (partial_success) occurs at the top level; -1
 * if the bytes are not a well-formed message. protobuf-c merges repeated
 * occurrences of a proto3 message field unlike protobuf (a later
 * occurrence without rejected_* resets it to 0), so the two decoders are
 * compared on answers with at most one occurrence. */
static int count_partial(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    int count = 0;
    while (p < end) {
        uint64_t tag = 0, v = 0;
        int shift = 0;
        do {
            if (p == end || shift > 63)
                return -1;
            tag |= (uint64_t)(*p & 0x7f) << shift;
            shift += 7;
        } while (*p++ & 0x80);
        if ((tag & 7) == 1 || (tag & 7) == 5) {
            size_t w = (tag & 7) == 1 ? 8 : 4;
            if ((size_t)(end - p) < w)
                return -1;
            p += w;
            count += tag >> 3 == 1;
            continue;
        }
        if ((tag & 7) != 0 && (tag & 7) != 2)
            return -1;
        shift = 0;
        do {
            if (p == end || shift > 63)
                return -1;
            v |= (uint64_t)(*p & 0x7f) << shift;
            shift += 7;
        } while (*p++ & 0x80);
        if ((tag & 7) == 2) {
            if (v > (uint64_t)(end - p))
                return -1;
            p += v;
        }
        count += tag >> 3 == 1;
    }
    return count;
}

static void fuzz_partial(const uint8_t *d, size_t n) {
    if (n < 1)
        return;
    size_t msg_len = 1 + d[0] % 64; /* a small, exact buffer */
    d++;
    n--;
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, d, n);
    char *msg = malloc(msg_len), *msg2 = malloc(msg_len);
    int64_t rej = -1, rej2 = -1;
    int rc = ss_otlp_decode_partial_success(copy, n, &rej, msg, msg_len);
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK(memchr(msg, '\0', msg_len) != NULL);
    CHECK(rc == 0 || (rej == 0 && msg[0] == '\0'));
    CHECK(ss_otlp_decode_partial_success(copy, n, &rej2, msg2, msg_len) == rc);
    CHECK(rej == rej2 && strcmp(msg, msg2) == 0);
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceResponse *pc =
        opentelemetry__proto__collector__logs__v1__export_logs_service_response__unpack(NULL, n,
                                                                                        copy);
    int occurrences = count_partial(copy, n);
    if (pc && rc == 0 && occurrences >= 0 && occurrences <= 1) {
        const Opentelemetry__Proto__Collector__Logs__V1__ExportLogsPartialSuccess *ps =
            pc->partial_success;
        CHECK(rej == (ps ? ps->rejected_log_records : 0));
        const char *m = ps && ps->error_message ? ps->error_message : "";
        CHECK(strncmp(msg, m, msg_len - 1) == 0);
    }
    if (pc)
        opentelemetry__proto__collector__logs__v1__export_logs_service_response__free_unpacked(
            pc, NULL);
    free(copy);
    free(msg);
    free(msg2);
}

static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t i = 0;
    do {
        p[i] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            p[i] |= 0x80;
        i++;
    } while (v);
    return i;
}

/* tag + length + bytes */
static size_t put_bytes(uint8_t *p, uint32_t field, const void *b, size_t n) {
    size_t i = put_varint(p, (uint64_t)field << 3 | 2);
    i += put_varint(p + i, n);
    memcpy(p + i, b, n);
    return i + n;
}

static void round_trips(const uint8_t *d, size_t n) {
    uint64_t x[3] = {0, 0, 0};
    memcpy(x, d, n < sizeof x ? n : sizeof x);
    /* Status{code=1: 8, details=3: Any{type_url, value=RetryInfo{retry_delay=Duration}}} */
    uint64_t secs = x[0] % (86400ull * 365), nanos = x[1] % SEC;
    uint8_t dur[32], info[40], any[128], status[160];
    size_t nd = 0;
    dur[nd++] = 0x08;
    nd += put_varint(dur + nd, secs);
    dur[nd++] = 0x10;
    nd += put_varint(dur + nd, nanos);
    size_t ni = put_bytes(info, 1, dur, nd);
    static const char url[] = "type.googleapis.com/google.rpc.RetryInfo";
    size_t na = put_bytes(any, 1, url, sizeof url - 1);
    na += put_bytes(any + na, 2, info, ni);
    size_t ns = 0;
    status[ns++] = 0x08;
    status[ns++] = 8; /* RESOURCE_EXHAUSTED */
    ns += put_bytes(status + ns, 3, any, na);
    uint64_t delay = 0;
    CHECK(ss_grpc_decode_retry_info(status, ns, &delay));
    CHECK(delay == secs * SEC + nanos);
    /* ExportLogsServiceResponse{partial_success{rejected, error_message}} */
    int64_t rejected = (int64_t)x[2];
    char text[24];
    size_t tl = n > 24 ? 24 : n;
    for (size_t i = 0; i < tl; i++)
        text[i] = (char)(d[i] % 94 + 33); /* printable, no NUL */
    uint8_t ps[64], resp[80];
    size_t np = 0;
    ps[np++] = 0x08;
    np += put_varint(ps + np, (uint64_t)rejected);
    np += put_bytes(ps + np, 2, text, tl);
    size_t nr = put_bytes(resp, 1, ps, np);
    int64_t got;
    char msg[32];
    CHECK(ss_otlp_decode_partial_success(resp, nr, &got, msg, sizeof msg) == 0);
    CHECK(got == rejected && strlen(msg) == tl && memcmp(msg, text, tl) == 0);
}

/* Walk every field, descending into length-delimited ones (as if each
 * were a message) to a depth of 8. Each step moves forward and every
 * slice lies inside its parent. Returns the fields seen. */
static size_t walk(pb_reader r, int depth) {
    size_t fields = 0;
    while (pb_more(&r)) {
        const uint8_t *before = r.p, *end = r.end;
        uint32_t num;
        int wt;
        uint64_t v;
        pb_reader sub = {0};
        if (!pb_next(&r, &num, &wt, &v, &sub))
            break;
        CHECK(r.p > before && r.p <= end && r.end == end);
        CHECK(num >= 1 && num <= 0x1fffffff);
        fields++;
        if (wt == PB_LEN) {
            CHECK(sub.p >= before && sub.end <= r.p && sub.p <= sub.end);
            if (depth < 8)
                fields += walk(sub, depth + 1);
        }
    }
    return fields;
}

static void fuzz_reader(const uint8_t *d, size_t n) {
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees over-reads */
    memcpy(copy, d, n);
    CHECK(walk(pb_reader_of(copy, n), 0) == walk(pb_reader_of(copy, n), 0));
    size_t msg_len = 1 + (n ? d[0] % 48 : 0);
    char *msg = malloc(msg_len);
    int32_t code = -1;
    int rc = ss_otlp_decode_status(copy, n, &code, msg, msg_len);
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK(memchr(msg, '\0', msg_len) != NULL);
    CHECK(rc == 0 || (code == 0 && msg[0] == '\0'));
    free(msg);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0: fuzz_retry_info(data + 1, size - 1); break;
    case 1: fuzz_partial(data + 1, size - 1); break;
    case 2: round_trips(data + 1, size - 1); break;
    case 3: fuzz_reader(data + 1, size - 1); break;
    }
    return 0;
}
