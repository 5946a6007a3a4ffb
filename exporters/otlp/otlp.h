/*
 * otlp.h: OTLP over gRPC, as the exporters of exporters/ use it.
 *
 * The OTLP logs exporter (this folder) and the OTLP profiles exporter
 * (exporters/profiles) share:
 *
 *   - endpoint configuration resolved per signal ("LOGS", "PROFILES") from
 *     the OTEL_EXPORTER_OTLP_* variables: target, TLS, headers, compression,
 *     timeout;
 *   - a gRPC unary client on gRPC C core: one channel, one completion queue,
 *     owned by the exporter thread that created it (not thread-safe);
 *   - the resource (service.name, process.*, host.name, telemetry.*), as a
 *     plain list, and its writer;
 *   - the retry policy: which status codes are retryable, backoff with
 *     jitter, RetryInfo from grpc-status-details-bin.
 *
 * Requests are written with the protobuf writer of exporters/common
 * (pb.h); the OTLP messages every signal shares (Resource, KeyValue,
 * InstrumentationScope) have their writers here (wire.c). The .proto files
 * of exporters/otlp/proto describe the wire for the tests, which decode
 * with code generated from them; the agent does not link protobuf-c.
 *
 * Nothing here may be called from a signal handler. gRPC lives in a module
 * (libstackshot-grpc.so, grpc_client.c), opened and initialised lazily by
 * the first ss_grpc_client_create, on the calling (exporter) thread.
 */
#ifndef SS_OTLP_H
#define SS_OTLP_H

#include "agent/buf.h"
#include "exporters/common/common.h"
#include "exporters/common/pb.h"

/* The opentelemetry-proto tag whose wire the .proto files of
 * exporters/otlp/proto follow (each file says so too). */
#define SS_OTLP_PROTO_TAG "v1.11.0"

/* ------------------------------------------------------------------ */
/* Endpoint configuration                                               */
/* ------------------------------------------------------------------ */

typedef struct ss_otlp_header {
    char *key;   /* lowercased: gRPC metadata keys must be lowercase */
    char *value; /* percent-decoded; never logged */
} ss_otlp_header;

typedef enum ss_otlp_compression {
    SS_OTLP_COMPRESS_NONE = 0,
    SS_OTLP_COMPRESS_GZIP = 1,
} ss_otlp_compression;

#define SS_OTLP_DEFAULT_ENDPOINT "http://localhost:4317"
#define SS_OTLP_DEFAULT_HTTP_ENDPOINT "http://localhost:4318"
/* Splunk Observability Cloud's ingest of profiling logs for SPLUNK_REALM
 * (docs/otlp.md, "Splunk Observability Cloud directly") */
#define SS_SPLUNK_INGEST_LOGS "https://ingest.%s.signalfx.com/v1/log"
#define SS_OTLP_DEFAULT_TIMEOUT_MS 10000

/* OTEL_EXPORTER_OTLP[_<SIGNAL>]_PROTOCOL */
typedef enum ss_otlp_protocol {
    SS_OTLP_GRPC = 0,          /* "grpc" (the default) */
    SS_OTLP_HTTP_PROTOBUF = 1, /* "http/protobuf" */
} ss_otlp_protocol;

typedef struct ss_otlp_endpoint {
    char signal[16];          /* "LOGS", "PROFILES" */
    ss_otlp_protocol protocol;
    char url[1024];           /* gRPC: the endpoint as configured; HTTP: the URL posted
                                 to; both without credentials or query (for messages) */
    char url_key[64];         /* the variable it came from, "" for the default */
    char target[1024];        /* "host:port" for gRPC C core (and messages) */
    char http_url[1024];      /* HTTP: the URL requests are POSTed to, as configured */
    char *ca_file;            /* HTTP: the paths of *_CERTIFICATE, ... */
    char *cert_file;          /* ... *_CLIENT_CERTIFICATE ... */
    char *key_file;           /* ... and *_CLIENT_KEY (NULL: none) */
    bool tls;                 /* https://, or no scheme and not INSECURE */
    bool skip_verify;         /* https:// and INSECURE=true: TLS, server not verified */
    char *root_certs_pem;     /* contents of *_CERTIFICATE; NULL: system roots */
    char *client_key_pem;     /* *_CLIENT_KEY contents (mTLS), or NULL */
    char *client_cert_pem;    /* *_CLIENT_CERTIFICATE contents (mTLS), or NULL */
    ss_otlp_header *headers;  /* *_HEADERS, per-signal entries win per key */
    size_t n_headers;
    ss_otlp_compression compression;
    uint32_t timeout_ms;      /* call deadline; 0 = none */
} ss_otlp_endpoint;

/* Resolve the endpoint of one signal ("LOGS" or "PROFILES") from the
 * configuration. The protocol: OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL, then
 * OTEL_EXPORTER_OTLP_PROTOCOL, grpc by default (http/json: one line,
 * http/protobuf). The endpoint is, first set wins: for LOGS
 * SPLUNK_PROFILER_LOGS_ENDPOINT, then OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT
 * (both used as they are), OTEL_EXPORTER_OTLP_ENDPOINT (HTTP: with the
 * signal's path appended), for LOGS SPLUNK_REALM (Splunk's ingest, over
 * OTLP/HTTP), the default: http://localhost:4317 for gRPC,
 * http://localhost:4318 + the signal's path for HTTP. SPLUNK_ACCESS_TOKEN
 * adds the header x-sf-token. Every other setting
 * has a per-signal variable that wins over the general one. Bad values get
 * one line each and a safe fallback (a malformed endpoint falls back to the
 * default endpoint). Returns 0, or -ENOMEM. Free with ss_otlp_endpoint_free. */
int ss_otlp_endpoint_load(ss_otlp_endpoint *ep, const char *signal);
/* Configuration time: are the signal's (LOGS, PROFILES) protocol and
 * endpoint usable? 0, or -EINVAL after one line saying the exporter is off
 * (a mistake never falls back to a default destination). */
int ss_otlp_endpoint_check(const char *signal);
/* The same, with the path the signal's requests take over OTLP/HTTP when
 * the endpoint is the general one (OTEL_EXPORTER_OTLP_ENDPOINT or the
 * default http://localhost:4318): "/v1/logs", "/v1development/profiles".
 * Signal-specific endpoints are used as they are (the specification's
 * rule). ss_otlp_endpoint_load uses /v1/logs for LOGS and
 * /v1development/profiles for PROFILES. */
int ss_otlp_endpoint_load_path(ss_otlp_endpoint *ep, const char *signal, const char *http_path);

/* A forked child cannot use gRPC: turn a gRPC endpoint into the OTLP/HTTP
 * one of STACKSHOT_OTLP_FORK_ENDPOINT (a base URL, http_path appended),
 * keeping the headers, compression, timeout and TLS files. 0; -ENOENT when
 * the variable is not set; -EINVAL after one line when it is not an
 * endpoint (the endpoint then stays as it was). */
int ss_otlp_endpoint_fork_http(ss_otlp_endpoint *ep, const char *http_path);
void ss_otlp_endpoint_free(ss_otlp_endpoint *ep);

/* Split an endpoint URL into a gRPC target and the TLS choice:
 * "http://h:p" plaintext, "https://h:p" TLS, "h:p" -> !insecure. A path
 * ("/"), if any, is ignored; a missing port becomes 4317 (http) or 443
 * (https). Returns 0 or -EINVAL (empty host, bad port, unknown scheme). */
int ss_otlp_parse_url(const char *url, bool insecure, char *target, size_t target_len,
                      bool *tls);

/* Percent-decode in[0..n) into out (NUL-terminated, out_len >= n + 1).
 * Returns the decoded length or -EINVAL for a bad escape ("%4", "%zz"). */
int ss_otlp_percent_decode(const char *in, size_t n, char *out, size_t out_len);

/* Parse "k1=v1,k2=v2" (W3C-baggage-like, OTEL_EXPORTER_OTLP_HEADERS): keys
 * trimmed and lowercased, values trimmed and percent-decoded. Appends to
 * *list (an existing key is replaced). A malformed item (no '=', empty key,
 * bad escape, illegal key characters) is skipped with one line naming
 * `key_name` but never its value. Returns the number of bad items, or
 * -ENOMEM. */
int ss_otlp_parse_headers(const char *key_name, const char *s, ss_otlp_header **list,
                          size_t *n);
void ss_otlp_headers_free(ss_otlp_header *list, size_t n);

/* ------------------------------------------------------------------ */
/* gRPC unary client                                                    */
/* ------------------------------------------------------------------ */

/* gRPC status codes (the numbers of grpc_status_code). */
enum {
    SS_GRPC_OK = 0,
    SS_GRPC_CANCELLED = 1,
    SS_GRPC_UNKNOWN = 2,
    SS_GRPC_INVALID_ARGUMENT = 3,
    SS_GRPC_DEADLINE_EXCEEDED = 4,
    SS_GRPC_NOT_FOUND = 5,
    SS_GRPC_ALREADY_EXISTS = 6,
    SS_GRPC_PERMISSION_DENIED = 7,
    SS_GRPC_RESOURCE_EXHAUSTED = 8,
    SS_GRPC_FAILED_PRECONDITION = 9,
    SS_GRPC_ABORTED = 10,
    SS_GRPC_OUT_OF_RANGE = 11,
    SS_GRPC_UNIMPLEMENTED = 12,
    SS_GRPC_INTERNAL = 13,
    SS_GRPC_UNAVAILABLE = 14,
    SS_GRPC_DATA_LOSS = 15,
    SS_GRPC_UNAUTHENTICATED = 16,
};

/* "UNAVAILABLE", "OK", ... ("code 42" style for unknown numbers is not
 * returned: unknown codes give "UNKNOWN_CODE"). */
const char *ss_grpc_status_name(int code);

typedef struct ss_grpc_client ss_grpc_client;

typedef struct ss_grpc_result {
    int status;               /* SS_GRPC_*; local failures map to a code too */
    char message[256];        /* grpc-message, or why the call failed locally */
    ss_buf response;          /* response message bytes (only when status OK) */
    ss_buf details;           /* the grpc-status-details-bin trailer, if any */
    bool has_retry_delay;     /* RetryInfo found in grpc-status-details-bin */
    uint64_t retry_delay_ns;
} ss_grpc_result;

/* Create a client for ep (opening the gRPC module, libstackshot-grpc.so,
 * and initialising gRPC on first use): one channel to ep->target with the
 * TLS credentials, compression and user agent ("stackshot/<version>") of
 * ep, and the headers sent as metadata on every call. ep is copied. NULL
 * on failure (one line says why, naming `who`); *err is then -ENOPKG when
 * the module could not be opened, else -EIO. */
ss_grpc_client *ss_grpc_client_create(const ss_otlp_endpoint *ep, const char *who, int *err);

/* One unary call of method_path ("/opentelemetry.proto.collector.logs.v1.
 * LogsService/Export") with the packed request bytes; waits for the answer
 * until deadline_ns (monotonic, 0 = none). Fills *result (call
 * ss_grpc_result_init before, ss_grpc_result_free after). Returns the
 * status code (also in result->status). Blocks the calling thread only. */
int ss_grpc_unary(ss_grpc_client *c, const char *method_path, const void *bytes, size_t len,
                  uint64_t deadline_ns, ss_grpc_result *result);

/* gRPC starts its threads lazily (some long after the first call); they
 * inherit the exporter thread's all-blocked signal mask. This registers
 * every thread with exactly that mask as internal (ss_internal_thread_add)
 * so samplers leave it out. Cheap when no thread appeared (one stat);
 * ss_grpc_unary calls it after each call, exporters from their tick. */
void ss_grpc_client_note_threads(ss_grpc_client *c);

/* The same call without blocking: ss_grpc_call_start sends it (NULL when
 * it fails locally: *result then says why), ss_grpc_call_poll waits at
 * most wait_ns (0: only look; UINT64_MAX: until it ends) and returns true
 * once the call has ended, with *result filled and the call freed. One
 * call in flight per client. ss_grpc_call_cancel ends a call in flight
 * (result CANCELLED) and frees it. */
typedef struct ss_grpc_call ss_grpc_call;
ss_grpc_call *ss_grpc_call_start(ss_grpc_client *c, const char *method_path,
                                 const void *bytes, size_t len, uint64_t deadline_ns,
                                 ss_grpc_result *result);
bool ss_grpc_call_poll(ss_grpc_client *c, ss_grpc_call *call, uint64_t wait_ns,
                       ss_grpc_result *result);
void ss_grpc_call_cancel(ss_grpc_client *c, ss_grpc_call *call, ss_grpc_result *result);

void ss_grpc_result_init(ss_grpc_result *r);
void ss_grpc_result_free(ss_grpc_result *r);

/* The process that initialised gRPC (in its helper process or with the
 * module), 0 if none did. In a forked child it is the parent's pid: gRPC
 * is not used there. */
pid_t ss_grpc_started_in(const char *who);
/* The agent leaves the process for good: gRPC's threads end if gRPC was
 * initialised for the agent alone (nothing if it never was). */
void ss_grpc_release(void);

/* Close the channel and free the client. gRPC itself stays initialised
 * (its threads are shared; shutting it down from an exiting agent risks
 * the host's own use). */
void ss_grpc_client_destroy(ss_grpc_client *c);

/* Decode a serialized google.rpc.Status (the grpc-status-details-bin
 * trailer) and find a google.rpc.RetryInfo among its details. Returns true
 * and sets *delay_ns when one is there. Never reads past n. */
bool ss_grpc_decode_retry_info(const uint8_t *p, size_t n, uint64_t *delay_ns);

/* Decode the partial_success of an Export answer (ExportLogsServiceResponse,
 * ExportProfilesServiceResponse: partial_success=1{rejected=1 int64,
 * error_message=2 string}) from its bytes: *rejected (0 when absent) and
 * the message as a C string cut to msg_len - 1 bytes ("" when absent).
 * Returns 0, or -EINVAL for malformed bytes (then 0 and ""). Never reads
 * past n nor writes past msg_len. */
int ss_otlp_decode_partial_success(const uint8_t *p, size_t n, int64_t *rejected, char *msg,
                                   size_t msg_len);

/* Decode a google.rpc.Status (code=1 int32, message=2 string; what an
 * OTLP/HTTP receiver puts in the body of a failure): *code (0 when absent)
 * and the message, as above. 0, or -EINVAL for malformed bytes (then 0 and
 * ""). Never reads past n nor writes past msg_len. */
int ss_otlp_decode_status(const uint8_t *p, size_t n, int32_t *code, char *msg, size_t msg_len);

/* ------------------------------------------------------------------ */
/* Retry policy                                                         */
/* ------------------------------------------------------------------ */

typedef struct ss_retry_policy {
    uint64_t initial_ns;   /* first backoff (default 1 s) */
    uint64_t max_ns;       /* cap on one backoff (default 30 s) */
    uint32_t max_attempts; /* attempts in all, first one included (default 6) */
} ss_retry_policy;

typedef struct ss_retry_state {
    uint32_t attempts;     /* attempts made so far */
    uint64_t backoff_ns;   /* the current, un-jittered backoff */
} ss_retry_state;

/* The default policy (1 s initial, x2, 30 s max, 6 attempts). */
ss_retry_policy ss_retry_policy_default(void);

/* The default policy adjusted by STACKSHOT_OTLP_RETRY_INITIAL (ms, default
 * 1000), STACKSHOT_OTLP_RETRY_MAX (ms, default 30000) and
 * STACKSHOT_OTLP_RETRY_ATTEMPTS (default 6); bad values get one line and
 * the default. */
ss_retry_policy ss_retry_policy_load(void);

/* Is a call that ended with `status` worth retrying (spec: CANCELLED,
 * DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS; and
 * RESOURCE_EXHAUSTED only with RetryInfo)? */
bool ss_otlp_retryable(int status, bool has_retry_info);

/* After a failed attempt: may we try again, and after how long? Counts the
 * attempt in *st. The delay is the exponential backoff with full jitter in
 * [backoff/2, backoff], at least server_delay_ns (RetryInfo; 0 if none),
 * never above max_ns unless the server asked for more (its delay wins, but
 * is capped at 10 * max_ns). Returns false when attempts are exhausted.
 * `rnd` is a 64-bit random value (tests pass fixed ones). */
bool ss_retry_next(const ss_retry_policy *p, ss_retry_state *st, uint64_t server_delay_ns,
                   uint64_t rnd, uint64_t *delay_ns);

/* ------------------------------------------------------------------ */
/* Resource                                                             */
/* ------------------------------------------------------------------ */

typedef enum ss_attr_type {
    SS_ATTR_STRING = 0,
    SS_ATTR_INT = 1,
} ss_attr_type;

/* One attribute as a plain value. */
typedef struct ss_attr {
    char *key;
    ss_attr_type type;
    char *str;     /* SS_ATTR_STRING */
    int64_t i;     /* SS_ATTR_INT */
} ss_attr;

typedef struct ss_otlp_resource {
    ss_attr *attrs;        /* in order: OTEL_RESOURCE_ATTRIBUTES, then ours */
    size_t n_attrs;
} ss_otlp_resource;

/* Build the resource of this process: OTEL_RESOURCE_ATTRIBUTES (decoded;
 * any decoding error discards the whole variable with one line),
 * service.name (OTEL_SERVICE_NAME > service.name from the attributes >
 * "unknown_service:<exe name>"), process.pid, process.executable.name,
 * process.executable.path, process.command_line, process.runtime.* (JVM),
 * host.name, telemetry.sdk.name=stackshot, telemetry.sdk.language=cpp,
 * telemetry.sdk.version, telemetry.distro.name/.version. Attributes the
 * user set win over detected ones. Returns 0 or -ENOMEM. */
int ss_otlp_resource_build(ss_otlp_resource *r);
void ss_otlp_resource_free(ss_otlp_resource *r);

/* Look up an attribute by key (NULL if absent). */
const ss_attr *ss_otlp_resource_get(const ss_otlp_resource *r, const char *key);

/* Parse "k=v,k2=v2" (OTEL_RESOURCE_ATTRIBUTES) into a list, values
 * percent-decoded, keys and values trimmed. All or nothing: on a decoding
 * error (no '=', empty key, bad escape) nothing is returned and
 * -EINVAL is; -ENOMEM when out of memory. */
int ss_otlp_parse_resource_attributes(const char *s, ss_attr **list, size_t *n);
void ss_attrs_free(ss_attr *list, size_t n);

/* ------------------------------------------------------------------ */
/* The common OTLP messages, with the protobuf writer (wire.c)          */
/* ------------------------------------------------------------------ */

/* KeyValue{key=1, value=2 AnyValue{string_value=1 | int_value=3}} as field
 * `field` of the message being written. Strings are written as given (make
 * them valid UTF-8 first). */
void ss_otlp_put_kv_str(ss_buf *b, uint32_t field, const char *key, const char *s, size_t len);
void ss_otlp_put_kv_int(ss_buf *b, uint32_t field, const char *key, int64_t v);
/* AnyValue{string_value=1} as field `field`. */
void ss_otlp_put_any_str(ss_buf *b, uint32_t field, const char *s, size_t len);
/* Resource{attributes=1} with every attribute of r, as field `field`. */
void ss_otlp_put_resource(ss_buf *b, uint32_t field, const ss_otlp_resource *r);
/* InstrumentationScope{name=1, version=2} as field `field`. */
void ss_otlp_put_scope(ss_buf *b, uint32_t field, const char *name, const char *version);

/* ------------------------------------------------------------------ */
/* UTF-8                                                                */
/* ------------------------------------------------------------------ */

/* proto3 strings must be valid UTF-8 (Go receivers reject the request).
 * ss_utf8_fix replaces, in place, every byte of an invalid sequence of
 * s[0..n) (stray continuation bytes, overlongs, surrogates such as Java's
 * modified UTF-8 makes, truncated sequences) with '?'; returns how many. */
size_t ss_utf8_fix(char *s, size_t n);
bool ss_utf8_valid(const char *s, size_t n);

#endif /* SS_OTLP_H */
