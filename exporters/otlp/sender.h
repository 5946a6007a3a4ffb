/*
 * sender.h: the one OTLP sender, used by every OTLP exporter (otlp_logs,
 * otlp_profiles). The exporters only encode; the sender delivers.
 *
 *   - a FIFO of encoded requests, charged to the agent's memory account:
 *     past STACKSHOT_MAX_MEMORY the oldest go (counted, said once per
 *     outage); the newest always stays;
 *   - merging: while requests wait behind the one being sent, a new one
 *     joins the newest waiting one, when the signal's requests merge by
 *     concatenation (logs: two serialized ExportLogsServiceRequests one
 *     after the other are one request), within a record and a byte limit;
 *   - one call in flight, never waited on for long: push and tick start
 *     the next call when one is due and look at the one in flight for at
 *     most 20 ms;
 *   - retries with exponential backoff and jitter, a server's delay
 *     (gRPC RetryInfo, HTTP Retry-After) as the floor;
 *   - partial success counted in records for every signal;
 *   - at close, what is held is delivered within the shutdown deadline and
 *     the rest counted as dropped; then the accounting line.
 *
 * The transport (gRPC or HTTP, transport.h) is chosen by the endpoint's
 * protocol. Used by one exporter thread only; nothing here locks.
 */
#ifndef SS_OTLP_SENDER_H
#define SS_OTLP_SENDER_H

#include "agent/exporter_stats.h"
#include "exporters/otlp/otlp.h"

/* What the sender needs to know of the signal it sends. */
typedef struct ss_otlp_signal {
    const char *who;         /* the exporter, as messages name it: "otlp_logs" */
    const char *signal;      /* its OTEL_EXPORTER_OTLP_<SIGNAL>_* variables: "LOGS" */
    const char *grpc_method; /* "/opentelemetry.proto.collector.logs.v1.LogsService/Export" */
    const char *http_path;   /* appended to a general endpoint for HTTP: "/v1/logs" */
    const char *items;       /* what the backend counts in a partial success: "records" */
    /* What a receiver that answers UNIMPLEMENTED (HTTP 404) lacks, after
     * "it is not an OTLP/gRPC receiver ": "with a logs pipeline". */
    const char *unimplemented;
    bool mergeable;          /* concatenated requests are one request */
    uint32_t max_records;    /* a merged request holds at most this many records */
    size_t max_request;      /* and at most this many bytes */
} ss_otlp_signal;

typedef struct ss_otlp_sender ss_otlp_sender;

/* Load the signal's endpoint and retry policy, open its transport (on the
 * calling exporter thread). 0, or -errno after one line (-ENOPKG: the
 * transport's module could not be opened). */
int ss_otlp_sender_open(ss_otlp_sender **out, const ss_otlp_signal *sig,
                        ss_exporter_stats *stats);

/* The endpoint in use (for the exporter's start-up line). */
const ss_otlp_endpoint *ss_otlp_sender_endpoint(const ss_otlp_sender *s);

/* Queue one encoded request (copied) of `records` records (the exporter's
 * unit, counted in the accounting line) holding `items` items (what the
 * backend counts: log records, profiles), made of the consumed rounds
 * round_lo..round_hi (ss_otlp_sender_round's numbers): when the request is
 * dropped or partly rejected, those rounds count as lost (ss_round_loss). */
void ss_otlp_sender_push(ss_otlp_sender *s, const void *bytes, size_t len, uint64_t records,
                         uint64_t items, uint64_t round_lo, uint64_t round_hi);

/* Send what is due (after a round's pushes). */
void ss_otlp_sender_pump(ss_otlp_sender *s);

/* For the accounting line: rounds the exporter consumed and the records it
 * took from them (each one exported, dropped or rejected in the end). */
void ss_otlp_sender_took(ss_otlp_sender *s, uint64_t rounds, uint64_t records);

/* The number of the round consumed last (1 for the first; 0: none yet). */
uint64_t ss_otlp_sender_round(const ss_otlp_sender *s);

/* The exporter lost `records` records of rounds round_lo..round_hi before
 * it could queue them (encoding failed, too large): counted as dropped. */
void ss_otlp_sender_lost(ss_otlp_sender *s, uint64_t records, uint64_t round_lo,
                         uint64_t round_hi);

/* Periodic work: the transport's threads, the memory cap, what is due. */
void ss_otlp_sender_tick(ss_otlp_sender *s);

/* Deliver what is held before deadline_ns (keeping a little of it for the
 * transport to end its call), count the rest as dropped, print the
 * accounting line, free. */
void ss_otlp_sender_close(ss_otlp_sender *s, uint64_t deadline_ns);

#endif /* SS_OTLP_SENDER_H */
