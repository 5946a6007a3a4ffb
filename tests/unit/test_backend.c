/* test_backend.c: a network backend's state from its last calls and what
 * it earns at exit (exporters/common/backend.c): healthy gets the shutdown
 * deadline, never heard from the unproven budget from its call's start
 * (or the exit's), refused, failing or stalled nothing; a call in flight
 * past the unproven budget is stalled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/time.h"
#include "exporters/common/backend.h"

#include <stdatomic.h>
#include <errno.h>
#include <stdlib.h>

#define MS 1000000ull

static ss_backend fresh(void) {
    setenv("STACKSHOT_SHUTDOWN_UNPROVEN", "300", 1);
    ss_backend b;
    ss_backend_init(&b);
    return b;
}

static void test_unknown_gets_the_unproven_budget(void **state) {
    (void)state;
    ss_backend b = fresh();
    uint64_t now = ss_mono_ns(), deadline = now + 2000 * MS;
    assert_int_equal(ss_backend_state_at(&b, now), SS_BACKEND_UNKNOWN);
    assert_int_equal(ss_backend_exit_until(&b, now, deadline), now + 300 * MS);
    /* never past the shutdown deadline */
    assert_int_equal(ss_backend_exit_until(&b, now, now + 100 * MS), now + 100 * MS);
    /* a call in flight: from its start */
    ss_backend_call_start(&b);
    uint64_t since = atomic_load(&b.call_since);
    assert_int_equal(ss_backend_exit_until(&b, since + 100 * MS, deadline), since + 300 * MS);
}

static void test_call_in_flight_too_long_is_stalled(void **state) {
    (void)state;
    ss_backend b = fresh();
    ss_backend_call_end(&b, SS_BACKEND_HEALTHY);
    ss_backend_call_start(&b);
    uint64_t since = atomic_load(&b.call_since);
    assert_int_equal(ss_backend_state_at(&b, since + 200 * MS), SS_BACKEND_HEALTHY);
    assert_int_equal(ss_backend_state_at(&b, since + 300 * MS), SS_BACKEND_STALLED);
    uint64_t at = since + 400 * MS;
    assert_int_equal(ss_backend_exit_until(&b, at, at + 2000 * MS), at); /* nothing */
    /* the call ended: healthy again, the whole deadline */
    ss_backend_call_end(&b, SS_BACKEND_HEALTHY);
    assert_int_equal(ss_backend_exit_until(&b, at, at + 2000 * MS), at + 2000 * MS);
}

static void test_failures_get_nothing(void **state) {
    (void)state;
    ss_backend b = fresh();
    uint64_t now = ss_mono_ns();
    int rcs[] = {-ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EPROTO};
    ss_backend_state want[] = {SS_BACKEND_REFUSED, SS_BACKEND_STALLED, SS_BACKEND_FAILING,
                               SS_BACKEND_FAILING};
    for (int i = 0; i < 4; i++) {
        ss_backend_call_start(&b);
        ss_backend_call_end(&b, ss_backend_state_of_rc(rcs[i]));
        assert_int_equal(ss_backend_state_at(&b, now), want[i]);
        assert_int_equal(ss_backend_exit_until(&b, now, now + 2000 * MS), now);
    }
    assert_int_equal(ss_backend_state_of_rc(0), SS_BACKEND_HEALTHY);
}

static void test_bound_without_exit_is_the_deadline(void **state) {
    (void)state;
    ss_backend b = fresh();
    ss_backend_call_end(&b, SS_BACKEND_REFUSED);
    /* the exporters are not stopping: a wait keeps its own deadline */
    uint64_t d = ss_mono_ns() + 5000 * MS;
    assert_int_equal(ss_backend_bound(&b, d), d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_gets_the_unproven_budget),
        cmocka_unit_test(test_call_in_flight_too_long_is_stalled),
        cmocka_unit_test(test_failures_get_nothing),
        cmocka_unit_test(test_bound_without_exit_is_the_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
