/* bench_qb_encode.c: Qubership stream encoding against the other outputs,
 * on synthetic rounds of 100 threads at depth 50 (interned funcinfos, as a
 * sampler builds them).
 *
 * Workloads:
 *   busy  every thread on CPU; the top 3 frames of each stack change from
 *         round to round (a new ENTER/EXIT pair per sample and thread);
 *   idle  90 of the 100 threads parked on the same stack with no CPU (the
 *         common shape of a server's thread pool), 10 busy as above.
 * For each: thread samples and frames encoded per second, and bytes per
 * thread sample, for the qubership streams (trace + calls + dictionary,
 * windows of 5 rounds), the thread-dump text (ss_text_format_thread, the
 * baseline) and the OTLP logs request (ss_logs_encode). Figures are ratios
 * against the text baseline of the same run; nothing is asserted.
 *
 *   bench_qb_encode [ROUNDS]   (default 200) */
#include "agent/buf.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"
#include "exporters/ss_exporters.h"
#if __has_include("exporters/otlp_logs/logs.h")
#include "exporters/otlp_logs/logs.h"
#define HAVE_OTLP_LOGS 1
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 100
#define DEPTH 50
#define WINDOW 5

static const ss_funcinfo *funcs[400];

static void make_funcs(void) {
    for (int i = 0; i < 400; i++) {
        char ns[64], name[64];
        snprintf(ns, sizeof ns, "com.example.service.layer%d.Component%d", i % 7, i);
        snprintf(name, sizeof name, "handle%d", i);
        funcs[i] = ss_funcinfo_intern(ns, name, "Component.java", "app@1.0", SS_FRAME_JAVA);
    }
}

static ss_round *make_round(ss_round_builder *b, int n, bool idle_pool) {
    ss_round_builder_begin(b, ss_wall_ns() + (uint64_t)n * 100000000u, 100, SS_RUNTIME_JVM);
    for (int t = 0; t < THREADS; t++) {
        char name[32];
        snprintf(name, sizeof name, "worker-%d", t);
        ss_thread_sample *s = ss_round_builder_add_thread(b, name);
        bool idle = idle_pool && t >= 10;
        s->number = t + 1;
        s->state = idle ? SS_STATE_WAITING : SS_STATE_RUNNABLE;
        s->status = idle ? "waiting on condition" : "runnable";
        s->cpu_ns = (uint64_t)n * 1000000u;
        s->cpu_delta_ns = idle ? 0 : 1000000u;
        s->on_cpu = !idle;
        for (int d = 0; d < DEPTH; d++) { /* leaf first */
            int k = (t * 3 + (DEPTH - d)) % 300;
            if (!idle && d < 3)
                k = 300 + (n + t + d) % 100; /* the changing top */
            ss_frame f = {.fn = funcs[k], .addr = (uint64_t)d, .line = 10 + d};
            ss_round_builder_add_frame(b, &f);
        }
    }
    return ss_round_builder_finish(b, 0, 0);
}

typedef struct result {
    double secs;
    uint64_t bytes;
} result;

static uint64_t take_pending(qb_session *q) {
    uint64_t n = 0;
    for (int i = 0; i < QB_NSTREAMS; i++) {
        n += q->s[i].pending.len;
        ss_buf_reset(&q->s[i].pending);
    }
    return n;
}

static result run_qubership(ss_round **rounds, int n) {
    qb_session q;
    uint8_t h[16] = {1};
    qb_session_init(&q, (int64_t)(rounds[0]->time_ns / 1000000u));
    for (int i = 0; i < QB_NSTREAMS; i++)
        qb_session_opened(&q, i, h, 0, 0, 0, 0);
    qb_map *m = qb_map_create("bench-node");
    result r = {0};
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < n; i++) {
        qb_map_add_round(m, &q, rounds[i]);
        if ((i + 1) % WINDOW == 0 || i == n - 1) {
            qb_map_stats st = {0};
            qb_map_close_window(m, &q, &st);
            qb_session_dict_sync(&q);
            qb_session_flush_phrases(&q);
            r.bytes += take_pending(&q);
        }
    }
    r.secs = (double)(ss_mono_ns() - t0) / 1e9;
    qb_map_destroy(m);
    qb_session_free(&q);
    return r;
}

static result run_text(ss_round **rounds, int n) {
    ss_buf b;
    ss_buf_init(&b);
    result r = {0};
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < n; i++)
        for (uint32_t t = 0; t < rounds[i]->n_threads; t++) {
            ss_buf_reset(&b);
            ss_text_format_thread(rounds[i], &rounds[i]->threads[t], &b);
            r.bytes += b.len;
        }
    r.secs = (double)(ss_mono_ns() - t0) / 1e9;
    ss_buf_free(&b);
    return r;
}

#ifdef HAVE_OTLP_LOGS
static result run_otlp(ss_round **rounds, int n) {
    ss_otlp_resource res;
    memset(&res, 0, sizeof res);
    ss_otlp_resource_build(&res);
    ss_logs_encoder e;
    ss_logs_encoder_init(&e);
    ss_buf out;
    ss_buf_init(&out);
    result r = {0};
    uint64_t t0 = ss_mono_ns();
    for (int i = 0; i < n; i++) {
        uint32_t first = 0, nrec, ndrop;
        int k;
        while ((k = ss_logs_encode(&e, &res, rounds[i], first, 512, 4u << 20, ss_wall_ns(), &out,
                                   &nrec, &ndrop)) > 0) {
            r.bytes += out.len;
            first += (uint32_t)k;
        }
    }
    r.secs = (double)(ss_mono_ns() - t0) / 1e9;
    ss_buf_free(&out);
    ss_logs_encoder_free(&e);
    ss_otlp_resource_free(&res);
    return r;
}
#endif

static void report(const char *what, result r, result base, double samples) {
    printf("  %-22s %10.0f samples/s %12.0f frames/s %9.1f B/sample   speed x%.2f  size x%.3f\n",
           what, samples / r.secs, samples * DEPTH / r.secs, (double)r.bytes / samples,
           base.secs / r.secs, (double)r.bytes / (double)base.bytes);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    if (n < WINDOW)
        n = WINDOW;
    ss_mem_set_limit(SIZE_MAX / 2);
    ss_process_refresh();
    make_funcs();
    ss_round_builder *b = ss_round_builder_create();
    ss_round **rounds = calloc((size_t)n, sizeof *rounds);
    for (int w = 0; w < 2; w++) {
        bool idle = w == 1;
        for (int i = 0; i < n; i++)
            rounds[i] = make_round(b, i, idle);
        double samples = (double)n * THREADS;
        printf("%s: %d rounds x %d threads x depth %d (ratios against the text baseline)\n",
               idle ? "idle (90 of 100 threads parked)" : "busy (all threads change)", n, THREADS,
               DEPTH);
        run_qubership(rounds, n); /* warm the interning and the caches */
        result text = run_text(rounds, n);
        result qb = run_qubership(rounds, n);
        report("thread-dump text", text, text, samples);
        report("qubership streams", qb, text, samples);
#ifdef HAVE_OTLP_LOGS
        report("otlp logs request", run_otlp(rounds, n), text, samples);
#else
        printf("  otlp logs request      (exporters/otlp offers no encoder in this build)\n");
#endif
        for (int i = 0; i < n; i++)
            ss_round_unref(rounds[i]);
    }
    free(rounds);
    ss_round_builder_destroy(b);
    return 0;
}
