/* registry.c: the exporters compiled into this build, by STACKSHOT_EXPORTERS bit. */
#include "ss_exporters.h"

extern const ss_exporter_ops ss_text_exporter;
extern const ss_exporter_ops ss_otlp_logs_exporter;
extern const ss_exporter_ops ss_qubership_exporter;
extern const ss_exporter_ops ss_pprof_exporter;
extern const ss_exporter_ops ss_flamegraph_exporter;
extern const ss_exporter_ops ss_otlp_profiles_exporter;
extern const ss_exporter_ops ss_zorka_exporter;

const ss_exporter_ops *ss_exporter_find(uint32_t bit) {
    switch (bit) {
    case SS_EXPORT_TEXT:
        return &ss_text_exporter;
    case SS_EXPORT_OTLP_LOGS:
        return &ss_otlp_logs_exporter;
    case SS_EXPORT_QUBERSHIP:
        return &ss_qubership_exporter;
    case SS_EXPORT_PPROF:
        return &ss_pprof_exporter;
    case SS_EXPORT_FLAMEGRAPH:
        return &ss_flamegraph_exporter;
    case SS_EXPORT_OTLP_PROFILES:
        return &ss_otlp_profiles_exporter;
    case SS_EXPORT_ZORKA:
        return &ss_zorka_exporter;
    default:
        return NULL;
    }
}
