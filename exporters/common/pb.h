/*
 * pb.h: a tiny protobuf writer, for the encoders of exporters/ (pprof,
 * OTLP profiles).
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

#include "common.h"

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
void pb_bytes(ss_buf *b, uint32_t field, const void *p, size_t n);
void pb_string(ss_buf *b, uint32_t field, const char *s);
void pb_string_nz(ss_buf *b, uint32_t field, const char *s); /* skip "" */

/* Nested message or packed repeated field. */
size_t pb_begin(ss_buf *b, uint32_t field);
void pb_end(ss_buf *b, size_t mark);

#endif
