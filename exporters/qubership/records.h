/*
 * records.h: the records of the Qubership streams (spec §4), and the
 * writers the agent's streams use to turn them into bytes. The readers
 * (tools/stackshot-dump/decode.h) decode streams into the same records:
 * only the decoder, the tests and the fuzzers read streams, so the reading
 * half is not linked into the agent.
 *
 * The decoders work on one rolling file held in memory, already without
 * phrase headers (ss_qb_unphrase strips them and remembers the phrase
 * sizes, so a re-encode can reproduce the framing). Strings point into the
 * input (ss_qb_str), so the input must outlive the decoded records.
 *
 * Every decoder consumes the whole input or fails with -EBADMSG and the
 * offset of the first record it could not read: hostile input never
 * crashes, never reads out of bounds, never allocates without bound
 * (every count is checked against the bytes left).
 */
#ifndef SS_QB_RECORDS_H
#define SS_QB_RECORDS_H

#include "agent/buf.h"
#include "exporters/qubership/codec.h"

#define SS_QB_CALLS_MAGIC 0xFFFEFDFCu

typedef enum ss_qb_stream {
    SS_QB_UNKNOWN = 0,
    SS_QB_DICTIONARY,
    SS_QB_POS_DICTIONARY,
    SS_QB_PARAMS,
    SS_QB_SUSPEND,
    SS_QB_CALLS,
    SS_QB_TRACE,
    SS_QB_SQL,
    SS_QB_XML,
} ss_qb_stream;

/* ---- records ------------------------------------------------------- */

typedef struct ss_qb_word {
    uint32_t id;
    uint32_t offset; /* in the unframed stream */
    ss_qb_str word;
} ss_qb_word;

typedef struct ss_qb_param {
    ss_qb_str name;
    uint8_t index, list;
    uint32_t order;
    ss_qb_str signature;
} ss_qb_param;

typedef struct ss_qb_suspend_rec {
    uint32_t delta;
    uint32_t duration;
    int64_t end_ms; /* absolute end of the pause */
} ss_qb_suspend_rec;

typedef struct ss_qb_call_param {
    uint32_t id;
    uint32_t count;
    ss_qb_str *values;
} ss_qb_call_param;

typedef struct ss_qb_call {
    uint32_t offset;      /* of the record in the calls file */
    int32_t time;         /* zigzag delta */
    int64_t start_ms;     /* absolute start */
    uint32_t method;
    uint64_t duration;
    uint32_t calls;
    uint32_t thread_index;
    bool has_name;        /* the name followed (first appearance) */
    ss_qb_str thread_name;/* resolved from the thread table */
    uint32_t logs_written, logs_diff;
    uint32_t trace_file_index, buffer_offset, record_index;
    uint64_t cpu, wait, memory;
    uint64_t file_read, file_written, net_read, net_written;
    uint32_t transactions, queue_wait;
    uint32_t n_params;
    ss_qb_call_param *params;
} ss_qb_call;

typedef enum ss_qb_event_type {
    SS_QB_ENTER = 0,
    SS_QB_EXIT = 1,
    SS_QB_TAG = 2,
    SS_QB_FINISH = 3,
} ss_qb_event_type;

enum { SS_QB_PARAM_INLINE = 0, SS_QB_PARAM_BIG = 1, SS_QB_PARAM_INDEX = 2,
       SS_QB_PARAM_BIG_DEDUP = 3 };

typedef struct ss_qb_event {
    uint8_t type;
    uint8_t param_type;
    bool extended;         /* the delta had an extension varint */
    int32_t delta;
    int64_t time_ms;       /* absolute: file header + running sum */
    uint32_t id;           /* ENTER: method; TAG: tag id */
    ss_qb_str value;       /* TAG inline/index */
    uint32_t file_index;   /* TAG big/dedup */
    uint32_t value_offset;
} ss_qb_event;

typedef struct ss_qb_chunk {
    uint32_t offset;       /* of the chunk in the trace file */
    int64_t thread_id;
    int64_t real_time;
    uint32_t first_event;  /* index into the trace's events */
    uint32_t n_events;     /* FINISH excluded */
} ss_qb_chunk;

typedef struct ss_qb_value {
    uint32_t offset;
    ss_qb_str value;
} ss_qb_value;

/* One decoded rolling file of any stream. */
typedef struct ss_qb_file {
    ss_qb_stream type;
    ss_buf payload;          /* the unframed bytes the records point into */
    uint32_t *phrases;       /* phrase sizes (phrase streams read framed) */
    size_t n_phrases;
    bool framed;
    int err;                 /* 0 or -EBADMSG */
    size_t err_offset;       /* where decoding stopped */
    /* dictionary / posDictionary */
    ss_qb_word *words;
    size_t n_words;
    /* params */
    uint8_t params_version;
    ss_qb_param *params;
    size_t n_params;
    /* suspend */
    int64_t suspend_base;
    ss_qb_suspend_rec *suspends;
    size_t n_suspends;
    /* calls */
    uint32_t calls_format;
    int64_t calls_start;
    ss_qb_call *calls;
    size_t n_calls;
    /* trace */
    int64_t trace_start;
    ss_qb_chunk *chunks;
    size_t n_chunks;
    ss_qb_event *events;
    size_t n_events;
    /* sql / xml */
    ss_qb_value *values;
    size_t n_values;
} ss_qb_file;

/* Write one record of each kind (used by the agent's stream writers and
 * by the re-encoder, tools/stackshot-dump/reencode.c). */
void ss_qb_write_call(ss_buf *b, const ss_qb_call *c, uint32_t format);
void ss_qb_write_event(ss_buf *b, const ss_qb_event *e);

#endif /* SS_QB_RECORDS_H */
