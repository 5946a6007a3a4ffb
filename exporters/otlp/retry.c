/* retry.c: when to try an export again, and when.
 *
 * OTLP's rules (specification/protocol, "Failures"): a fixed set of gRPC
 * codes is retryable; RESOURCE_EXHAUSTED only when the server says when to
 * come back (google.rpc.RetryInfo in grpc-status-details-bin). Backoff is
 * exponential with jitter, and a server's delay is a floor.
 *
 * The RetryInfo is decoded with the protobuf reader of common/pb.h: it is
 * three tiny messages (google.rpc.Status, google.protobuf.Any,
 * google.rpc.RetryInfo with a google.protobuf.Duration). */
#include "agent/config.h"
#include "exporters/otlp/otlp.h"

#include <string.h>

#define SEC 1000000000ull

ss_retry_policy ss_retry_policy_default(void) {
    return (ss_retry_policy){.initial_ns = 1 * SEC, .max_ns = 30 * SEC, .max_attempts = 6};
}

bool ss_otlp_retryable(int status, bool has_retry_info) {
    switch (status) {
    case SS_GRPC_CANCELLED:
    case SS_GRPC_DEADLINE_EXCEEDED:
    case SS_GRPC_ABORTED:
    case SS_GRPC_OUT_OF_RANGE:
    case SS_GRPC_UNAVAILABLE:
    case SS_GRPC_DATA_LOSS:
        return true;
    case SS_GRPC_RESOURCE_EXHAUSTED:
        return has_retry_info;
    default:
        return false;
    }
}

bool ss_retry_next(const ss_retry_policy *p, ss_retry_state *st, uint64_t server_delay_ns,
                   uint64_t rnd, uint64_t *delay_ns) {
    st->attempts++;
    if (st->attempts >= p->max_attempts)
        return false;
    /* Double up to max_ns; above it only a server's delay takes us, and
     * then backing off goes on from there (never back down). */
    if (st->backoff_ns == 0)
        st->backoff_ns = p->initial_ns;
    else if (st->backoff_ns < p->max_ns)
        st->backoff_ns = st->backoff_ns < p->max_ns / 2 ? st->backoff_ns * 2 : p->max_ns;
    /* The server's delay is the floor, and backing off continues from it. */
    uint64_t cap = p->max_ns * 10;
    if (server_delay_ns > cap)
        server_delay_ns = cap;
    if (server_delay_ns > st->backoff_ns)
        st->backoff_ns = server_delay_ns;
    /* jitter: uniformly in [backoff/2, backoff] */
    uint64_t half = st->backoff_ns / 2;
    uint64_t d = half + (half ? rnd % (half + 1) : 0);
    if (d < server_delay_ns)
        d = server_delay_ns;
    *delay_ns = d;
    return true;
}

/* ---- google.rpc.Status / RetryInfo, with the reader of common/pb.h ---- */

/* google.protobuf.Duration{seconds=1 int64, nanos=2 int32} */
static bool decode_duration(pb_reader r, uint64_t *ns) {
    uint64_t secs = 0, nanos = 0;
    while (pb_more(&r)) {
        uint32_t num;
        int wt;
        pb_reader s;
        uint64_t v = 0;
        if (!pb_next(&r, &num, &wt, &v, &s))
            return false;
        if (num == 1 && wt == PB_VARINT)
            secs = v;
        else if (num == 2 && wt == PB_VARINT)
            nanos = v;
    }
    if ((int64_t)secs < 0 || secs > 86400 * 365)
        return false;
    if ((int64_t)nanos < 0 || nanos >= SEC)
        nanos = 0;
    *ns = secs * SEC + nanos;
    return true;
}

/* google.rpc.RetryInfo{retry_delay=1 Duration} */
static bool decode_retry_info(pb_reader r, uint64_t *ns) {
    while (pb_more(&r)) {
        uint32_t num;
        int wt;
        pb_reader s;
        uint64_t v;
        if (!pb_next(&r, &num, &wt, &v, &s))
            return false;
        if (num == 1 && wt == PB_LEN)
            return decode_duration(s, ns);
    }
    *ns = 0; /* RetryInfo without a delay: retry, no floor */
    return true;
}

static const char retry_info_type[] = "type.googleapis.com/google.rpc.RetryInfo";

/* google.protobuf.Any{type_url=1, value=2} */
static bool decode_any(pb_reader r, uint64_t *ns) {
    bool is_retry = false;
    pb_reader value = {0};
    bool has_value = false;
    while (pb_more(&r)) {
        uint32_t num;
        int wt;
        pb_reader s;
        uint64_t v;
        if (!pb_next(&r, &num, &wt, &v, &s))
            return false;
        if (num == 1 && wt == PB_LEN)
            is_retry = pb_left(&s) == sizeof retry_info_type - 1 &&
                       memcmp(s.p, retry_info_type, sizeof retry_info_type - 1) == 0;
        else if (num == 2 && wt == PB_LEN) {
            value = s;
            has_value = true;
        }
    }
    if (!is_retry)
        return false;
    if (!has_value) {
        *ns = 0;
        return true;
    }
    return decode_retry_info(value, ns);
}

bool ss_grpc_decode_retry_info(const uint8_t *p, size_t n, uint64_t *delay_ns) {
    /* google.rpc.Status{code=1, message=2, details=3 repeated Any} */
    pb_reader r = pb_reader_of(p, n);
    while (pb_more(&r)) {
        uint32_t num;
        int wt;
        pb_reader s;
        uint64_t v;
        if (!pb_next(&r, &num, &wt, &v, &s))
            return false;
        if (num == 3 && wt == PB_LEN && decode_any(s, delay_ns))
            return true;
    }
    return false;
}

ss_retry_policy ss_retry_policy_load(void) {
    ss_retry_policy p = ss_retry_policy_default();
    p.initial_ns = (uint64_t)ss_config_int("STACKSHOT_OTLP_RETRY_INITIAL", 1000, 10, 600000) *
                   1000000ull;
    p.max_ns = (uint64_t)ss_config_int("STACKSHOT_OTLP_RETRY_MAX", 30000, 10, 3600000) *
               1000000ull;
    if (p.max_ns < p.initial_ns)
        p.max_ns = p.initial_ns;
    p.max_attempts = (uint32_t)ss_config_int("STACKSHOT_OTLP_RETRY_ATTEMPTS", 6, 1, 1000);
    return p;
}
