/* text_format.c: one thread as thread-dump text.
 *
 * The body format of specs/splunk-profiling.md, which follows jstack:
 *
 *   "main" #1 prio=5 os_prio=0 cpu=388.96ms elapsed=3.17s tid=0x00007fd5e4017ed0 nid=0x1881 waiting on condition
 *      java.lang.Thread.State: WAITING (parking)
 *   	at jdk.internal.misc.Unsafe.park(java.base@17.0.15/Native Method)
 *   	at Workload.main(Workload.java:53)
 *
 * Native threads use the same shape; their state line starts with
 * "native.Thread.State:" (see docs/how-it-works.md, "Thread states"). */
#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/common/common.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Thread names go between quotes on one line: keep them on one line. */
static void put_name(ss_buf *out, const char *name) {
    for (const char *p = name; *p; p++)
        ss_buf_putc(out, (*p == '\n' || *p == '\r') ? ' ' : *p);
}

/* A thread of a runtime that numbers its threads, which it did not number
 * (a JVM's VM Thread, GC and compiler threads: number -tid). The body
 * grammar (specs/splunk-profiling.md) asks every thread for "#<n>" and a
 * state line, which OTLP logs, Qubership and Zorka readers parse: "#0" (no
 * Java id) and the native state line, where jstack prints neither for
 * these threads. */
static bool vm_thread(const ss_round *r, const ss_thread_sample *t) {
    return ss_runtime_about(r->runtime)->numbers_threads && t->number <= 0 && !t->is_virtual;
}

/* The runtime's own threads take its label; OS threads the native one. */
static void put_state_line(ss_buf *out, const ss_round *r, const ss_thread_sample *t) {
    const char *label = ss_runtime_about(r->runtime)->state_label;
    ss_buf_puts(out, "   ");
    ss_buf_puts(out, label && !vm_thread(r, t) ? label : "native.Thread.State");
    ss_buf_puts(out, ": ");
    ss_buf_puts(out, ss_thread_state_name(t->state));
    if (t->state_detail) {
        ss_buf_puts(out, " (");
        ss_buf_puts(out, t->state_detail);
        ss_buf_putc(out, ')');
    }
    ss_buf_putc(out, '\n');
}

static void put_frame(ss_buf *out, const ss_frame *f) {
    const ss_funcinfo *fn = f->fn;
    const char *ns = fn && fn->ns ? fn->ns : "unknown";
    const char *name = fn && fn->name ? fn->name : "unknown";
    const char *file = fn && fn->file ? fn->file : "unknown";
    ss_buf_printf(out, "\tat %s.%s(", ns, name);
    if (fn && fn->module)
        ss_buf_printf(out, "%s/", fn->module);
    ss_buf_puts(out, file);
    if (f->line > 0)
        ss_buf_printf(out, ":%" PRId32, f->line);
    ss_buf_puts(out, ")\n");
}

/* The metadata line is written for every thread of every round, so it is
 * put together by hand, not by printf (a sixth of a round's cost when
 * the frames are reused): a small writer into a line on the stack. */
typedef struct line {
    char b[256];
    size_t n;
} line;

static void l_str(line *l, const char *s) {
    while (*s && l->n < sizeof l->b)
        l->b[l->n++] = *s++;
}

static void l_u64(line *l, uint64_t v) {
    char t[24];
    int i = 0;
    do
        t[i++] = (char)('0' + v % 10);
    while ((v /= 10) && i < 24);
    while (i && l->n < sizeof l->b)
        l->b[l->n++] = t[--i];
}

static void l_i64(line *l, int64_t v) {
    if (v < 0) {
        l_str(l, "-");
        l_u64(l, (uint64_t)0 - (uint64_t)v);
    } else {
        l_u64(l, (uint64_t)v);
    }
}

static void l_hex(line *l, uint64_t v, int width) {
    static const char digits[] = "0123456789abcdef";
    char t[16];
    int i = 0;
    do
        t[i++] = digits[v & 15];
    while ((v >>= 4) && i < 16);
    while (i < width && i < 16)
        t[i++] = '0';
    while (i && l->n < sizeof l->b)
        l->b[l->n++] = t[--i];
}

/* ns / unit with two decimals, as printf's "%.2f" of the double
 * ns / unit prints it. Computed on integers, except where the double's
 * rounding could decide otherwise (within 1,000 ns of a tie, or values
 * of 2^30 and more, whose ulp passes that margin): there printf. */
static void l_fixed2(line *l, uint64_t ns, uint64_t unit) {
    uint64_t step = unit / 100, q = ns / step, r = ns % step, tie = step / 2;
    double v = (double)ns / (double)unit;
    if (v >= 1073741824.0 || (r + 1000 > tie && r < tie + 1000)) {
        char t[48];
        snprintf(t, sizeof t, "%.2f", v);
        l_str(l, t);
        return;
    }
    if (r > tie)
        q++;
    l_u64(l, q / 100);
    char c[4] = {'.', (char)('0' + q % 100 / 10), (char)('0' + q % 10), 0};
    l_str(l, c);
}

/* The metadata line: "name" #<number> [[<nid>] ][daemon ]prio=... nid=<nid>
 * <status> (JDK 21 added the bracketed os thread id and prints nid in
 * decimal). */
static void put_header(ss_buf *out, const ss_round *r, const ss_thread_sample *t, bool jdk21) {
    ss_buf_putc(out, '"');
    put_name(out, t->name);
    line l = {.n = 0};
    l_str(&l, "\" #");
    l_i64(&l, vm_thread(r, t) ? 0 : t->number);
    l_str(&l, " ");
    if (jdk21) {
        l_str(&l, "[");
        l_i64(&l, t->nid);
        l_str(&l, "] ");
    }
    if (t->daemon)
        l_str(&l, "daemon ");
    l_str(&l, "prio=");
    l_i64(&l, t->prio);
    l_str(&l, " os_prio=");
    l_i64(&l, t->os_prio);
    l_str(&l, " cpu=");
    l_fixed2(&l, t->cpu_ns == SS_UNKNOWN_U64 ? 0 : t->cpu_ns, 1000000);
    l_str(&l, "ms elapsed=");
    l_fixed2(&l, t->elapsed_ns == SS_UNKNOWN_U64 ? 0 : t->elapsed_ns, 1000000000);
    l_str(&l, "s tid=0x");
    l_hex(&l, t->tid, 16);
    if (jdk21) {
        l_str(&l, " nid=");
        l_i64(&l, t->nid);
    } else {
        l_str(&l, " nid=0x");
        l_hex(&l, (uint32_t)t->nid, 1);
    }
    l_str(&l, " ");
    ss_buf_append(out, l.b, l.n);
    ss_buf_puts(out, t->status ? t->status : "runnable");
    ss_buf_putc(out, '\n');
}

static int format_frames(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    const ss_frame *f = ss_thread_frames(r, t);
    for (uint32_t i = 0; i < t->frame_count; i++)
        put_frame(out, &f[i]);
    /* A cut stack ends with a marker that still parses as a frame, so
     * readers of the grammar see it and people know the root side is gone. */
    if (t->truncated)
        ss_buf_printf(out, "\tat stackshot.truncated(STACKSHOT_MAX_DEPTH:%" PRIu32 ")\n",
                      t->frame_count);
    return out->failed ? -12 : 0;
}

static int format_thread(const ss_round *r, const ss_thread_sample *t, bool jdk21,
                         ss_buf *out) {
    put_header(out, r, t, jdk21);
    put_state_line(out, r, t);
    return format_frames(r, t, out);
}

int ss_text_format_thread_head(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    put_header(out, r, t, false);
    put_state_line(out, r, t);
    return out->failed ? -12 : 0;
}

int ss_text_format_thread_frames(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    return format_frames(r, t, out);
}

int ss_text_format_thread(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    return format_thread(r, t, false, out);
}

int ss_text_format_thread_jdk21(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    return format_thread(r, t, true, out);
}

/* The frame lines of t appended to out: the bytes kept in memo from an
 * earlier round when t's stack did not change, otherwise formatted, passed
 * through fix (when not NULL; it must keep whole lines whole) and kept for
 * the next round. The text exporter and the OTLP logs body share this. */
void ss_text_format_frames_memo(const ss_round *r, const ss_thread_sample *t,
                                ss_stack_memo *memo, ss_text_fix_fn fix, ss_buf *out) {
    const ss_memo_entry *m = ss_stack_memo_get(memo, t->stack_id);
    if (m) {
        ss_buf_append(out, m->data, m->len);
        return;
    }
    size_t mark = out->len;
    ss_text_format_thread_frames(r, t, out);
    if (out->failed)
        return;
    if (fix)
        fix(out->data + mark, out->len - mark);
    if (t->stack_id)
        ss_stack_memo_put(memo, t->stack_id, 0, out->data + mark, out->len - mark);
}

int ss_text_format_round_header(const ss_round *r, ss_buf *out) {
    char when[20]; /* not gmtime_r: its tzset mallocs on this thread (agent/time.c) */
    ss_utc_format(r->time_ns / 1000000000ull, when);
    ss_buf_printf(out,
                  "Full thread dump stackshot round %" PRIu64 " at %s.%03uZ "
                  "(pid %d, %u threads, %u skipped",
                  r->seq, when, (unsigned)((r->time_ns / 1000000ull) % 1000),
                  (int)ss_process()->pid, r->n_threads, r->threads_skipped);
    /* threads that block the sampling signal are not sampled: say how many
     * (only when there are some, so the usual header is unchanged) */
    if (r->threads_blocked)
        ss_buf_printf(out, ", %u blocking the signal", r->threads_blocked);
    ss_buf_printf(out, ")\n\n");
    return out->failed ? -12 : 0;
}
