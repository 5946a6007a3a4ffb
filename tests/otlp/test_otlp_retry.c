/* test_otlp_retry.c: which gRPC codes are retried, the backoff with jitter,
 * and RetryInfo decoding from a hand-built grpc-status-details-bin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "exporters/otlp/otlp.h"

#include <stdlib.h>
#include <string.h>

#define MS 1000000ull
#define SEC 1000000000ull

static void test_retryable_codes(void **state) {
    (void)state;
    const int yes[] = {SS_GRPC_CANCELLED, SS_GRPC_DEADLINE_EXCEEDED, SS_GRPC_ABORTED,
                       SS_GRPC_OUT_OF_RANGE, SS_GRPC_UNAVAILABLE, SS_GRPC_DATA_LOSS};
    const int no[] = {SS_GRPC_OK, SS_GRPC_UNKNOWN, SS_GRPC_INVALID_ARGUMENT,
                      SS_GRPC_NOT_FOUND, SS_GRPC_ALREADY_EXISTS, SS_GRPC_PERMISSION_DENIED,
                      SS_GRPC_FAILED_PRECONDITION, SS_GRPC_UNIMPLEMENTED, SS_GRPC_INTERNAL,
                      SS_GRPC_UNAUTHENTICATED};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_true(ss_otlp_retryable(yes[i], false));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        assert_false(ss_otlp_retryable(no[i], false));
        assert_false(ss_otlp_retryable(no[i], true));
    }
    assert_false(ss_otlp_retryable(SS_GRPC_RESOURCE_EXHAUSTED, false));
    assert_true(ss_otlp_retryable(SS_GRPC_RESOURCE_EXHAUSTED, true));
    assert_string_equal(ss_grpc_status_name(SS_GRPC_UNAVAILABLE), "UNAVAILABLE");
    assert_string_equal(ss_grpc_status_name(99), "UNKNOWN_CODE");
}

static void test_backoff_grows_with_jitter_and_cap(void **state) {
    (void)state;
    ss_retry_policy p = {.initial_ns = 1 * SEC, .max_ns = 8 * SEC, .max_attempts = 7};
    ss_retry_state st = {0};
    uint64_t d;
    /* rnd = 0 gives the low end (backoff/2), rnd = UINT64_MAX-ish some value
     * inside [backoff/2, backoff]. */
    const uint64_t expect_backoff[] = {1, 2, 4, 8, 8, 8};
    for (int i = 0; i < 6; i++) {
        assert_true(ss_retry_next(&p, &st, 0, 0, &d));
        assert_int_equal(st.backoff_ns, expect_backoff[i] * SEC);
        assert_int_equal(d, expect_backoff[i] * SEC / 2);
    }
    /* the 7th attempt was the last */
    assert_false(ss_retry_next(&p, &st, 0, 0, &d));
    st = (ss_retry_state){0};
    for (uint64_t rnd = 1; rnd < 5000000000ull; rnd = rnd * 3 + 12345) {
        ss_retry_state s2 = {0};
        assert_true(ss_retry_next(&p, &s2, 0, rnd, &d));
        assert_in_range(d, SEC / 2, SEC);
    }
    (void)st;
}

static void test_server_delay_is_a_floor(void **state) {
    (void)state;
    ss_retry_policy p = {.initial_ns = 100 * MS, .max_ns = 1 * SEC, .max_attempts = 5};
    ss_retry_state st = {0};
    uint64_t d;
    assert_true(ss_retry_next(&p, &st, 3 * SEC, 0, &d));
    assert_true(d >= 3 * SEC);
    /* backing off continues from the server's delay */
    assert_true(ss_retry_next(&p, &st, 0, 0, &d));
    assert_int_equal(st.backoff_ns, 3 * SEC);
    assert_true(d >= 1500 * MS);
    /* an absurd server delay is capped at 10 x max */
    st = (ss_retry_state){0};
    assert_true(ss_retry_next(&p, &st, 3600 * SEC, 0, &d));
    assert_int_equal(d, 10 * SEC);
}

/* ---- a tiny protobuf writer for the test's status details ---------- */

typedef struct w {
    uint8_t b[512];
    size_t n;
} w;

static void varint(w *o, uint64_t v) {
    while (v >= 0x80) {
        o->b[o->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    o->b[o->n++] = (uint8_t)v;
}

static void field_bytes(w *o, unsigned num, const void *p, size_t n) {
    varint(o, num << 3 | 2);
    varint(o, n);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void field_varint(w *o, unsigned num, uint64_t v) {
    varint(o, num << 3);
    varint(o, v);
}

static size_t status_with(uint8_t *out, const char *type_url, int64_t secs, int32_t nanos,
                          bool with_other_detail) {
    w dur = {0}, ri = {0}, any = {0}, other = {0}, st = {0};
    field_varint(&dur, 1, (uint64_t)secs);
    field_varint(&dur, 2, (uint64_t)nanos);
    field_bytes(&ri, 1, dur.b, dur.n);
    field_bytes(&any, 1, type_url, strlen(type_url));
    field_bytes(&any, 2, ri.b, ri.n);
    field_varint(&st, 1, 8);
    field_bytes(&st, 2, "slow down", 9);
    if (with_other_detail) {
        field_bytes(&other, 1, "type.googleapis.com/google.rpc.DebugInfo", 40);
        field_bytes(&other, 2, "\x0a\x01x", 3);
        field_bytes(&st, 3, other.b, other.n);
    }
    field_bytes(&st, 3, any.b, any.n);
    memcpy(out, st.b, st.n);
    return st.n;
}

static void test_decode_retry_info(void **state) {
    (void)state;
    uint8_t buf[512];
    uint64_t ns = 0;
    size_t n = status_with(buf, "type.googleapis.com/google.rpc.RetryInfo", 2, 500000000,
                           true);
    assert_true(ss_grpc_decode_retry_info(buf, n, &ns));
    assert_int_equal(ns, 2 * SEC + 500 * MS);
    /* another detail type only: no RetryInfo */
    n = status_with(buf, "type.googleapis.com/google.rpc.ErrorInfo", 2, 0, false);
    assert_false(ss_grpc_decode_retry_info(buf, n, &ns));
    /* every truncation is rejected or decodes without reading past the end */
    n = status_with(buf, "type.googleapis.com/google.rpc.RetryInfo", 1, 0, false);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        uint64_t v = 0;
        bool ok = ss_grpc_decode_retry_info(copy, cut, &v);
        if (ok)
            assert_true(v <= SEC);
        free(copy);
    }
    assert_false(ss_grpc_decode_retry_info(NULL, 0, &ns));
}

static void test_policy_from_config(void **state) {
    (void)state;
    setenv("STACKSHOT_OTLP_RETRY_INITIAL", "50", 1);
    setenv("STACKSHOT_OTLP_RETRY_MAX", "200", 1);
    setenv("STACKSHOT_OTLP_RETRY_ATTEMPTS", "3", 1);
    ss_retry_policy p = ss_retry_policy_load();
    assert_int_equal(p.initial_ns, 50 * MS);
    assert_int_equal(p.max_ns, 200 * MS);
    assert_int_equal(p.max_attempts, 3);
    setenv("STACKSHOT_OTLP_RETRY_ATTEMPTS", "lots", 1);
    p = ss_retry_policy_load();
    assert_int_equal(p.max_attempts, 6);
    unsetenv("STACKSHOT_OTLP_RETRY_INITIAL");
    unsetenv("STACKSHOT_OTLP_RETRY_MAX");
    unsetenv("STACKSHOT_OTLP_RETRY_ATTEMPTS");
    p = ss_retry_policy_load();
    assert_int_equal(p.initial_ns, 1 * SEC);
    assert_int_equal(p.max_ns, 30 * SEC);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retryable_codes),
        cmocka_unit_test(test_backoff_grows_with_jitter_and_cap),
        cmocka_unit_test(test_server_delay_is_a_floor),
        cmocka_unit_test(test_decode_retry_info),
        cmocka_unit_test(test_policy_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
