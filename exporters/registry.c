/* registry.c: the exporters compiled into this build, by STACKSHOT_EXPORTERS bit. */
#include "ss_exporters.h"

extern const ss_exporter_ops ss_text_exporter;

const ss_exporter_ops *ss_exporter_find(uint32_t bit) {
    switch (bit) {
    case SS_EXPORT_TEXT:
        return &ss_text_exporter;
    default:
        return NULL;
    }
}
