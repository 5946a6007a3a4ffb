/*
 * bench_profiles.c: the same samples in every output, side by side.
 *
 *   bench_profiles [ROUNDS [THREADS [DEPTH]]]   (default 60 x 100 x 50)
 *
 * Rounds come from tests/profiles/synth.c (ss_synth_bench: a JVM-like mix of
 * native and Java frames, one thread in four busy, leaves that change now
 * and then). For each output: bytes, and CPU time to produce them (the
 * aggregation of the rounds is measured once, separately, since every
 * profile output shares it). Figures are printed as ratios against the
 * thread-dump text of every thread (the body of the Splunk call-stack
 * logs), measured in the same run. Nothing is asserted.
 */
#include "agent/buf.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/version.h"
#include "exporters/profiles/encode.h"
#include "tests/profiles/synth.h"
#if __has_include("exporters/qubership/qb.h")
#include "exporters/qubership/qb.h"
#define HAVE_QB 1
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct row {
    const char *name;
    double bytes, secs;
} row;

#define REPEAT 5

static row text_row(ss_round **r, int n) {
    ss_buf b;
    ss_buf_init(&b);
    row out = {"thread-dump text (Splunk logs bodies)", 0, 0};
    double t0 = cpu_now();
    for (int k = 0; k < REPEAT; k++) {
        uint64_t bytes = 0;
        for (int i = 0; i < n; i++)
            for (uint32_t t = 0; t < r[i]->n_threads; t++) {
                ss_buf_reset(&b);
                ss_text_format_thread(r[i], &r[i]->threads[t], &b);
                bytes += b.len;
            }
        out.bytes = (double)bytes;
    }
    out.secs = (cpu_now() - t0) / REPEAT;
    ss_buf_free(&b);
    return out;
}

static ss_agg *aggregate(ss_round **r, int n, double *secs) {
    ss_agg *a = ss_agg_create((size_t)1 << 30);
    double t0 = cpu_now();
    for (int k = 0; k < REPEAT; k++) {
        ss_agg_reset(a);
        for (int i = 0; i < n; i++)
            ss_agg_add_round(a, r[i]);
    }
    *secs = (cpu_now() - t0) / REPEAT;
    return a;
}

typedef int (*enc_fn)(ss_agg *a, const void *arg, ss_buf *out);

static int enc_pprof(ss_agg *a, const void *arg, ss_buf *out) {
    (void)arg;
    return ss_pprof_encode_agg(a, SS_PPROF_ALL, out);
}

static int enc_otlp(ss_agg *a, const void *arg, ss_buf *out) {
    return ss_otlp_profiles_encode(a, arg, out);
}

static row encode_row(const char *name, ss_agg *a, enc_fn fn, const void *arg, bool gz) {
    ss_buf b, z;
    ss_buf_init(&b);
    ss_buf_init(&z);
    row out = {name, 0, 0};
    double t0 = cpu_now();
    for (int k = 0; k < REPEAT; k++) {
        ss_buf_reset(&b);
        ss_buf_reset(&z);
        if (fn(a, arg, &b) != 0)
            fprintf(stderr, "%s: encoding failed\n", name);
        if (gz)
            ss_gzip(b.data, b.len, &z);
    }
    out.secs = (cpu_now() - t0) / REPEAT;
    out.bytes = (double)(gz ? z.len : b.len);
    ss_buf_free(&b);
    ss_buf_free(&z);
    return out;
}

#ifdef HAVE_QB
static row qb_row(ss_round **r, int n) {
    row out = {"Qubership streams (5-round windows)", 0, 0};
    double t0 = cpu_now();
    qb_session q;
    uint8_t h[16] = {1};
    qb_session_init(&q, (int64_t)(r[0]->time_ns / 1000000u));
    for (int i = 0; i < QB_NSTREAMS; i++)
        qb_session_opened(&q, i, h, 0, 0, 0, 0);
    qb_map *m = qb_map_create("bench-node");
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        qb_map_add_round(m, &q, r[i]);
        if ((i + 1) % 5 == 0 || i == n - 1) {
            qb_map_stats st = {0};
            qb_map_close_window(m, &q, &st);
            qb_session_dict_sync(&q);
            qb_session_flush_phrases(&q);
            for (int s = 0; s < QB_NSTREAMS; s++) {
                bytes += q.s[s].pending.len;
                ss_buf_reset(&q.s[s].pending);
            }
        }
    }
    out.secs = cpu_now() - t0;
    out.bytes = (double)bytes;
    qb_map_destroy(m);
    qb_session_free(&q);
    return out;
}
#endif

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    uint32_t threads = argc > 2 ? (uint32_t)atoi(argv[2]) : 100;
    uint32_t depth = argc > 3 ? (uint32_t)atoi(argv[3]) : 50;
    ss_mem_set_limit((size_t)4 << 30);
    ss_process_refresh();
    ss_round **r = calloc((size_t)rounds, sizeof *r);
    for (int i = 0; i < rounds; i++)
        r[i] = ss_synth_bench((uint32_t)i, threads, depth);

    double agg_secs;
    ss_agg *a = aggregate(r, rounds, &agg_secs);
    ss_prof_resource_attr res[] = {{"service.name", "bench", 0}, {"process.pid", NULL, 4242}};
    ss_prof_request_opts dev = {.version = SS_OTLP_PROF_V1DEVELOPMENT, .resource = res,
                                .n_resource = 2, .scope_name = "stackshot",
                                .scope_version = SS_VERSION, .timestamps = true};
    ss_prof_request_opts dev_nots = dev, exp = dev;
    dev_nots.timestamps = false;
    exp.version = SS_OTLP_PROF_V1EXPERIMENTAL;
    exp.timestamps = false;

    row rows[12];
    int n = 0;
    rows[n++] = text_row(r, rounds);
    rows[n++] = encode_row("pprof (3 sample types)", a, enc_pprof, NULL, false);
    rows[n++] = encode_row("pprof gzipped (the .pb.gz file)", a, enc_pprof, NULL, true);
    rows[n++] = encode_row("OTLP profiles v1development, timestamps", a, enc_otlp, &dev, false);
    rows[n++] = encode_row("  same, gzipped (OTLP gzip)", a, enc_otlp, &dev, true);
    rows[n++] = encode_row("OTLP profiles v1development, values only", a, enc_otlp, &dev_nots,
                           false);
    rows[n++] = encode_row("  same, gzipped", a, enc_otlp, &dev_nots, true);
    rows[n++] = encode_row("OTLP profiles v1experimental, values only", a, enc_otlp, &exp, false);
#ifdef HAVE_QB
    rows[n++] = qb_row(r, rounds);
#endif

    printf("%d rounds x %u threads x depth %u: %llu samples, %u distinct stacks, "
           "%u locations, %u functions, %u strings\n",
           rounds, threads, depth, (unsigned long long)a->n_obs, a->n_stacks - 1,
           a->n_locations - 1, a->n_functions - 1, a->n_strings - 1);
    printf("aggregation (shared by every profile output): %.2f ms CPU, %.2f us per round, "
           "%.0f ns per sample; tables %zu KiB\n",
           agg_secs * 1e3, agg_secs * 1e6 / rounds, agg_secs * 1e9 / (double)a->n_obs,
           a->bytes / 1024);
    printf("%-44s %12s %10s %12s %10s\n", "output", "bytes", "vs text", "CPU ms", "vs text");
    for (int i = 0; i < n; i++)
        printf("%-44s %12.0f %9.4fx %12.2f %9.3fx\n", rows[i].name, rows[i].bytes,
               rows[i].bytes / rows[0].bytes, rows[i].secs * 1e3, rows[i].secs / rows[0].secs);
    printf("text / OTLP v1development (timestamps): %.1fx smaller; OTLP / pprof: %.2f\n",
           rows[0].bytes / rows[3].bytes, rows[3].bytes / rows[1].bytes);
    ss_agg_destroy(a);
    for (int i = 0; i < rounds; i++)
        ss_round_unref(r[i]);
    free(r);
    return 0;
}
