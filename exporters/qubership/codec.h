/*
 * codec.h: the primitive encodings of the Qubership profiler streams and
 * of its TCP protocol (specs/qubership-wire.md §2).
 *
 *   - big-endian fixed-width ints (every fixed int, stream or TCP);
 *   - varint / varlong: standard unsigned LEB128, 1-5 and 1-10 bytes;
 *   - zigzag (the calls record's time field only);
 *   - varstring: varint count of UTF-16 code units, then big-endian UTF-16;
 *   - phrase framing (4-byte length + whole records, L <= 10239).
 *
 * Writers append to an ss_buf (whose `failed` flag absorbs allocation
 * failures). The reader checks every length against what is left, so a
 * hostile or truncated input sets `err` and yields zeros; it never reads
 * out of bounds.
 */
#ifndef SS_QB_CODEC_H
#define SS_QB_CODEC_H

#include "agent/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SS_QB_MAX_PHRASE 10240           /* PhraseOutputStream buffer: L <= 10239 */
#define SS_QB_PHRASE_SOFT (10240 - 200)  /* commit threshold of the real agent */

/* ---- writers ------------------------------------------------------- */

void ss_qb_put_u8(ss_buf *b, uint8_t v);
void ss_qb_put_be32(ss_buf *b, uint32_t v);
void ss_qb_put_be64(ss_buf *b, uint64_t v);
void ss_qb_put_varint(ss_buf *b, uint32_t v);
/* Standard LEB128 over 64 bits: NOT the Java agent's long writer, which
 * drops the high bits of some values >= 2^28 (spec §2.5). */
void ss_qb_put_varlong(ss_buf *b, uint64_t v);
void ss_qb_put_zigzag(ss_buf *b, int32_t v);
/* A varstring from UTF-8: non-BMP characters become surrogate pairs and
 * invalid UTF-8 becomes U+FFFD, one per bad byte. */
void ss_qb_put_varstring(ss_buf *b, const char *utf8, size_t len);
static inline void ss_qb_put_cstring(ss_buf *b, const char *s) {
    ss_qb_put_varstring(b, s, strlen(s));
}
/* A varstring from raw big-endian UTF-16 (as read by the reader). */
void ss_qb_put_varstring_be16(ss_buf *b, const uint8_t *be16, uint32_t units);
/* TCP [S]/[F]: 4-byte big-endian byte count, then the bytes. */
void ss_qb_put_field(ss_buf *b, const void *p, uint32_t len);

/* Decode one UTF-8 scalar at s[0..n): returns the code point (U+FFFD for
 * an invalid sequence) and stores the bytes consumed (>= 1) in *used. */
uint32_t ss_qb_utf8_next(const unsigned char *s, size_t n, size_t *used);
/* How many UTF-16 code units the UTF-8 text takes. */
uint32_t ss_qb_utf16_units(const char *utf8, size_t len);

/* ---- phrase framing -------------------------------------------------- */

/* Records are added whole; a phrase is emitted (header + payload into
 * `out`) when the next record would pass the soft limit, and on flush.
 * A record of SS_QB_MAX_PHRASE bytes or more is refused (-EMSGSIZE). */
typedef struct ss_qb_phraser {
    ss_buf cur;
} ss_qb_phraser;

void ss_qb_phraser_init(ss_qb_phraser *p);
void ss_qb_phraser_free(ss_qb_phraser *p);
int ss_qb_phraser_add(ss_qb_phraser *p, const void *rec, size_t len, ss_buf *out);
void ss_qb_phraser_flush(ss_qb_phraser *p, ss_buf *out);

/* A varstring as read: `units` UTF-16 code units at `be16` (big-endian),
 * pointing into the reader's input. */
typedef struct ss_qb_str {
    const uint8_t *be16;
    uint32_t units;
} ss_qb_str;

#endif /* SS_QB_CODEC_H */
