/* test_otlp_encode.c: a round encoded as an ExportLogsServiceRequest,
 * decoded back with the generated protobuf-c code: envelope, scope,
 * attributes, bodies equal to the text exporter's, span ids, and the
 * splitting by record count and by bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "exporters/otlp_logs/logs.h"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest Request;
typedef Opentelemetry__Proto__Logs__V1__LogRecord LogRecord;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;

#define T0 1700000000123456789ull

static ss_round *make_round(uint32_t n_threads, uint32_t depth) {
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, T0, 250, SS_RUNTIME_NATIVE);
    const ss_funcinfo *leaf = ss_funcinfo_intern("global", "leaf_fn", "demo.c", NULL,
                                                 SS_FRAME_NATIVE);
    const ss_funcinfo *root = ss_funcinfo_intern("global", "main", "demo.c", NULL,
                                                 SS_FRAME_NATIVE);
    for (uint32_t i = 0; i < n_threads; i++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%u", i);
        ss_thread_sample *t = ss_round_builder_add_thread(b, name);
        t->nid = 1000 + (int32_t)i;
        t->state = i % 2 ? SS_STATE_WAITING : SS_STATE_RUNNABLE;
        t->status = i % 2 ? "sleeping" : "runnable";
        if (i == 1) {
            t->has_span = true;
            for (int k = 0; k < 16; k++)
                t->trace_id[k] = (uint8_t)(k + 1);
            for (int k = 0; k < 8; k++)
                t->span_id[k] = (uint8_t)(0xa1 + k);
            static const char attrs[] = "http.route=/api/x\nhttp.method=GET";
            ss_round_builder_set_span_attrs(b, attrs, sizeof attrs - 1);
        }
        for (uint32_t d = 0; d < depth; d++) {
            ss_frame f = {.fn = d + 1 == depth ? root : leaf, .line = (int32_t)(10 + d)};
            ss_round_builder_add_frame(b, &f);
        }
    }
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

static const AnyValue *attr(const LogRecord *rec, const char *key) {
    for (size_t i = 0; i < rec->n_attributes; i++)
        if (strcmp(rec->attributes[i]->key, key) == 0)
            return rec->attributes[i]->value;
    return NULL;
}

static const char *attr_str(const LogRecord *rec, const char *key) {
    const AnyValue *v = attr(rec, key);
    assert_non_null(v);
    assert_int_equal(v->value_case,
                     OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
    return v->string_value;
}

static int64_t attr_int(const LogRecord *rec, const char *key) {
    const AnyValue *v = attr(rec, key);
    assert_non_null(v);
    assert_int_equal(v->value_case, OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE);
    return v->int_value;
}

static void test_round_as_request(void **state) {
    (void)state;
    ss_process_refresh();
    ss_otlp_resource res;
    assert_int_equal(ss_otlp_resource_build(&res), 0);
    ss_round *r = make_round(3, 4);
    ss_logs_encoder e;
    ss_logs_encoder_init(&e);
    ss_buf out;
    ss_buf_init(&out);
    uint32_t n, dropped;
    int used = ss_logs_encode(&e, &res, r, 0, 512, SS_LOGS_MAX_REQUEST, T0 + 5, &out, &n,
                              &dropped);
    assert_int_equal(used, 3);
    assert_int_equal(n, 3);
    assert_int_equal(dropped, 0);

    Request *req = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
        NULL, out.len, (const uint8_t *)out.data);
    assert_non_null(req);
    assert_int_equal(req->n_resource_logs, 1);
    const Opentelemetry__Proto__Logs__V1__ResourceLogs *rl = req->resource_logs[0];
    assert_non_null(rl->resource);
    assert_int_equal(rl->resource->n_attributes, res.n_attrs);
    bool has_sdk = false;
    for (size_t i = 0; i < rl->resource->n_attributes; i++)
        if (!strcmp(rl->resource->attributes[i]->key, "telemetry.sdk.name"))
            has_sdk = !strcmp(rl->resource->attributes[i]->value->string_value, "stackshot");
    assert_true(has_sdk);
    assert_int_equal(rl->n_scope_logs, 1);
    const Opentelemetry__Proto__Logs__V1__ScopeLogs *sl = rl->scope_logs[0];
    assert_string_equal(sl->scope->name, "otel.profiling");
    assert_string_equal(sl->scope->version, "0.1.0");
    assert_int_equal(sl->n_log_records, 3);
    ss_buf text;
    ss_buf_init(&text);
    for (uint32_t i = 0; i < 3; i++) {
        const LogRecord *rec = sl->log_records[i];
        assert_int_equal(rec->time_unix_nano, T0);
        assert_int_equal(rec->observed_time_unix_nano, T0 + 5);
        assert_string_equal(rec->event_name, "otel.profiling");
        assert_string_equal(attr_str(rec, "com.splunk.sourcetype"), "otel.profiling");
        assert_int_equal(attr_int(rec, "source.event.period"), 250);
        assert_string_equal(attr_str(rec, "source.event.name"), "wall");
        assert_int_equal(attr_int(rec, "thread.id"), 1000 + i);
        char name[32];
        snprintf(name, sizeof name, "worker-%u", i);
        assert_string_equal(attr_str(rec, "thread.name"), name);
        assert_string_equal(attr_str(rec, "thread.state"), i % 2 ? "WAITING" : "RUNNABLE");
        /* the span's attributes (OTEP 4947 record) on the thread in a span */
        assert_int_equal(rec->n_attributes, i == 1 ? 8 : 6);
        if (i == 1) {
            assert_string_equal(attr_str(rec, "http.route"), "/api/x");
            assert_string_equal(attr_str(rec, "http.method"), "GET");
        }
        /* body: exactly the text exporter's block for the thread */
        ss_buf_reset(&text);
        ss_text_format_thread(r, &r->threads[i], &text);
        ss_buf_putc(&text, '\0');
        assert_int_equal(rec->body->value_case,
                         OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
        assert_string_equal(rec->body->string_value, text.data);
        assert_non_null(strstr(rec->body->string_value, "\tat global.leaf_fn(demo.c:10)\n"));
        if (i == 1) {
            assert_int_equal(rec->trace_id.len, 16);
            assert_int_equal(rec->span_id.len, 8);
            assert_int_equal(rec->trace_id.data[0], 1);
            assert_int_equal(rec->trace_id.data[15], 16);
            assert_int_equal(rec->span_id.data[7], 0xa8);
        } else {
            assert_int_equal(rec->trace_id.len, 0);
            assert_int_equal(rec->span_id.len, 0);
        }
    }
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(req,
                                                                                         NULL);
    ss_buf_free(&text);
    ss_buf_free(&out);
    ss_logs_encoder_free(&e);
    ss_round_unref(r);
    ss_otlp_resource_free(&res);
}

static size_t records_in(const ss_buf *out) {
    Request *req = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
        NULL, out->len, (const uint8_t *)out->data);
    assert_non_null(req);
    size_t n = req->resource_logs[0]->scope_logs[0]->n_log_records;
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(req,
                                                                                         NULL);
    return n;
}

static void test_split_by_count_and_bytes(void **state) {
    (void)state;
    ss_otlp_resource res;
    assert_int_equal(ss_otlp_resource_build(&res), 0);
    ss_round *r = make_round(5, 20);
    ss_logs_encoder e;
    ss_logs_encoder_init(&e);
    ss_buf out;
    ss_buf_init(&out);
    uint32_t n, dropped;
    /* by count: 2 + 2 + 1 */
    assert_int_equal(ss_logs_encode(&e, &res, r, 0, 2, SS_LOGS_MAX_REQUEST, 1, &out, &n,
                                    &dropped), 2);
    assert_int_equal(records_in(&out), 2);
    assert_int_equal(ss_logs_encode(&e, &res, r, 4, 2, SS_LOGS_MAX_REQUEST, 1, &out, &n,
                                    &dropped), 1);
    assert_int_equal(n, 1);
    assert_int_equal(ss_logs_encode(&e, &res, r, 5, 2, SS_LOGS_MAX_REQUEST, 1, &out, &n,
                                    &dropped), 0);
    /* by bytes: the whole round's size, minus a little, keeps all but one */
    assert_int_equal(ss_logs_encode(&e, &res, r, 0, 0, SS_LOGS_MAX_REQUEST, 1, &out, &n,
                                    &dropped), 5);
    size_t whole = out.len;
    assert_int_equal(ss_logs_encode(&e, &res, r, 0, 0, whole - 10, 1, &out, &n, &dropped), 4);
    assert_int_equal(n, 4);
    assert_true(out.len <= whole - 10);
    assert_int_equal(records_in(&out), 4);
    /* a limit no single record fits: every thread is dropped, none encoded */
    assert_int_equal(ss_logs_encode(&e, &res, r, 0, 0, 600, 1, &out, &n, &dropped), 5);
    assert_int_equal(n, 0);
    assert_int_equal(dropped, 5);
    assert_int_equal(out.len, 0);
    ss_buf_free(&out);
    ss_logs_encoder_free(&e);
    ss_round_unref(r);
    ss_otlp_resource_free(&res);
}

static void test_utf8_fix(void **state) {
    (void)state;
    char ok[] = "plain ascii, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80";
    assert_true(ss_utf8_valid(ok, strlen(ok)));
    assert_int_equal(ss_utf8_fix(ok, strlen(ok)), 0);
    struct {
        const char *in, *out;
    } bad[] = {
        {"a\xff" "b", "a?b"},                /* never valid */
        {"a\x80" "b", "a?b"},                /* stray continuation */
        {"\xc0\x80", "??"},                /* modified UTF-8 NUL (overlong) */
        {"\xed\xa0\xbd\xed\xb8\x80", "??????"}, /* surrogate pair, CESU style */
        {"\xe2\x82", "??"},                /* truncated */
        {"\xf4\x90\x80\x80", "????"},      /* beyond U+10FFFF */
        {"\xe0\x80\xaf", "???"},           /* overlong 3-byte */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[32];
        strcpy(buf, bad[i].in);
        assert_false(ss_utf8_valid(buf, strlen(buf)));
        ss_utf8_fix(buf, strlen(buf));
        assert_string_equal(buf, bad[i].out);
        assert_true(ss_utf8_valid(buf, strlen(buf)));
    }
}

/* A thread name that is not UTF-8 (from /proc, or Java's modified UTF-8)
 * must not make the request invalid: name and body get '?' instead. */
static void test_invalid_utf8_thread_name(void **state) {
    (void)state;
    ss_otlp_resource res;
    assert_int_equal(ss_otlp_resource_build(&res), 0);
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, T0, 1000, SS_RUNTIME_NATIVE);
    ss_thread_sample *t = ss_round_builder_add_thread(b, "bad\xff\xfe name \xed\xa0\x80");
    t->nid = 9;
    t = ss_round_builder_add_thread(b, "good");
    t->nid = 10;
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    ss_logs_encoder e;
    ss_logs_encoder_init(&e);
    ss_buf out;
    ss_buf_init(&out);
    uint32_t n, dropped;
    assert_int_equal(ss_logs_encode(&e, &res, r, 0, 10, SS_LOGS_MAX_REQUEST, 1, &out, &n,
                                    &dropped), 2);
    Request *req = opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
        NULL, out.len, (const uint8_t *)out.data);
    assert_non_null(req);
    const LogRecord *rec = req->resource_logs[0]->scope_logs[0]->log_records[0];
    assert_string_equal(attr_str(rec, "thread.name"), "bad?? name ???");
    assert_non_null(strstr(rec->body->string_value, "\"bad?? name ???\" #"));
    assert_true(ss_utf8_valid(rec->body->string_value, strlen(rec->body->string_value)));
    rec = req->resource_logs[0]->scope_logs[0]->log_records[1];
    assert_string_equal(attr_str(rec, "thread.name"), "good");
    /* the round itself is untouched: other exporters share it */
    assert_string_equal(r->threads[0].name, "bad\xff\xfe name \xed\xa0\x80");
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(req,
                                                                                         NULL);
    ss_buf_free(&out);
    ss_logs_encoder_free(&e);
    ss_round_unref(r);
    ss_otlp_resource_free(&res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_as_request),
        cmocka_unit_test(test_split_by_count_and_bytes),
        cmocka_unit_test(test_utf8_fix),
        cmocka_unit_test(test_invalid_utf8_thread_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
