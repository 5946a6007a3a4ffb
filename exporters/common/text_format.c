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
 * "native.Thread.State:" (see README, "Native thread states"). */
#include "common.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

/* Thread names go between quotes on one line: keep them on one line. */
static void put_name(ss_buf *out, const char *name) {
    for (const char *p = name; *p; p++)
        ss_buf_putc(out, (*p == '\n' || *p == '\r') ? ' ' : *p);
}

/* A thread of a JVM that is not a Java thread (VM Thread, GC and compiler
 * threads: number -tid). The body grammar (specs/splunk-profiling.md) asks
 * every thread for "#<n>" and a state line, which OTLP logs, Qubership and
 * Zorka readers parse: "#0" (no Java id) and the native state line, where
 * jstack prints neither for these threads. */
static bool vm_thread(const ss_round *r, const ss_thread_sample *t) {
    return r->runtime == SS_RUNTIME_JVM && t->number <= 0 && !t->is_virtual;
}

static void put_state_line(ss_buf *out, const ss_round *r, const ss_thread_sample *t) {
    ss_buf_puts(out, r->runtime == SS_RUNTIME_JVM && !vm_thread(r, t)
                         ? "   java.lang.Thread.State: "
                         : "   native.Thread.State: ");
    ss_buf_puts(out, ss_thread_state_name(t->state));
    if (t->state_detail)
        ss_buf_printf(out, " (%s)", t->state_detail);
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

/* The metadata line: "name" #<number> [[<nid>] ][daemon ]prio=... nid=<nid>
 * <status> (JDK 21 added the bracketed os thread id and prints nid in
 * decimal). */
static void put_header(ss_buf *out, const ss_round *r, const ss_thread_sample *t, bool jdk21) {
    ss_buf_putc(out, '"');
    put_name(out, t->name);
    ss_buf_printf(out, "\" #%" PRId64 " ", vm_thread(r, t) ? 0 : t->number);
    if (jdk21)
        ss_buf_printf(out, "[%" PRId32 "] ", t->nid);
    if (t->daemon)
        ss_buf_puts(out, "daemon ");
    double cpu_ms = t->cpu_ns == SS_UNKNOWN_U64 ? 0.0 : (double)t->cpu_ns / 1e6;
    double elapsed_s = t->elapsed_ns == SS_UNKNOWN_U64 ? 0.0 : (double)t->elapsed_ns / 1e9;
    ss_buf_printf(out,
                  "prio=%" PRId32 " os_prio=%" PRId32 " cpu=%.2fms elapsed=%.2fs "
                  "tid=0x%016" PRIx64 " ",
                  t->prio, t->os_prio, cpu_ms, elapsed_s, t->tid);
    if (jdk21)
        ss_buf_printf(out, "nid=%" PRId32, t->nid);
    else
        ss_buf_printf(out, "nid=0x%" PRIx32, (uint32_t)t->nid);
    ss_buf_printf(out, " %s\n", t->status ? t->status : "runnable");
}

static int format_thread(const ss_round *r, const ss_thread_sample *t, bool jdk21,
                         ss_buf *out) {
    put_header(out, r, t, jdk21);
    put_state_line(out, r, t);
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

int ss_text_format_thread(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    return format_thread(r, t, false, out);
}

int ss_text_format_thread_jdk21(const ss_round *r, const ss_thread_sample *t, ss_buf *out) {
    return format_thread(r, t, true, out);
}

int ss_text_format_round_header(const ss_round *r, ss_buf *out) {
    time_t secs = (time_t)(r->time_ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
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
