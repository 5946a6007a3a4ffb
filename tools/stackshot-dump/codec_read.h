/*
 * codec_read.h: reading the primitive encodings of the Qubership streams
 * (spec §2); exporters/qubership/codec.h has the writers, the agent's
 * half. Linked into the decoder, the tests and the fuzzers, never into
 * the agent.
 */
#ifndef SS_QB_CODEC_READ_H
#define SS_QB_CODEC_READ_H

#include "agent/buf.h"
#include "exporters/qubership/codec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- reader ---------------------------------------------------------- */

typedef struct ss_qb_reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int err; /* 0, or -EBADMSG after the first bad or short read */
} ss_qb_reader;

static inline void ss_qb_reader_init(ss_qb_reader *r, const void *p, size_t len) {
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->err = 0;
}
static inline size_t ss_qb_left(const ss_qb_reader *r) { return r->err ? 0 : r->len - r->pos; }

uint8_t ss_qb_get_u8(ss_qb_reader *r);
uint32_t ss_qb_get_be32(ss_qb_reader *r);
uint64_t ss_qb_get_be64(ss_qb_reader *r);
uint32_t ss_qb_get_varint(ss_qb_reader *r);   /* at most 5 bytes */
uint64_t ss_qb_get_varlong(ss_qb_reader *r);  /* at most 10 bytes */
int32_t ss_qb_get_zigzag(ss_qb_reader *r);
ss_qb_str ss_qb_get_varstring(ss_qb_reader *r);
/* Skip n bytes (bounds-checked). */
void ss_qb_skip(ss_qb_reader *r, size_t n);

/* Append a varstring's text as UTF-8 (unpaired surrogates become U+FFFD). */
void ss_qb_str_utf8(ss_qb_str s, ss_buf *out);
/* Does the varstring equal the ASCII/UTF-8 text? */
bool ss_qb_str_eq(ss_qb_str s, const char *utf8);

#endif /* SS_QB_CODEC_READ_H */
