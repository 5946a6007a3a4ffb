/* test_secrets_options.c: tokens given in the JVMTI option string (or the
 * environment) never appear in the agent's lines, at debug level, whatever
 * the mistakes around them: the option parser, the typed readers that
 * print a bad value, the header parser and the endpoint messages. Each
 * case checks the agent did print something (the error path ran) and
 * that no "SECRET" is in it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/config.h"
#include "agent/log.h"
#include "exporters/otlp/otlp.h"
#include "tests/unit/stderr_capture.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void unset_all(void) {
    static const char *const vars[] = {
        "SPLUNK_PROFILER_ENABLED", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
        "OTEL_EXPORTER_OTLP_ENDPOINT", "SPLUNK_PROFILER_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_INSECURE", "STACKSHOT_LOG_LEVEL", NULL};
    for (const char *const *v = vars; *v; v++)
        unsetenv(*v);
}

/* Apply an option string, load the core config and the LOGS endpoint with
 * stderr captured; fails if a secret shows, or if nothing was printed
 * when `expect_line` (a fragment of the line the mistake must give). */
static void check(const char *options, const char *expect_line) {
    unset_all();
    capture cap;
    capture_begin(&cap);
    ss_config_set_options(options);
    ss_config c;
    ss_config_load(&c);
    ss_log_set_level(SS_LOG_DEBUG);
    ss_otlp_endpoint ep;
    int rc = ss_otlp_endpoint_load(&ep, "LOGS");
    ss_log(SS_LOG_DEBUG, "endpoint %s target %s", ep.url, ep.target);
    capture_end(&cap);
    assert_true(rc == 0 || rc == -EINVAL); /* -EINVAL: a bad endpoint, the exporter off */
    if (rc == 0)
        ss_otlp_endpoint_free(&ep);
    ss_config_set_options(NULL);
    if (strstr(cap.text, "SECRET"))
        fail_msg("options \"%s\" leaked a secret:\n%s", options, cap.text);
    if (expect_line && !strstr(cap.text, expect_line))
        fail_msg("options \"%s\": expected a line with \"%s\", got:\n%s", options,
                 expect_line, cap.text);
}

static void test_headers_in_options(void **state) {
    (void)state;
    check("STACKSHOT_LOG_LEVEL=debug,OTEL_EXPORTER_OTLP_HEADERS=x-sf-token=SECRET1",
          "endpoint ");
    check("OTEL_EXPORTER_OTLP_HEADERS=x-sf-token=SECRET2%zz",
          "header item 1 has a bad percent-escape");
    check("OTEL_EXPORTER_OTLP_HEADERS=x-sf-token=SECRET3,SECRET4", "header item 2 has no '='");
    check("OTEL_EXPORTER_OTLP_LOGS_HEADERS=Bad Key=SECRET5", "header item 1 has an empty key");
    check("OTEL_EXPORTER_OTLP_HEADERS=x-sf-token=SECRET6%0D%0Ax: y",
          "header item 1 has a value with bytes gRPC metadata does not allow");
}

/* A typed key's bad value is printed, but a setting swallowed after its
 * comma is not (its value may be a token). */
static void test_swallowed_setting(void **state) {
    (void)state;
    check("SPLUNK_PROFILER_ENABLED=true,OTEL_EXPORTER_OTLP_HEADERS x-sf-token=SECRET7",
          "SPLUNK_PROFILER_ENABLED=true,... (rest not shown): only true turns the agent on");
    check("OTEL_EXPORTER_OTLP_INSECURE=yes please,x-sf-token=SECRET8",
          "OTEL_EXPORTER_OTLP_INSECURE=yes please,... (rest not shown)");
    /* an unknown KEY is named, its value never */
    check("OTEL_EXPORTER_OTLP_HEADERS=a=b,TOKEN=SECRET9", "option 'TOKEN': unknown key");
}

/* Endpoints: credentials and query strings are not shown. */
static void test_endpoint_tokens(void **state) {
    (void)state;
    check("OTEL_EXPORTER_OTLP_ENDPOINT=https://user:SECRET10@collector:4317",
          "OTEL_EXPORTER_OTLP_ENDPOINT=https://***@collector:4317: not an endpoint");
    check("OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317/?token=SECRET11",
          "endpoint http://collector:4317/ target collector:4317");
    check("SPLUNK_PROFILER_LOGS_ENDPOINT=https://collector/x#SECRET12",
          "endpoint https://collector/x target collector:443");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_in_options),
        cmocka_unit_test(test_swallowed_setting),
        cmocka_unit_test(test_endpoint_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
