/* test_native_busy.c: a signal that already has a handler is not taken.
 *
 * The program owns the sampling signal; starting the native sampler must
 * fail with -EBUSY, leave the program's handler in place and start no
 * thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/round.h"
#include "samplers/ss_samplers.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

static void host_handler(int sig) { (void)sig; }

static void test_foreign_handler_kept(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = host_handler;
    assert_int_equal(sigaction(cfg.signal, &sa, NULL), 0);

    ss_round *r = (ss_round *)1;
    assert_int_equal(ss_native_sample_once(&cfg, &r), -EBUSY);
    assert_null(r);
    assert_int_equal(ss_native_source.start(&cfg), -EBUSY);

    struct sigaction now;
    assert_int_equal(sigaction(cfg.signal, NULL, &now), 0);
    assert_ptr_equal(now.sa_handler, host_handler);
}

static void test_other_signal_works(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.signal = SIGRTMAX - 6; /* free */
    ss_round *r = NULL;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    assert_non_null(r);
    ss_round_unref(r);
    struct sigaction now;
    assert_int_equal(sigaction(cfg.signal, NULL, &now), 0);
    assert_true(now.sa_flags & SA_SIGINFO);
    ss_native_release();
    /* stopped: still installed (a no-op), never back to SIG_DFL */
    assert_int_equal(sigaction(cfg.signal, NULL, &now), 0);
    assert_true(now.sa_flags & SA_SIGINFO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_foreign_handler_kept),
        cmocka_unit_test(test_other_signal_works),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
