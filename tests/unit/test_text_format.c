/* test_text_format.c: the thread-dump text of one thread, byte for byte,
 * for a Java-shaped and a native-shaped sample (specs/splunk-profiling.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/ss_exporters.h"

#include <stdio.h>

static ss_round *java_round(void) {
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, 1700000000000000000ull, 1000, SS_RUNTIME_JVM);
    ss_thread_sample *t = ss_round_builder_add_thread(b, "main");
    t->number = 1;
    t->prio = 5;
    t->os_prio = 0;
    t->cpu_ns = 388960000;
    t->elapsed_ns = 3170000000ull;
    t->tid = 0x00007fd5e4017ed0ull;
    t->nid = 0x1881;
    t->status = "waiting on condition";
    t->state = SS_STATE_WAITING;
    t->state_detail = "parking";
    ss_frame f = {0};
    f.fn = ss_funcinfo_intern("jdk.internal.misc.Unsafe", "park", "Native Method",
                              "java.base@17.0.15", SS_FRAME_JAVA);
    ss_round_builder_add_frame(b, &f);
    f.fn = ss_funcinfo_intern("java.util.concurrent.locks.LockSupport", "park",
                              "LockSupport.java", "java.base@17.0.15", SS_FRAME_JAVA);
    f.line = 211;
    ss_round_builder_add_frame(b, &f);
    f.fn = ss_funcinfo_intern("Workload", "main", "Workload.java", NULL, SS_FRAME_JAVA);
    f.line = 53;
    ss_round_builder_add_frame(b, &f);
    t = ss_round_builder_add_thread(b, "pool\nworker");
    t->number = 14;
    t->daemon = true;
    t->prio = 5;
    t->status = "runnable";
    t->state = SS_STATE_RUNNABLE;
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

static void test_java_thread_matches_jstack(void **state) {
    (void)state;
    ss_round *r = java_round();
    ss_buf out;
    ss_buf_init(&out);
    assert_int_equal(ss_text_format_thread(r, &r->threads[0], &out), 0);
    assert_string_equal(
        out.data,
        "\"main\" #1 prio=5 os_prio=0 cpu=388.96ms elapsed=3.17s tid=0x00007fd5e4017ed0 "
        "nid=0x1881 waiting on condition\n"
        "   java.lang.Thread.State: WAITING (parking)\n"
        "\tat jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)\n"
        "\tat java.util.concurrent.locks.LockSupport.park(java.base@17.0.15/LockSupport.java:211)\n"
        "\tat Workload.main(Workload.java:53)\n");
    ss_buf_reset(&out);
    ss_text_format_thread(r, &r->threads[1], &out);
    /* a newline in a name would break the line structure: it becomes a space;
     * unknown cpu/elapsed print as zero */
    assert_string_equal(out.data,
                        "\"pool worker\" #14 daemon prio=5 os_prio=0 cpu=0.00ms elapsed=0.00s "
                        "tid=0x0000000000000000 nid=0x0 runnable\n"
                        "   java.lang.Thread.State: RUNNABLE\n");
    ss_buf_free(&out);
    ss_round_unref(r);
}

static void test_native_thread_and_truncation(void **state) {
    (void)state;
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, 1700000000000000000ull, 100, SS_RUNTIME_NATIVE);
    ss_thread_sample *t = ss_round_builder_add_thread(b, "sleeper");
    t->number = 3;
    t->os_prio = -5;
    t->cpu_ns = 1234567;
    t->elapsed_ns = 61500000000ull;
    t->tid = 0x7f0011223344ull;
    t->nid = 4242;
    t->status = "sleeping";
    t->state = SS_STATE_TIMED_WAITING;
    t->state_detail = "sleeping";
    t->truncated = true;
    ss_frame f = {0};
    f.fn = ss_funcinfo_intern("global", "clock_nanosleep", "libc.so.6", NULL, SS_FRAME_NATIVE);
    ss_round_builder_add_frame(b, &f);
    f.fn = ss_funcinfo_intern("global", "sleep_forever", "stackshot-demo.c", NULL, SS_FRAME_NATIVE);
    f.line = 77;
    ss_round_builder_add_frame(b, &f);
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    ss_buf out;
    ss_buf_init(&out);
    ss_text_format_thread(r, &r->threads[0], &out);
    assert_string_equal(out.data,
                        "\"sleeper\" #3 prio=0 os_prio=-5 cpu=1.23ms elapsed=61.50s "
                        "tid=0x00007f0011223344 nid=0x1092 sleeping\n"
                        "   native.Thread.State: TIMED_WAITING (sleeping)\n"
                        "\tat global.clock_nanosleep(libc.so.6)\n"
                        "\tat global.sleep_forever(stackshot-demo.c:77)\n"
                        "\tat stackshot.truncated(STACKSHOT_MAX_DEPTH:2)\n");
    ss_buf_reset(&out);
    ss_text_format_round_header(r, &out);
    char expect[160];
    snprintf(expect, sizeof expect,
             "Full thread dump stackshot round 1 at 2023-11-14T22:13:20.000Z (pid %d, 1 threads, 0 skipped)\n\n",
             (int)ss_process()->pid);
    assert_string_equal(out.data, expect);
    ss_buf_free(&out);
    ss_round_unref(r);
}

/* The round header's time stamp, formatted without gmtime_r (whose tzset
 * mallocs on the exporter's thread): leap days, century rules, epoch. */
static void test_utc_format(void **state) {
    (void)state;
    static const struct {
        uint64_t secs;
        const char *text;
    } cases[] = {
        {0, "1970-01-01T00:00:00"},          {951782400, "2000-02-29T00:00:00"},
        {1735689599, "2024-12-31T23:59:59"}, {4107542400, "2100-03-01T00:00:00"},
        {1709251199, "2024-02-29T23:59:59"}, {1700000000, "2023-11-14T22:13:20"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[20];
        ss_utc_format(cases[i].secs, out);
        assert_string_equal(out, cases[i].text);
    }
}

int main(void) {
    ss_process_refresh();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_java_thread_matches_jstack),
        cmocka_unit_test(test_native_thread_and_truncation),
        cmocka_unit_test(test_utc_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
