/* logs_encode.c: a round as OTLP LogRecords, the Splunk call-stack way.
 *
 * One LogRecord per thread: the body is the thread's thread-dump text (the
 * text exporter's own formatter, so both outputs agree byte for byte), the
 * attributes say what it is (com.splunk.sourcetype=otel.profiling, the
 * period, the thread), and trace_id/span_id link it to the span the thread
 * was in. All records of a request share one ScopeLogs named
 * "otel.profiling": Splunk's collector routes profiling data by that scope
 * name alone, so nothing else may share it.
 *
 * The protobuf-c structs point into the round and into a bodies buffer; they
 * live only until the request is packed. */
#include "logs.h"
#include "../common/pprof.h"

#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef Opentelemetry__Proto__Logs__V1__LogRecord LogRecord;
typedef Opentelemetry__Proto__Common__V1__KeyValue KeyValue;
typedef Opentelemetry__Proto__Common__V1__AnyValue AnyValue;

/* Attributes per record: three shared by all records, three per thread. */
enum { SHARED_ATTRS = 3, OWN_ATTRS = 3, ATTRS = SHARED_ATTRS + OWN_ATTRS };
/* AnyValues per record: its own attributes' values, then the body. */
enum { VALUES = OWN_ATTRS + 1 };

void ss_logs_encoder_init(ss_logs_encoder *e) {
    memset(e, 0, sizeof *e);
    ss_buf_init(&e->bodies);
}

void ss_logs_encoder_free(ss_logs_encoder *e) {
    ss_buf_free(&e->bodies);
    free(e->offsets);
    free(e->name_offsets);
    free(e->records);
    free(e->record_ptrs);
    free(e->kvs);
    free(e->kv_ptrs);
    free(e->values);
    memset(e, 0, sizeof *e);
}

/* realloc *p to n bytes; on failure *p stays valid as it was. */
static int grow(void **p, size_t n) {
    void *q = realloc(*p, n);
    if (!q)
        return -ENOMEM;
    *p = q;
    return 0;
}

static int reserve(ss_logs_encoder *e, size_t n) {
    if (n <= e->cap)
        return 0;
    size_t cap = n < 64 ? 64 : n;
    if (grow((void **)&e->offsets, cap * sizeof(size_t)) ||
        grow((void **)&e->name_offsets, cap * sizeof(size_t)) ||
        grow(&e->records, cap * sizeof(LogRecord)) ||
        grow(&e->record_ptrs, cap * sizeof(LogRecord *)) ||
        grow(&e->kvs, cap * OWN_ATTRS * sizeof(KeyValue)) ||
        grow(&e->kv_ptrs, cap * ATTRS * sizeof(KeyValue *)) ||
        grow(&e->values, cap * VALUES * sizeof(AnyValue)))
        return -ENOMEM; /* what grew stays valid; cap unchanged */
    e->cap = cap;
    return 0;
}

static void kv_str(KeyValue *kv, AnyValue *v, const char *key, const char *s) {
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(v);
    kv->key = (char *)key;
    kv->value = v;
    v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    v->string_value = (char *)s;
}

static void kv_int(KeyValue *kv, AnyValue *v, const char *key, int64_t i) {
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(v);
    kv->key = (char *)key;
    kv->value = v;
    v->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
    v->int_value = i;
}

/* The per-record part: body, thread attributes, span. */
static void fill_record(LogRecord *rec, AnyValue *body, KeyValue *own_kv, AnyValue *own_v,
                        KeyValue **kv_ptrs, KeyValue *const *shared, const ss_round *r,
                        const ss_thread_sample *t, char *text, const char *name,
                        uint64_t observed_ns) {
    opentelemetry__proto__logs__v1__log_record__init(rec);
    rec->time_unix_nano = r->time_ns;
    rec->observed_time_unix_nano = observed_ns;
    rec->event_name = (char *)SS_LOGS_SCOPE_NAME;
    opentelemetry__proto__common__v1__any_value__init(body);
    body->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    body->string_value = text;
    rec->body = body;
    kv_int(&own_kv[0], &own_v[0], "thread.id", t->nid);
    kv_str(&own_kv[1], &own_v[1], "thread.name", name);
    kv_str(&own_kv[2], &own_v[2], "thread.state", ss_thread_state_name(t->state));
    for (int i = 0; i < SHARED_ATTRS; i++)
        kv_ptrs[i] = shared[i];
    for (int i = 0; i < OWN_ATTRS; i++)
        kv_ptrs[SHARED_ATTRS + i] = &own_kv[i];
    rec->n_attributes = ATTRS;
    rec->attributes = kv_ptrs;
    if (t->has_span) {
        rec->trace_id.len = 16;
        rec->trace_id.data = (uint8_t *)t->trace_id;
        rec->span_id.len = 8;
        rec->span_id.data = (uint8_t *)t->span_id;
    }
}

/* Bytes a length-delimited field of size n takes in its parent. */
static size_t field_size(size_t n) {
    size_t v = 1;
    for (size_t x = n; x >= 0x80; x >>= 7)
        v++;
    return 1 + v + n;
}

int ss_logs_encode(ss_logs_encoder *e, const ss_otlp_resource *res, const ss_round *r,
                   uint32_t first, uint32_t max_records, size_t max_bytes,
                   uint64_t observed_ns, ss_buf *out, uint32_t *n_records,
                   uint32_t *n_dropped) {
    *n_records = *n_dropped = 0;
    ss_buf_reset(out);
    if (first >= r->n_threads)
        return 0;
    uint32_t n = r->n_threads - first;
    if (max_records && n > max_records)
        n = max_records;
    if (reserve(e, n) != 0)
        return -ENOMEM;

    /* Bodies first (the buffer may move while it grows), made valid UTF-8;
     * a thread name that is not valid gets a fixed copy after its body. */
    ss_buf_reset(&e->bodies);
    for (uint32_t i = 0; i < n; i++) {
        const ss_thread_sample *t = &r->threads[first + i];
        e->offsets[i] = e->bodies.len;
        ss_text_format_thread(r, t, &e->bodies);
        if (e->bodies.failed)
            return -ENOMEM;
        ss_utf8_fix(e->bodies.data + e->offsets[i], e->bodies.len - e->offsets[i]);
        ss_buf_putc(&e->bodies, '\0');
        e->name_offsets[i] = SIZE_MAX;
        if (t->name && !ss_utf8_valid(t->name, strlen(t->name))) {
            e->name_offsets[i] = e->bodies.len;
            ss_buf_puts(&e->bodies, t->name);
            if (!e->bodies.failed)
                ss_utf8_fix(e->bodies.data + e->name_offsets[i],
                            e->bodies.len - e->name_offsets[i]);
            ss_buf_putc(&e->bodies, '\0');
        }
    }
    if (e->bodies.failed)
        return -ENOMEM;

    KeyValue shared_kv[SHARED_ATTRS];
    AnyValue shared_v[SHARED_ATTRS];
    kv_str(&shared_kv[0], &shared_v[0], "com.splunk.sourcetype", SS_LOGS_SOURCETYPE);
    kv_int(&shared_kv[1], &shared_v[1], "source.event.period", r->interval_ms);
    kv_str(&shared_kv[2], &shared_v[2], "source.event.name", "wall");
    KeyValue *shared[SHARED_ATTRS] = {&shared_kv[0], &shared_kv[1], &shared_kv[2]};

    Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
    opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
    scope.name = (char *)SS_LOGS_SCOPE_NAME;
    scope.version = (char *)SS_LOGS_SCOPE_VERSION;
    Opentelemetry__Proto__Logs__V1__ScopeLogs scope_logs;
    opentelemetry__proto__logs__v1__scope_logs__init(&scope_logs);
    scope_logs.scope = &scope;
    Opentelemetry__Proto__Logs__V1__ResourceLogs rl;
    opentelemetry__proto__logs__v1__resource_logs__init(&rl);
    rl.resource = (Opentelemetry__Proto__Resource__V1__Resource *)&res->msg;
    Opentelemetry__Proto__Logs__V1__ScopeLogs *slp = &scope_logs;
    rl.n_scope_logs = 1;
    rl.scope_logs = &slp;
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest req;
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__init(&req);
    Opentelemetry__Proto__Logs__V1__ResourceLogs *rlp = &rl;
    req.n_resource_logs = 1;
    req.resource_logs = &rlp;

    /* The envelope without records, then records while they fit (each
     * adds its own size plus tag and length; the two enclosing lengths may
     * grow by a few bytes, hence the slack). */
    size_t total =
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__get_packed_size(
            &req) +
        16;
    LogRecord *recs = e->records;
    LogRecord **rec_ptrs = e->record_ptrs;
    KeyValue *kvs = e->kvs;
    KeyValue **kv_ptrs = e->kv_ptrs;
    AnyValue *vals = e->values;
    uint32_t used = 0, kept = 0;
    for (; used < n; used++) {
        const ss_thread_sample *t = &r->threads[first + used];
        LogRecord *rec = &recs[kept];
        AnyValue *v = &vals[kept * VALUES];
        fill_record(rec, &v[OWN_ATTRS], &kvs[kept * OWN_ATTRS], v, &kv_ptrs[kept * ATTRS],
                    shared, r, t, e->bodies.data + e->offsets[used],
                    e->name_offsets[used] != SIZE_MAX ? e->bodies.data + e->name_offsets[used]
                    : t->name                         ? t->name
                                                      : "",
                    observed_ns);
        size_t sz = field_size(opentelemetry__proto__logs__v1__log_record__get_packed_size(rec));
        if (total + sz > max_bytes) {
            if (kept > 0)
                break; /* the next request takes it */
            (*n_dropped)++; /* alone too big: it never fits */
            continue;
        }
        total += sz;
        rec_ptrs[kept++] = rec;
    }
    *n_records = kept;
    if (kept == 0)
        return (int)used;
    scope_logs.n_log_records = kept;
    scope_logs.log_records = rec_ptrs;
    size_t len =
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__get_packed_size(
            &req);
    if (ss_buf_reserve(out, len) != 0)
        return -ENOMEM;
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__pack(
        &req, (uint8_t *)out->data);
    out->len = len;
    return (int)used;
}

/* ---- the "later format": one record per round, a pprof in the body ---- */

static int base64_append(ss_buf *out, const uint8_t *p, size_t n) {
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (ss_buf_reserve(out, (n + 2) / 3 * 4 + 1) != 0)
        return -ENOMEM;
    char *o = out->data + out->len;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[v >> 12 & 63];
        *o++ = tab[v >> 6 & 63];
        *o++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = tab[v >> 18];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = '=';
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
    return 0;
}

int ss_logs_encode_pprof(ss_logs_encoder *e, const ss_otlp_resource *res, ss_round *r,
                         uint64_t observed_ns, ss_buf *out) {
    ss_buf_reset(out);
    /* pprof (scratch: e->bodies), then gzip, then base64 */
    ss_buf *pprof = &e->bodies;
    ss_buf_reset(pprof);
    int rc = ss_pprof_encode_rounds(&r, 1, SS_PPROF_WALL, pprof);
    if (rc != 0)
        return rc;
    ss_buf gz, text;
    ss_buf_init(&gz);
    ss_buf_init(&text);
    rc = ss_gzip(pprof->data, pprof->len, &gz);
    if (rc == 0 && base64_append(&text, (const uint8_t *)gz.data, gz.len) != 0)
        rc = -ENOMEM;
    ss_buf_free(&gz);
    if (rc != 0) {
        ss_buf_free(&text);
        return rc;
    }
    int64_t frames = 0;
    for (uint32_t i = 0; i < r->n_threads; i++)
        frames += r->threads[i].frame_count;

    KeyValue kv[6];
    AnyValue v[6];
    kv_str(&kv[0], &v[0], "com.splunk.sourcetype", SS_LOGS_SOURCETYPE);
    kv_str(&kv[1], &v[1], "profiling.data.format", "pprof-gzip-base64");
    kv_str(&kv[2], &v[2], "profiling.data.type", "cpu");
    kv_int(&kv[3], &v[3], "profiling.data.total.frame.count", frames);
    kv_str(&kv[4], &v[4], "profiling.instrumentation.source", "continuous");
    kv_int(&kv[5], &v[5], "source.event.period", r->interval_ms);
    KeyValue *kvp[6] = {&kv[0], &kv[1], &kv[2], &kv[3], &kv[4], &kv[5]};
    AnyValue body;
    opentelemetry__proto__common__v1__any_value__init(&body);
    body.value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
    body.string_value = text.data;
    LogRecord rec;
    opentelemetry__proto__logs__v1__log_record__init(&rec);
    rec.time_unix_nano = r->time_ns;
    rec.observed_time_unix_nano = observed_ns;
    rec.event_name = (char *)SS_LOGS_SCOPE_NAME;
    rec.body = &body;
    rec.n_attributes = 6;
    rec.attributes = kvp;
    LogRecord *recp = &rec;

    Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
    opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
    scope.name = (char *)SS_LOGS_SCOPE_NAME;
    scope.version = (char *)SS_LOGS_SCOPE_VERSION;
    Opentelemetry__Proto__Logs__V1__ScopeLogs sl;
    opentelemetry__proto__logs__v1__scope_logs__init(&sl);
    sl.scope = &scope;
    sl.n_log_records = 1;
    sl.log_records = &recp;
    Opentelemetry__Proto__Logs__V1__ScopeLogs *slp = &sl;
    Opentelemetry__Proto__Logs__V1__ResourceLogs rl;
    opentelemetry__proto__logs__v1__resource_logs__init(&rl);
    rl.resource = (Opentelemetry__Proto__Resource__V1__Resource *)&res->msg;
    rl.n_scope_logs = 1;
    rl.scope_logs = &slp;
    Opentelemetry__Proto__Logs__V1__ResourceLogs *rlp = &rl;
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest req;
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__init(&req);
    req.n_resource_logs = 1;
    req.resource_logs = &rlp;
    size_t len =
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__get_packed_size(
            &req);
    rc = ss_buf_reserve(out, len);
    if (rc == 0) {
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__pack(
            &req, (uint8_t *)out->data);
        out->len = len;
    }
    ss_buf_free(&text);
    return rc;
}
