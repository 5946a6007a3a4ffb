/* test_profiles_period.c: export periods (period.c): boundaries by round
 * time, early export at the memory limit, nothing lost in between. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/exporter_stats.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "exporters/profiles/period.h"
#include "tests/profiles/synth.h"

typedef struct seen {
    int flushes;
    uint64_t rounds[16];
    uint64_t obs;
} seen;

static void on_flush(void *owner, ss_agg *a) {
    seen *s = owner;
    if (s->flushes < 16)
        s->rounds[s->flushes] = a->rounds;
    s->flushes++;
    s->obs += a->n_obs;
    /* Every timestamp of the period lies in its range. */
    for (uint32_t i = 0; i < a->n_round_times; i++) {
        assert_true(a->round_times[i] >= a->start_ns);
        assert_true(a->round_times[i] < a->end_ns);
    }
}

static void feed(ss_period *p, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; i++) {
        ss_round *r = ss_synth_known(i);
        ss_period_consume(p, r);
        ss_round_unref(r);
    }
}

static void test_boundaries(void **st) {
    (void)st;
    setenv("STACKSHOT_PROFILES_PERIOD", "1", 1);
    ss_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_memory = 64u << 20;
    ss_exporter_stats stats;
    memset(&stats, 0, sizeof stats);
    seen s = {0};
    ss_period p;
    assert_int_equal(ss_period_init(&p, &cfg, "test", &stats, on_flush, &s), 0);
    /* Rounds are 10 ms apart: a 1 s period holds 100 of them. */
    feed(&p, 0, 250);
    assert_int_equal(s.flushes, 2);
    ss_period_flush(&p);
    assert_int_equal(s.flushes, 3);
    assert_int_equal(s.rounds[0], 100);
    assert_int_equal(s.rounds[1], 100);
    assert_int_equal(s.rounds[2], 50);
    assert_int_equal(s.obs, 250 * 3);
    /* Nothing held: another flush exports nothing. */
    ss_period_flush(&p);
    assert_int_equal(s.flushes, 3);
    assert_int_equal(stats.records_dropped, 0);
    ss_period_free(&p);
    unsetenv("STACKSHOT_PROFILES_PERIOD");
}

static void test_memory_limit_exports_early(void **st) {
    (void)st;
    ss_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_memory = 64u << 20;
    ss_exporter_stats stats;
    memset(&stats, 0, sizeof stats);
    seen s = {0};
    ss_period p;
    assert_int_equal(ss_period_init(&p, &cfg, "test", &stats, on_flush, &s), 0);
    feed(&p, 0, 3);
    /* Let the period hold a little more than it holds now. */
    p.agg->limit = p.agg->bytes + 1;
    feed(&p, 3, 60);
    ss_period_flush(&p);
    assert_true(s.flushes >= 2);
    assert_int_equal(s.obs, 60 * 3);
    assert_int_equal(stats.records_dropped, 0);
    ss_period_free(&p);
}

int main(void) {
    ss_mem_set_limit(256u << 20);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_boundaries),
        cmocka_unit_test(test_memory_limit_exports_early),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
