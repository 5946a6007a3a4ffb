/* test_fanout.c: rounds reach every exporter in order, a stalled exporter
 * never blocks the publisher, the memory cap drops the oldest rounds and
 * counts them, and stop() keeps its deadline even when an exporter hangs.
 *
 * The test provides its own exporter table (ss_exporter_table), so the
 * real exporters are not linked in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/round_loss.h"
#include "agent/time.h"

#include <string.h>

typedef struct fake {
    ss_exporter_stats *stats;
    _Atomic int gate_open;   /* consume waits until this is 1 */
    _Atomic uint64_t consumed;
    uint64_t last_seq;
    bool in_order;
    _Atomic int closed;
    uint64_t dropped_at_close; /* the stats live in the slot, freed by stop() */
} fake;

static fake fakes[2];
/* written by the exporter threads, read by the test */

static int fake_open(void **state, const ss_config *cfg, ss_exporter_stats *stats, int i) {
    (void)cfg;
    fakes[i].stats = stats;
    fakes[i].in_order = true;
    *state = &fakes[i];
    return 0;
}
static int open0(void **s, const ss_config *c, ss_exporter_stats *st) { return fake_open(s, c, st, 0); }
static int open1(void **s, const ss_config *c, ss_exporter_stats *st) { return fake_open(s, c, st, 1); }

static void fake_consume(void *state, ss_round *r) {
    fake *f = state;
    while (!atomic_load(&f->gate_open))
        ss_sleep_ns(1000000);
    if (r->seq <= f->last_seq)
        f->in_order = false;
    f->last_seq = r->seq;
    atomic_fetch_add(&f->consumed, 1);
}

static void fake_close(void *state, uint64_t deadline) {
    (void)deadline;
    fake *f = state;
    f->dropped_at_close = atomic_load(&f->stats->rounds_dropped);
    atomic_store(&f->closed, 1);
}

static const ss_exporter_ops ops0 = {"fake0", "f0", 0, open0, fake_consume, NULL, fake_close};
static const ss_exporter_ops ops1 = {"fake1", "f1", 0, open1, fake_consume, NULL, fake_close};

const ss_exporter_def ss_exporter_table[] = {
    {.name = "fake0", .ops = &ops0},
    {.name = "fake1", .ops = &ops1},
    {.name = NULL},
};

static ss_round_builder *builder;

static ss_round *make_round(void) {
    ss_round_builder_begin(builder, ss_wall_ns(), 10, SS_RUNTIME_NATIVE);
    ss_round_builder_add_thread(builder, "t");
    return ss_round_builder_finish(builder, 0, 0);
}

static void reset(void) {
    memset(fakes, 0, sizeof fakes);
}

static void test_in_order_to_every_exporter(void **state) {
    (void)state;
    reset();
    atomic_store(&fakes[0].gate_open, 1);
    atomic_store(&fakes[1].gate_open, 1);
    ss_config cfg = {.exporters = 1u | 2u};
    ss_mem_set_limit(64u << 20);
    assert_int_equal(ss_exporters_start(&cfg), 2);
    for (int i = 0; i < 200; i++)
        ss_exporters_publish(make_round());
    ss_exporters_stop(ss_mono_ns() + 2000000000ull);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(atomic_load(&fakes[i].consumed), 200);
        assert_true(fakes[i].in_order);
        assert_int_equal(atomic_load(&fakes[i].closed), 1);
    }
    assert_int_equal(ss_mem_used(), 0);
}

static void test_memory_cap_drops_oldest(void **state) {
    (void)state;
    reset();
    ss_config cfg = {.exporters = 1u};
    ss_round *probe = make_round();
    size_t one = probe->bytes;
    ss_round_unref(probe);
    ss_mem_set_limit(10 * one);
    assert_int_equal(ss_exporters_start(&cfg), 1);
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < 100; i++) {
        ss_exporters_publish(make_round());
        assert_true(ss_mem_used() <= 10 * one);
    }
    /* the exporter is stalled, yet publishing took no time at all */
    assert_true(ss_mono_ns() - t0 < 500000000ull);
    /* open() runs on the exporter thread: wait until it has */
    for (int i = 0; i < 1000 && !fakes[0].stats; i++)
        ss_sleep_ns(1000000);
    ss_exporter_stats *st = fakes[0].stats;
    assert_non_null(st);
    assert_int_equal(atomic_load(&st->rounds_in), 100);
    assert_true(atomic_load(&st->rounds_dropped) >= 89);
    atomic_store(&fakes[0].gate_open, 1);
    ss_exporters_stop(ss_mono_ns() + 2000000000ull);
    /* every round is accounted for: consumed or dropped */
    assert_int_equal(atomic_load(&fakes[0].consumed) + fakes[0].dropped_at_close, 100);
    assert_true(fakes[0].in_order);
    assert_int_equal(ss_mem_used(), 0);
    ss_mem_set_limit(64u << 20);
}

static void test_stop_keeps_deadline_with_hung_exporter(void **state) {
    (void)state;
    reset();
    ss_config cfg = {.exporters = 1u};
    assert_int_equal(ss_exporters_start(&cfg), 1);
    ss_exporters_publish(make_round());
    ss_exporters_publish(make_round());
    uint64_t t0 = ss_mono_ns();
    ss_exporters_stop(t0 + 200000000ull);
    uint64_t took = ss_mono_ns() - t0;
    assert_true(took < 800000000ull);
    atomic_store(&fakes[0].gate_open, 1); /* let the abandoned thread finish */
    ss_sleep_ns(100000000ull);
}

/* Rounds lost after consumption are counted once each, whatever order
 * and overlap the requests or traces holding them are dropped in. */
static void test_round_loss_counts_each_round_once(void **state) {
    (void)state;
    ss_exporter_stats st = {0};
    ss_round_loss l;
    ss_round_loss_init(&l);
    assert_int_equal(ss_round_loss_mark(&l, &st, 5, 9), 5);   /* a request after the head */
    assert_int_equal(ss_round_loss_mark(&l, &st, 3, 5), 2);   /* then the head: 3, 4 are new */
    assert_int_equal(ss_round_loss_mark(&l, &st, 9, 9), 0);   /* a second batch of round 9 */
    assert_int_equal(ss_round_loss_mark(&l, &st, 0, 4), 0);   /* no rounds known */
    assert_int_equal(ss_round_loss_mark(&l, &st, 7, 6), 0);
    assert_int_equal(ss_round_loss_mark(&l, &st, 11, 12), 2); /* a gap stays a gap */
    assert_int_equal(ss_round_loss_mark(&l, &st, 10, 10), 1); /* which merges when filled */
    assert_int_equal(l.n, 1);
    assert_int_equal(l.span[0].lo, 3);
    assert_int_equal(l.span[0].hi, 12);
    assert_int_equal(ss_round_loss_mark(&l, &st, 1, 20), 10);  /* 1, 2 and 13..20 */
    assert_int_equal(atomic_load(&st.rounds_lost), 20);
    /* many separate runs: the oldest is forgotten, newer ones still dedup */
    for (uint64_t r = 100; r < 100 + 3 * (SS_ROUND_LOSS_SPANS + 4); r += 3)
        assert_int_equal(ss_round_loss_mark(&l, &st, r, r), 1);
    assert_int_equal(l.n, SS_ROUND_LOSS_SPANS);
    uint64_t last = 100 + 3 * (SS_ROUND_LOSS_SPANS + 3);
    assert_int_equal(ss_round_loss_mark(&l, &st, last, last + 1), 1);
    assert_int_equal(atomic_load(&st.rounds_lost), 20 + SS_ROUND_LOSS_SPANS + 4 + 1);
    ss_round_loss_destroy(&l);
}

int main(void) {
    builder = ss_round_builder_create();
    ss_log_set_level(SS_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_order_to_every_exporter),
        cmocka_unit_test(test_memory_cap_drops_oldest),
        cmocka_unit_test(test_stop_keeps_deadline_with_hung_exporter),
        cmocka_unit_test(test_round_loss_counts_each_round_once),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ss_round_builder_destroy(builder);
    return rc;
}
