/*
 * profiles_drive.c: run the "pprof" and "flamegraph" exporters (their real
 * ops, as the agent does) over N rounds of the known synthetic scenario and
 * close them, so the files land in the output directory.
 *
 *     profiles_drive <output dir> <rounds> [otlp]
 *
 * With "otlp", runs the "otlp_profiles" exporter instead (its endpoint from
 * the environment, OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporters/ss_exporters.h"
#include "synth.h"

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s <output dir> <rounds> [otlp]\n", argv[0]);
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
    if (argc == 4) {
        names[0] = "otlp_profiles";
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
            ss_round *r = ss_synth_known(i);
            ops->consume(st, r);
            ss_round_unref(r);
        }
        ops->close(st, ss_mono_ns() + 5000000000ull);
        printf("%s: exported %llu dropped %llu rejected %llu\n", ops->name,
               (unsigned long long)stats.records_exported,
               (unsigned long long)stats.records_dropped,
               (unsigned long long)stats.records_rejected);
        if (stats.records_dropped || !stats.records_exported)
            return 1;
    }
    return 0;
}
