/* test_sig_config.c: STACKSHOT_SIGNAL values the agent must refuse, and a
 * handler the host installed before the agent started (cmocka).
 *
 * Every bad value gives exactly one stderr line naming the key and value,
 * and the default signal (SIGRTMAX-3). A host handler already on the
 * signal is never replaced: ss_native_sample_once answers -EBUSY with one
 * line, and the host's handler is still installed afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/round.h"
#include "samplers/ss_samplers.h"
#include "tests/unit/stderr_capture.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static int load_with(const char *value, ss_config *c, capture *cap) {
    setenv("STACKSHOT_SIGNAL", value, 1);
    capture_begin(cap);
    ss_config_load(c);
    int lines = capture_end(cap);
    unsetenv("STACKSHOT_SIGNAL");
    return lines;
}

static void test_bad_values(void **state) {
    (void)state;
    char sigrtmin_minus[32], reserved[8];
    snprintf(sigrtmin_minus, sizeof sigrtmin_minus, "%d", SIGRTMIN - 1); /* glibc's own */
    snprintf(reserved, sizeof reserved, "%d", 32);
    const char *bad[] = {"SIGSEGV", "SIGKILL", "SIGSTOP", "SIGBUS", "SIGCHLD", "SIGALRM",
                         "0", "99", "-5", "abc", "SIGFOO", "SIGRTMIN-1", "SIGRTMAX+1",
                         "SIGRTMIN+40", "27x", sigrtmin_minus, reserved};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ss_config c;
        capture cap;
        int lines = load_with(bad[i], &c, &cap);
        char want[64];
        snprintf(want, sizeof want, "STACKSHOT_SIGNAL=%s: ", bad[i]);
        if (lines != 1 || !strstr(cap.text, want) || !strstr(cap.text, "using SIGRTMAX-3"))
            fail_msg("STACKSHOT_SIGNAL=%s: %d lines: %s", bad[i], lines, cap.text);
        assert_int_equal(c.signal, SIGRTMAX - 3);
    }
}

static void test_good_values(void **state) {
    (void)state;
    static const struct {
        const char *v;
        int sig;
    } good[] = {{"SIGPROF", SIGPROF}, {"SIGUSR2", SIGUSR2}, {"SIGRTMIN", 0},
                {"SIGRTMAX-3", 0}, {"  ", 0}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ss_config c;
        capture cap;
        assert_int_equal(load_with(good[i].v, &c, &cap), 0);
        int want = good[i].sig;
        if (strcmp(good[i].v, "SIGRTMIN") == 0)
            want = SIGRTMIN;
        else if (!want)
            want = SIGRTMAX - 3;
        assert_int_equal(c.signal, want);
    }
}

static volatile sig_atomic_t host_got;
static void host_handler(int sig) {
    (void)sig;
    host_got++;
}

/* The host owns the signal before the agent starts: refused, kept. */
static void test_refused_before_start(void **state) {
    (void)state;
    struct sigaction sa, now;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = host_handler;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGRTMAX - 3, &sa, NULL), 0);

    ss_config c;
    capture cap;
    assert_int_equal(load_with("", &c, &cap), 0);
    ss_round *r = NULL;
    capture_begin(&cap);
    int rc = ss_native_sample_once(&c, &r);
    int lines = capture_end(&cap);
    assert_int_equal(rc, -EBUSY);
    assert_null(r);
    assert_int_equal(lines, 1);
    assert_non_null(strstr(cap.text, "already has a handler"));
    assert_int_equal(sigaction(SIGRTMAX - 3, NULL, &now), 0);
    assert_true(now.sa_handler == host_handler);
    raise(SIGRTMAX - 3);
    assert_int_equal(host_got, 1);
    ss_native_release();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_good_values),
        cmocka_unit_test(test_refused_before_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
