/* test_qb_codec.c: the primitive encodings against every example table of
 * specs/qubership-wire.md §2 (and the worked examples of §3.6 and §4). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/buf.h"
#include "exporters/qubership/codec.h"
#include "tools/stackshot-dump/codec_read.h"

static size_t unhex(const char *hex, uint8_t *out) {
    size_t n = 0;
    for (const char *p = hex; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        sscanf(p, "%2x", &v);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

static void assert_bytes(const ss_buf *b, const char *hex) {
    uint8_t want[256];
    size_t n = unhex(hex, want);
    assert_false(b->failed);
    assert_int_equal(b->len, n);
    assert_memory_equal(b->data, want, n);
}

static const struct {
    uint32_t v;
    const char *hex;
} varints[] = {
    {0, "00"},
    {127, "7F"},
    {128, "80 01"},
    {300, "AC 02"},
    {1101, "CD 08"},
    {999465, "A9 80 3D"},
    {268435455, "FF FF FF 7F"},
    {268435456, "80 80 80 80 01"},
    {(uint32_t)-1, "FF FF FF FF 0F"},
    {(uint32_t)-679, "D9 FA FF FF 0F"},
    {0x80000000u, "80 80 80 80 08"},
};

static void varint_table(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof varints / sizeof varints[0]; i++) {
        ss_buf b;
        ss_buf_init(&b);
        ss_qb_put_varint(&b, varints[i].v);
        assert_bytes(&b, varints[i].hex);
        ss_qb_reader r;
        ss_qb_reader_init(&r, b.data, b.len);
        assert_int_equal(ss_qb_get_varint(&r), varints[i].v);
        assert_int_equal(r.err, 0);
        assert_int_equal(r.pos, b.len);
        ss_buf_free(&b);
    }
}

/* Standard LEB128 for longs: the right column of the §2.5 table. */
static void varlong_table(void **st) {
    (void)st;
    static const struct {
        uint64_t v;
        const char *hex;
    } t[] = {
        {268435456ull, "80 80 80 80 01"},
        {268435456ull + 5, "85 80 80 80 01"},
        {(1ull << 30) + (1ull << 14), "80 80 81 80 04"},
        {(1ull << 28) + (1ull << 21), "80 80 80 81 01"},
        {5000000000ull, "80 E4 97 D0 12"},
        {UINT64_MAX, "FF FF FF FF FF FF FF FF FF 01"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ss_buf b;
        ss_buf_init(&b);
        ss_qb_put_varlong(&b, t[i].v);
        assert_bytes(&b, t[i].hex);
        ss_qb_reader r;
        ss_qb_reader_init(&r, b.data, b.len);
        assert_true(ss_qb_get_varlong(&r) == t[i].v);
        assert_int_equal(r.err, 0);
        ss_buf_free(&b);
    }
}

static void zigzag_table(void **st) {
    (void)st;
    static const struct {
        int32_t v;
        const char *hex;
    } t[] = {{0, "00"}, {1, "02"}, {-1, "01"}, {2, "04"}, {-2, "03"}, {-679, "CD 0A"},
             {INT32_MIN, "FF FF FF FF 0F"}, {INT32_MAX, "FE FF FF FF 0F"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ss_buf b;
        ss_buf_init(&b);
        ss_qb_put_zigzag(&b, t[i].v);
        assert_bytes(&b, t[i].hex);
        ss_qb_reader r;
        ss_qb_reader_init(&r, b.data, b.len);
        assert_int_equal(ss_qb_get_zigzag(&r), t[i].v);
        ss_buf_free(&b);
    }
}

static void varstring_examples(void **st) {
    (void)st;
    static const struct {
        const char *s;
        const char *hex;
    } t[] = {
        {"call.info", "09 00 63 00 61 00 6C 00 6C 00 2E 00 69 00 6E 00 66 00 6F"},
        {"", "00"},
        {"\xC3\x84\xE2\x82\xAC\xF0\x9F\x98\x80", "04 00 C4 20 AC D8 3D DE 00"}, /* Ä€😀 */
        {"a\xFF" "b", "03 00 61 FF FD 00 62"},       /* invalid byte -> U+FFFD */
        {"\xED\xA0\x80", "03 FF FD FF FD FF FD"},    /* encoded surrogate: invalid */
        {"\xC0\xAF", "02 FF FD FF FD"},              /* overlong '/' */
        {"\xE2\x82", "02 FF FD FF FD"},              /* truncated sequence */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ss_buf b;
        ss_buf_init(&b);
        ss_qb_put_cstring(&b, t[i].s);
        assert_bytes(&b, t[i].hex);
        ss_buf_free(&b);
    }
    /* and back to UTF-8 */
    uint8_t in[64];
    size_t n = unhex("04 00 C4 20 AC D8 3D DE 00", in);
    ss_qb_reader r;
    ss_qb_reader_init(&r, in, n);
    ss_qb_str s = ss_qb_get_varstring(&r);
    assert_int_equal(s.units, 4);
    assert_int_equal(r.pos, n);
    ss_buf u;
    ss_buf_init(&u);
    ss_qb_str_utf8(s, &u);
    assert_int_equal(u.len, 9);
    assert_memory_equal(u.data, "\xC3\x84\xE2\x82\xAC\xF0\x9F\x98\x80", 9);
    assert_true(ss_qb_str_eq(s, "\xC3\x84\xE2\x82\xAC\xF0\x9F\x98\x80"));
    assert_false(ss_qb_str_eq(s, "x"));
    ss_buf_free(&u);
}

static void fixed_and_field(void **st) {
    (void)st;
    ss_buf b;
    ss_buf_init(&b);
    ss_qb_put_field(&b, "ns1", 3);
    assert_bytes(&b, "00 00 00 03 6E 73 31");
    ss_buf_reset(&b);
    ss_qb_put_be64(&b, 100705);
    assert_bytes(&b, "00 00 00 00 00 01 89 61");
    ss_buf_reset(&b);
    ss_qb_put_be64(&b, 0xFFFEFDFC00000004ull);
    ss_qb_put_be64(&b, 1700000001780ull);
    assert_bytes(&b, "FF FE FD FC 00 00 00 04 00 00 01 8B CF E5 6E F4");
    ss_buf_free(&b);
}

/* §4.1 and §4.2: phrase framing of the dictionary and params examples. */
static void phrase_examples(void **st) {
    (void)st;
    ss_buf out, rec;
    ss_buf_init(&out);
    ss_buf_init(&rec);
    ss_qb_phraser p;
    ss_qb_phraser_init(&p);
    ss_qb_put_cstring(&rec, "call.info");
    assert_int_equal(ss_qb_phraser_add(&p, rec.data, rec.len, &out), 0);
    ss_buf_reset(&rec);
    ss_qb_put_cstring(&rec, "call.red");
    assert_int_equal(ss_qb_phraser_add(&p, rec.data, rec.len, &out), 0);
    assert_int_equal(out.len, 0); /* nothing leaves before a flush */
    ss_qb_phraser_flush(&p, &out);
    assert_bytes(&out, "00 00 00 24 09 00 63 00 61 00 6C 00 6C 00 2E 00 69 00 6E 00 66 00 6F"
                       " 08 00 63 00 61 00 6C 00 6C 00 2E 00 72 00 65 00 64");
    /* params: version byte + one row, one phrase */
    ss_buf_reset(&out);
    ss_buf_reset(&rec);
    ss_qb_put_u8(&rec, 1);
    ss_qb_put_cstring(&rec, "call.red");
    ss_qb_put_u8(&rec, 1);
    ss_qb_put_u8(&rec, 0);
    ss_qb_put_varint(&rec, 500);
    ss_qb_put_cstring(&rec, "");
    ss_qb_phraser_add(&p, rec.data, rec.len, &out);
    ss_qb_phraser_flush(&p, &out);
    assert_bytes(&out, "00 00 00 17 01 08 00 63 00 61 00 6C 00 6C 00 2E 00 72 00 65 00 64 01 00 F4 03 00");
    /* a record never straddles phrases, and no phrase passes 10239 bytes */
    ss_buf_reset(&out);
    char big[3000];
    memset(big, 'x', sizeof big);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ss_qb_phraser_add(&p, big, sizeof big, &out), 0);
    ss_qb_phraser_flush(&p, &out);
    ss_qb_reader r;
    ss_qb_reader_init(&r, out.data, out.len);
    size_t total = 0;
    while (ss_qb_left(&r)) {
        uint32_t l = ss_qb_get_be32(&r);
        assert_true(l >= 1 && l <= 10239);
        assert_int_equal(l % 3000, 0);
        ss_qb_skip(&r, l);
        total += l;
    }
    assert_int_equal(r.err, 0);
    assert_int_equal(total, 30000);
    assert_int_equal(ss_qb_phraser_add(&p, big, 10240, &out), -EMSGSIZE);
    ss_qb_phraser_free(&p);
    ss_buf_free(&out);
    ss_buf_free(&rec);
}

static void hostile_input(void **st) {
    (void)st;
    ss_qb_reader r;
    /* a varint that never ends */
    uint8_t cont[12];
    memset(cont, 0xFF, sizeof cont);
    ss_qb_reader_init(&r, cont, sizeof cont);
    ss_qb_get_varint(&r);
    assert_int_equal(r.err, -EBADMSG);
    ss_qb_reader_init(&r, cont, sizeof cont);
    ss_qb_get_varlong(&r);
    assert_int_equal(r.err, -EBADMSG);
    /* a varstring claiming more units than there are bytes */
    uint8_t s[] = {0x05, 0x00, 0x41};
    ss_qb_reader_init(&r, s, sizeof s);
    ss_qb_str x = ss_qb_get_varstring(&r);
    assert_int_equal(r.err, -EBADMSG);
    assert_int_equal(x.units, 0);
    /* huge count */
    uint8_t h[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x0F};
    ss_qb_reader_init(&r, h, sizeof h);
    ss_qb_get_varstring(&r);
    assert_int_equal(r.err, -EBADMSG);
    /* short fixed ints; errors are sticky */
    ss_qb_reader_init(&r, s, 3);
    assert_int_equal(ss_qb_get_be32(&r), 0);
    assert_int_equal(ss_qb_get_u8(&r), 0);
    assert_int_equal(r.err, -EBADMSG);
    assert_int_equal(ss_qb_left(&r), 0);
    /* the 5th varint byte's stray high bits are ignored, as in Java */
    uint8_t v5[] = {0xFF, 0xFF, 0xFF, 0xFF, 0x7F};
    ss_qb_reader_init(&r, v5, sizeof v5);
    assert_int_equal(ss_qb_get_varint(&r), 0xFFFFFFFFu);
    assert_int_equal(r.err, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(varint_table),   cmocka_unit_test(varlong_table),
        cmocka_unit_test(zigzag_table),   cmocka_unit_test(varstring_examples),
        cmocka_unit_test(fixed_and_field), cmocka_unit_test(phrase_examples),
        cmocka_unit_test(hostile_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
