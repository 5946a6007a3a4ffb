/* test_otlp_config.c: OTLP endpoint resolution, header parsing, resource
 * attributes with percent-decoding, and the resource this process gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "proc/process.h"
#include "agent/version.h"
#include "exporters/otlp/otlp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const vars[] = {
    "SPLUNK_PROFILER_LOGS_ENDPOINT", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_LOGS_INSECURE", "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
    "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", NULL,
};

static int clean_env(void **state) {
    (void)state;
    for (const char *const *v = vars; *v; v++)
        unsetenv(*v);
    ss_process_refresh();
    return 0;
}

/* ---- URLs ---------------------------------------------------------- */

static void test_parse_url(void **state) {
    (void)state;
    char t[256];
    bool tls = true;
    assert_int_equal(ss_otlp_parse_url("http://localhost:4317", false, t, sizeof t, &tls), 0);
    assert_string_equal(t, "localhost:4317");
    assert_false(tls);
    assert_int_equal(ss_otlp_parse_url("https://ingest.us0.signalfx.com", true, t, sizeof t,
                                       &tls), 0);
    assert_string_equal(t, "ingest.us0.signalfx.com:443");
    assert_true(tls); /* the scheme wins over INSECURE */
    assert_int_equal(ss_otlp_parse_url("collector:4317", false, t, sizeof t, &tls), 0);
    assert_string_equal(t, "collector:4317");
    assert_true(tls); /* no scheme, not insecure: TLS */
    assert_int_equal(ss_otlp_parse_url("collector:4317", true, t, sizeof t, &tls), 0);
    assert_false(tls);
    assert_int_equal(ss_otlp_parse_url("http://[::1]:9999/ignored/path", false, t, sizeof t,
                                       &tls), 0);
    assert_string_equal(t, "[::1]:9999");
    assert_int_equal(ss_otlp_parse_url("http://h", false, t, sizeof t, &tls), 0);
    assert_string_equal(t, "h:4317");
    assert_int_equal(ss_otlp_parse_url("http://", false, t, sizeof t, &tls), -EINVAL);
    assert_int_equal(ss_otlp_parse_url("http://h:99999", false, t, sizeof t, &tls), -EINVAL);
    assert_int_equal(ss_otlp_parse_url("http://h:x1", false, t, sizeof t, &tls), -EINVAL);
    assert_int_equal(ss_otlp_parse_url("ftp://h:1", false, t, sizeof t, &tls), -EINVAL);
    assert_int_equal(ss_otlp_parse_url("http://bad host:1", false, t, sizeof t, &tls), -EINVAL);
    assert_int_equal(ss_otlp_parse_url(" http://h:2 \n", false, t, sizeof t, &tls), 0);
    assert_string_equal(t, "h:2");
    assert_int_equal(ss_otlp_parse_url("http://ba$d:1", false, t, sizeof t, &tls), -EINVAL);
}

static void test_endpoint_precedence(void **state) {
    (void)state;
    ss_otlp_endpoint ep;
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_string_equal(ep.url, SS_OTLP_DEFAULT_ENDPOINT);
    assert_string_equal(ep.target, "localhost:4317");
    assert_false(ep.tls);
    assert_int_equal(ep.timeout_ms, 10000);
    assert_int_equal(ep.compression, SS_OTLP_COMPRESS_NONE);
    ss_otlp_endpoint_free(&ep);

    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:1", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_string_equal(ep.target, "general:1");
    ss_otlp_endpoint_free(&ep);
    setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "https://logs:2", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_string_equal(ep.target, "logs:2");
    assert_true(ep.tls);
    assert_string_equal(ep.url_key, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT");
    ss_otlp_endpoint_free(&ep);
    setenv("SPLUNK_PROFILER_LOGS_ENDPOINT", "http://splunk:3", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_string_equal(ep.target, "splunk:3");
    ss_otlp_endpoint_free(&ep);
    /* The Splunk variable is for logs only. */
    assert_int_equal(ss_otlp_endpoint_load(&ep, "PROFILES"), 0);
    assert_string_equal(ep.target, "general:1");
    ss_otlp_endpoint_free(&ep);
    setenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "profiles:4", 1);
    setenv("OTEL_EXPORTER_OTLP_INSECURE", "true", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "PROFILES"), 0);
    assert_string_equal(ep.target, "profiles:4");
    assert_false(ep.tls);
    ss_otlp_endpoint_free(&ep);
}

static void test_endpoint_bad_values_fall_back(void **state) {
    (void)state;
    ss_otlp_endpoint ep;
    /* an endpoint or protocol that is a mistake: the exporter is off,
     * never sent to the default destination */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://:notaport", 1);
    assert_int_equal(ss_otlp_endpoint_check("LOGS"), -EINVAL);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), -EINVAL);
    setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", 1);
    assert_int_equal(ss_otlp_endpoint_check("LOGS"), -EINVAL);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), -EINVAL);
    unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc/web", 1);
    assert_int_equal(ss_otlp_endpoint_check("LOGS"), -EINVAL);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), -EINVAL);
    unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL");
    /* other bad values fall back to their defaults */
    setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "ten", 1);
    setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli", 1);
    assert_int_equal(ss_otlp_endpoint_check("LOGS"), 0);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_string_equal(ep.target, "localhost:4317");
    assert_false(ep.tls);
    assert_int_equal(ep.timeout_ms, 10000);
    assert_int_equal(ep.compression, SS_OTLP_COMPRESS_NONE);
    ss_otlp_endpoint_free(&ep);
    setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "-5", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_int_equal(ep.timeout_ms, 10000);
    ss_otlp_endpoint_free(&ep);
    setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0", 1);
    setenv("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "250", 1);
    setenv("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip", 1);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_int_equal(ep.timeout_ms, 250); /* per-signal wins */
    assert_int_equal(ep.compression, SS_OTLP_COMPRESS_GZIP);
    ss_otlp_endpoint_free(&ep);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "PROFILES"), 0);
    assert_int_equal(ep.timeout_ms, 0); /* 0 = no deadline */
    ss_otlp_endpoint_free(&ep);
}

/* ---- headers ------------------------------------------------------- */

static const char *header(const ss_otlp_endpoint *ep, const char *key) {
    for (size_t i = 0; i < ep->n_headers; i++)
        if (strcmp(ep->headers[i].key, key) == 0)
            return ep->headers[i].value;
    return NULL;
}

static void test_parse_headers(void **state) {
    (void)state;
    ss_otlp_header *h = NULL;
    size_t n = 0;
    int bad = ss_otlp_parse_headers("K", " X-SF-Token = abc%3D%2C1 ,api-key=k2,,novalue, =x,"
                                    "bad%zz=1,ok=%4",
                                    &h, &n);
    /* "novalue" (no '='), " =x" (empty key), "bad%zz" (illegal key), "ok=%4" */
    assert_int_equal(bad, 4);
    assert_int_equal(n, 2);
    ss_otlp_headers_free(h, n);
    h = NULL;
    n = 0;
    bad = ss_otlp_parse_headers("K", " X-SF-Token = abc%3D%2C1 ,api-key=k2,,novalue", &h, &n);
    assert_int_equal(bad, 1);
    assert_int_equal(n, 2);
    assert_string_equal(h[0].key, "x-sf-token"); /* lowercased for gRPC */
    assert_string_equal(h[0].value, "abc=,1");   /* trimmed, percent-decoded */
    assert_string_equal(h[1].key, "api-key");
    assert_string_equal(h[1].value, "k2");
    /* A repeated key replaces the earlier value. */
    bad = ss_otlp_parse_headers("K", "API-KEY=k3", &h, &n);
    assert_int_equal(bad, 0);
    assert_int_equal(n, 2);
    assert_string_equal(h[1].value, "k3");
    ss_otlp_headers_free(h, n);
}

static void test_parse_headers_bad_items(void **state) {
    (void)state;
    ss_otlp_header *h = NULL;
    size_t n = 0;
    assert_int_equal(ss_otlp_parse_headers("K", "=x", &h, &n), 1);
    assert_int_equal(ss_otlp_parse_headers("K", "a=%4", &h, &n), 1);
    assert_int_equal(ss_otlp_parse_headers("K", "a b=1", &h, &n), 1);
    assert_int_equal(ss_otlp_parse_headers("K", "k=%zz", &h, &n), 1);
    assert_int_equal(n, 0);
    assert_int_equal(ss_otlp_parse_headers("K", "k=", &h, &n), 0); /* empty value is fine */
    assert_int_equal(n, 1);
    assert_string_equal(h[0].value, "");
    ss_otlp_headers_free(h, n);
}

static void test_headers_per_signal_win(void **state) {
    (void)state;
    setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-sf-token=general,a=1", 1);
    setenv("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "X-SF-Token=logs", 1);
    ss_otlp_endpoint ep;
    assert_int_equal(ss_otlp_endpoint_load(&ep, "LOGS"), 0);
    assert_int_equal(ep.n_headers, 2);
    assert_string_equal(header(&ep, "x-sf-token"), "logs");
    assert_string_equal(header(&ep, "a"), "1");
    ss_otlp_endpoint_free(&ep);
    assert_int_equal(ss_otlp_endpoint_load(&ep, "PROFILES"), 0);
    assert_string_equal(header(&ep, "x-sf-token"), "general");
    ss_otlp_endpoint_free(&ep);
}

static void test_percent_decode(void **state) {
    (void)state;
    char out[32];
    assert_int_equal(ss_otlp_percent_decode("a%20b%2c", 8, out, sizeof out), 4);
    assert_string_equal(out, "a b,");
    assert_int_equal(ss_otlp_percent_decode("%41", 3, out, sizeof out), 1);
    assert_string_equal(out, "A");
    assert_int_equal(ss_otlp_percent_decode("%4", 2, out, sizeof out), -EINVAL);
    assert_int_equal(ss_otlp_percent_decode("%g0", 3, out, sizeof out), -EINVAL);
    assert_int_equal(ss_otlp_percent_decode("abc", 3, out, 3), -EINVAL); /* no room for NUL */
}

/* ---- resource ------------------------------------------------------ */

static void test_parse_resource_attributes(void **state) {
    (void)state;
    ss_attr *a = NULL;
    size_t n = 0;
    assert_int_equal(ss_otlp_parse_resource_attributes(
                         "deployment.environment=prod, k8s.pod.name = pod%2C1 ,x=a%3Db,x=last",
                         &a, &n),
                     0);
    assert_int_equal(n, 3);
    assert_string_equal(a[0].key, "deployment.environment");
    assert_string_equal(a[0].str, "prod");
    assert_string_equal(a[1].key, "k8s.pod.name");
    assert_string_equal(a[1].str, "pod,1");
    assert_string_equal(a[2].key, "x");
    assert_string_equal(a[2].str, "last");
    ss_attrs_free(a, n);
    a = NULL;
    n = 0;
    assert_int_equal(ss_otlp_parse_resource_attributes("ok=1,broken", &a, &n), -EINVAL);
    assert_null(a);
    assert_int_equal(ss_otlp_parse_resource_attributes("ok=1,v=%ZZ", &a, &n), -EINVAL);
    assert_int_equal(ss_otlp_parse_resource_attributes("=1", &a, &n), -EINVAL);
    assert_null(a);
}

static void test_resource_detected(void **state) {
    (void)state;
    ss_otlp_resource r;
    assert_int_equal(ss_otlp_resource_build(&r), 0);
    const ss_attr *a = ss_otlp_resource_get(&r, "service.name");
    assert_non_null(a);
    assert_string_equal(a->str, "unknown_service:test_otlp_config");
    a = ss_otlp_resource_get(&r, "process.pid");
    assert_non_null(a);
    assert_int_equal(a->type, SS_ATTR_INT);
    assert_int_equal(a->i, getpid());
    assert_string_equal(ss_otlp_resource_get(&r, "process.executable.name")->str,
                        "test_otlp_config");
    assert_non_null(ss_otlp_resource_get(&r, "host.name"));
    assert_string_equal(ss_otlp_resource_get(&r, "telemetry.sdk.name")->str, "stackshot");
    assert_string_equal(ss_otlp_resource_get(&r, "telemetry.sdk.language")->str, "cpp");
    assert_string_equal(ss_otlp_resource_get(&r, "telemetry.sdk.version")->str, SS_VERSION);
    assert_string_equal(ss_otlp_resource_get(&r, "telemetry.distro.name")->str, "stackshot");
    assert_null(ss_otlp_resource_get(&r, "process.runtime.name")); /* not a JVM */
    ss_otlp_resource_free(&r);
}

static void test_resource_user_wins(void **state) {
    (void)state;
    setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,host.name=h%201", 1);
    ss_otlp_resource r;
    assert_int_equal(ss_otlp_resource_build(&r), 0);
    assert_string_equal(ss_otlp_resource_get(&r, "service.name")->str, "from-attrs");
    assert_string_equal(ss_otlp_resource_get(&r, "host.name")->str, "h 1");
    ss_otlp_resource_free(&r);
    setenv("OTEL_SERVICE_NAME", "checkout", 1); /* beats the attribute */
    assert_int_equal(ss_otlp_resource_build(&r), 0);
    assert_string_equal(ss_otlp_resource_get(&r, "service.name")->str, "checkout");
    ss_otlp_resource_free(&r);
    /* A decoding error discards the whole variable. */
    unsetenv("OTEL_SERVICE_NAME");
    setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=x,bad=%G1", 1);
    assert_int_equal(ss_otlp_resource_build(&r), 0);
    assert_string_equal(ss_otlp_resource_get(&r, "service.name")->str,
                        "unknown_service:test_otlp_config");
    assert_null(ss_otlp_resource_get(&r, "bad"));
    ss_otlp_resource_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_parse_url, clean_env),
        cmocka_unit_test_setup(test_endpoint_precedence, clean_env),
        cmocka_unit_test_setup(test_endpoint_bad_values_fall_back, clean_env),
        cmocka_unit_test_setup(test_parse_headers, clean_env),
        cmocka_unit_test_setup(test_parse_headers_bad_items, clean_env),
        cmocka_unit_test_setup(test_headers_per_signal_win, clean_env),
        cmocka_unit_test_setup(test_percent_decode, clean_env),
        cmocka_unit_test_setup(test_parse_resource_attributes, clean_env),
        cmocka_unit_test_setup(test_resource_detected, clean_env),
        cmocka_unit_test_setup(test_resource_user_wins, clean_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
