/* test_grow_hmap.c: the growable array (agent/grow.h) and the hash index
 * (agent/hmap.h) the agent's tables share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/grow.h"
#include "agent/hmap.h"
#include "agent/mem.h"

#include <stdio.h>
#include <string.h>

static void test_grow_doubles_from_first(void **state) {
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    assert_int_equal(ss_grow((void **)&a, &cap, 1, sizeof *a, 16), 0);
    assert_int_equal(cap, 16);
    assert_int_equal(ss_grow((void **)&a, &cap, 16, sizeof *a, 16), 0);
    assert_int_equal(cap, 16); /* fits: nothing done */
    for (int i = 0; i < 16; i++)
        a[i] = i;
    assert_int_equal(ss_grow((void **)&a, &cap, 17, sizeof *a, 16), 0);
    assert_int_equal(cap, 32);
    assert_int_equal(ss_grow((void **)&a, &cap, 1000, sizeof *a, 16), 0);
    assert_int_equal(cap, 1024);
    for (int i = 0; i < 16; i++) /* realloc kept the contents */
        assert_int_equal(a[i], i);
    a[1023] = 7; /* the whole capacity is there (ASan checks) */
    free(a);
}

static void test_grow_overflow_leaves_array(void **state) {
    (void)state;
    char *a = NULL;
    size_t cap = 0;
    assert_int_equal(ss_grow((void **)&a, &cap, 10, 16, 8), 0);
    assert_int_equal(cap, 16);
    char *before = a;
    memset(a, 'x', 16 * 16);
    /* need * elem passes SIZE_MAX: refused before any realloc */
    assert_int_equal(ss_grow((void **)&a, &cap, SIZE_MAX / 8, 16, 8), -ENOMEM);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 16);
    assert_int_equal(a[255], 'x');
    assert_int_equal(ss_grow_cap(0, SIZE_MAX, 1, 1, SIZE_MAX), 0);
    assert_int_equal(ss_grow_cap(4, 5, 1, 1, 7), 0); /* 8 passes max */
    assert_int_equal(ss_grow_cap(4, 5, 1, 1, 8), 8);

    uint32_t *w = NULL;
    uint32_t c32 = 0;
    assert_int_equal(ss_grow32((void **)&w, &c32, 3, sizeof *w, 256), 0);
    assert_int_equal(c32, 256);
    /* the next doubling past UINT32_MAX elements is refused */
    uint32_t big = 1u << 31;
    assert_int_equal(ss_grow32((void **)&w, &big, UINT32_MAX, sizeof *w, 256), -ENOMEM);
    assert_int_equal(big, 1u << 31);
    free(w);
    free(a);
}

typedef struct words {
    char (*w)[16];
    uint32_t n;
    int compares;
} words;

static bool word_eq(const void *ctx, uint32_t idx, const void *key) {
    words *ws = (words *)ctx;
    ws->compares++;
    return strcmp(ws->w[idx], key) == 0;
}

static void test_hmap_finds_every_key(void **state) {
    (void)state;
    enum { N = 20000 };
    size_t used = ss_mem_used(), mine = 0;
    words ws = {calloc(N, sizeof *ws.w), 0, 0};
    assert_non_null(ws.w);
    ss_hmap h;
    ss_hmap_init(&h, 0, 0, &mine);
    for (uint32_t i = 0; i < N; i++) {
        snprintf(ws.w[i], sizeof ws.w[i], "w%u", i * 7919u);
        ss_hslot *slot;
        uint32_t hash = ss_hash_str(ws.w[i]);
        assert_int_equal(ss_hmap_find(&h, hash, word_eq, &ws, ws.w[i], &slot), SS_HMAP_NONE);
        assert_non_null(slot);
        ss_hmap_put(&h, slot, hash, i);
        ws.n++;
    }
    assert_int_equal(h.count, N);
    /* load at most 3/4, a power of two, all charged */
    assert_true((size_t)N * 4 <= ((size_t)h.mask + 1) * 3);
    assert_int_equal(h.mask & (h.mask + 1), 0);
    assert_int_equal(mine, ((size_t)h.mask + 1) * sizeof(ss_hslot));
    assert_int_equal(ss_mem_used(), used + mine);
    ws.compares = 0;
    for (uint32_t i = 0; i < N; i++) {
        ss_hslot *slot;
        assert_int_equal(ss_hmap_find(&h, ss_hash_str(ws.w[i]), word_eq, &ws, ws.w[i], &slot), i);
    }
    /* the stored hash spares compares: about one per lookup */
    assert_true(ws.compares < N + N / 50);
    ss_hslot *slot;
    assert_int_equal(ss_hmap_find(&h, ss_hash_str("absent"), word_eq, &ws, "absent", &slot),
                     SS_HMAP_NONE);
    assert_non_null(slot);
    size_t cap = (size_t)h.mask + 1;
    ss_hmap_clear(&h);
    assert_int_equal(h.count, 0);
    assert_int_equal((size_t)h.mask + 1, cap); /* cleared, slots kept */
    assert_int_equal(ss_hmap_find(&h, ss_hash_str(ws.w[5]), word_eq, &ws, ws.w[5], &slot),
                     SS_HMAP_NONE);
    ss_hmap_free(&h);
    assert_int_equal(mine, 0);
    assert_int_equal(ss_mem_used(), used);
    free(ws.w);
}

static bool never_eq(const void *ctx, uint32_t idx, const void *key) {
    (void)ctx, (void)idx, (void)key;
    return false;
}

static void test_hmap_same_hash_probes_on(void **state) {
    (void)state;
    /* every key on one hash: linear probing still places and finds them */
    ss_hmap h;
    ss_hmap_init(&h, 8, 50, NULL);
    uint32_t keys[40];
    for (uint32_t i = 0; i < 40; i++) {
        keys[i] = i;
        ss_hslot *slot;
        assert_int_equal(ss_hmap_find(&h, 42, never_eq, NULL, &keys[i], &slot), SS_HMAP_NONE);
        assert_non_null(slot);
        ss_hmap_put(&h, slot, 42, i);
        assert_true((size_t)h.count * 2 <= (size_t)h.mask + 1);
    }
    assert_int_equal(h.mask + 1, 128);
    uint32_t filled = 0;
    for (uint32_t i = 0; i <= h.mask; i++)
        filled += h.slots[i].idx1 != 0;
    assert_int_equal(filled, 40);
    ss_hmap_free(&h);
    assert_null(h.slots);
}

static void test_hash_spreads(void **state) {
    (void)state;
    /* aligned pointers differ in their low bits after hashing */
    uint32_t seen = 0;
    for (uintptr_t p = 0x7f0000001000; p < 0x7f0000001000 + 64 * 16; p += 16)
        seen |= 1u << (ss_hash_ptr((void *)p) & 31);
    assert_true(__builtin_popcount(seen) >= 24);
    assert_int_equal(ss_hash_str("abc"), ss_hash_bytes("abc", 3));
    assert_int_not_equal(ss_hash_str("abc"), ss_hash_str("abd"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow_doubles_from_first),
        cmocka_unit_test(test_grow_overflow_leaves_array),
        cmocka_unit_test(test_hmap_finds_every_key),
        cmocka_unit_test(test_hmap_same_hash_probes_on),
        cmocka_unit_test(test_hash_spreads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
