/*
 * qb_module.h: what libstackshot-qubership.so hands the core: one table of
 * functions, behind qb_tls_* (qb.h) and qb_zip_file (dumps.h), which
 * module_api.c implements in the core. The module holds the two files
 * that need a heavy library: tls.c (OpenSSL, TLS to the collector) and
 * zip.c (minizip, heap dump archives); a process that needs neither maps
 * neither. Private to exporters/qubership.
 *
 * The module and the core are built together from one tree, so the table
 * and the types it passes have one layout; `size` guards against a module
 * file of another build.
 */
#ifndef SS_QB_MODULE_H
#define SS_QB_MODULE_H

#include "exporters/qubership/qb.h"

typedef struct qb_module {
    size_t size; /* sizeof(qb_module) of the module */
    qb_tls_ctx *(*tls_ctx_new)(char *why, size_t n);
    void (*tls_ctx_free)(qb_tls_ctx *t);
    qb_tls *(*tls_new)(qb_tls_ctx *ctx, int fd, const char *host);
    int (*tls_handshake)(qb_tls *t, char *why, size_t n);
    ssize_t (*tls_send)(qb_tls *t, const void *p, size_t n);
    ssize_t (*tls_recv)(qb_tls *t, void *p, size_t n);
    short (*tls_want)(const qb_tls *t);
    void (*tls_free)(qb_tls *t, bool graceful);
    int (*zip_file)(const char *src, const char *entry, const char *dst, int level,
                    _Atomic bool *stop, uint64_t *in_bytes, uint64_t *out_bytes);
} qb_module;

/* tls.c and zip.c, the module's side of the table */
qb_tls_ctx *qbm_tls_ctx_new(char *why, size_t n);
void qbm_tls_ctx_free(qb_tls_ctx *t);
qb_tls *qbm_tls_new(qb_tls_ctx *ctx, int fd, const char *host);
int qbm_tls_handshake(qb_tls *t, char *why, size_t n);
ssize_t qbm_tls_send(qb_tls *t, const void *p, size_t n);
ssize_t qbm_tls_recv(qb_tls *t, void *p, size_t n);
short qbm_tls_want(const qb_tls *t);
void qbm_tls_free(qb_tls *t, bool graceful);
int qbm_zip_file(const char *src, const char *entry, const char *dst, int level,
                 _Atomic bool *stop, uint64_t *in_bytes, uint64_t *out_bytes);

#endif
