/*
 * decode.h: readers of the Qubership streams (spec §4) into the records of
 * exporters/qubership/records.h, and the re-encoder that turns decoded
 * records back into the same bytes. Not linked into the agent.
 */
#ifndef SS_QB_DECODE_H
#define SS_QB_DECODE_H

#include "agent/buf.h"
#include "exporters/qubership/records.h"
#include "tools/stackshot-dump/codec_read.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

const char *ss_qb_stream_name(ss_qb_stream s);
/* From a stream name or a file name ("u5min-service.calls.0.bin"). */
ss_qb_stream ss_qb_stream_guess(const char *name);
bool ss_qb_stream_phrased(ss_qb_stream s);

/* ---- phrases ------------------------------------------------------- */

/* Does data look like a whole sequence of phrases (every header 1..10239,
 * ending exactly at len)? */
bool ss_qb_looks_phrased(const uint8_t *data, size_t len);
/* Strip phrase headers: payload bytes to *out, phrase sizes to *sizes
 * (array of uint32_t, malloc'd, *n_sizes). 0 or -EBADMSG. */
int ss_qb_unphrase(const uint8_t *data, size_t len, ss_buf *out, uint32_t **sizes,
                   size_t *n_sizes);

/* ---- files ---------------------------------------------------------- */

/* Decode one file. `framing`: 1 phrases, 0 none, -1 auto (phrase streams
 * only). The data is copied. Returns f->err. */
int ss_qb_decode(ss_qb_file *f, ss_qb_stream type, const uint8_t *data, size_t len,
                 int framing);
void ss_qb_file_free(ss_qb_file *f);

/* Re-encode the decoded records (the same phrase sizes when it was read
 * framed). For a file of real agent output that holds no long >= 2^28 the
 * result is byte-identical. */
int ss_qb_encode(const ss_qb_file *f, ss_buf *out);

/* Find the event of a chunk at (offset, record index); NULL if none. */
const ss_qb_event *ss_qb_trace_event_at(const ss_qb_file *trace, uint32_t offset,
                                        uint32_t record_index);

#endif /* SS_QB_DECODE_H */
