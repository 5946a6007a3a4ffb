/* test_core_heap.c: the core's heaps (core/core_heap.c): the zone that
 * serves libdw and libelf is given back whole when its last block is
 * freed; a forked child inherits both heaps, goes on with the blocks its
 * parent had (a resolver it keeps) and empties its own copy of the zone
 * without touching the parent's; the children of a process that forks
 * often lack the zone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core_heap.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Is the page holding p mapped in this process? */
static bool mapped(const void *p) {
    unsigned char v;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    return mincore((void *)page, 4096, &v) == 0;
}

/* Is [p, p + len) mapped here and every byte v? */
static bool holds(const void *p, size_t len, unsigned char v) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095; a < (uintptr_t)p + len; a += 4096)
        if (!mapped((const void *)a))
            return false;
    for (size_t i = 0; i < len; i++)
        if (((const unsigned char *)p)[i] != v)
            return false;
    return true;
}

static void test_zone_blocks_are_the_zones(void **state) {
    (void)state;
    void *small = ss_core_zone_alloc(100, 16);
    void *large = ss_core_zone_alloc(200 << 10, 64); /* a mapping of its own */
    void *main_block = ss_core_heap_alloc(100, 16);
    assert_non_null(small);
    assert_non_null(large);
    assert_non_null(main_block);
    assert_int_equal((uintptr_t)large % 64, 0);
    memset(small, 1, 100);
    memset(large, 2, 200 << 10);
    assert_true(ss_core_heap_owns(small) && ss_core_heap_in_zone(small));
    assert_true(ss_core_heap_owns(large) && ss_core_heap_in_zone(large));
    assert_true(ss_core_heap_owns(main_block) && !ss_core_heap_in_zone(main_block));
    int on_stack = 0;
    assert_false(ss_core_heap_owns(&on_stack));
    assert_true(ss_core_heap_usable(small) >= 100);
    ss_core_heap_free(large);
    ss_core_heap_free(small);
    ss_core_heap_free(main_block);
}

/* The last block freed: every chunk unmapped, counted once. */
static void test_zone_given_back_when_empty(void **state) {
    (void)state;
    uint64_t before = ss_core_zone_emptied();
    void *b[300];
    for (int i = 0; i < 300; i++) { /* 300 x 8 KiB: more than one chunk */
        b[i] = ss_core_zone_alloc(8000, 16);
        assert_non_null(b[i]);
        memset(b[i], i, 8000);
    }
    for (int i = 0; i < 299; i++)
        ss_core_heap_free(b[i]);
    assert_int_equal(ss_core_zone_emptied(), before); /* one still in use */
    assert_true(mapped(b[0]) && mapped(b[299]));
    assert_int_equal(((unsigned char *)b[299])[7999], 299 & 0xff);
    ss_core_heap_free(b[299]);
    assert_int_equal(ss_core_zone_emptied(), before + 1);
    assert_false(mapped(b[0]));
    assert_false(mapped(b[299]));
    assert_false(ss_core_heap_owns(b[0]));
    /* and it serves again */
    void *again = ss_core_zone_alloc(64, 16);
    assert_non_null(again);
    assert_true(ss_core_heap_in_zone(again));
    ss_core_heap_free(again);
}

/* A forked child: the parent's blocks are there and still the heaps';
 * freeing the zone's last one empties the child's copy only. */
static void test_child_goes_on_with_parent_blocks(void **state) {
    (void)state;
    uint64_t emptied = ss_core_zone_emptied();
    void *z = ss_core_zone_alloc(4000, 16);
    void *m = ss_core_heap_alloc(4000, 16);
    assert_non_null(z);
    assert_non_null(m);
    memset(z, 7, 4000);
    memset(m, 9, 4000);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ss_core_zone_after_fork_child(); /* the loader's at-fork handler calls them */
        ss_core_heap_after_fork_child();
        int bad = 0;
        if (!mapped(z) || ((unsigned char *)z)[3999] != 7 || !ss_core_heap_in_zone(z))
            bad |= 1;
        if (!mapped(m) || ((unsigned char *)m)[3999] != 9 || !ss_core_heap_owns(m))
            bad |= 2;
        void *mine = ss_core_zone_alloc(4000, 16);
        if (!mine || !ss_core_heap_in_zone(mine))
            bad |= 4;
        ss_core_heap_free(mine);
        ss_core_heap_free(z); /* the last one: the child's zone is emptied */
        if (ss_core_zone_emptied() != emptied + 1 || mapped(z))
            bad |= 8;
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the parent's are untouched */
    assert_true(ss_core_heap_in_zone(z));
    assert_int_equal(((unsigned char *)z)[3999], 7);
    assert_int_equal(ss_core_zone_emptied(), emptied);
    ss_core_heap_free(z);
    assert_int_equal(ss_core_zone_emptied(), emptied + 1);
    ss_core_heap_free(m);
}

/* A process that forks often (20 forks within a second while the zone
 * holds anything): from then on its children lack the zone (MADV_DONTFORK:
 * no page table of it copied); a child's zone starts empty under a mark of
 * its own, the parent's blocks (still marked in the inherited map) are not
 * taken for its own, and the parent's zone is untouched. Emptied, the zone
 * is inherited again. */
static void test_forking_parent_keeps_zone_to_itself(void **state) {
    (void)state;
    ss_core_zone_note_forks();
    void *z = ss_core_zone_alloc(4000, 16);
    void *large = ss_core_zone_alloc(100 << 10, 16); /* a mapping of its own */
    assert_non_null(z);
    assert_non_null(large);
    memset(z, 7, 4000);
    memset(large, 5, 100 << 10);
    uint64_t unforks = ss_core_zone_unforks();
    /* a few forks: inherited */
    for (int i = 0; i < 3; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            ss_core_zone_after_fork_child();
            _exit(ss_core_zone_inherited() && mapped(z) && mapped(large) &&
                          ss_core_heap_in_zone(z) ? 0 : 1);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(ss_core_zone_unforks(), unforks);
    /* many: not inherited from then on */
    for (int i = 0; i < 20; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(0);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
    }
    assert_int_equal(ss_core_zone_unforks(), unforks + 1);
    void *later = ss_core_zone_alloc(200 << 10, 16); /* mapped since: not inherited either */
    assert_non_null(later);
    memset(later, 9, 200 << 10);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ss_core_zone_after_fork_child();
        int bad = 0;
        if (ss_core_zone_inherited())
            bad |= 1;
        /* not here (something of the child's may be mapped there since: a
         * sanitizer's runtime maps memory at fork; never the parent's bytes) */
        if (holds(z, 4000, 7))
            bad |= 2;
        if (holds(large, 100 << 10, 5))
            bad |= 32;
        if (holds(later, 200 << 10, 9))
            bad |= 64;
        if (ss_core_heap_in_zone(z) || ss_core_heap_owns(large))
            bad |= 4;
        void *mine = ss_core_zone_alloc(4000, 16);
        if (!mine || !mapped(mine) || !ss_core_heap_in_zone(mine))
            bad |= 8;
        memset(mine, 3, 4000);
        uint64_t emptied = ss_core_zone_emptied();
        ss_core_heap_free(mine); /* its own last block: its zone emptied */
        if (ss_core_zone_emptied() != emptied + 1)
            bad |= 16;
        _exit(bad);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the parent's are untouched */
    assert_true(ss_core_heap_in_zone(z) && ss_core_heap_in_zone(large));
    assert_int_equal(((unsigned char *)z)[3999], 7);
    assert_int_equal(((unsigned char *)large)[(100 << 10) - 1], 5);
    uint64_t emptied = ss_core_zone_emptied();
    ss_core_heap_free(later);
    ss_core_heap_free(large);
    ss_core_heap_free(z);
    assert_int_equal(ss_core_zone_emptied(), emptied + 1);
    /* emptied: inherited again */
    void *again = ss_core_zone_alloc(64, 16);
    assert_non_null(again);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ss_core_zone_after_fork_child();
        _exit(ss_core_zone_inherited() && mapped(again) && ss_core_heap_in_zone(again) ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ss_core_heap_free(again);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zone_blocks_are_the_zones),
        cmocka_unit_test(test_zone_given_back_when_empty),
        cmocka_unit_test(test_child_goes_on_with_parent_blocks),
        cmocka_unit_test(test_forking_parent_keeps_zone_to_itself),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
