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
    uint32_t bits[] = {SS_EXPORT_PPROF, SS_EXPORT_FLAMEGRAPH};
    size_t n_bits = 2;
    if (argc == 4) {
        bits[0] = SS_EXPORT_OTLP_PROFILES;
        n_bits = 1;
    }
    for (size_t e = 0; e < n_bits; e++) {
        const ss_exporter_ops *ops = ss_exporter_find(bits[e]);
        if (!ops) {
            fprintf(stderr, "exporter %u not compiled in\n", bits[e]);
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
        printf("%s: exported %llu dropped %llu\n", ops->name,
               (unsigned long long)stats.records_exported,
               (unsigned long long)stats.records_dropped);
        if (stats.records_dropped || !stats.records_exported)
            return 1;
    }
    return 0;
}
