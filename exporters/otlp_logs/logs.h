/*
 * logs.h: the OTLP call-stack logs exporter (exporters/otlp_logs).
 *
 * Private to this folder (and its tests and benchmark): the encoder that
 * turns a round into ExportLogsServiceRequest bytes, Splunk conventions.
 */
#ifndef SS_OTLP_LOGS_H
#define SS_OTLP_LOGS_H

#include "agent/buf.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "exporters/otlp/otlp.h"

#define SS_LOGS_METHOD "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
#define SS_LOGS_HTTP_PATH "/v1/logs"
#define SS_LOGS_SCOPE_NAME "otel.profiling"
#define SS_LOGS_SCOPE_VERSION "0.1.0"
#define SS_LOGS_SOURCETYPE "otel.profiling"
#define SS_LOGS_DEFAULT_BATCH 512
#define SS_LOGS_MAX_REQUEST (4u << 20) /* uncompressed; gRPC servers' default cap */

/* Reused scratch of the encoder: one body at a time, a thread name made
 * valid UTF-8, the attributes every record of a round shares. */
typedef struct ss_logs_encoder {
    ss_buf text;
    ss_buf name;
    ss_buf shared;
    /* stack_id -> the frame lines of a body (UTF-8 fixed), kept from the
     * last round: a stack that did not change is not formatted again.
     * Swept once the last thread of a round is encoded. NULL: none. */
    ss_stack_memo *memo;
} ss_logs_encoder;

void ss_logs_encoder_init(ss_logs_encoder *e);
void ss_logs_encoder_free(ss_logs_encoder *e);

/* Encode the threads of round r from index `first` as one request: one
 * LogRecord per thread, at most max_records of them and at most max_bytes
 * packed, appended to out (reset first). *n_records gets the number of
 * records in the request, *n_dropped the threads skipped because a single
 * record alone exceeds max_bytes. Returns the number of threads consumed
 * (records + dropped; 0 only when first >= n_threads), or -ENOMEM. */
int ss_logs_encode(ss_logs_encoder *e, const ss_otlp_resource *res, const ss_round *r,
                   uint32_t first, uint32_t max_records, size_t max_bytes,
                   uint64_t observed_ns, ss_buf *out, uint32_t *n_records,
                   uint32_t *n_dropped);

/* STACKSHOT_LOGS_FORMAT=pprof, Splunk's later format: the whole round as
 * one LogRecord whose body is base64(gzip(pprof)) (the pprof encoder of
 * exporters/common, wall view: every thread of the round, labels
 * thread.name/id/state and trace_id/span_id), with attributes
 * com.splunk.sourcetype, profiling.data.format=pprof-gzip-base64,
 * profiling.data.type=cpu, profiling.data.total.frame.count,
 * profiling.instrumentation.source=continuous, source.event.period; no
 * trace/span id on the record. Resets and fills out. 0, -ENOMEM or
 * -ENODATA (nothing to encode). */
int ss_logs_encode_pprof(ss_logs_encoder *e, const ss_otlp_resource *res, ss_round *r,
                         uint64_t observed_ns, ss_buf *out);

#endif /* SS_OTLP_LOGS_H */
