/* test_qb_dumps.c: the dumps exporter's pieces without a collector:
 * diagtools' addressing (spec §1.2 table), names and paths (§2.1, §2.3),
 * Go durations and booleans, the command mailbox, and the td text of a
 * round in both jstack spellings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "exporters/qubership/dumps.h"

static void test_diag_base(void **state) {
    (void)state;
    char out[512];
    /* the spec's table (§1.2) */
    qb_diag_base(NULL, false, "myns", out, sizeof out);
    assert_string_equal(out, "http://nc-diagnostic-agent.myns:8080");
    qb_diag_base("nc-diagnostic-agent", true, "myns", out, sizeof out);
    assert_string_equal(out, "https://nc-diagnostic-agent.myns:8443");
    qb_diag_base("http://localhost:8081", false, "myns", out, sizeof out);
    assert_string_equal(out, "http://localhost.myns:8081");
    qb_diag_base("http://127.0.0.1:18080", false, "myns", out, sizeof out);
    assert_string_equal(out, "http://127.0.0.1:18080");
    /* trimmed; a dotted name gets its port but no namespace */
    qb_diag_base("  collector.example ", false, "ns", out, sizeof out);
    assert_string_equal(out, "http://collector.example:8080");
    /* the other scheme than TLS_ENABLED says: used as it is */
    qb_diag_base("https://x:1", false, "ns", out, sizeof out);
    assert_string_equal(out, "https://x:1");
    qb_diag_base("http://x", true, "ns", out, sizeof out);
    assert_string_equal(out, "http://x");
    /* a port alone: "http://:8080" ends in ".:\d+" (the '/'), gets the
     * namespace like any dotless name, as in diagtools */
    qb_diag_base(":8080", false, "ns", out, sizeof out);
    assert_string_equal(out, "http://.ns:8080");
}

static void test_names_and_paths(void **state) {
    (void)state;
    char out[512];
    time_t t = 1754557619; /* 2025-08-07T09:06:59Z */
    qb_dump_name(t, ".td.txt", out, sizeof out);
    assert_string_equal(out, "20250807T090659.td.txt");
    qb_diag_url("http://h.ns:8080", "ns", t, "orders-7d9f8b6c5d-abcde_1754550000000",
                "20250807T090659.td.txt", out, sizeof out);
    assert_string_equal(out, "http://h.ns:8080/diagnostic/ns/2025/08/07/09/06/59/"
                             "orders-7d9f8b6c5d-abcde_1754550000000/20250807T090659.td.txt");
    /* zero-padded in January at midnight */
    qb_diag_url("b", "n", 1704067201, "p-1", "x.top.txt", out, sizeof out);
    assert_string_equal(out, "b/diagnostic/n/2024/01/01/00/00/01/p-1/x.top.txt");
}

static void test_durations(void **state) {
    (void)state;
    uint64_t ms;
    assert_int_equal(qb_go_duration_ms("1m", &ms), 0);
    assert_int_equal(ms, 60000);
    assert_int_equal(qb_go_duration_ms("1m30s", &ms), 0);
    assert_int_equal(ms, 90000);
    assert_int_equal(qb_go_duration_ms("1.5h", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(qb_go_duration_ms("500ms", &ms), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(qb_go_duration_ms("2h45m", &ms), 0);
    assert_int_equal(ms, 9900000);
    assert_int_equal(qb_go_duration_ms("90", &ms), 0); /* integer seconds */
    assert_int_equal(ms, 90000);
    assert_int_equal(qb_go_duration_ms("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(qb_go_duration_ms("1500us", &ms), 0);
    assert_int_equal(ms, 2); /* rounded */
    assert_int_equal(qb_go_duration_ms("1", &ms), 0);
    assert_int_equal(ms, 1000);
    assert_int_equal(qb_go_duration_ms("abc", &ms), -EINVAL);
    assert_int_equal(qb_go_duration_ms("10", &ms), 0);
    assert_int_equal(qb_go_duration_ms("10x", &ms), -EINVAL);
    assert_int_equal(qb_go_duration_ms("5 m", &ms), -EINVAL);
    assert_int_equal(qb_go_duration_ms("", &ms), -EINVAL);
    assert_int_equal(qb_go_duration_ms("-1m", &ms), -EINVAL);
    assert_int_equal(qb_go_duration_ms("1e400h", &ms), -EINVAL);
    assert_int_equal(qb_parse_bool("false"), 0);
    assert_int_equal(qb_parse_bool("F"), 0);
    assert_int_equal(qb_parse_bool("True"), 1);
    assert_int_equal(qb_parse_bool("yes"), -1); /* not Go's */
}

static void test_commands(void **state) {
    (void)state;
    uint8_t a[16] = {1}, b[16] = {2}, c[16] = {3}, d[16] = {4};
    qb_command out[8];
    /* nobody to run them */
    assert_false(qb_commands_post(a, "td", 1));
    qb_commands_serve(true);
    assert_false(qb_commands_post(a, "gc", 1)); /* not a command */
    assert_true(qb_commands_post(a, "td", 1));
    assert_true(qb_commands_post(b, "heap", 1));
    assert_true(qb_commands_post(c, "top", 1));
    assert_int_equal(qb_commands_results(1, out, 8), 0); /* none done yet */
    assert_int_equal(qb_commands_take(out, 8), 3);
    assert_int_equal(out[0].what, QB_CMD_TD);
    assert_int_equal(out[1].what, QB_CMD_HEAP);
    assert_int_equal(qb_commands_take(out, 8), 0); /* taken once */
    qb_commands_done(a, true);
    qb_commands_done(b, false);
    assert_int_equal(qb_commands_results(1, out, 8), 2);
    assert_memory_equal(out[0].id, a, 16);
    assert_true(out[0].ok);
    assert_false(out[1].ok);
    assert_int_equal(qb_commands_results(1, out, 8), 0); /* told once */
    /* a command of a connection since replaced: its result is dropped */
    qb_commands_done(c, true);
    assert_true(qb_commands_post(d, "td", 2));
    assert_int_equal(qb_commands_results(2, out, 8), 0);
    assert_int_equal(qb_commands_results(1, out, 8), 0); /* c was discarded */
    /* the exporter stops: what waits fails */
    qb_commands_serve(false);
    assert_int_equal(qb_commands_results(2, out, 8), 1);
    assert_memory_equal(out[0].id, d, 16);
    assert_false(out[0].ok);
    /* a forked child starts with an empty box */
    qb_commands_serve(true);
    assert_true(qb_commands_post(a, "td", 3));
    pid_t pid = fork();
    if (pid == 0)
        _exit(qb_commands_take(out, 8) == 0 ? 0 : 1);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(qb_commands_take(out, 8), 1);
    qb_commands_serve(false);
}

static ss_round *one_round(ss_runtime rt) {
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, 1754557619000000000ull, 1000, rt);
    ss_thread_sample *t = ss_round_builder_add_thread(b, "main");
    t->number = 1;
    t->nid = 4242;
    t->tid = 0x7f00deadbeefull;
    t->prio = 5;
    t->cpu_ns = 12340000;
    t->elapsed_ns = 3500000000ull;
    t->state = SS_STATE_TIMED_WAITING;
    t->state_detail = "sleeping";
    t->status = "waiting on condition";
    ss_frame f = {.fn = ss_funcinfo_intern("java.lang.Thread", "sleep", "Native Method",
                                           "java.base@17.0.15", SS_FRAME_JAVA)};
    ss_round_builder_add_frame(b, &f);
    ss_thread_sample *v = ss_round_builder_add_thread(b, "virtual");
    v->is_virtual = true;
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

static void test_td(void **state) {
    (void)state;
    ss_process_info *p = ss_process_mut();
    snprintf(p->runtime_banner, sizeof p->runtime_banner,
             "OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing)");
    snprintf(p->runtime_version, sizeof p->runtime_version, "17.0.15+6-Debian-1deb12u1");
    setenv("TZ", "UTC", 1);
    tzset();
    ss_round *r = one_round(SS_RUNTIME_JVM);
    ss_buf b;
    ss_buf_init(&b);
    assert_int_equal(qb_td_format(r, &b), 0);
    ss_buf_putc(&b, '\0');
    const char *want17 =
        "2025-08-07 09:06:59\n"
        "Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, "
        "sharing):\n\n"
        "\"main\" #1 prio=5 os_prio=0 cpu=12.34ms elapsed=3.50s tid=0x00007f00deadbeef "
        "nid=0x1092 waiting on condition\n"
        "   java.lang.Thread.State: TIMED_WAITING (sleeping)\n"
        "\tat java.lang.Thread.sleep(java.base@17.0.15/Native Method)\n\n";
    assert_string_equal(b.data, want17); /* the virtual thread left out */
    /* JDK 21 and later: "#<id> [<os tid>]" and a decimal nid */
    snprintf(p->runtime_version, sizeof p->runtime_version, "25.0.3+9-LTS");
    p->dump_os_tid = true; /* what jvmti/heapdump.c derives from that version */
    ss_buf_reset(&b);
    qb_td_format(r, &b);
    ss_buf_putc(&b, '\0');
    assert_non_null(strstr(b.data, "\"main\" #1 [4242] prio=5 os_prio=0 cpu=12.34ms "
                                   "elapsed=3.50s tid=0x00007f00deadbeef nid=4242 waiting on "
                                   "condition\n   java.lang.Thread.State: TIMED_WAITING"));
    ss_buf_free(&b);
    ss_round_unref(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_diag_base),
        cmocka_unit_test(test_names_and_paths),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_td),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
