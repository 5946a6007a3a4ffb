/* registry.c: the exporter table, one row per exporter.
 *
 * Configuration (STACKSHOT_EXPORTERS names, the option-string key check),
 * the start-up line and the fan-out all iterate this table: adding an
 * exporter is its own folder and one row here. Row i is bit 1u << i of
 * ss_config.exporters; the order is the order exporters start and are
 * listed in. An exporter that is a module (its heavy library mapped only
 * when it is configured: stackshot_module(... EXPORTER ...) in its
 * CMakeLists.txt) names its module instead of its ops.
 *
 * Compiled with SS_EXPORTER_TABLE_ONLY (the configuration fuzzers), the
 * rows keep their names and keys but no ops, so nothing else of exporters/
 * needs to be linked. */
#include "agent/exporter.h"
#include "exporters/ss_exporters.h"

#ifdef SS_EXPORTER_TABLE_ONLY
#define OPS(x) NULL
#define CHECK(x) NULL
#else
#include "exporters/otlp/otlp.h"
#define OPS(x) (&(x))
#define CHECK(x) (x)
/* the OTLP exporters' destinations, checked before anything starts */
static int check_logs(void) { return ss_otlp_endpoint_check("LOGS"); }
static int check_profiles(void) { return ss_otlp_endpoint_check("PROFILES"); }
extern const ss_exporter_ops ss_text_exporter;
extern const ss_exporter_ops ss_otlp_logs_exporter;
extern const ss_exporter_ops ss_otlp_profiles_exporter;
extern const ss_exporter_ops ss_qubership_exporter;
extern const ss_exporter_ops ss_qubership_dumps_exporter;
extern const ss_exporter_ops ss_pprof_exporter;
extern const ss_exporter_ops ss_flamegraph_exporter;
#endif

/* A NULL-terminated list of configuration keys (static storage). */
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The OpenTelemetry exporter variables of one signal, and the general
 * ones every OTLP signal reads (exporters/otlp/endpoint.c). */
#define OTLP_KEYS(SIGNAL)                                                                     \
    "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_ENDPOINT",          \
        "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_CERTIFICATE",                     \
        "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",            \
        "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_COMPRESSION",                      \
        "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_PROTOCOL",                         \
        "OTEL_EXPORTER_OTLP_" SIGNAL "_ENDPOINT", "OTEL_EXPORTER_OTLP_" SIGNAL "_INSECURE",   \
        "OTEL_EXPORTER_OTLP_" SIGNAL "_CERTIFICATE", "OTEL_EXPORTER_OTLP_" SIGNAL "_CLIENT_KEY", \
        "OTEL_EXPORTER_OTLP_" SIGNAL "_CLIENT_CERTIFICATE",                                  \
        "OTEL_EXPORTER_OTLP_" SIGNAL "_HEADERS", "OTEL_EXPORTER_OTLP_" SIGNAL "_COMPRESSION", \
        "OTEL_EXPORTER_OTLP_" SIGNAL "_TIMEOUT", "OTEL_EXPORTER_OTLP_" SIGNAL "_PROTOCOL",   \
        "STACKSHOT_OTLP_RETRY_INITIAL", "STACKSHOT_OTLP_RETRY_MAX",                          \
        "STACKSHOT_OTLP_RETRY_ATTEMPTS", "STACKSHOT_OTLP_FORK_ENDPOINT", "SPLUNK_ACCESS_TOKEN", \
        "STACKSHOT_SHUTDOWN_UNPROVEN", "STACKSHOT_GRPC_HELPER"

/* The export period of exporters/profiles. */
#define PERIOD_KEYS "STACKSHOT_PROFILES_PERIOD"

const ss_exporter_def ss_exporter_table[] = {
    {.name = "text", .ops = OPS(ss_text_exporter), .keys = KEYS("STACKSHOT_OUTPUT_DIR")},
    {.name = "otlp_logs",
     .ops = OPS(ss_otlp_logs_exporter),
     .check = CHECK(check_logs),
     .keys = KEYS(OTLP_KEYS("LOGS"), "SPLUNK_PROFILER_LOGS_ENDPOINT", "SPLUNK_REALM",
                  "STACKSHOT_LOGS_FORMAT",
                  "STACKSHOT_LOGS_BATCH_SIZE")},
    {.name = "otlp_profiles",
     .ops = OPS(ss_otlp_profiles_exporter),
     .check = CHECK(check_profiles),
     .keys = KEYS(OTLP_KEYS("PROFILES"), PERIOD_KEYS, "STACKSHOT_PROFILES_VERSION",
                  "STACKSHOT_PROFILES_METHOD", "STACKSHOT_PROFILES_TIMESTAMPS")},
    {.name = "qubership",
     .ops = OPS(ss_qubership_exporter),
     .keys = KEYS("REMOTE_DUMP_HOST", "REMOTE_DUMP_PORT_PLAIN", "CLOUD_NAMESPACE",
                  "MICROSERVICE_NAME", "POD_NAME", "NAMESPACE", "NC_DIAGNOSTIC_FOLDER",
                  "REMOTE_DUMP_PORT_SSL", "TLS_CERT_DIR", "NC_DIAGNOSTIC_KEYSTORE",
                  "TLS_KEYSTORE_PATH", "NC_DIAGNOSTIC_KEYSTORE_PASSWD", "TLS_KEYSTORE_PWD",
                  "STACKSHOT_QUBERSHIP_TLS_VERIFY", "STACKSHOT_QUBERSHIP_WINDOW",
                  "STACKSHOT_QUBERSHIP_SUSPEND_THRESHOLD", "STACKSHOT_QUBERSHIP_TIMEOUT",
                  "STACKSHOT_QUBERSHIP_RECONNECT")},
    {.name = "pprof", .ops = OPS(ss_pprof_exporter), .keys = KEYS("STACKSHOT_OUTPUT_DIR", PERIOD_KEYS)},
    {.name = "flamegraph",
     .ops = OPS(ss_flamegraph_exporter),
     .keys = KEYS("STACKSHOT_OUTPUT_DIR", PERIOD_KEYS, "STACKSHOT_FLAMEGRAPH_VIEW")},
    {.name = "zorka",
     .module = "zorka", /* libstackshot-zorka.so (libcbor) */
     .keys = KEYS("STACKSHOT_ZORKA_URL", "STACKSHOT_ZORKA_PERIOD", "STACKSHOT_ZORKA_TIMEOUT",
                  "STACKSHOT_ZORKA_RETRIES", "STACKSHOT_ZORKA_CERTIFICATE",
                  "STACKSHOT_ZORKA_CLIENT_CERTIFICATE", "STACKSHOT_ZORKA_CLIENT_KEY",
                  "STACKSHOT_ZORKA_INSECURE", "OTEL_SERVICE_NAME")},
    /* runs along with "qubership" (diagtools' part of a Qubership agent) */
    {.name = "qubership_dumps",
     .ops = OPS(ss_qubership_dumps_exporter),
     .with = "qubership",
     .keys = KEYS("NC_DIAGNOSTIC_AGENT_SERVICE", "TLS_ENABLED", "TLS_CERT_DIR", "CLOUD_NAMESPACE",
                  "NAMESPACE", "POD_NAME", "NC_DIAGNOSTIC_FOLDER", "NC_DIAGNOSTIC_LOGS_FOLDER",
                  "NC_DIAGNOSTIC_THREADDUMP_ENABLED", "NC_DIAGNOSTIC_TOP_ENABLED",
                  "DIAGNOSTIC_CENTER_DUMPS_ENABLED", "NC_DIAGNOSTIC_DUMPS_ENABLED",
                  "DIAGNOSTIC_DUMP_INTERVAL", "DIAGNOSTIC_SCAN_INTERVAL",
                  "DIAGNOSTIC_UPLOAD_TIMEOUT", "NC_HEAP_DUMP_COMPRESSION_LEVEL")},
    {.name = NULL},
};
