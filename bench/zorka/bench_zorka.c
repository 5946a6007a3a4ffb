/*
 * bench_zorka.c: the zorka exporter's encoding against the Qubership and
 * OTLP profiles encoders, on the same rounds.
 *
 *   bench_zorka [ROUNDS [THREADS [DEPTH [PERIOD]]]]   (default 60 x 100 x 50, 10)
 *
 * Rounds come from tests/profiles/synth.c (ss_synth_bench, as bench_profiles
 * uses them: a JVM-like mix of native and Java frames, one thread in four
 * busy, leaves that change now and then). Each output runs its whole path
 * from rounds to the bytes it would send, per period of PERIOD rounds (the
 * zorka default: 10 s at the default 1 s interval):
 *   zorka      rounds -> traces (traces.c) -> agd + trc bodies (encode.c,
 *              libcbor), one session: definitions once, in the first period
 *              mostly;
 *   Qubership  rounds -> trace chunks, calls, dictionary (windows of PERIOD
 *              rounds);
 *   OTLP       rounds -> aggregate -> OTLP profiles v1development request
 *              with timestamps (one per period), uncompressed.
 * Printed per thread sample: CPU ns and bytes, and the ratios of zorka to
 * the two others. The first period of zorka carries the definitions; the
 * steady state (later periods) is printed apart. Nothing is asserted.
 */
#include "agent/buf.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/version.h"
#include "exporters/profiles/encode.h"
#include "exporters/qubership/qb.h"
#include "exporters/zorka/zorka.h"
#include "tests/profiles/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPEAT 5

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct result {
    double secs, bytes;
    double steady_secs, steady_bytes; /* periods after the first */
} result;

/* One repetition of a run: CPU and bytes, and what the first period took. */
typedef struct meter {
    double t0, bytes, first_secs, first_bytes;
} meter;

static meter meter_start(void) { return (meter){.t0 = cpu_now()}; }

/* After the period ending at round i (0-based) added `bytes`. */
static void meter_period(meter *m, int i, int period, double bytes) {
    m->bytes += bytes;
    if (i + 1 == period) {
        m->first_secs = cpu_now() - m->t0;
        m->first_bytes = m->bytes;
    }
}

/* The repetition is over: its share of the averages. */
static void meter_end(const meter *m, result *out) {
    double secs = cpu_now() - m->t0;
    out->secs += secs / REPEAT;
    out->bytes = m->bytes;
    out->steady_secs += (secs - m->first_secs) / REPEAT;
    out->steady_bytes = m->bytes - m->first_bytes;
}

static bool period_ends(int i, int n, int period) { return (i + 1) % period == 0 || i == n - 1; }

/* ---- zorka ------------------------------------------------------------------ */

typedef struct zk_bench {
    zk_session *s;
    zk_process p;
    ss_buf agd, trc;
    double bytes;
    uint64_t traces, records;
} zk_bench;

static void zk_encode_one(void *owner, zk_trace *t) {
    zk_bench *z = owner;
    ss_buf_reset(&z->agd);
    ss_buf_reset(&z->trc);
    if (zk_encode_trace(z->s, &z->p, t, &z->agd, &z->trc) != 0)
        fprintf(stderr, "zorka: encoding failed\n");
    zk_session_reset_done(z->s);
    z->bytes += (double)(z->agd.len + z->trc.len);
    z->traces++;
    z->records += t->n_recs;
    zk_trace_free(t);
}

static result zorka_run(ss_round **r, int n, int period, uint64_t *traces, uint64_t *records) {
    result out = {0};
    for (int k = 0; k < REPEAT; k++) {
        zk_bench z = {.s = zk_session_new(), .p = {.host = "bench-host", .service = "bench",
                                                   .pid = "4242"}};
        ss_buf_init(&z.agd);
        ss_buf_init(&z.trc);
        zk_builder *b = zk_builder_new(zk_encode_one, &z);
        meter m = meter_start();
        for (int i = 0; i < n; i++) {
            zk_builder_add_round(b, r[i], (uint64_t)i + 1);
            if (period_ends(i, n, period)) {
                double before = z.bytes;
                zk_builder_close_all(b);
                meter_period(&m, i, period, z.bytes - before);
            }
        }
        meter_end(&m, &out);
        *traces = z.traces;
        *records = z.records;
        zk_builder_free(b);
        zk_session_free(z.s);
        ss_buf_free(&z.agd);
        ss_buf_free(&z.trc);
    }
    return out;
}

/* ---- Qubership ----------------------------------------------------------------- */

static result qb_run(ss_round **r, int n, int period) {
    result out = {0};
    for (int k = 0; k < REPEAT; k++) {
        qb_session q;
        uint8_t handle[16] = {1};
        qb_session_init(&q, (int64_t)(r[0]->time_ns / 1000000u));
        for (int s = 0; s < QB_NSTREAMS; s++)
            qb_session_opened(&q, s, handle, 0, 0, 0, 0);
        qb_map *map = qb_map_create("bench-node");
        meter m = meter_start();
        for (int i = 0; i < n; i++) {
            qb_map_add_round(map, &q, r[i]);
            if (!period_ends(i, n, period))
                continue;
            qb_map_stats st = {0};
            qb_map_close_window(map, &q, &st);
            qb_session_dict_sync(&q);
            qb_session_flush_phrases(&q);
            double bytes = 0;
            for (int s = 0; s < QB_NSTREAMS; s++) {
                bytes += (double)q.s[s].pending.len;
                ss_buf_reset(&q.s[s].pending);
            }
            meter_period(&m, i, period, bytes);
        }
        meter_end(&m, &out);
        qb_map_destroy(map);
        qb_session_free(&q);
    }
    return out;
}

/* ---- OTLP profiles ------------------------------------------------------------- */

static result otlp_run(ss_round **r, int n, int period) {
    result out = {0};
    ss_prof_resource_attr res[] = {{"service.name", "bench", 0}, {"process.pid", NULL, 4242}};
    ss_prof_request_opts o = {.version = SS_OTLP_PROF_V1DEVELOPMENT, .resource = res,
                              .n_resource = 2, .scope_name = "stackshot",
                              .scope_version = SS_VERSION, .timestamps = true};
    ss_buf b;
    ss_buf_init(&b);
    for (int k = 0; k < REPEAT; k++) {
        ss_agg *a = ss_agg_create((size_t)1 << 30);
        meter m = meter_start();
        for (int i = 0; i < n; i++) {
            ss_agg_add_round(a, r[i]);
            if (!period_ends(i, n, period))
                continue;
            ss_buf_reset(&b);
            if (ss_otlp_profiles_encode(a, &o, &b) != 0)
                fprintf(stderr, "otlp: encoding failed\n");
            ss_agg_reset(a);
            meter_period(&m, i, period, (double)b.len);
        }
        meter_end(&m, &out);
        ss_agg_destroy(a);
    }
    ss_buf_free(&b);
    return out;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    uint32_t threads = argc > 2 ? (uint32_t)atoi(argv[2]) : 100;
    uint32_t depth = argc > 3 ? (uint32_t)atoi(argv[3]) : 50;
    int period = argc > 4 ? atoi(argv[4]) : 10;
    if (rounds < 1 || threads < 1 || depth < 1 || period < 1)
        return 2;
    ss_mem_set_limit((size_t)4 << 30);
    ss_process_refresh();
    ss_round **r = calloc((size_t)rounds, sizeof *r);
    for (int i = 0; i < rounds; i++) {
        r[i] = ss_synth_bench((uint32_t)i, threads, depth);
        r[i]->seq = (uint64_t)i + 1; /* one builder each: number them as one sampler would */
    }
    double samples = (double)rounds * threads;
    double steady = (double)(rounds > period ? rounds - period : 0) * threads;

    uint64_t traces, records;
    result zk = zorka_run(r, rounds, period, &traces, &records);
    result qb = qb_run(r, rounds, period);
    result ot = otlp_run(r, rounds, period);

    printf("%d rounds x %u threads x depth %u, periods of %d rounds: %.0f samples; zorka: "
           "%llu traces, %llu records (%.1f per trace)\n",
           rounds, threads, depth, period, samples, (unsigned long long)traces,
           (unsigned long long)records, traces ? (double)records / (double)traces : 0.0);
    printf("%-40s %12s %12s %12s %12s\n", "output (all periods)", "bytes", "bytes/sample",
           "CPU ms", "ns/sample");
    const struct {
        const char *name;
        result *x;
    } rows[] = {{"zorka agd+trc (Gen C CBOR)", &zk},
                {"Qubership streams", &qb},
                {"OTLP profiles v1development, timestamps", &ot}};
    for (int i = 0; i < 3; i++)
        printf("%-40s %12.0f %12.1f %12.2f %12.0f\n", rows[i].name, rows[i].x->bytes,
               rows[i].x->bytes / samples, rows[i].x->secs * 1e3, rows[i].x->secs * 1e9 / samples);
    if (steady > 0) {
        printf("%-40s %12s %12s %12s %12s\n", "steady state (periods after the first)", "bytes",
               "bytes/sample", "CPU ms", "ns/sample");
        for (int i = 0; i < 3; i++)
            printf("%-40s %12.0f %12.1f %12.2f %12.0f\n", rows[i].name, rows[i].x->steady_bytes,
                   rows[i].x->steady_bytes / steady, rows[i].x->steady_secs * 1e3,
                   rows[i].x->steady_secs * 1e9 / steady);
    }
    printf("zorka / Qubership: bytes %.2fx, CPU %.2fx; zorka / OTLP profiles: bytes %.2fx, "
           "CPU %.2fx\n",
           zk.bytes / qb.bytes, zk.secs / qb.secs, zk.bytes / ot.bytes, zk.secs / ot.secs);
    for (int i = 0; i < rounds; i++)
        ss_round_unref(r[i]);
    free(r);
    return 0;
}
