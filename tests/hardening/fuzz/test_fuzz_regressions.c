/* test_fuzz_regressions.c: what the fuzz targets of this folder found,
 * replayed as unit tests in every build (plain, ASan+UBSan, TSan), and the
 * contract of the pure answer decoder they fuzz. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "exporters/otlp/otlp.h"

#include <errno.h>
#include <string.h>

/* fuzz_otlp_config: two keys that differ only in invalid UTF-8 bytes
 * ("\xb0" and "\xb7") both became "?" after the fix-up and the resource
 * carried the key twice. Now the later one wins, as for equal keys. */
static void test_resource_keys_equal_after_utf8_fix(void **state) {
    (void)state;
    ss_attr *a = NULL;
    size_t n = 0;
    assert_int_equal(ss_otlp_parse_resource_attributes("k\xb0=1,k\xb7=2,x=3", &a, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(a[0].key, "k?");
    assert_string_equal(a[0].str, "2");
    assert_string_equal(a[1].key, "x");
    ss_attrs_free(a, n);
}

/* fuzz_otlp_config: a repeated key's new value skipped the UTF-8 fix-up
 * and invalid UTF-8 went out in the resource (Go receivers reject the
 * whole request for that). */
static void test_resource_repeated_key_value_fixed(void **state) {
    (void)state;
    ss_attr *a = NULL;
    size_t n = 0;
    assert_int_equal(ss_otlp_parse_resource_attributes("k=ok,k=\xf4\xf5x", &a, &n), 0);
    assert_int_equal(n, 1);
    assert_true(ss_utf8_valid(a[0].str, strlen(a[0].str)));
    assert_string_equal(a[0].str, "??x");
    ss_attrs_free(a, n);
}

/* "%00" decoded into a key or value cut the C string: "%00x=1" gave an
 * empty key. A decoded NUL is a decoding error (the whole variable goes). */
static void test_resource_decoded_nul_refused(void **state) {
    (void)state;
    ss_attr *a = NULL;
    size_t n = 0;
    assert_int_equal(ss_otlp_parse_resource_attributes("%00x=1", &a, &n), -EINVAL);
    assert_int_equal(ss_otlp_parse_resource_attributes("k=a%00b", &a, &n), -EINVAL);
    assert_int_equal(ss_otlp_parse_resource_attributes("=1", &a, &n), -EINVAL);
}

/* fuzz_otlp_response: partial_success sent twice merges field by field
 * (protobuf's rule): rejected from the first occurrence stays when the
 * second has none (protobuf-c's decoder resets it to 0). */
static void test_partial_success_merge(void **state) {
    (void)state;
    /* {1: {1: 10}} {1: {2: "late"}} */
    static const uint8_t b[] = {0x0a, 0x02, 0x08, 0x0a, 0x0a, 0x06, 0x12, 0x04, 'l', 'a', 't', 'e'};
    int64_t rej;
    char msg[16];
    assert_int_equal(ss_otlp_decode_partial_success(b, sizeof b, &rej, msg, sizeof msg), 0);
    assert_int_equal(rej, 10);
    assert_string_equal(msg, "late");
}

/* The message is cut to the buffer, never written past it. */
static void test_partial_success_bounds(void **state) {
    (void)state;
    static const uint8_t b[] = {0x0a, 0x0a, 0x08, 0x03, 0x12, 0x06, 'a', 'b', 'c', 'd', 'e', 'f'};
    int64_t rej;
    char msg[5] = {'x', 'x', 'x', 'x', 'x'};
    assert_int_equal(ss_otlp_decode_partial_success(b, sizeof b, &rej, msg, 4), 0);
    assert_int_equal(rej, 3);
    assert_string_equal(msg, "abc");
    assert_int_equal(msg[4], 'x');
    /* negative rejected counts are carried as sent (int64) */
    static const uint8_t neg[] = {0x0a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(ss_otlp_decode_partial_success(neg, sizeof neg, &rej, msg, 4), 0);
    assert_int_equal(rej, -1);
}

/* Malformed answers (length past the end, wrong wire type, a group, a
 * varint of 11 bytes) say nothing: 0 and "". */
static void test_partial_success_malformed(void **state) {
    (void)state;
    static const uint8_t past_end[] = {0x0a, 0x09, 0x08, 0x01};
    static const uint8_t wrong_type[] = {0x0a, 0x02, 0x0a, 0x00};
    static const uint8_t group[] = {0x0b, 0x0c};
    static const uint8_t long_varint[] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                          0x80, 0x80, 0x80, 0x80, 0x01};
    static const uint8_t inner_past[] = {0x0a, 0x03, 0x08, 0x05, 0x12};
    const struct {
        const uint8_t *b;
        size_t n;
    } cases[] = {{past_end, sizeof past_end}, {wrong_type, sizeof wrong_type},
                 {group, sizeof group}, {long_varint, sizeof long_varint},
                 {inner_past, sizeof inner_past}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t rej = 77;
        char msg[8] = "junk";
        assert_int_equal(ss_otlp_decode_partial_success(cases[i].b, cases[i].n, &rej, msg,
                                                        sizeof msg), -EINVAL);
        assert_int_equal(rej, 0);
        assert_string_equal(msg, "");
    }
    /* empty answer: no partial success */
    int64_t rej = 5;
    char msg[4];
    assert_int_equal(ss_otlp_decode_partial_success(NULL, 0, &rej, msg, sizeof msg), 0);
    assert_int_equal(rej, 0);
}

/* The body of an OTLP/HTTP failure: google.rpc.Status{code, message}; a
 * truncated one says nothing. */
static void test_status_body(void **state) {
    (void)state;
    static const uint8_t b[] = {0x08, 0x08, 0x12, 0x09, 's', 'l', 'o', 'w', ' ', 'd', 'o', 'w', 'n'};
    int32_t code;
    char msg[8];
    assert_int_equal(ss_otlp_decode_status(b, sizeof b, &code, msg, sizeof msg), 0);
    assert_int_equal(code, 8);
    assert_string_equal(msg, "slow do");
    assert_int_equal(ss_otlp_decode_status(b, sizeof b - 1, &code, msg, sizeof msg), -EINVAL);
    assert_int_equal(code, 0);
    assert_string_equal(msg, "");
    assert_int_equal(ss_otlp_decode_status(NULL, 0, &code, msg, sizeof msg), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resource_keys_equal_after_utf8_fix),
        cmocka_unit_test(test_resource_repeated_key_value_fixed),
        cmocka_unit_test(test_resource_decoded_nul_refused),
        cmocka_unit_test(test_partial_success_merge),
        cmocka_unit_test(test_partial_success_bounds),
        cmocka_unit_test(test_partial_success_malformed),
        cmocka_unit_test(test_status_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
