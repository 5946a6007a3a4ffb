/* test_config.c: every core key, valid and invalid values, the error lines,
 * and the JVMTI option string. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/log.h"
#include "agent/ms_keys.h"
#include "tests/unit/stderr_capture.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char *const core_keys[] = {
    "SPLUNK_PROFILER_ENABLED",     "SPLUNK_PROFILER_CALL_STACK_INTERVAL",
    "SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS", "STACKSHOT_OUTPUT_DIR",
    "STACKSHOT_EXPORTERS",         "STACKSHOT_MAX_DEPTH",
    "STACKSHOT_MAX_MEMORY",        "STACKSHOT_LOG_LEVEL",
    "STACKSHOT_SIGNAL",            "STACKSHOT_SHUTDOWN_TIMEOUT",
    "STACKSHOT_SIGNAL_TIMEOUT",    "TMPDIR",
};

static int clean_env(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof core_keys / sizeof core_keys[0]; i++)
        unsetenv(core_keys[i]);
    ss_config_set_options(NULL);
    return 0;
}

/* Load the config with stderr captured; returns the number of lines printed. */
static int load(ss_config *c, capture *cap) {
    capture_begin(cap);
    ss_config_load(c);
    return capture_end(cap);
}

static void test_defaults(void **state) {
    (void)state;
    ss_config c;
    capture cap;
    assert_int_equal(load(&c, &cap), 0);
    assert_false(c.enabled);
    assert_int_equal(c.interval_ms, 1000);
    assert_false(c.include_internal);
    assert_int_equal(c.exporters, ss_exporter_bit("otlp_logs"));
    assert_int_equal(c.max_depth, 1024);
    assert_int_equal(c.max_memory, 64u << 20);
    assert_int_equal(c.log_level, SS_LOG_INFO);
    assert_int_equal(c.signal, SIGRTMAX - 3);
    assert_int_equal(c.shutdown_ms, 2000);
    assert_int_equal(c.answer_ms, 100);
    /* a template: the effective uid is filled in when a file is created */
    assert_string_equal(c.output_dir, "/tmp/stackshot-%u");
}

static void test_valid_values(void **state) {
    (void)state;
    setenv("SPLUNK_PROFILER_ENABLED", "TRUE", 1);
    setenv("SPLUNK_PROFILER_CALL_STACK_INTERVAL", " 250", 1);
    setenv("SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS", "yes", 1);
    setenv("STACKSHOT_OUTPUT_DIR", "/var/tmp/out", 1);
    setenv("STACKSHOT_EXPORTERS", "text, qubership,otlp_logs", 1);
    setenv("STACKSHOT_MAX_DEPTH", "64", 1);
    setenv("STACKSHOT_MAX_MEMORY", "16MiB", 1);
    setenv("STACKSHOT_LOG_LEVEL", "debug", 1);
    setenv("STACKSHOT_SIGNAL", "SIGPROF", 1);
    setenv("STACKSHOT_SHUTDOWN_TIMEOUT", "500", 1);
    setenv("STACKSHOT_SIGNAL_TIMEOUT", "20", 1);
    ss_config c;
    capture cap;
    assert_int_equal(load(&c, &cap), 0);
    assert_true(c.enabled);
    assert_int_equal(c.interval_ms, 250);
    assert_true(c.include_internal);
    assert_string_equal(c.output_dir, "/var/tmp/out");
    /* qubership_dumps runs along with qubership (its table row's .with) */
    assert_int_equal(c.exporters, ss_exporter_bit("text") | ss_exporter_bit("qubership") |
                                      ss_exporter_bit("otlp_logs") |
                                      ss_exporter_bit("qubership_dumps"));
    assert_int_equal(c.max_depth, 64);
    assert_int_equal(c.max_memory, 16u << 20);
    assert_int_equal(c.log_level, SS_LOG_DEBUG);
    assert_int_equal(c.signal, SIGPROF);
    assert_int_equal(c.shutdown_ms, 500);
    assert_int_equal(c.answer_ms, 20);
    ss_log_set_level(SS_LOG_INFO);
}

/* One bad value: exactly one line, in the documented shape, and the default. */
static void expect_one_line(const char *key, const char *value, const char *line) {
    setenv(key, value, 1);
    ss_config c;
    capture cap;
    int lines = load(&c, &cap);
    if (lines != 1 || strstr(cap.text, line) == NULL)
        fail_msg("%s=%s printed %d lines:\n%s\nexpected: %s", key, value, lines,
                 cap.text, line);
    unsetenv(key);
}

static void test_bad_values(void **state) {
    (void)state;
    expect_one_line("SPLUNK_PROFILER_ENABLED", "maybe",
                    "stackshot: SPLUNK_PROFILER_ENABLED=maybe: only true turns the agent on; the agent stays off\n");
    expect_one_line("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "fast",
                    "stackshot: SPLUNK_PROFILER_CALL_STACK_INTERVAL=fast: not an integer; using 1000\n");
    expect_one_line("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "1",
                    "stackshot: SPLUNK_PROFILER_CALL_STACK_INTERVAL=1: out of range [5, 3600000]; using 1000\n");
    expect_one_line("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "99999999999999999999",
                    "out of range");
    expect_one_line("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "100ms", "not an integer; using 1000");
    expect_one_line("STACKSHOT_MAX_DEPTH", "0",
                    "stackshot: STACKSHOT_MAX_DEPTH=0: out of range [1, 65536]; using 1024\n");
    expect_one_line("STACKSHOT_MAX_MEMORY", "lots", "not a size (bytes, or with K, M, G); using 67108864 bytes");
    expect_one_line("STACKSHOT_MAX_MEMORY", "-5M", "negative size");
    expect_one_line("STACKSHOT_MAX_MEMORY", "1K", "out of range [1048576, 17179869184] bytes");
    expect_one_line("STACKSHOT_LOG_LEVEL", "loud",
                    "STACKSHOT_LOG_LEVEL=loud: not a log level (off, error, warn, info, debug); using info");
    expect_one_line("STACKSHOT_SIGNAL", "SIGFOO", "STACKSHOT_SIGNAL=SIGFOO: not a signal");
    expect_one_line("STACKSHOT_SIGNAL", "SIGSEGV",
                    "STACKSHOT_SIGNAL=SIGSEGV: that signal stops, kills or reports errors in the process; using SIGRTMAX-3");
    expect_one_line("STACKSHOT_EXPORTERS", "text,carrier-pigeon",
                    "unknown exporter 'carrier-pigeon'");
    expect_one_line("STACKSHOT_EXPORTERS", "pigeon", "unknown exporter 'pigeon'");
    expect_one_line("STACKSHOT_SHUTDOWN_TIMEOUT", "-1", "out of range [0, 60000]; using 2000");
}

static void test_bad_values_fall_back(void **state) {
    (void)state;
    setenv("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "fast", 1);
    setenv("STACKSHOT_EXPORTERS", "text,pigeon", 1);
    setenv("STACKSHOT_SIGNAL", "SIGKILL", 1);
    ss_config c;
    capture cap;
    assert_int_equal(load(&c, &cap), 3);
    assert_int_equal(c.interval_ms, 1000);
    assert_int_equal(c.exporters, ss_exporter_bit("text"));
    assert_int_equal(c.signal, SIGRTMAX - 3);
}

static void test_exporters_none(void **state) {
    (void)state;
    setenv("STACKSHOT_EXPORTERS", "none", 1);
    ss_config c;
    capture cap;
    assert_int_equal(load(&c, &cap), 0);
    assert_int_equal(c.exporters, 0);
}

/* Only true turns the agent on; other spellings are off with one line;
 * OTEL_SDK_DISABLED=true overrides it (agent/enabled.c). */
static void test_enabled_values(void **state) {
    (void)state;
    static const struct {
        const char *enabled, *sdk_disabled;
        bool on;
        const char *line; /* NULL: no line */
    } cases[] = {
        {"true", NULL, true, NULL},
        {" TRUE ", NULL, true, NULL},
        {"True", "false", true, NULL},
        {"false", NULL, false, NULL},
        {"", NULL, false, NULL},
        {"yes", NULL, false, "SPLUNK_PROFILER_ENABLED=yes: only true turns the agent on; the agent stays off"},
        {"1", NULL, false, "SPLUNK_PROFILER_ENABLED=1: only true turns the agent on"},
        {"on", NULL, false, "SPLUNK_PROFILER_ENABLED=on: only true turns the agent on"},
        {"true", "TRUE", false, "OTEL_SDK_DISABLED=true: OpenTelemetry is disabled in this process"},
        {"true", "1", true, NULL}, /* OTel booleans: only true is true */
        {"false", "true", false, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("SPLUNK_PROFILER_ENABLED", cases[i].enabled, 1);
        if (cases[i].sdk_disabled)
            setenv("OTEL_SDK_DISABLED", cases[i].sdk_disabled, 1);
        else
            unsetenv("OTEL_SDK_DISABLED");
        setenv("STACKSHOT_EXPORTERS", "text", 1);
        ss_config c;
        capture cap;
        int lines = load(&c, &cap);
        if (c.enabled != cases[i].on || lines != (cases[i].line ? 1 : 0) ||
            (cases[i].line && !strstr(cap.text, cases[i].line)))
            fail_msg("ENABLED=%s OTEL_SDK_DISABLED=%s: enabled %d, %d lines: %s", cases[i].enabled,
                     cases[i].sdk_disabled ? cases[i].sdk_disabled : "(unset)", c.enabled, lines,
                     cap.text);
    }
    unsetenv("OTEL_SDK_DISABLED");
}

/* A mistake in what to send, or where, never sends to a default: the
 * exporter is left out, and with nothing left the agent stays off. */
static void test_mistakes_send_nothing(void **state) {
    (void)state;
    setenv("SPLUNK_PROFILER_ENABLED", "true", 1);
    ss_config c;
    capture cap;
    setenv("STACKSHOT_EXPORTERS", "otlp_log", 1); /* a typo */
    assert_int_equal(load(&c, &cap), 1);
    assert_non_null(strstr(cap.text, "no exporter left: the agent stays off"));
    assert_int_equal(c.exporters, 0);
    assert_true(c.nothing_to_run);
    assert_false(c.enabled);

    unsetenv("STACKSHOT_EXPORTERS"); /* the default, otlp_logs, to a bad endpoint */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "htp:/ /x", 1);
    assert_int_equal(load(&c, &cap), 2);
    assert_non_null(strstr(cap.text, "OTEL_EXPORTER_OTLP_ENDPOINT=htp:/ /x: not an endpoint"));
    assert_non_null(strstr(cap.text, "the otlp_logs exporter is off: nothing is sent"));
    assert_non_null(strstr(cap.text, "no exporter has a usable destination"));
    assert_false(c.enabled);

    setenv("STACKSHOT_EXPORTERS", "text,otlp_logs", 1); /* text goes on alone */
    assert_int_equal(load(&c, &cap), 1);
    assert_int_equal(c.exporters, ss_exporter_bit("text"));
    assert_true(c.enabled);
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");

    setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc/web", 1);
    assert_int_equal(load(&c, &cap), 1);
    assert_non_null(strstr(cap.text, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc/web: not a protocol"));
    assert_int_equal(c.exporters, ss_exporter_bit("text"));
    unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL");

    setenv("STACKSHOT_EXPORTERS", "otlp_logs", 1);
    setenv("SPLUNK_REALM", "US0!", 1);
    assert_int_equal(load(&c, &cap), 2);
    assert_non_null(strstr(cap.text, "SPLUNK_REALM=US0!: not a realm name"));
    assert_false(c.enabled);
    unsetenv("SPLUNK_REALM");

    /* a good endpoint: on, no line */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317", 1);
    assert_int_equal(load(&c, &cap), 0);
    assert_int_equal(c.exporters, ss_exporter_bit("otlp_logs"));
    assert_true(c.enabled);
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv("STACKSHOT_EXPORTERS");
}

static void test_signal_names(void **state) {
    (void)state;
    assert_int_equal(ss_parse_signal("SIGPROF"), SIGPROF);
    assert_int_equal(ss_parse_signal("prof"), SIGPROF);
    assert_int_equal(ss_parse_signal("SIGRTMIN"), SIGRTMIN);
    assert_int_equal(ss_parse_signal("SIGRTMIN+5"), SIGRTMIN + 5);
    assert_int_equal(ss_parse_signal("RTMAX-3"), SIGRTMAX - 3);
    assert_int_equal(ss_parse_signal("40"), 40);
    assert_int_equal(ss_parse_signal("SIGRTMIN-1"), -1);
    assert_int_equal(ss_parse_signal("SIGRTMAX+1"), -1);
    assert_int_equal(ss_parse_signal("SIGRTMIN+99"), -1);
    assert_int_equal(ss_parse_signal("0"), -1);
    assert_int_equal(ss_parse_signal(""), -1);
}

static void test_output_dir_follows_tmpdir(void **state) {
    (void)state;
    setenv("TMPDIR", "/var/tmp", 1);
    ss_config c;
    capture cap;
    load(&c, &cap);
    assert_string_equal(c.output_dir, "/var/tmp/stackshot-%u");
}

/* The JVMTI option string wins over the environment; commas inside a
 * value (OTEL headers) survive; unknown keys get one line each. */
static void test_options_override_env(void **state) {
    (void)state;
    setenv("SPLUNK_PROFILER_CALL_STACK_INTERVAL", "300", 1);
    capture cap;
    capture_begin(&cap);
    int problems = ss_config_set_options(
        "SPLUNK_PROFILER_ENABLED=true,SPLUNK_PROFILER_CALL_STACK_INTERVAL=50,"
        "OTEL_EXPORTER_OTLP_HEADERS=x-sf-token=abc,other=1,STACKSHOT_MAX_DEPTH=32");
    assert_int_equal(capture_end(&cap), 0);
    assert_int_equal(problems, 0);
    ss_config c;
    assert_int_equal(load(&c, &cap), 0);
    assert_true(c.enabled);
    assert_int_equal(c.interval_ms, 50);
    assert_int_equal(c.max_depth, 32);
    assert_string_equal(ss_config_raw("OTEL_EXPORTER_OTLP_HEADERS"), "x-sf-token=abc,other=1");
    ss_config_set_options(NULL);
    assert_string_equal(ss_config_raw("SPLUNK_PROFILER_CALL_STACK_INTERVAL"), "300");
}

static void test_options_errors(void **state) {
    (void)state;
    capture cap;
    capture_begin(&cap);
    /* "bogus" is not KEY=value-shaped, so it stays in the value before it;
     * NOPE=1 is a pair with an unknown key: one line, ignored. */
    int problems = ss_config_set_options("SPLUNK_PROFILER_ENABLED=true,bogus,NOPE=1");
    int lines = capture_end(&cap);
    assert_int_equal(problems, 1);
    assert_int_equal(lines, 1);
    assert_string_equal(cap.text, "stackshot: option 'NOPE': unknown key; ignoring it\n");
    assert_string_equal(ss_config_raw("SPLUNK_PROFILER_ENABLED"), "true,bogus");
    ss_config c;
    assert_int_equal(load(&c, &cap), 1);
    assert_non_null(strstr(cap.text, "SPLUNK_PROFILER_ENABLED=true,bogus: only true turns the agent on"));
    assert_false(c.enabled);

    capture_begin(&cap);
    problems = ss_config_set_options("=2,justtext,,SPLUNK_PROFILER_ENABLED=1");
    lines = capture_end(&cap);
    assert_int_equal(problems, 1);
    assert_int_equal(lines, 1);
    assert_non_null(strstr(cap.text, "stackshot: option '=2,justtext,': expected key=value; ignoring it\n"));
    assert_string_equal(ss_config_raw("SPLUNK_PROFILER_ENABLED"), "1");

    /* lower-case known keys are accepted as well */
    assert_int_equal(ss_config_set_options("splunk_profiler_enabled=true"), 0);
    assert_string_equal(ss_config_raw("SPLUNK_PROFILER_ENABLED"), "true");
    ss_config_set_options(NULL);
}

/* The loader reads the interval and the shutdown timeout before the core
 * is opened, with the parser the configuration uses (agent/ms_keys.c): a
 * value the configuration takes is the loader's, one it refuses (and
 * says so) is the default for both. */
static void test_loader_agrees(void **state) {
    (void)state;
    static const char *values[] = {" 250 ", "+7", "5", "4", "3600000", "3600001", "5x",
                                   "", "  ", "-5", "99999999999999999999", "0x10", "1e3"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        setenv(SS_INTERVAL_KEY, values[i], 1);
        ss_config cfg;
        ss_config_load(&cfg);
        uint32_t ms = SS_INTERVAL_DEFAULT_MS;
        int rc = ss_ms_parse(values[i], SS_INTERVAL_MIN_MS, SS_INTERVAL_MAX_MS, &ms);
        assert_int_equal(rc == 0 ? ms : SS_INTERVAL_DEFAULT_MS, cfg.interval_ms);
    }
    uint32_t ms = 0;
    assert_int_equal(ss_ms_parse(" 250 ", 5, 3600000, &ms), 0);
    assert_int_equal(ms, 250);
    assert_int_equal(ss_ms_parse(NULL, 5, 10, &ms), -ENOENT);
    assert_int_equal(ss_ms_parse(" ", 5, 10, &ms), -ENOENT);
    assert_int_equal(ss_ms_parse("5x", 5, 10, &ms), -EINVAL);
    assert_int_equal(ss_ms_parse("11", 5, 10, &ms), -ERANGE);
    assert_int_equal(ss_ms_parse("99999999999999999999", 0, 60000, &ms), -ERANGE);
    assert_int_equal(ms, 250);
}

static void test_typed_readers(void **state) {
    (void)state;
    setenv("STACKSHOT_PROFILES_PERIOD", "12", 1);
    assert_int_equal(ss_config_int("STACKSHOT_PROFILES_PERIOD", 60, 1, 3600), 12);
    setenv("STACKSHOT_PROFILES_PERIOD", "  ", 1);
    assert_int_equal(ss_config_int("STACKSHOT_PROFILES_PERIOD", 60, 1, 3600), 60);
    unsetenv("STACKSHOT_PROFILES_PERIOD");
    assert_string_equal(ss_config_str("STACKSHOT_PROFILES_VERSION", "v1development"),
                        "v1development");
    setenv("STACKSHOT_MAX_MEMORY", "2g", 1);
    assert_int_equal(ss_config_size("STACKSHOT_MAX_MEMORY", 1, 1, UINT64_MAX), 2ull << 30);
    setenv("STACKSHOT_MAX_MEMORY", "99999999999G", 1);
    capture cap;
    capture_begin(&cap);
    assert_int_equal(ss_config_size("STACKSHOT_MAX_MEMORY", 7, 1, UINT64_MAX), 7);
    assert_int_equal(capture_end(&cap), 1);
    unsetenv("STACKSHOT_MAX_MEMORY");
    assert_true(ss_config_known_key("otel_exporter_otlp_headers"));
    assert_false(ss_config_known_key("STACKSHOT_NOPE"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clean_env),
        cmocka_unit_test_setup(test_valid_values, clean_env),
        cmocka_unit_test_setup(test_bad_values, clean_env),
        cmocka_unit_test_setup(test_bad_values_fall_back, clean_env),
        cmocka_unit_test_setup(test_exporters_none, clean_env),
        cmocka_unit_test_setup(test_enabled_values, clean_env),
        cmocka_unit_test_setup(test_mistakes_send_nothing, clean_env),
        cmocka_unit_test_setup(test_signal_names, clean_env),
        cmocka_unit_test_setup(test_output_dir_follows_tmpdir, clean_env),
        cmocka_unit_test_setup(test_options_override_env, clean_env),
        cmocka_unit_test_setup(test_options_errors, clean_env),
        cmocka_unit_test_setup(test_typed_readers, clean_env),
        cmocka_unit_test_setup(test_loader_agrees, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
