/*
 * profiles_drive.c: run the "pprof" and "flamegraph" exporters (their real
 * ops, as the agent does) over N rounds of the known synthetic scenario and
 * close them, so the files land in the output directory.
 *
 *     profiles_drive <output dir> <rounds> [otlp]
 *
 * With "otlp", runs the "otlp_profiles" exporter instead (its endpoint from
 * the environment, OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT). With "xss", the
 * "flamegraph" exporter over rounds whose busy thread runs a function named
 * <script>alert(1)</script> in a thread named "><img src=x onerror=alert(2)>
 * (the flame graph must show both as text), under Java and native frames
 * and over JIT and vDSO (kernel) ones: every frame kind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/ss_exporters.h"
#include "tests/profiles/synth.h"

#define XSS_FUNCTION "<script>alert(1)</script>"
#define XSS_THREAD "\"><img src=x onerror=alert(2)>"

static ss_round *xss_round(uint32_t i) {
    ss_round_builder *b = ss_round_builder_create();
    if (!b)
        return NULL;
    ss_round_builder_begin(b, SS_SYNTH_T0 + (uint64_t)i * 10000000ull, 10, SS_RUNTIME_NATIVE);
    ss_thread_sample *t = ss_round_builder_add_thread(b, XSS_THREAD);
    t->nid = 200;
    t->state = SS_STATE_RUNNABLE;
    t->on_cpu = true;
    t->cpu_delta_ns = 9000000;
    /* Leaf first: the vDSO (kernel), JIT code, the function, a Java
     * frame, main: every frame kind in one stack. */
    const ss_mapping *vdso = ss_mapping_intern("[vdso]", "", 0x7fff0000, 0x7fff2000, 0);
    struct {
        const char *ns, *name;
        ss_frame_kind kind;
        const ss_mapping *map;
    } fr[] = {
        {"global", "__vdso_clock_gettime", SS_FRAME_NATIVE, vdso},
        {"jit", "LazyCompile:*fib /app.js:3", SS_FRAME_NATIVE, NULL},
        {"global", i % 3 == 2 ? "helper" : XSS_FUNCTION, SS_FRAME_NATIVE, NULL},
        {"com.example.App", "run", SS_FRAME_JAVA, NULL},
        {"global", "main", SS_FRAME_NATIVE, NULL},
    };
    for (size_t k = 0; k < sizeof fr / sizeof *fr; k++) {
        ss_frame f = {.fn = ss_funcinfo_intern(fr[k].ns, fr[k].name, "x.c", NULL, fr[k].kind),
                      .map = fr[k].map, .addr = fr[k].map ? 0x7fff0900 : 0};
        ss_round_builder_add_frame(b, &f);
    }
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s <output dir> <rounds> [otlp|xss]\n", argv[0]);
        return 2;
    }
    ss_process_refresh();
    ss_mem_set_limit(256u << 20);
    ss_config cfg;
    ss_config_load(&cfg);
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", argv[1]);
    uint32_t rounds = (uint32_t)atoi(argv[2]);
    const char *names[] = {"pprof", "flamegraph"};
    size_t n_names = 2;
    bool xss = argc == 4 && strcmp(argv[3], "xss") == 0;
    if (argc == 4) {
        names[0] = xss ? "flamegraph" : "otlp_profiles";
        n_names = 1;
    }
    for (size_t e = 0; e < n_names; e++) {
        const ss_exporter_def *def = ss_exporter_by_name(names[e], strlen(names[e]));
        const ss_exporter_ops *ops = def ? def->ops : NULL;
        if (!ops) {
            fprintf(stderr, "exporter %s not compiled in\n", names[e]);
            return 1;
        }
        ss_exporter_stats stats;
        memset(&stats, 0, sizeof stats);
        void *st = NULL;
        if (ops->open(&st, &cfg, &stats) != 0)
            return 1;
        for (uint32_t i = 0; i < rounds; i++) {
            ss_round *r = xss ? xss_round(i) : ss_synth_known(i);
            ops->consume(st, r);
            ss_round_unref(r);
        }
        ops->close(st, ss_mono_ns() + 5000000000ull);
        printf("%s: exported %llu dropped %llu rejected %llu taken %llu\n", ops->name,
               (unsigned long long)stats.records_exported,
               (unsigned long long)stats.records_dropped,
               (unsigned long long)stats.records_rejected,
               (unsigned long long)stats.records_taken);
        if (stats.records_dropped || !stats.records_exported)
            return 1;
    }
    return 0;
}
