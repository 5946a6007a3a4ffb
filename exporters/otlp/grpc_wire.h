/*
 * grpc_wire.h: the messages between the core and its gRPC helper process
 * (grpc_remote.c in the host, grpc_helper.c in stackshot-grpc-helper).
 * Private to exporters/otlp.
 *
 * One stream socket per client, one call at a time on each. The process
 * that started the helper (its owner) has the first (a socket pair);
 * the other processes of its session connect to the helper's name (a
 * listening socket in the abstract namespace, grpc_remote.c). A frame
 * is an 8-byte header (payload length, u32 little-endian; type, one
 * byte; three zero bytes) and its payload: u32 and u64 little-endian,
 * strings and byte runs as a u32 length and the bytes (length 0xffffffff:
 * a NULL string). Both ends are built from one tree: no versioning (a
 * helper's name holds its program's identity).
 *
 *   host -> helper   'E' endpoint     the client to make (ss_otlp_endpoint)
 *                    'S' start        u64 deadline (monotonic ns, 0 none),
 *                                     str method, bytes request
 *                    'X' cancel       the call in flight
 *                    'Q' quit         the owner leaves
 *   helper -> host   'e' created      u32 0 or errno (the helper drops
 *                                     the client after a failure), u32
 *                                     the helper's pid
 *                    'D' done         the call's ss_grpc_result
 *                    'L' log          u32 level, str line: the helper's
 *                                     lines, written by the host's log
 *                    'K' keeping on   after 'Q': other clients keep the
 *                                     helper; the owner must not wait for
 *                                     its end
 */
#ifndef SS_OTLP_GRPC_WIRE_H
#define SS_OTLP_GRPC_WIRE_H

#include "agent/buf.h"
#include "exporters/otlp/otlp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    SS_GW_ENDPOINT = 'E',
    SS_GW_START = 'S',
    SS_GW_CANCEL = 'X',
    SS_GW_QUIT = 'Q',
    SS_GW_CREATED = 'e',
    SS_GW_DONE = 'D',
    SS_GW_LOG = 'L',
    SS_GW_KEEPING = 'K',
};

#define SS_GW_HEADER 8u
/* The largest payload either end accepts (an export request is a few
 * MiB at most: the batch limits of the senders). */
#define SS_GW_MAX_PAYLOAD (256u << 20)

/* Writing: begin a frame of a type at the end of b, put fields, end it
 * (writes the length). ss_gw_end: 0, or -ENOMEM when b failed. */
void ss_gw_begin(ss_buf *b, int type);
void ss_gw_u32(ss_buf *b, uint32_t v);
void ss_gw_u64(ss_buf *b, uint64_t v);
void ss_gw_bytes(ss_buf *b, const void *p, size_t n);
void ss_gw_str(ss_buf *b, const char *s); /* NULL kept as NULL */
int ss_gw_end(ss_buf *b, size_t begin);

/* Reading one frame's payload. A field past the end sets bad and reads
 * as zero / NULL. */
typedef struct ss_gw_reader {
    const uint8_t *p, *end;
    bool bad;
} ss_gw_reader;

void ss_gw_reader_init(ss_gw_reader *r, const void *payload, size_t n);
uint32_t ss_gw_get_u32(ss_gw_reader *r);
uint64_t ss_gw_get_u64(ss_gw_reader *r);
/* A run of bytes inside the payload (*n its length); NULL for a NULL
 * string or past the end. */
const void *ss_gw_get_bytes(ss_gw_reader *r, size_t *n);
/* A string, copied (malloc; NUL-terminated); NULL for NULL or failure. */
char *ss_gw_get_str(ss_gw_reader *r);
/* A string into a fixed array (cut to fit). */
void ss_gw_get_str_into(ss_gw_reader *r, char *out, size_t cap);

/* The endpoint and the result, field by field. get: 0 or -EPROTO /
 * -ENOMEM (what was filled is freed by the usual free functions). */
void ss_gw_put_endpoint(ss_buf *b, const ss_otlp_endpoint *ep);
int ss_gw_get_endpoint(ss_gw_reader *r, ss_otlp_endpoint *ep);
void ss_gw_put_result(ss_buf *b, const ss_grpc_result *res);
int ss_gw_get_result(ss_gw_reader *r, ss_grpc_result *res);

/* Send all of p before deadline_ns (monotonic; 0: no bound), without a
 * SIGPIPE. 0, -ETIMEDOUT, or -errno (-EPIPE: the other end is gone). */
int ss_gw_send(int fd, const void *p, size_t n, uint64_t deadline_ns);
/* Read until in holds a whole frame or deadline_ns passes (0: look only;
 * UINT64_MAX: no bound). 1: the first frame of in is whole (*type, and
 * its payload at in->data + SS_GW_HEADER, *payload_len long); 0: not yet;
 * -EPIPE: the other end closed; -EPROTO: a frame too large; -errno. */
int ss_gw_recv(int fd, ss_buf *in, uint64_t deadline_ns, int *type, size_t *payload_len);
/* Drop the first frame of in (after ss_gw_recv returned 1). */
void ss_gw_consume(ss_buf *in, size_t payload_len);

/* Whether the process at the other end of the unix socket fd (the one
 * that connected, or that listens) is of our effective user and group:
 * both ends check before they trust the other. */
bool ss_gw_peer_is_us(int fd);

#endif
