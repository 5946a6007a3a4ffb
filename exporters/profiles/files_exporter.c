/*
 * files_exporter.c: local profile files, one set per export period, in
 * STACKSHOT_OUTPUT_DIR (mode 0600):
 *
 *   exporter "pprof":      <program>.<pid>.<seq>.pb.gz   (gzipped pprof: samples/count,
 *                                                     wall/nanoseconds, cpu/nanoseconds)
 *   exporter "flamegraph": <program>.<pid>.<seq>.collapsed and .html
 *
 * The collapsed file holds the CPU view by default (threads on CPU: where
 * the time goes) or every thread of every round (STACKSHOT_FLAMEGRAPH_VIEW=
 * wall); the page holds both and opens on that one (on wall when no thread
 * was on CPU: then there is no collapsed file).
 * seq counts the periods of one exporter, from 1. Only the newest
 * STACKSHOT_OUTPUT_KEEP_PERIODS periods' files are kept (240: four hours of
 * 60 s periods): the files of period seq - keep go when period seq is
 * written, so a long run's files stay bounded. A write that fails is said
 * once per kind of failure (then at debug), and the period's rounds are
 * counted lost.
 */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "proc/process.h"
#include "agent/round.h"
#include "exporters/profiles/encode.h"
#include "exporters/profiles/period.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum { FILES_PPROF, FILES_FLAME } files_kind;

typedef struct files_state {
    files_kind kind;
    ss_period period;
    ss_exporter_stats *stats;
    char dir[1024];
    uint64_t seq;
    uint64_t keep_periods;
    int told_errno; /* the write failure last said */
    bool cpu_view;
    ss_buf raw, out;
} files_state;

static int write_file(files_state *s, const char *suffix, const ss_buf *b) {
    char stem[300], name[400];
    ss_output_file_stem(stem, sizeof stem);
    snprintf(name, sizeof name, "%s.%llu.%s", stem, (unsigned long long)s->seq, suffix);
    /* checked before every chunk: a host closing every descriptor while
     * this file is written keeps its own files, and ours is opened again */
    ss_output_file f;
    ss_output_file_init(&f, s->dir, name, false);
    int rc = ss_output_file_write(&f, b->data, b->len);
    ss_output_file_close(&f);
    if (rc != 0) {
        ss_log(rc == s->told_errno ? SS_LOG_DEBUG : SS_LOG_WARN,
               "%s: writing %s/%s failed: %s; the period's rounds are counted lost (further "
               "failures alike at debug)",
               s->kind == FILES_PPROF ? "pprof" : "flamegraph", s->dir, name, strerror(-rc));
        s->told_errno = rc;
    } else {
        atomic_fetch_add(&s->stats->bytes_sent, b->len);
    }
    return rc;
}

/* The files of period seq - keep go: at most `keep` periods stay. */
static void remove_old_period(files_state *s) {
    if (!s->keep_periods || s->seq <= s->keep_periods)
        return;
    static const char *const pprof_sfx[] = {"pb.gz", NULL};
    static const char *const flame_sfx[] = {"collapsed", "html", NULL};
    char dir[1100], stem[300], name[1500];
    if (ss_output_dir_expand(s->dir, dir, sizeof dir) != 0)
        return;
    ss_output_file_stem(stem, sizeof stem);
    for (const char *const *x = s->kind == FILES_PPROF ? pprof_sfx : flame_sfx; *x; x++) {
        snprintf(name, sizeof name, "%s/%s.%llu.%s", dir, stem,
                 (unsigned long long)(s->seq - s->keep_periods), *x);
        unlink(name); /* unlink never follows a symlink: at worst a link of ours goes */
    }
}

static int flush_pprof(files_state *s, ss_agg *a) {
    ss_buf_reset(&s->raw);
    ss_buf_reset(&s->out);
    int rc = ss_pprof_encode_agg(a, SS_PPROF_ALL, &s->raw);
    if (rc == 0)
        rc = ss_gzip(s->raw.data, s->raw.len, &s->out);
    if (rc == 0)
        rc = write_file(s, "pb.gz", &s->out);
    return rc;
}

static int flush_flame(files_state *s, ss_agg *a) {
    ss_buf_reset(&s->out);
    /* No thread on CPU (an idle process): no collapsed file for the CPU
     * view, but the page still comes, on the wall view, saying why. */
    int rc = ss_collapsed_encode(a, s->cpu_view, &s->out);
    if (rc == 0)
        rc = write_file(s, "collapsed", &s->out);
    if (rc != 0 && rc != -ENODATA)
        return rc;
    ss_buf_reset(&s->out);
    char title[600];
    const ss_process_info *p = ss_process();
    snprintf(title, sizeof title, "%s (pid %d), %llu rounds", p->program_name, (int)p->pid,
             (unsigned long long)a->rounds);
    rc = ss_flamegraph_html(a, s->cpu_view, title, &s->out);
    if (rc == 0)
        rc = write_file(s, "html", &s->out);
    return rc;
}

static void files_flush(void *owner, ss_agg *a) {
    files_state *s = owner;
    s->seq++;
    int rc = a->failed ? -ENOMEM : s->kind == FILES_PPROF ? flush_pprof(s, a) : flush_flame(s, a);
    uint64_t n = s->cpu_view && s->kind == FILES_FLAME ? 0 : a->n_obs;
    if (s->kind == FILES_FLAME && s->cpu_view)
        for (uint32_t i = 1; i < a->n_samples; i++)
            n += a->samples[i].cpu;
    if (rc == 0 || rc == -ENODATA) {
        atomic_fetch_add(&s->stats->records_exported, n);
        remove_old_period(s);
    } else {
        /* the period's rounds were consumed, never written: lost, not
         * delivered (each round is in one period only) */
        atomic_fetch_add(&s->stats->failures, 1);
        atomic_fetch_add(&s->stats->records_dropped, n);
        atomic_fetch_add(&s->stats->rounds_lost, a->rounds);
    }
}

static int files_open(void **state, const ss_config *cfg, ss_exporter_stats *stats,
                      files_kind kind) {
    files_state *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->kind = kind;
    s->stats = stats;
    snprintf(s->dir, sizeof s->dir, "%s", cfg->output_dir);
    s->keep_periods =
        (uint64_t)ss_config_int("STACKSHOT_OUTPUT_KEEP_PERIODS", 240, 0, 1000000000);
    ss_buf_init(&s->raw);
    ss_buf_init(&s->out);
    if (kind == FILES_FLAME) {
        const char *v = ss_config_str("STACKSHOT_FLAMEGRAPH_VIEW", "cpu");
        if (strcasecmp(v, "wall") == 0)
            s->cpu_view = false;
        else if (strcasecmp(v, "cpu") == 0)
            s->cpu_view = true;
        else {
            ss_config_bad("STACKSHOT_FLAMEGRAPH_VIEW", v, "not cpu or wall", "using cpu");
            s->cpu_view = true;
        }
    }
    int rc = ss_period_init(&s->period, cfg, kind == FILES_PPROF ? "pprof" : "flamegraph",
                            stats, files_flush, s);
    if (rc != 0) {
        free(s);
        return rc;
    }
    *state = s;
    return 0;
}

static int pprof_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    return files_open(state, cfg, stats, FILES_PPROF);
}

static int flame_open(void **state, const ss_config *cfg, ss_exporter_stats *stats) {
    return files_open(state, cfg, stats, FILES_FLAME);
}

static void files_consume(void *state, ss_round *r) {
    files_state *s = state;
    ss_period_consume(&s->period, r);
}

static void files_tick(void *state, uint64_t now) {
    files_state *s = state;
    ss_period_tick(&s->period, now);
}

static void files_close(void *state, uint64_t deadline_ns) {
    (void)deadline_ns;
    files_state *s = state;
    ss_period_flush(&s->period);
    ss_period_free(&s->period);
    ss_buf_free(&s->raw);
    ss_buf_free(&s->out);
    free(s);
}

const ss_exporter_ops ss_pprof_exporter = {
    .name = "pprof",
    .role = "pprof",
    .tick_ms = 1000,
    .open = pprof_open,
    .consume = files_consume,
    .tick = files_tick,
    .close = files_close,
};

const ss_exporter_ops ss_flamegraph_exporter = {
    .name = "flamegraph",
    .role = "flame",
    .tick_ms = 1000,
    .open = flame_open,
    .consume = files_consume,
    .tick = files_tick,
    .close = files_close,
};
