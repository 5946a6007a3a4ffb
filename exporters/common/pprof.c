/*
 * pprof.c: a period's aggregate as a pprof Profile (profile.proto field
 * numbers of github.com/google/pprof).
 *
 * pprof ids are the aggregate's table indices: every table starts with its
 * zero element, so real elements have ids 1..n-1 and id 0 means "none",
 * exactly pprof's rule. The string table is the aggregate's, whose entry 0
 * is "" as Go's parser demands.
 */
#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "exporters/common/pprof.h"
#include "exporters/common/pb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* profile.proto */
enum {
    P_SAMPLE_TYPE = 1, P_SAMPLE = 2, P_MAPPING = 3, P_LOCATION = 4, P_FUNCTION = 5,
    P_STRING_TABLE = 6, P_TIME_NANOS = 9, P_DURATION_NANOS = 10, P_PERIOD_TYPE = 11,
    P_PERIOD = 12, P_DEFAULT_SAMPLE_TYPE = 14,
    VT_TYPE = 1, VT_UNIT = 2,
    S_LOCATION_ID = 1, S_VALUE = 2, S_LABEL = 3,
    L_KEY = 1, L_STR = 2, L_NUM = 3,
    M_ID = 1, M_START = 2, M_LIMIT = 3, M_OFFSET = 4, M_FILENAME = 5, M_BUILD_ID = 6,
    M_HAS_FUNCTIONS = 7, M_HAS_FILENAMES = 8, M_HAS_LINE_NUMBERS = 9, M_HAS_INLINE_FRAMES = 10,
    LOC_ID = 1, LOC_MAPPING_ID = 2, LOC_ADDRESS = 3, LOC_LINE = 4,
    LN_FUNCTION_ID = 1, LN_LINE = 2,
    F_ID = 1, F_NAME = 2, F_SYSTEM_NAME = 3, F_FILENAME = 4,
};

static void value_type(ss_buf *b, uint32_t field, uint32_t type, uint32_t unit) {
    size_t m = pb_begin(b, field);
    pb_uint_nz(b, VT_TYPE, type);
    pb_uint_nz(b, VT_UNIT, unit);
    pb_end(b, m);
}

static void str_label(ss_buf *b, uint32_t key, uint32_t str) {
    size_t m = pb_begin(b, S_LABEL);
    pb_uint(b, L_KEY, key);
    pb_uint(b, L_STR, str);
    pb_end(b, m);
}

static void hex(char *out, const uint8_t *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static void put_sample(ss_buf *b, ss_agg *a, const agg_sample *s, ss_pprof_view view,
                       uint32_t s_trace, uint32_t s_span) {
    size_t m = pb_begin(b, P_SAMPLE);
    const agg_stack *st = &a->stacks[s->stack];
    if (st->n) {
        size_t p = pb_begin(b, S_LOCATION_ID);
        for (uint32_t i = 0; i < st->n; i++)
            pb_varint(b, a->stack_locs[st->start + i]);
        pb_end(b, p);
    }
    uint64_t iv = a->interval_ns;
    size_t p = pb_begin(b, S_VALUE);
    if (view == SS_PPROF_CPU) {
        pb_varint(b, s->cpu);
        pb_varint(b, s->cpu_ns);
    } else {
        pb_varint(b, s->wall);
        pb_varint(b, (uint64_t)s->wall * iv);
        if (view == SS_PPROF_ALL)
            pb_varint(b, s->cpu_ns);
    }
    pb_end(b, p);
    const agg_attrset *t = &a->attrsets[s->attrset];
    str_label(b, a->s_thread_name, t->name);
    size_t l = pb_begin(b, S_LABEL);
    pb_uint(b, L_KEY, a->s_thread_id);
    pb_uint(b, L_NUM, (uint64_t)t->id);
    pb_end(b, l);
    str_label(b, a->s_thread_state, t->state);
    if (s->link) {
        char h[33];
        hex(h, a->links[s->link].trace_id, 16);
        str_label(b, s_trace, ss_agg_intern(a, h, 32));
        hex(h, a->links[s->link].span_id, 8);
        str_label(b, s_span, ss_agg_intern(a, h, 16));
    }
    pb_end(b, m);
}

static void put_mapping(ss_buf *b, const ss_agg *a, uint32_t i) {
    const agg_mapping *mp = &a->mappings[i];
    size_t m = pb_begin(b, P_MAPPING);
    pb_uint(b, M_ID, i);
    pb_uint_nz(b, M_START, mp->start);
    pb_uint_nz(b, M_LIMIT, mp->limit);
    pb_uint_nz(b, M_OFFSET, mp->offset);
    pb_uint_nz(b, M_FILENAME, mp->file);
    pb_uint_nz(b, M_BUILD_ID, mp->build_id);
    /* Symbolised here: tell pprof not to symbolise again. */
    pb_uint(b, M_HAS_FUNCTIONS, 1);
    pb_uint(b, M_HAS_FILENAMES, 1);
    pb_uint(b, M_HAS_LINE_NUMBERS, 1);
    pb_uint(b, M_HAS_INLINE_FRAMES, 1);
    pb_end(b, m);
}

/* pprof takes the first mapping for the main binary ("File:" in its
 * reports): the executable's mapping goes first, the rest in table order. */
static uint32_t main_mapping(const ss_agg *a) {
    const char *exe = ss_process()->exe_path;
    for (uint32_t i = 1; exe[0] && i < a->n_mappings; i++)
        if (strcmp(ss_agg_str(a, a->mappings[i].file), exe) == 0)
            return i;
    return 0;
}

static void put_tables(ss_buf *b, const ss_agg *a) {
    uint32_t first = main_mapping(a);
    if (first)
        put_mapping(b, a, first);
    for (uint32_t i = 1; i < a->n_mappings; i++)
        if (i != first)
            put_mapping(b, a, i);
    for (uint32_t i = 1; i < a->n_locations; i++) {
        const agg_location *lc = &a->locations[i];
        size_t m = pb_begin(b, P_LOCATION);
        pb_uint(b, LOC_ID, i);
        pb_uint_nz(b, LOC_MAPPING_ID, lc->mapping);
        pb_uint_nz(b, LOC_ADDRESS, lc->address);
        for (uint32_t k = 0; k < lc->n_lines; k++) {
            const agg_line *ln = &a->lines[lc->line_start + k];
            size_t l = pb_begin(b, LOC_LINE);
            pb_uint_nz(b, LN_FUNCTION_ID, ln->function);
            pb_uint_nz(b, LN_LINE, (uint64_t)ln->line);
            pb_end(b, l);
        }
        pb_end(b, m);
    }
    for (uint32_t i = 1; i < a->n_functions; i++) {
        const agg_function *f = &a->functions[i];
        size_t m = pb_begin(b, P_FUNCTION);
        pb_uint(b, F_ID, i);
        pb_uint_nz(b, F_NAME, f->name);
        pb_uint_nz(b, F_SYSTEM_NAME, f->system_name ? f->system_name : f->name);
        pb_uint_nz(b, F_FILENAME, f->file);
        pb_end(b, m);
    }
}

int ss_pprof_encode_agg(ss_agg *a, ss_pprof_view view, ss_buf *out) {
    uint32_t s_trace = ss_agg_intern(a, "trace_id", 8);
    uint32_t s_span = ss_agg_intern(a, "span_id", 7);
    if (a->failed)
        return -ENOMEM;
    size_t start = out->len;
    uint32_t second = view == SS_PPROF_CPU ? a->s_cpu : a->s_wall;
    value_type(out, P_SAMPLE_TYPE, a->s_samples, a->s_count);
    value_type(out, P_SAMPLE_TYPE, second, a->s_nanoseconds);
    if (view == SS_PPROF_ALL)
        value_type(out, P_SAMPLE_TYPE, a->s_cpu, a->s_nanoseconds);
    uint32_t n = 0;
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        if (view == SS_PPROF_CPU && !s->cpu)
            continue;
        put_sample(out, a, s, view, s_trace, s_span);
        n++;
    }
    put_tables(out, a);
    /* After the samples: put_sample may have interned label strings. */
    for (uint32_t i = 0; i < a->n_strings; i++)
        pb_bytes(out, P_STRING_TABLE, ss_agg_str(a, i), ss_agg_strlen(a, i));
    pb_uint_nz(out, P_TIME_NANOS, a->start_ns);
    pb_uint_nz(out, P_DURATION_NANOS, a->end_ns - a->start_ns);
    value_type(out, P_PERIOD_TYPE, second, a->s_nanoseconds);
    pb_uint_nz(out, P_PERIOD, a->interval_ns);
    if (view == SS_PPROF_ALL)
        pb_uint(out, P_DEFAULT_SAMPLE_TYPE, a->s_cpu);
    if (out->failed || a->failed) {
        out->len = start;
        return -ENOMEM;
    }
    if (n == 0) {
        out->len = start;
        return -ENODATA;
    }
    return 0;
}

int ss_pprof_encode_rounds(ss_round *const *rounds, size_t n, ss_pprof_view view,
                           ss_buf *out) {
    ss_agg *a = ss_agg_create(SIZE_MAX);
    if (!a)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = ss_agg_add_round(a, rounds[i]);
    if (rc == 0)
        rc = ss_pprof_encode_agg(a, view, out);
    ss_agg_destroy(a);
    return rc;
}
