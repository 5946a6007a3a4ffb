/* test_span.c: the per-thread span context, including a reader that
 * interrupts the writer (a signal handler on the same thread). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/span.h"
#include "agent/time.h"
#include "include/stackshot.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

static void test_set_clear(void **state) {
    (void)state;
    uint8_t t[16], s[8];
    assert_false(ss_span_current(t, s));
    uint8_t trace[16], span[8];
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)(i + 1);
    for (int i = 0; i < 8; i++)
        span[i] = (uint8_t)(0xa0 + i);
    stackshot_set_span_context(trace, span);
    assert_true(ss_span_current(t, s));
    assert_memory_equal(t, trace, 16);
    assert_memory_equal(s, span, 8);
    stackshot_clear_span_context();
    assert_false(ss_span_current(t, s));
    uint8_t zero[16] = {0};
    stackshot_set_span_context(zero, span); /* an all-zero id clears */
    assert_false(ss_span_current(t, s));
    stackshot_set_span_context(NULL, NULL);
    assert_false(ss_span_current(t, s));
}

static void *other_thread(void *arg) {
    uint8_t t[16], s[8];
    *(bool *)arg = ss_span_current(t, s);
    return NULL;
}

static void test_per_thread(void **state) {
    (void)state;
    uint8_t trace[16] = {1}, span[8] = {2};
    stackshot_set_span_context(trace, span);
    bool other_has = true;
    pthread_t th;
    pthread_create(&th, NULL, other_thread, &other_has);
    pthread_join(th, NULL);
    assert_false(other_has);
    stackshot_clear_span_context();
}

/* A timer signal interrupts the writer at random points; every read in the
 * handler must see a pair written together (span byte == trace byte). */
static volatile sig_atomic_t torn, reads;

static void on_alarm(int sig) {
    (void)sig;
    uint8_t t[16], s[8];
    if (ss_span_current(t, s)) {
        reads++;
        for (int i = 0; i < 16; i++)
            if (t[i] != t[0])
                torn = 1;
        for (int i = 0; i < 8; i++)
            if (s[i] != t[0])
                torn = 1;
    }
}

static void test_signal_reader_sees_whole_pairs(void **state) {
    (void)state;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_PROF, &it, NULL);
    uint8_t trace[16], span[8];
    uint64_t start = ss_mono_ns();
    for (unsigned v = 1; ss_mono_ns() - start < 300000000ull; v++) {
        memset(trace, (int)(v & 0xff) | 1, 16);
        memset(span, (int)(v & 0xff) | 1, 8);
        stackshot_set_span_context(trace, span);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_IGN);
    assert_int_equal(torn, 0);
    assert_true(reads > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_clear),
        cmocka_unit_test(test_per_thread),
        cmocka_unit_test(test_signal_reader_sees_whole_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
