/* module_entry.c: the one symbol libstackshot-qubership.so exports,
 * ss_module_qubership_entry: its table (qb_module.h). */
#include "agent/module_abi.h"
#include "exporters/qubership/qb_module.h"

static const qb_module module = {
    .size = sizeof(qb_module),
    .tls_ctx_new = qbm_tls_ctx_new,
    .tls_ctx_free = qbm_tls_ctx_free,
    .tls_new = qbm_tls_new,
    .tls_handshake = qbm_tls_handshake,
    .tls_send = qbm_tls_send,
    .tls_recv = qbm_tls_recv,
    .tls_want = qbm_tls_want,
    .tls_free = qbm_tls_free,
    .zip_file = qbm_zip_file,
};

__attribute__((visibility("default"))) const void *ss_module_qubership_entry(void) {
    return &module;
}
