/*
 * qb.h: the Qubership exporter's private pieces (this folder only).
 *
 *   dict.c     the dictionary: words -> ids, append-only, re-sent from 0
 *   session.c  the stream writers: per-stream pending bytes, file offsets
 *              and indexes, headers, calls thread table, rotation headers
 *   mapping.c  samples -> trace chunks + calls records, per thread and window
 *   reply.c    parsing the collector's replies (handshake, INIT, acks)
 *   client.c   the TCP client (non-blocking socket, deadlines)
 *   suspend.c  the pause detector thread
 *   exporter.c ss_exporter_ops glue
 */
#ifndef SS_QB_H
#define SS_QB_H

#include "agent/buf.h"
#include "agent/exporter_stats.h"
#include "agent/hmap.h"
#include "agent/round.h"
#include "exporters/qubership/records.h"
#include "agent/kept_fd.h"
#include "exporters/common/backend.h"

/* ---- dictionary ------------------------------------------------------ */

typedef struct qb_fn_id {
    const void *fn; /* an interned funcinfo */
    uint32_t id;
} qb_fn_id;

typedef struct qb_dict {
    char **words;          /* id -> UTF-8 word (owned) */
    uint32_t n, cap;
    ss_hmap ix;            /* word -> id */
    qb_fn_id *fns;         /* funcinfo pointer -> id cache */
    uint32_t n_fn, cap_fn;
    ss_hmap fn_ix;         /* funcinfo pointer -> index in fns */
    uint32_t sent;         /* words [0, sent) are in the current dictionary file */
    size_t bytes;          /* charged to ss_mem (the indexes charge their own) */
} qb_dict;

#define QB_NO_ID UINT32_MAX

void qb_dict_init(qb_dict *d);
void qb_dict_free(qb_dict *d);
/* The id of a word, adding it if new; QB_NO_ID when out of memory. */
uint32_t qb_dict_id(qb_dict *d, const char *word);
/* The id of a frame's method, in the Java agent's signature style:
 * "void <ns>.<name>() (<file>) [<module>]" (cached per funcinfo). */
uint32_t qb_dict_method(qb_dict *d, const ss_frame *f);
/* Format the method word of a frame into buf. */
void qb_method_word(const ss_frame *f, char *buf, size_t size);

/* ---- streams and the session ------------------------------------------ */

/* In the real agent's INIT order (spec §3.5, V2 reply). */
enum { QB_TRACE, QB_CALLS, QB_XML, QB_SQL, QB_DICT, QB_SUSPEND, QB_PARAMS, QB_NSTREAMS };

typedef struct qb_stream {
    const char *name;
    bool phrased;
    bool closed;            /* params: written once, then closed */
    ss_qb_phraser ph;
    ss_buf pending;         /* bytes for RCV_DATA, phrase headers included */
    uint64_t file_bytes;    /* unframed bytes of the current rolling file */
    uint32_t file_index;    /* rolling sequence id + 1; 0 before the first open */
    uint8_t handle[16];
    int64_t rotation_period_ms;
    int64_t required_size;
    uint64_t opened_ms;
    uint64_t local_limit;   /* rotate past this many bytes (0: never) */
} qb_stream;

/* One calls record, as the mapping produces it. */
typedef struct qb_call {
    int64_t start_ms;
    uint32_t method;
    uint64_t duration_ms;
    uint32_t enters;
    int64_t thread_number;
    const char *thread_name;
    uint32_t trace_file_index, buffer_offset, record_index;
    uint64_t cpu_ms, wait_ms, memory, file_read, file_written;
} qb_call;

typedef struct qb_session {
    qb_stream s[QB_NSTREAMS];
    qb_dict dict;
    int64_t start_ms;        /* agent start: trace header, first suspend base */
    int64_t suspend_last_ms; /* end of the last suspend record written */
    bool suspend_header_due; /* the header goes with the next record */
    int64_t calls_base_ms;   /* running time base of the calls file */
    int64_t *threads;        /* calls file thread table: thread numbers */
    uint32_t n_threads, cap_threads;
    uint32_t calls_written;  /* records since the last take */
    size_t charged;          /* pending bytes charged to ss_mem */
} qb_session;

void qb_session_init(qb_session *q, int64_t start_ms);
void qb_session_free(qb_session *q);
/* Forget every file (disconnect): pending bytes dropped, indexes 0. */
void qb_session_reset(qb_session *q);
/* Stream opened (or rotated) on the collector: adopt the reply and write
 * the new file's header (spec §5). */
void qb_session_opened(qb_session *q, int stream, const uint8_t handle[16],
                       int64_t period_ms, int64_t size, int32_t seq, uint64_t now_ms);
/* Append raw bytes to a stream's current file. */
void qb_session_write(qb_session *q, int stream, const void *p, size_t n);
/* Append one whole record to a phrase stream. */
int qb_session_record(qb_session *q, int stream, const void *p, size_t n);
/* Move words not yet sent into the dictionary stream. */
void qb_session_dict_sync(qb_session *q);
void qb_session_write_call(qb_session *q, const qb_call *c);
void qb_session_write_suspend(qb_session *q, int64_t end_ms, uint32_t duration_ms);
/* Emit the partial phrases (the agent's flush()). */
void qb_session_flush_phrases(qb_session *q);
/* Keep ss_mem in step with the pending bytes. */
void qb_session_account(qb_session *q);
/* Does the stream want a rotation (spec §5 triggers)? */
bool qb_session_rotation_due(const qb_session *q, int stream, uint64_t now_ms);
/* The params table this agent uses (version byte + rows). */
void qb_params_table(ss_buf *out);

/* ---- mapping ---------------------------------------------------------- */

typedef struct qb_map qb_map;

typedef struct qb_map_stats {
    uint64_t calls;      /* calls records written */
    uint64_t chunks;     /* trace chunks written */
    uint64_t idle;       /* thread-windows skipped as idle */
} qb_map_stats;

qb_map *qb_map_create(const char *node_name);
void qb_map_destroy(qb_map *m);
/* Add one round's samples (ms since the epoch = round->time_ns / 1e6). */
void qb_map_add_round(qb_map *m, qb_session *q, const ss_round *r);
/* Close the window: write chunks and calls records into the session. */
void qb_map_close_window(qb_map *m, qb_session *q, qb_map_stats *st);
/* Samples held (bytes, for the memory bound). */
size_t qb_map_bytes(const qb_map *m);

/* ---- replies ---------------------------------------------------------- */

#define QB_PROTOCOL_V2 100605LL
#define QB_PROTOCOL_V3 100705LL
#define QB_BLACKLISTED 88888888LL

enum {
    QB_CMD_RCV_DATA = 0x02,
    QB_CMD_CLOSE = 0x04,
    QB_CMD_REQUEST_ACK_FLUSH = 0x11,
    QB_CMD_REPORT_COMMAND_RESULT = 0x13,
    QB_CMD_GET_PROTOCOL_VERSION_V2 = 0x14,
    QB_CMD_INIT_STREAM_V2 = 0x15,
};

typedef struct qb_init_reply {
    uint8_t handle[16];
    int64_t rotation_period_ms;
    int64_t required_size;
    int32_t seq;
} qb_init_reply;

/* Handshake reply (8 bytes): 0 accepted, -EACCES blacklisted, -EPROTO. */
int qb_reply_handshake(const uint8_t *p, size_t len, int64_t *version);
/* INIT reply: bytes needed so far (16, then 36) is returned through
 * *need; 0 parsed, -EAGAIN need more, -EPROTO null handle. */
int qb_reply_init(const uint8_t *p, size_t len, qb_init_reply *r, size_t *need);
/* A diagnostic command in an ack: its id and its string ("td", "top",
 * "heap"; a longer one is cut, and is no known command either). */
typedef struct qb_reply_cmd {
    uint8_t id[16];
    char what[16];
} qb_reply_cmd;

/* Parse ack bytes: each ack is one byte, with n commands (UUID + [S])
 * after a byte 1..127. Consumes whole acks only. Returns the number of
 * acks parsed (>= 0), or -EPROTO (0xFF, invalid byte, bad command).
 * Commands go to cmds (up to max_cmds; *n_cmds counts all). */
int qb_reply_acks(const uint8_t *p, size_t len, size_t *consumed, qb_reply_cmd *cmds,
                  size_t max_cmds, size_t *n_cmds);

/* ---- tls.c: TLS to the collector (OpenSSL) ---------------------------- */

typedef struct qb_tls_ctx qb_tls_ctx;
typedef struct qb_tls qb_tls;

/* Settings from TLS_CERT_DIR, the Java agent's keystore or the system's
 * roots, and STACKSHOT_QUBERSHIP_TLS_VERIFY. NULL (why filled) when they
 * cannot be used. */
qb_tls_ctx *qb_tls_ctx_new(char *why, size_t n);
void qb_tls_ctx_free(qb_tls_ctx *t);
/* A connection on the connected, non-blocking fd to `host`. */
qb_tls *qb_tls_new(qb_tls_ctx *ctx, int fd, const char *host);
/* 0 done, -EAGAIN (poll for qb_tls_want), or a failure (why filled). */
int qb_tls_handshake(qb_tls *t, char *why, size_t n);
/* Bytes moved, -EAGAIN (poll for qb_tls_want), -EPIPE at the peer's close,
 * or -errno / -EPROTO. */
ssize_t qb_tls_send(qb_tls *t, const void *p, size_t n);
ssize_t qb_tls_recv(qb_tls *t, void *p, size_t n);
short qb_tls_want(const qb_tls *t);
void qb_tls_free(qb_tls *t, bool graceful);

/* ---- client ----------------------------------------------------------- */

typedef struct qb_client {
    int fd;                  /* kept.fd while connected, checked before every use */
    ss_kept_fd kept;         /* the socket's identity (the host may close it) */
    qb_tls_ctx *tls_ctx;     /* TLS to the collector, or NULL (plain) */
    qb_tls *tls;             /* the connection's, when TLS */
    uint64_t conn;           /* counts connections: commands belong to one */
    uint64_t commands;       /* diagnostic commands received */
    ss_buf out;              /* bytes to write */
    uint8_t in[4096];
    size_t in_len;
    uint32_t pending_acks;
    uint32_t timeout_ms;
    ss_exporter_stats *stats;
    char err[160];           /* why the last call failed */
    /* the collector's state from the last connection and cycle: every
     * wait is also bounded by what the exit gives it (ss_backend_bound) */
    ss_backend backend;
} qb_client;

void qb_client_init(qb_client *c, uint32_t timeout_ms, ss_exporter_stats *stats);
/* Connect (non-blocking, bounded by the timeout) and handshake. 0,
 * -EACCES (blacklisted) or another negative errno (c->err says why). */
int qb_client_connect(qb_client *c, const char *host, int port, const char *pod,
                      const char *service, const char *ns, uint64_t deadline_ns);
int qb_client_init_stream(qb_client *c, const char *name, int32_t seq, bool reset,
                          qb_init_reply *r, uint64_t deadline_ns);
/* RCV_DATA in pieces of at most 1024 bytes. */
int qb_client_send(qb_client *c, const uint8_t handle[16], const void *p, size_t n,
                   uint64_t deadline_ns);
/* REQUEST_ACK_FLUSH, then wait for every pending ack. */
int qb_client_flush(qb_client *c, uint64_t deadline_ns);
/* Wait for every pending ack (before an INIT). */
int qb_client_drain(qb_client *c, uint64_t deadline_ns);
/* CLOSE (best effort) and close the socket. */
void qb_client_close(qb_client *c, bool graceful, uint64_t deadline_ns);

/* ---- process-wide state shared by the exporters of this folder -------- */

/* A lock that a forked child takes over from its parent (proclock.c). */
typedef struct qb_proclock {
    _Atomic pid_t holder; /* pid of the holding process, 0 free */
} qb_proclock;

void qb_proclock_lock(qb_proclock *l);
void qb_proclock_unlock(qb_proclock *l);

/* This process's identity to the collectors (pod.c). */
typedef struct qb_pod {
    char server[320]; /* POD_NAME, else the host name, else "default" */
    char name[400];   /* "<server>_<start ms>", unique among live processes */
    int64_t start_ms;
    bool dir_valid;   /* passes the dumps collector's pod pattern */
} qb_pod;

/* Computed once per process (again in a forked child). */
void qb_pod_get(qb_pod *out);
/* The dumps collector's pod-directory pattern (spec §2.3 (4)). */
bool qb_pod_dir_valid(const char *name);
/* CLOUD_NAMESPACE, NAMESPACE, the service account's namespace, "unknown". */
void qb_namespace(char *out, size_t n);

/* Read a small file into buf (terminated; trailing white space removed):
 * its length, or -errno. */
ssize_t qb_read_small(const char *path, char *buf, size_t n);

/* ---- suspend ---------------------------------------------------------- */

typedef struct qb_suspend qb_suspend;

typedef struct qb_pause {
    int64_t end_ms;
    uint32_t duration_ms;
} qb_pause;

/* Start the detector thread ("stackshot-qsusp"): it sleeps `tick_ms` and
 * records wake-ups late by more than threshold_ms. NULL on failure. */
qb_suspend *qb_suspend_start(uint32_t threshold_ms, uint32_t tick_ms);
/* Take the pauses recorded so far (merged when adjacent); returns count. */
size_t qb_suspend_take(qb_suspend *s, qb_pause *out, size_t max, uint64_t *lost);
void qb_suspend_stop(qb_suspend *s);

#endif /* SS_QB_H */
