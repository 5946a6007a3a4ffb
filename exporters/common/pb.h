/*
 * pb.h: a tiny protobuf writer, for the encoders of exporters/ (pprof,
 * OTLP logs and profiles), and the one protobuf reader, for what backends
 * answer (OTLP partial success, google.rpc.Status, RetryInfo).
 *
 * pprof and OTLP profiles are written field by field straight from the
 * aggregator's tables into one ss_buf: no intermediate message structs, no
 * allocation per element. A nested message is opened with pb_begin(), which
 * writes its tag and remembers where its body starts, and closed with
 * pb_end(), which slides the body right by the size of its length varint and
 * writes the length in front. The copy costs O(bytes x nesting depth), and
 * profile messages nest at most five deep.
 *
 * Errors are sticky in the ss_buf (b->failed); callers check once at the end.
 */
#ifndef SS_PROFILES_PB_H
#define SS_PROFILES_PB_H

#include "agent/buf.h"
#include "exporters/common/common.h"

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

void pb_varint(ss_buf *b, uint64_t v);               /* raw varint, no tag */
void pb_tag(ss_buf *b, uint32_t field, int wire_type);
/* Scalar fields; proto3 rules: callers skip zero values themselves when the
 * field is optional (the *_nz helpers do it). */
void pb_uint(ss_buf *b, uint32_t field, uint64_t v);  /* int32/int64/uint64/enum/bool */
void pb_uint_nz(ss_buf *b, uint32_t field, uint64_t v);
void pb_sint_as_int(ss_buf *b, uint32_t field, int64_t v); /* int64 (two's complement) */
void pb_fixed64(ss_buf *b, uint32_t field, uint64_t v);
void pb_fixed64_nz(ss_buf *b, uint32_t field, uint64_t v);
void pb_fixed32_nz(ss_buf *b, uint32_t field, uint32_t v); /* fixed32, skip 0 */
void pb_bytes(ss_buf *b, uint32_t field, const void *p, size_t n);
void pb_string(ss_buf *b, uint32_t field, const char *s);
void pb_string_nz(ss_buf *b, uint32_t field, const char *s); /* skip "" */

/* Nested message or packed repeated field. */
size_t pb_begin(ss_buf *b, uint32_t field);
void pb_end(ss_buf *b, size_t mark);

/* ---- reading: bytes from the network, every length checked ---------- */

/* The unread part of a message: [p, end). */
typedef struct pb_reader {
    const uint8_t *p, *end;
} pb_reader;

static inline pb_reader pb_reader_of(const void *p, size_t n) {
    return (pb_reader){(const uint8_t *)p, (const uint8_t *)p + (p ? n : 0)};
}
static inline bool pb_more(const pb_reader *r) { return r->p < r->end; }
static inline size_t pb_left(const pb_reader *r) { return (size_t)(r->end - r->p); }

/* Read the next field: its number (1 .. 2^29-1), wire type, and payload: a
 * varint in *value, a length-delimited field's bytes in *sub; fixed-width
 * payloads are skipped. False for a malformed field (a varint over 10
 * bytes, a length past the end, groups, unknown wire types): the caller
 * stops there. Never reads past r->end. */
bool pb_next(pb_reader *r, uint32_t *field, int *wire_type, uint64_t *value, pb_reader *sub);

#endif
