/* wire.c: the OTLP messages every signal shares, written with the protobuf
 * writer (common/pb.h): KeyValue, AnyValue, Resource, InstrumentationScope
 * (opentelemetry/proto/common/v1/common.proto and resource.proto). Fields go
 * in field-number order, zero scalars are left out (proto3), a oneof member
 * is always written. */
#include "agent/buf.h"
#include "exporters/otlp/otlp.h"

#include <string.h>

enum {
    KV_KEY = 1, KV_VALUE = 2,
    AV_STRING = 1, AV_INT = 3,
    RES_ATTRIBUTES = 1,
    SCOPE_NAME = 1, SCOPE_VERSION = 2,
};

void ss_otlp_put_any_str(ss_buf *b, uint32_t field, const char *s, size_t len) {
    size_t m = pb_begin(b, field);
    pb_bytes(b, AV_STRING, s, len);
    pb_end(b, m);
}

void ss_otlp_put_kv_str(ss_buf *b, uint32_t field, const char *key, const char *s, size_t len) {
    size_t m = pb_begin(b, field);
    pb_string(b, KV_KEY, key);
    ss_otlp_put_any_str(b, KV_VALUE, s, len);
    pb_end(b, m);
}

void ss_otlp_put_kv_int(ss_buf *b, uint32_t field, const char *key, int64_t v) {
    size_t m = pb_begin(b, field);
    pb_string(b, KV_KEY, key);
    size_t a = pb_begin(b, KV_VALUE);
    pb_sint_as_int(b, AV_INT, v);
    pb_end(b, a);
    pb_end(b, m);
}

void ss_otlp_put_resource(ss_buf *b, uint32_t field, const ss_otlp_resource *r) {
    size_t m = pb_begin(b, field);
    for (size_t i = 0; i < r->n_attrs; i++) {
        const ss_attr *a = &r->attrs[i];
        if (a->type == SS_ATTR_INT)
            ss_otlp_put_kv_int(b, RES_ATTRIBUTES, a->key, a->i);
        else
            ss_otlp_put_kv_str(b, RES_ATTRIBUTES, a->key, a->str, strlen(a->str));
    }
    pb_end(b, m);
}

void ss_otlp_put_scope(ss_buf *b, uint32_t field, const char *name, const char *version) {
    size_t m = pb_begin(b, field);
    pb_string_nz(b, SCOPE_NAME, name);
    pb_string_nz(b, SCOPE_VERSION, version);
    pb_end(b, m);
}
