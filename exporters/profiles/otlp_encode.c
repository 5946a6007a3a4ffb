/*
 * otlp_encode.c: a period's aggregate as one ExportProfilesServiceRequest,
 * written field by field (pb.h) from the field numbers of the .proto files
 * under proto/ (v1development: opentelemetry-proto v1.11.0; v1experimental:
 * v1.3.2).
 *
 * v1development: one request-wide ProfilesDictionary (the aggregate's
 * tables as they are: element 0 of each is the zero element) and two
 * Profiles sharing it, "wall" (every thread of every round) and "cpu"
 * (threads on CPU), each with ONE sample type samples/count, period type
 * wall/nanoseconds resp. cpu/nanoseconds and period = the sampling
 * interval. Samples carry one timestamp per observation (timestamps-only
 * shape, each timestamp counts 1) or, with STACKSHOT_PROFILES_TIMESTAMPS=
 * false, one aggregated value.
 *
 * v1experimental: one ProfileContainer whose Profile has its own tables
 * (the same ones, zero elements included so indices carry over) and three
 * sample types: samples/count, wall/nanoseconds, cpu/nanoseconds.
 */
#include "agent/buf.h"
#include "agent/time.h"
#include "exporters/profiles/encode.h"
#include "exporters/common/pb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Common. */
enum { KV_KEY = 1, KV_VALUE = 2, AV_STRING = 1, AV_INT = 3, SCOPE_NAME = 1, SCOPE_VERSION = 2 };
/* Request / resource / scope (both versions). */
enum { REQ_RESOURCE_PROFILES = 1, REQ_DICTIONARY = 2, RP_RESOURCE = 1, RP_SCOPE_PROFILES = 2,
       RES_ATTRIBUTES = 1, SP_SCOPE = 1, SP_PROFILES = 2 };
/* v1development. */
enum {
    D_MAPPING = 1, D_LOCATION = 2, D_FUNCTION = 3, D_LINK = 4, D_STRING = 5, D_ATTRIBUTE = 6,
    D_STACK = 7,
    PR_SAMPLE_TYPE = 1, PR_SAMPLES = 2, PR_TIME = 3, PR_DURATION = 4, PR_PERIOD_TYPE = 5,
    PR_PERIOD = 6, PR_PROFILE_ID = 7,
    VT_TYPE = 1, VT_UNIT = 2,
    SA_STACK = 1, SA_ATTRS = 2, SA_LINK = 3, SA_VALUES = 4, SA_TIMESTAMPS = 5,
    MA_START = 1, MA_LIMIT = 2, MA_OFFSET = 3, MA_FILENAME = 4, MA_ATTRS = 5,
    LO_MAPPING = 1, LO_ADDRESS = 2, LO_LINES = 3, LO_ATTRS = 4,
    LN_FUNCTION = 1, LN_LINE = 2,
    FN_NAME = 1, FN_SYSTEM_NAME = 2, FN_FILENAME = 3,
    KU_KEY = 1, KU_VALUE = 2, KU_UNIT = 3,
    LK_TRACE = 1, LK_SPAN = 2,
    ST_LOCATIONS = 1,
};
/* v1experimental (pprofextended). */
enum {
    PC_PROFILE_ID = 1, PC_START = 2, PC_END = 3, PC_PROFILE = 8,
    X_SAMPLE_TYPE = 1, X_SAMPLE = 2, X_MAPPING = 3, X_LOCATION = 4, X_FUNCTION = 5,
    X_STRING_TABLE = 6, X_TIME_NANOS = 9, X_DURATION_NANOS = 10, X_PERIOD_TYPE = 11,
    X_PERIOD = 12, X_DEFAULT_SAMPLE_TYPE = 14, X_LOCATION_INDICES = 15, X_ATTRIBUTE_TABLE = 16,
    X_LINK_TABLE = 18,
    XS_VALUE = 2, XS_START = 7, XS_LENGTH = 8, XS_ATTRIBUTES = 10, XS_LINK = 12,
    XS_TIMESTAMPS = 13,
    XM_ID = 1, XM_START = 2, XM_LIMIT = 3, XM_OFFSET = 4, XM_FILENAME = 5, XM_BUILD_ID = 6,
    XM_HAS_FUNCTIONS = 7, XM_HAS_FILENAMES = 8, XM_HAS_LINE_NUMBERS = 9,
    XM_HAS_INLINE_FRAMES = 10, XM_ATTRIBUTES = 12,
    XL_ID = 1, XL_MAPPING = 2, XL_ADDRESS = 3, XL_LINE = 4, XL_TYPE_INDEX = 6,
    XN_FUNCTION = 1, XN_LINE = 2,
    XF_ID = 1, XF_NAME = 2, XF_SYSTEM_NAME = 3, XF_FILENAME = 4,
};

static void packed_fixed64(ss_buf *b, uint64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    ss_buf_append(b, le, 8);
}

static void any_value(ss_buf *b, uint32_t field, const char *s, size_t len, bool is_int,
                      int64_t num) {
    size_t m = pb_begin(b, field);
    if (is_int)
        pb_sint_as_int(b, AV_INT, num);
    else
        pb_bytes(b, AV_STRING, s, len);
    pb_end(b, m);
}

static void key_value(ss_buf *b, uint32_t field, const char *key, const char *s, size_t len,
                      bool is_int, int64_t num) {
    size_t m = pb_begin(b, field);
    pb_string(b, KV_KEY, key);
    any_value(b, KV_VALUE, s, len, is_int, num);
    pb_end(b, m);
}

static void resource_and_scope_open(ss_buf *b, const ss_prof_request_opts *o, size_t *rp,
                                    size_t *sp) {
    *rp = pb_begin(b, REQ_RESOURCE_PROFILES);
    size_t r = pb_begin(b, RP_RESOURCE);
    for (size_t i = 0; i < o->n_resource; i++) {
        const ss_prof_resource_attr *a = &o->resource[i];
        key_value(b, RES_ATTRIBUTES, a->key, a->str ? a->str : "", a->str ? strlen(a->str) : 0,
                  a->str == NULL, a->num);
    }
    pb_end(b, r);
    *sp = pb_begin(b, RP_SCOPE_PROFILES);
    size_t s = pb_begin(b, SP_SCOPE);
    pb_string_nz(b, SCOPE_NAME, o->scope_name);
    pb_string_nz(b, SCOPE_VERSION, o->scope_version);
    pb_end(b, s);
}

static void random_id(uint8_t id[16]) {
    uint64_t x = ss_mono_ns() ^ (ss_wall_ns() * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)id;
    for (int i = 0; i < 16; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        id[i] = (uint8_t)x;
    }
    id[0] |= 1; /* all zeroes is invalid */
}

/* ---- v1development ------------------------------------------------- */

static void dev_value_type(ss_buf *b, uint32_t field, uint32_t type, uint32_t unit) {
    size_t m = pb_begin(b, field);
    pb_uint_nz(b, VT_TYPE, type);
    pb_uint_nz(b, VT_UNIT, unit);
    pb_end(b, m);
}

static void dev_profile(ss_buf *b, const ss_agg *a, const ss_prof_request_opts *o, bool cpu,
                        const agg_obs *obs, const uint32_t *first) {
    size_t m = pb_begin(b, SP_PROFILES);
    dev_value_type(b, PR_SAMPLE_TYPE, a->s_samples, a->s_count);
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        uint32_t count = cpu ? s->cpu : s->wall;
        if (!count)
            continue;
        size_t sm = pb_begin(b, PR_SAMPLES);
        pb_uint_nz(b, SA_STACK, s->stack);
        size_t p = pb_begin(b, SA_ATTRS);
        for (int k = 0; k < 3; k++)
            pb_varint(b, a->attrsets[s->attrset].attr[k]);
        pb_end(b, p);
        pb_uint_nz(b, SA_LINK, s->link);
        if (o->timestamps) {
            p = pb_begin(b, SA_TIMESTAMPS);
            for (uint32_t k = first[i]; k < first[i + 1]; k++) {
                if (cpu && !(obs[k].round & AGG_OBS_CPU))
                    continue;
                packed_fixed64(b, a->round_times[obs[k].round & ~AGG_OBS_CPU]);
            }
            pb_end(b, p);
        } else {
            p = pb_begin(b, SA_VALUES);
            pb_varint(b, count);
            pb_end(b, p);
        }
        pb_end(b, sm);
    }
    pb_fixed64(b, PR_TIME, a->start_ns);
    pb_uint_nz(b, PR_DURATION, a->end_ns - a->start_ns);
    dev_value_type(b, PR_PERIOD_TYPE, cpu ? a->s_cpu : a->s_wall, a->s_nanoseconds);
    pb_uint_nz(b, PR_PERIOD, a->interval_ns);
    uint8_t id[16];
    random_id(id);
    pb_bytes(b, PR_PROFILE_ID, id, 16);
    pb_end(b, m);
}

static void dev_attr(ss_buf *b, const ss_agg *a, const agg_attr *at) {
    size_t m = pb_begin(b, D_ATTRIBUTE);
    if (at->key) {
        pb_uint(b, KU_KEY, at->key);
        any_value(b, KU_VALUE, ss_agg_str(a, at->str), ss_agg_strlen(a, at->str), at->is_int,
                  at->num);
        pb_uint_nz(b, KU_UNIT, at->unit);
    }
    pb_end(b, m);
}

static void dev_dictionary(ss_buf *b, const ss_agg *a) {
    size_t d = pb_begin(b, REQ_DICTIONARY);
    for (uint32_t i = 0; i < a->n_mappings; i++) {
        const agg_mapping *mp = &a->mappings[i];
        size_t m = pb_begin(b, D_MAPPING);
        pb_uint_nz(b, MA_START, mp->start);
        pb_uint_nz(b, MA_LIMIT, mp->limit);
        pb_uint_nz(b, MA_OFFSET, mp->offset);
        pb_uint_nz(b, MA_FILENAME, mp->file);
        if (mp->build_id_attr) {
            size_t p = pb_begin(b, MA_ATTRS);
            pb_varint(b, mp->build_id_attr);
            pb_end(b, p);
        }
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_locations; i++) {
        const agg_location *lc = &a->locations[i];
        size_t m = pb_begin(b, D_LOCATION);
        if (i) {
            pb_uint_nz(b, LO_MAPPING, lc->mapping);
            pb_uint_nz(b, LO_ADDRESS, lc->address);
            for (uint32_t k = 0; k < lc->n_lines; k++) {
                const agg_line *ln = &a->lines[lc->line_start + k];
                size_t l = pb_begin(b, LO_LINES);
                pb_uint_nz(b, LN_FUNCTION, ln->function);
                pb_uint_nz(b, LN_LINE, (uint64_t)ln->line);
                pb_end(b, l);
            }
            size_t p = pb_begin(b, LO_ATTRS);
            pb_varint(b, a->a_frame_type[lc->kind < SS_FRAME_KINDS ? lc->kind : SS_FRAME_NATIVE]);
            pb_end(b, p);
        }
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_functions; i++) {
        const agg_function *f = &a->functions[i];
        size_t m = pb_begin(b, D_FUNCTION);
        pb_uint_nz(b, FN_NAME, f->name);
        pb_uint_nz(b, FN_SYSTEM_NAME, f->system_name);
        pb_uint_nz(b, FN_FILENAME, f->file);
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_links; i++) {
        /* links[0] is all zero bytes: 16 + 8 zeroes, as the spec prefers. */
        size_t m = pb_begin(b, D_LINK);
        pb_bytes(b, LK_TRACE, a->links[i].trace_id, 16);
        pb_bytes(b, LK_SPAN, a->links[i].span_id, 8);
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_strings; i++)
        pb_bytes(b, D_STRING, ss_agg_str(a, i), ss_agg_strlen(a, i));
    for (uint32_t i = 0; i < a->n_attrs; i++)
        dev_attr(b, a, &a->attrs[i]);
    for (uint32_t i = 0; i < a->n_stacks; i++) {
        const agg_stack *st = &a->stacks[i];
        size_t m = pb_begin(b, D_STACK);
        if (st->n) {
            size_t p = pb_begin(b, ST_LOCATIONS);
            for (uint32_t k = 0; k < st->n; k++)
                pb_varint(b, a->stack_locs[st->start + k]);
            pb_end(b, p);
        }
        pb_end(b, m);
    }
    pb_end(b, d);
}

static bool any_on_cpu(const ss_agg *a) {
    for (uint32_t i = 1; i < a->n_samples; i++)
        if (a->samples[i].cpu > 0)
            return true;
    return false;
}

uint32_t ss_otlp_profiles_count(const ss_agg *a, const ss_prof_request_opts *o) {
    if (o->version == SS_OTLP_PROF_V1EXPERIMENTAL)
        return 1;
    return any_on_cpu(a) ? 2 : 1;
}

static int encode_dev(ss_agg *a, const ss_prof_request_opts *o, ss_buf *b) {
    agg_obs *obs = NULL;
    uint32_t *first = NULL;
    if (o->timestamps && ss_agg_group_obs(a, &obs, &first) != 0)
        return -ENOMEM;
    bool any_cpu = any_on_cpu(a);
    size_t rp, sp;
    resource_and_scope_open(b, o, &rp, &sp);
    dev_profile(b, a, o, false, obs, first);
    if (any_cpu)
        dev_profile(b, a, o, true, obs, first);
    pb_end(b, sp);
    pb_end(b, rp);
    dev_dictionary(b, a);
    free(obs);
    free(first);
    return 0;
}

/* ---- v1experimental ------------------------------------------------ */

static void exp_value_type(ss_buf *b, uint32_t field, uint32_t type, uint32_t unit) {
    size_t m = pb_begin(b, field);
    pb_uint_nz(b, VT_TYPE, type);
    pb_uint_nz(b, VT_UNIT, unit);
    pb_end(b, m);
}

/* A location's profile.frame.type string (the value of the attribute
 * ss_agg_reset made for its kind). */
static uint32_t frame_type_string(const ss_agg *a, uint8_t kind) {
    return a->attrs[a->a_frame_type[kind < SS_FRAME_KINDS ? kind : SS_FRAME_NATIVE]].str;
}

static void exp_tables(ss_buf *b, const ss_agg *a) {
    for (uint32_t i = 0; i < a->n_mappings; i++) {
        const agg_mapping *mp = &a->mappings[i];
        size_t m = pb_begin(b, X_MAPPING);
        if (i) {
            pb_uint(b, XM_ID, i);
            pb_uint_nz(b, XM_START, mp->start);
            pb_uint_nz(b, XM_LIMIT, mp->limit);
            pb_uint_nz(b, XM_OFFSET, mp->offset);
            pb_uint_nz(b, XM_FILENAME, mp->file);
            pb_uint_nz(b, XM_BUILD_ID, mp->build_id);
            pb_uint(b, XM_HAS_FUNCTIONS, 1);
            pb_uint(b, XM_HAS_FILENAMES, 1);
            pb_uint(b, XM_HAS_LINE_NUMBERS, 1);
            pb_uint(b, XM_HAS_INLINE_FRAMES, 1);
            if (mp->build_id_attr) {
                size_t p = pb_begin(b, XM_ATTRIBUTES);
                pb_varint(b, mp->build_id_attr);
                pb_end(b, p);
            }
        }
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_locations; i++) {
        const agg_location *lc = &a->locations[i];
        size_t m = pb_begin(b, X_LOCATION);
        if (i) {
            pb_uint(b, XL_ID, i);
            pb_uint_nz(b, XL_MAPPING, lc->mapping);
            pb_uint_nz(b, XL_ADDRESS, lc->address);
            for (uint32_t k = 0; k < lc->n_lines; k++) {
                const agg_line *ln = &a->lines[lc->line_start + k];
                size_t l = pb_begin(b, XL_LINE);
                pb_uint_nz(b, XN_FUNCTION, ln->function);
                pb_uint_nz(b, XN_LINE, (uint64_t)ln->line);
                pb_end(b, l);
            }
            pb_uint(b, XL_TYPE_INDEX, frame_type_string(a, lc->kind));
        }
        pb_end(b, m);
    }
    if (a->n_stack_locs) {
        size_t p = pb_begin(b, X_LOCATION_INDICES);
        for (uint32_t i = 0; i < a->n_stack_locs; i++)
            pb_varint(b, a->stack_locs[i]);
        pb_end(b, p);
    }
    for (uint32_t i = 0; i < a->n_functions; i++) {
        const agg_function *f = &a->functions[i];
        size_t m = pb_begin(b, X_FUNCTION);
        if (i) {
            pb_uint(b, XF_ID, i);
            pb_uint_nz(b, XF_NAME, f->name);
            pb_uint_nz(b, XF_SYSTEM_NAME, f->system_name ? f->system_name : f->name);
            pb_uint_nz(b, XF_FILENAME, f->file);
        }
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_attrs; i++) {
        const agg_attr *at = &a->attrs[i];
        size_t m = pb_begin(b, X_ATTRIBUTE_TABLE);
        if (at->key) {
            pb_bytes(b, KV_KEY, ss_agg_str(a, at->key), ss_agg_strlen(a, at->key));
            any_value(b, KV_VALUE, ss_agg_str(a, at->str), ss_agg_strlen(a, at->str), at->is_int,
                      at->num);
        }
        pb_end(b, m);
    }
    for (uint32_t i = 0; i < a->n_links; i++) {
        size_t m = pb_begin(b, X_LINK_TABLE);
        pb_bytes(b, LK_TRACE, a->links[i].trace_id, 16);
        pb_bytes(b, LK_SPAN, a->links[i].span_id, 8);
        pb_end(b, m);
    }
}

static int encode_exp(ss_agg *a, const ss_prof_request_opts *o, ss_buf *b) {
    if (a->failed)
        return -ENOMEM;
    agg_obs *obs = NULL;
    uint32_t *first = NULL;
    if (o->timestamps && ss_agg_group_obs(a, &obs, &first) != 0)
        return -ENOMEM;
    size_t rp, sp;
    resource_and_scope_open(b, o, &rp, &sp);
    size_t pc = pb_begin(b, SP_PROFILES);
    uint8_t id[16];
    random_id(id);
    pb_bytes(b, PC_PROFILE_ID, id, 16);
    pb_fixed64(b, PC_START, a->start_ns);
    pb_fixed64(b, PC_END, a->end_ns);
    size_t pr = pb_begin(b, PC_PROFILE);
    exp_value_type(b, X_SAMPLE_TYPE, a->s_samples, a->s_count);
    exp_value_type(b, X_SAMPLE_TYPE, a->s_wall, a->s_nanoseconds);
    exp_value_type(b, X_SAMPLE_TYPE, a->s_cpu, a->s_nanoseconds);
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        size_t sm = pb_begin(b, X_SAMPLE);
        size_t p = pb_begin(b, XS_VALUE);
        pb_varint(b, s->wall);
        pb_varint(b, (uint64_t)s->wall * a->interval_ns);
        pb_varint(b, s->cpu_ns);
        pb_end(b, p);
        pb_uint_nz(b, XS_START, a->stacks[s->stack].start);
        pb_uint_nz(b, XS_LENGTH, a->stacks[s->stack].n);
        p = pb_begin(b, XS_ATTRIBUTES);
        for (int k = 0; k < 3; k++)
            pb_varint(b, a->attrsets[s->attrset].attr[k]);
        pb_end(b, p);
        pb_uint_nz(b, XS_LINK, s->link);
        if (o->timestamps) {
            p = pb_begin(b, XS_TIMESTAMPS);
            for (uint32_t k = first[i]; k < first[i + 1]; k++)
                pb_varint(b, a->round_times[obs[k].round & ~AGG_OBS_CPU]);
            pb_end(b, p);
        }
        pb_end(b, sm);
    }
    exp_tables(b, a);
    for (uint32_t i = 0; i < a->n_strings; i++)
        pb_bytes(b, X_STRING_TABLE, ss_agg_str(a, i), ss_agg_strlen(a, i));
    pb_uint_nz(b, X_TIME_NANOS, a->start_ns);
    pb_uint_nz(b, X_DURATION_NANOS, a->end_ns - a->start_ns);
    exp_value_type(b, X_PERIOD_TYPE, a->s_wall, a->s_nanoseconds);
    pb_uint_nz(b, X_PERIOD, a->interval_ns);
    pb_uint(b, X_DEFAULT_SAMPLE_TYPE, a->s_cpu);
    pb_end(b, pr);
    pb_end(b, pc);
    pb_end(b, sp);
    pb_end(b, rp);
    free(obs);
    free(first);
    return 0;
}

int ss_otlp_profiles_encode(ss_agg *a, const ss_prof_request_opts *o, ss_buf *out) {
    if (a->failed)
        return -ENOMEM;
    if (ss_agg_empty(a))
        return -ENODATA;
    size_t start = out->len;
    int rc = o->version == SS_OTLP_PROF_V1EXPERIMENTAL ? encode_exp(a, o, out)
                                                       : encode_dev(a, o, out);
    if (rc == 0 && (out->failed || a->failed))
        rc = -ENOMEM;
    if (rc != 0)
        out->len = start;
    return rc;
}
