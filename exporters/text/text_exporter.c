/* text_exporter.c: every round as thread-dump text in a local file,
 * <STACKSHOT_OUTPUT_DIR>/<program name>.<pid>.txt, appended round by round.
 * It is the output that needs no backend at all. The file is created at
 * the first write (a process that never writes a round leaves no file),
 * with the user the process runs as then.
 *
 * The frame lines of a stack that did not change since the last round
 * (the same ss_thread_sample.stack_id) are copied from what was written
 * then (a memo of the last round's stacks), not formatted again; the
 * metadata and state lines, whose CPU time and state move while a thread
 * sleeps in one place, are formatted every round. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "exporters/common/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct text_state {
    ss_output_file file; /* opened at the first write, again when the host took it */
    bool told_path;
    ss_buf buf;
    ss_stack_memo *memo; /* stack_id -> its frame lines; NULL: format every time */
    ss_exporter_stats *stats;
    char path[1500];
    int told_errno; /* the write error last told: a full disk is told once */
} text_state;

static int text_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    text_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    char stem[290], name[300];
    ss_output_file_stem(stem, sizeof stem);
    snprintf(name, sizeof name, "%s.txt", stem);
    ss_output_file_init(&s->file, cfg->output_dir, name, true);
    /* bounded: <name>, <name>.1 ... <name>.<keep>, each up to the cap */
    ss_output_file_limit(&s->file, ss_output_max_bytes(), ss_output_keep());
    ss_buf_init(&s->buf);
    /* at most an eighth of the agent's memory account: beyond, stacks are
     * formatted every round as before */
    s->memo = ss_stack_memo_create(ss_mem_limit() / 8);
    s->stats = stats;
    *state = s;
    return 0;
}

static void text_consume(void *state, ss_round *r) {
    text_state *s = state;
    ss_buf_reset(&s->buf);
    ss_text_format_round_header(r, &s->buf);
    for (uint32_t i = 0; i < r->n_threads; i++) {
        ss_text_format_thread_head(r, &r->threads[i], &s->buf);
        ss_text_format_frames_memo(r, &r->threads[i], s->memo, NULL, &s->buf);
        ss_buf_putc(&s->buf, '\n');
    }
    ss_stack_memo_sweep(s->memo); /* keeps this round's stacks only */
    if (s->buf.failed) {
        /* consumed but never written: lost, not delivered */
        atomic_fetch_add(&s->stats->records_dropped, r->n_threads);
        atomic_fetch_add(&s->stats->rounds_lost, 1);
        return;
    }
    if (!s->path[0]) {
        char dir[1100];
        ss_output_dir_expand(s->file.dir, dir, sizeof dir);
        snprintf(s->path, sizeof s->path, "%s/%s", dir, s->file.name);
    }
    /* opened at the first write (a refusal is told once, then counted
     * quietly, and tried again next round), checked before every write,
     * opened again when the host closed our descriptor */
    int rc = ss_output_file_write(&s->file, s->buf.data, s->buf.len);
    if (rc == 0 && !s->told_path) {
        s->told_path = true;
        ss_debug("text: writing thread dumps to %s", s->path);
    }
    if (rc != 0) {
        /* each round is consumed once: counted lost once */
        atomic_fetch_add(&s->stats->failures, 1);
        atomic_fetch_add(&s->stats->records_dropped, r->n_threads);
        atomic_fetch_add(&s->stats->rounds_lost, 1);
        /* once per kind of failure, not once per round (counted anyway) */
        ss_log(rc == s->told_errno ? SS_LOG_DEBUG : SS_LOG_WARN,
               "text: write to %s failed: %s; round %llu lost (further rounds that fail "
               "alike are counted as dropped, not told)",
               s->path, strerror(-rc), (unsigned long long)r->seq);
        s->told_errno = rc;
        return;
    }
    if (s->told_errno) {
        ss_info("text: writing to %s again", s->path);
        s->told_errno = 0;
    }
    atomic_fetch_add(&s->stats->records_exported, r->n_threads);
    atomic_fetch_add(&s->stats->bytes_sent, s->buf.len);
}

static void text_close(void *state, uint64_t deadline_ns) {
    (void)deadline_ns;
    text_state *s = state;
    ss_output_file_close(&s->file);
    ss_stack_memo_destroy(s->memo);
    ss_buf_free(&s->buf);
    free(s);
}

const ss_exporter_ops ss_text_exporter = {
    .name = "text",
    .role = "text",
    .tick_ms = 0,
    .open = text_open,
    .consume = text_consume,
    .tick = NULL,
    .close = text_close,
};
