/*
 * encode.h: the encoders of this folder, reading one period's aggregate
 * (private to exporters/profiles/). Each appends to out and returns 0,
 * -ENOMEM, or -ENODATA when the chosen view holds no sample. Encoders may
 * intern strings they need (labels) into the aggregate.
 */
#ifndef SS_PROFILES_ENCODE_H
#define SS_PROFILES_ENCODE_H

#include "agent/buf.h"
#include "exporters/common/aggregate.h"
#include "exporters/common/pprof.h"

/* Collapsed stacks ("thread;root;...;leaf count\n"), lines sorted. cpu:
 * only observations on CPU, else all (wall). */
int ss_collapsed_encode(ss_agg *a, bool cpu, ss_buf *out);

/* A self-contained HTML page with the interactive flame graph of the
 * period, both views in it: cpu chooses the one it opens on (the wall view
 * when no thread was on CPU). -ENODATA only when the period has no sample. */
int ss_flamegraph_html(ss_agg *a, bool cpu, const char *title, ss_buf *out);

typedef enum ss_otlp_prof_version {
    SS_OTLP_PROF_V1DEVELOPMENT = 0, /* opentelemetry-proto v1.11.0 */
    SS_OTLP_PROF_V1EXPERIMENTAL = 1 /* opentelemetry-proto v1.3.2 */
} ss_otlp_prof_version;

/* The resource attributes as key / string-or-int pairs. */
typedef struct ss_prof_resource_attr {
    const char *key;
    const char *str; /* NULL: integer */
    int64_t num;
} ss_prof_resource_attr;

typedef struct ss_prof_request_opts {
    ss_otlp_prof_version version;
    const ss_prof_resource_attr *resource;
    size_t n_resource;
    const char *scope_name, *scope_version;
    bool timestamps; /* per-observation timestamps (else one value per sample) */
} ss_prof_request_opts;

/* One ExportProfilesServiceRequest with two profiles (wall, CPU; the CPU
 * one only when some thread was on CPU). */
int ss_otlp_profiles_encode(ss_agg *a, const ss_prof_request_opts *o, ss_buf *out);
/* How many Profile messages that request holds (what a backend's partial
 * success counts): v1development 1 or 2, v1experimental 1. */
uint32_t ss_otlp_profiles_count(const ss_agg *a, const ss_prof_request_opts *o);

#endif
