/*
 * zorka.h: the "zorka" exporter (private to exporters/zorka/).
 *
 * Sampled stacks become Zorka trace records and go to a ZICO collector as
 * Gen C CBOR over HTTP (specs/zorka-wire.md §2-§7), the way a Zorka agent
 * talks to it:
 *
 *   traces.c   rounds -> traces: per thread, consecutive samples that share
 *              their root frame make one record tree (a record per frame
 *              and run of samples), closed at the end of each period;
 *   session.c  what the collector knows in this session: symbol and
 *              method IDs, "already sent" marks, reset;
 *   encode.c   one trace -> the agd body (new definitions) and the trc
 *              body (the records), with libcbor (the only libcbor user);
 *   sender.c   its own thread: the HTTP exchange (agd then trc on one
 *              kept-alive connection), session reset and backoff, drops;
 *   exporter.c the exporter's ops and configuration.
 *
 * Threads: traces.c runs on the exporter thread; session.c and encode.c on
 * the sender's; a closed trace is immutable and passes from one to the
 * other through the sender's queue.
 */
#ifndef SS_ZORKA_H
#define SS_ZORKA_H

#include "agent/module_abi.h"
#include "exporters/common/http_client.h"

/* ---- traces (traces.c) ---------------------------------------------------- */

#define ZK_LINES 4              /* distinct source lines kept per record */
#define ZK_MAX_RECORDS 65536    /* a trace closes when it has this many records */

/* One record: one frame over a run of consecutive samples. */
typedef struct zk_rec {
    const ss_funcinfo *fn;
    const ss_mapping *map;  /* native frames: the module, or NULL */
    uint32_t depth;         /* 0: the root */
    uint32_t first;         /* the trace's sample index where it appeared */
    uint32_t samples;       /* consecutive samples it was seen in */
    int32_t lines[ZK_LINES];/* distinct lines > 0, in order of first sight */
    uint8_t n_lines;
    bool more_lines;        /* more distinct lines than kept */
} zk_rec;

/* One trace: a root record and its subtree, records in pre-order. Closed
 * traces are immutable. */
typedef struct zk_trace {
    struct zk_trace *next;  /* the sender's queue */
    uint64_t start_ns;      /* wall clock of the first sample, epoch ns */
    uint64_t interval_ns;   /* what one sample stands for */
    uint32_t n_samples;
    uint64_t round_lo, round_hi; /* the consumed rounds its samples came from */
    uint32_t n_recs, cap_recs;
    zk_rec *recs;
    char *thread_name;
    int64_t thread_id;      /* Java thread id; native: the kernel tid */
    char state[64];         /* the state seen in most samples, "TIMED_WAITING (sleeping)" */
    bool has_span;
    uint8_t trace_id[16];   /* the thread's span context, when has_span */
    uint8_t span_id[8];
    uint8_t header_id[16];  /* X-Zorka-Trace-ID: trace_id, or random */
    int64_t zorka_span;     /* TraceBegin's spanId: random, never 0 */
    size_t bytes;           /* charged to ss_mem */
} zk_trace;

void zk_trace_free(zk_trace *t);

typedef void (*zk_emit_fn)(void *owner, zk_trace *t);

typedef struct zk_builder zk_builder;

/* emit receives every closed trace (ownership passes). */
zk_builder *zk_builder_new(zk_emit_fn emit, void *owner);
void zk_builder_free(zk_builder *b);
/* Add every thread of a round, the exporter's round_no-th (1, 2, ...:
 * traces carry the numbers of their rounds, for ss_round_loss). */
void zk_builder_add_round(zk_builder *b, const ss_round *r, uint64_t round_no);
/* Close every open trace (the end of a period); forget threads that had
 * no sample since the previous call. */
void zk_builder_close_all(zk_builder *b);
/* Bytes held by open traces and the thread table. */
size_t zk_builder_bytes(const zk_builder *b);
/* Samples and traces the builder has taken in / emitted. */
uint64_t zk_builder_samples(const zk_builder *b);

/* The class, method and signature a frame is defined by in Zorka:
 * Java: class, method name, JVM descriptor ("()" when unknown); native:
 * the C++ namespace or class when there is one, else the module's file
 * name, the function, "()". The strings live as long as the agent. */
typedef struct zk_method_names {
    const char *cls, *method, *signature;
    const char *file; /* a source file worth an attribute, or NULL */
} zk_method_names;
void zk_names_of(const zk_rec *r, zk_method_names *out);

/* ---- the session (session.c) -------------------------------------------- */

#define ZK_MAX_SYMBOL 2097151u /* ZICO keeps symbol IDs in 21 bits (spec §14.1) */

typedef struct zk_session zk_session;

zk_session *zk_session_new(void);
void zk_session_free(zk_session *s);
/* Forget what the collector was told: "sent" marks cleared, method IDs
 * numbered from 1 again (spec §7.3); the next agd says Reset: true. */
void zk_session_reset(zk_session *s);
bool zk_session_reset_pending(const zk_session *s);
/* The collector accepted an agd: the reset is done. */
void zk_session_reset_done(zk_session *s);
/* The symbol ID of a string (allocated on first use; 0 when out of memory).
 * *define is set when the collector has not been sent it in this session
 * (the caller sends it now; it counts as sent from here on). */
uint32_t zk_session_symbol(zk_session *s, const char *text, bool *define);
/* The method ID of (class, method, signature) symbols, as symbol. */
uint32_t zk_session_method(zk_session *s, uint32_t cls, uint32_t name, uint32_t sig,
                           bool *define);
/* A shortcut to an ID defined in this session, keyed by two pointers to
 * things that never change (an interned function and its module; a string
 * literal and a marker): 0 when none. Every reset forgets them. */
uint32_t zk_session_shortcut(const zk_session *s, const void *a, const void *b);
void zk_session_remember(zk_session *s, const void *a, const void *b, uint32_t id);
/* Changes when symbol IDs start again from 1 (IDs handed out before are
 * void: encode again). */
uint32_t zk_session_epoch(const zk_session *s);
/* Lower the largest symbol ID (tests). */
void zk_session_set_max_symbol(zk_session *s, uint32_t max);
/* Bytes the session's tables hold. */
size_t zk_session_bytes(const zk_session *s);

/* ---- encoding (encode.c) -------------------------------------------------- */

/* Facts of the process that every trace carries. */
typedef struct zk_process {
    const char *host;
    const char *service;
    char pid[24];
} zk_process;

/* Encode trace t for session s: new definitions to agd, the records to
 * trc (both appended). 0, or -ENOMEM (the buffers' failed flag). */
int zk_encode_trace(zk_session *s, const zk_process *p, const zk_trace *t, ss_buf *agd,
                    ss_buf *trc);

/* Valid UTF-8 of at most max bytes from s (bad bytes become U+FFFD). */
void zk_utf8_clean(const char *s, size_t max, ss_buf *out);

/* ---- the sender (sender.c) ---------------------------------------------- */

typedef struct zk_sender_config {
    char base_url[1024];     /* without the trailing '/' */
    uint32_t timeout_ms;     /* one HTTP call */
    uint32_t retries;        /* after the first attempt (10) */
    uint32_t retry_ms;       /* the first backoff (125), doubled after each */
    size_t max_queued;       /* bytes of closed traces waiting at most */
    ss_http_tls tls;
    char ca_file[1024], cert_file[1024], key_file[1024];
    zk_process process;
} zk_sender_config;

typedef struct zk_sender zk_sender;

/* Starts the sender's thread, which creates the HTTP client. NULL (after
 * one line) when it cannot. */
zk_sender *zk_sender_start(const zk_sender_config *cfg, ss_exporter_stats *stats);
/* Queue a closed trace (ownership passes). Past max_queued the oldest
 * waiting traces are dropped and counted. Never blocks on the network. */
void zk_sender_push(zk_sender *s, zk_trace *t);
/* Send what is queued until deadline_ns (monotonic), cancel the call in
 * flight then, count what is left as dropped, stop and free. */
void zk_sender_stop(zk_sender *s, uint64_t deadline_ns);
/* The session ID (16 hex digits). */
const char *zk_sender_session_id(const zk_sender *s);

#endif /* SS_ZORKA_H */
