/* dumps.h: the "qubership_dumps" exporter's pieces (this folder only):
 * thread, top and heap dumps uploaded over HTTP to the Qubership dumps
 * collector (specs/qubership-dumps.md), and the collector's commands.
 *
 *   diag.c           settings and addressing: base URL, paths, names, durations
 *   td.c             a round as jstack prints a thread dump
 *   top.c            the process's threads as `top -H -b` prints them, from /proc
 *   commands.c       the mailbox between the TCP exporter and the dumps exporter
 *   upload.c         the uploader thread: PUT of td/top texts and heap zips
 *   heap.c           heap dumps: scan, zip, upload with backoff
 *   zip.c            a one-entry zip of a file, streamed (minizip)
 *   dumps_exporter.c ss_exporter_ops glue
 */
#ifndef SS_QB_DUMPS_H
#define SS_QB_DUMPS_H

#include "agent/buf.h"
#include "agent/round.h"
#include "exporters/qubership/qb.h"

#include <time.h>

/* ---- diag.c: settings ----------------------------------------------- */

typedef struct qb_diag_cfg {
    char base[512];          /* {base} of the URLs: scheme://host[.<ns>]:port */
    char ns[256];            /* {namespace} */
    char logs_dir[1024];     /* NC_DIAGNOSTIC_LOGS_FOLDER: heap dumps */
    char cert_dir[1024];     /* TLS_CERT_DIR ("" unset) */
    bool tls;                /* TLS_ENABLED */
    bool td, top;            /* NC_DIAGNOSTIC_THREADDUMP_ENABLED, NC_DIAGNOSTIC_TOP_ENABLED */
    bool heap;               /* heap dumps wanted (DIAGNOSTIC_CENTER_DUMPS_ENABLED and
                                NC_DIAGNOSTIC_DUMPS_ENABLED not false) */
    uint64_t dump_ms;        /* DIAGNOSTIC_DUMP_INTERVAL */
    uint64_t scan_ms;        /* DIAGNOSTIC_SCAN_INTERVAL */
    uint64_t upload_ms;      /* DIAGNOSTIC_UPLOAD_TIMEOUT */
    int zip_level;           /* NC_HEAP_DUMP_COMPRESSION_LEVEL */
} qb_diag_cfg;

/* Read every setting (one line per bad value). */
void qb_diag_cfg_load(qb_diag_cfg *c);

/* diagtools' DiagService: NC_DIAGNOSTIC_AGENT_SERVICE (default
 * "nc-diagnostic-agent"), scheme and default port by TLS_ENABLED, ".<ns>"
 * inserted when the host has no dot. */
void qb_diag_base(const char *service, bool tls, const char *ns, char *out, size_t n);

/* {base}/diagnostic/{ns}/{YYYY}/{MM}/{DD}/{HH}/{mm}/{ss}/{pod}/{name}, the
 * time in UTC. */
void qb_diag_url(const char *base, const char *ns, time_t when, const char *pod,
                 const char *name, char *out, size_t n);

/* "<UTC YYYYMMDDTHHMMSS><suffix>" */
void qb_dump_name(time_t when, const char *suffix, char *out, size_t n);

/* A Go duration ("1m", "1m30s", "1.5h", "500ms") or integer seconds, in
 * ms. 0 parsed, -EINVAL not a duration. */
int qb_go_duration_ms(const char *s, uint64_t *ms);

/* A boolean as Go's strconv.ParseBool reads it: 1 true, 0 false, -1 neither. */
int qb_parse_bool(const char *s);

/* ---- td.c ----------------------------------------------------------- */

/* A round as a jstack thread dump: the local-time line, "Full thread dump
 * <VM> (<version> <info>):" (a native process: its executable), then each
 * thread's block and a blank line. */
int qb_td_format(const ss_round *r, ss_buf *out);

/* ---- top.c ---------------------------------------------------------- */

typedef struct qb_top qb_top;

/* Takes the first snapshot: the first dump's %CPU covers the time since. */
qb_top *qb_top_create(void);
void qb_top_destroy(qb_top *t);
/* `top -H -b -n1 -w 512 -p <pid>` of this process: summary lines, then a
 * row per thread sorted by %CPU (over the time since the previous call),
 * then TIME+. */
int qb_top_format(qb_top *t, ss_buf *out);

/* ---- commands.c ----------------------------------------------------- */

enum { QB_CMD_TD = 1, QB_CMD_TOP, QB_CMD_HEAP };

typedef struct qb_command {
    uint8_t id[16];
    int what;          /* QB_CMD_* */
    uint64_t conn;     /* the TCP connection it came on */
    int state;         /* 0 waiting, 1 running, 2 done */
    bool ok;
} qb_command;

/* The dumps exporter runs (commands can be served) or not. Off: every
 * waiting or running command fails. */
void qb_commands_serve(bool on);
/* TCP side: a command from an ack. false: nobody can run it (answer
 * failure at once): an unknown command, or no dumps exporter. */
bool qb_commands_post(const uint8_t id[16], const char *what, uint64_t conn);
/* TCP side: results of commands of connection `conn` (older connections'
 * are discarded); returns how many were written to out. */
size_t qb_commands_results(uint64_t conn, qb_command *out, size_t max);
/* Dumps side: take waiting commands (they become running). */
size_t qb_commands_take(qb_command *out, size_t max);
void qb_commands_done(const uint8_t id[16], bool ok);

/* ---- zip.c ---------------------------------------------------------- */

/* Zip `src` as one entry named `entry` into `dst` (created, 0600), level
 * -1..9 (zlib's levels), streamed through a fixed buffer; `stop` is checked between
 * chunks. 0, -ECANCELED, or -errno (dst removed on failure). */
int qb_zip_file(const char *src, const char *entry, const char *dst, int level,
                _Atomic bool *stop, uint64_t *in_bytes, uint64_t *out_bytes);

/* ---- upload.c ------------------------------------------------------- */

typedef struct qb_uploader qb_uploader;

/* The uploader's counters. They live in the uploader (which an exit may
 * abandon, still running): the exporter copies them. */
typedef struct qb_upload_stats {
    _Atomic uint64_t td_taken, td_sent, td_failed, td_dropped;
    _Atomic uint64_t top_taken, top_sent, top_failed, top_dropped;
    _Atomic uint64_t heap_found, heap_sent, heap_failed;
    _Atomic uint64_t bytes;
} qb_upload_stats;

qb_uploader *qb_uploader_start(const qb_diag_cfg *cfg, const char *pod);
/* A copy of the counters. */
void qb_uploader_stats(qb_uploader *u, qb_upload_stats *out);
/* Queue a td or top text (taken over; the buffer is emptied). A waiting
 * periodic one of the same kind is replaced (dropped, counted). */
void qb_uploader_text(qb_uploader *u, int kind, ss_buf *body, time_t made,
                      const uint8_t *cmd_id);
/* Look for heap dumps to zip and upload. */
void qb_uploader_scan(qb_uploader *u);
/* Take a heap dump of this JVM now (a command), then upload it. */
void qb_uploader_heap_dump(qb_uploader *u, const uint8_t cmd_id[16]);
/* Stop: the call in flight is cancelled at the deadline at the latest;
 * what waits is counted as dropped. Copies the last counters to *last,
 * then frees u, or abandons it, still running, when its thread does not
 * finish in time (a heap dump the VM is writing cannot be cut). */
void qb_uploader_stop(qb_uploader *u, uint64_t deadline_ns, qb_upload_stats *last);

/* ---- heap.c --------------------------------------------------------- */

typedef struct qb_heap qb_heap;

typedef struct qb_heap_env {
    const qb_diag_cfg *cfg;
    const char *pod;
    _Atomic bool *stop;
    qb_upload_stats *ust;
    /* PUT a file (chunked) at the URL of `name`: the HTTP status, or
     * -errno with `why` filled. */
    int (*put_file)(void *arg, const char *path, const char *name, char *why, size_t n);
    void *arg;
} qb_heap_env;

qb_heap *qb_heap_create(void);
void qb_heap_destroy(qb_heap *h);
/* The JVM reported this dump (a name in the logs folder) written. */
void qb_heap_complete(qb_heap *h, const char *name);
/* One scan of the logs folder: zip every finished .hprof, upload every
 * .hprof.zip (stops at the first failure, which starts the backoff). */
void qb_heap_scan(qb_heap *h, const qb_heap_env *env);
/* Zipped dumps still waiting for an upload. */
uint32_t qb_heap_pending(qb_heap *h, const qb_heap_env *env);

#endif /* SS_QB_DUMPS_H */
