/*
 * grpc_module.h: what libstackshot-grpc.so (grpc_client.c, with gRPC C
 * core) hands the core: one table of functions, behind the ss_grpc_* API
 * of otlp.h (grpc.c). Private to exporters/otlp.
 *
 * The module and the core are built together from one tree, so the table
 * and the structs it passes (ss_otlp_endpoint, ss_grpc_result) have one
 * layout; `size` guards against a module file of another build.
 */
#ifndef SS_OTLP_GRPC_MODULE_H
#define SS_OTLP_GRPC_MODULE_H

#include "exporters/otlp/otlp.h"

typedef struct ss_grpc_module {
    size_t size; /* sizeof(ss_grpc_module) of the module */
    ss_grpc_client *(*client_create)(const ss_otlp_endpoint *ep);
    void (*client_destroy)(ss_grpc_client *c);
    void (*note_threads)(ss_grpc_client *c);
    /* result->details gets the grpc-status-details-bin trailer's bytes;
     * the core decodes them (the protobuf reader stays in the core). */
    ss_grpc_call *(*call_start)(ss_grpc_client *c, const char *method_path, const void *bytes,
                                size_t len, uint64_t deadline_ns, ss_grpc_result *result);
    bool (*call_poll)(ss_grpc_client *c, ss_grpc_call *call, uint64_t wait_ns,
                      ss_grpc_result *result);
    void (*call_cancel)(ss_grpc_client *c, ss_grpc_call *call, ss_grpc_result *result);
    /* The process that initialised gRPC, 0 if none did. */
    pid_t (*started_pid)(void);
    /* The agent leaves the process: if this module initialised gRPC here
     * and no client is left, grpc_shutdown (gRPC's threads end within
     * about a second, unless the host uses gRPC too); a later client
     * initialises it again. */
    void (*release)(void);
} ss_grpc_module;

/* The same table over the helper process stackshot-grpc-helper
 * (grpc_remote.c): its client_create, with who for the lines. NULL and
 * *err: -ENOEXEC when the helper cannot be used here (the module in the
 * process is then the way), -EIO when the helper could not make the
 * client (it said why), -ENOMEM. */
extern const ss_grpc_module ss_grpc_remote;
ss_grpc_client *ss_grpc_remote_create(const ss_otlp_endpoint *ep, const char *who, int *err);
/* A client of ss_grpc_remote whose helper ended and could not be started
 * again at the last call (not a failure of the client itself). */
bool ss_grpc_remote_unstartable(ss_grpc_client *c);
/* Its endpoint, decoded into ep (free with ss_otlp_endpoint_free): 0 or
 * -errno. */
int ss_grpc_remote_endpoint(ss_grpc_client *c, ss_otlp_endpoint *ep);

#endif
