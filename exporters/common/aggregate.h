/*
 * aggregate.h: the samples of one export period, in interned tables.
 *
 * Every profile encoder (pprof here; collapsed stacks, flame graph, OTLP
 * profiles in both wire versions in exporters/profiles) reads the same
 * tables, which are shaped like the OTLP v1development ProfilesDictionary:
 *
 *   strings, functions, mappings, locations (+ their lines), stacks (+ their
 *   location indices, leaf first), attributes (KeyValueAndUnit-like
 *   entries), attribute sets (one per distinct thread name/id/state), links
 *   (trace id, span id) and samples keyed by (stack, attribute set, link).
 *
 * Element 0 of every table is the zero element ("" , Function{}, ...), so
 * index 0 means "unset" everywhere, and no table holds duplicates. Every
 * sample also has observations: one per round in which a thread showed it,
 * with the round's timestamp and whether the thread was on CPU. The wall
 * view counts every observation; the CPU view only those on CPU.
 *
 * Steady state allocates nothing: tables are reset between periods but keep
 * their memory, which is charged to ss_mem and bounded by a limit.
 */
#ifndef SS_PROFILES_AGGREGATE_H
#define SS_PROFILES_AGGREGATE_H

#include "agent/buf.h"
#include "agent/hmap.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "exporters/common/common.h"

/* An open-addressing hash index over the elements of one table. */
typedef ss_hslot agg_slot;
typedef ss_hmap agg_index;

typedef struct agg_string {
    uint32_t off, len; /* in ss_agg.chars */
} agg_string;

/* What a function's code is (the flame graph's colours). */
enum { AGG_KIND_NATIVE = 0, AGG_KIND_JAVA = 1, AGG_KIND_JIT = 2, AGG_KIND_KERNEL = 3 };

typedef struct agg_function {
    uint32_t name;        /* as profilers spell it: Java "pkg.Class.method", native
                           * the plain (demangled) name, a native frame without
                           * a symbol "libfoo.so+0x1234" (aggregate.c) */
    uint32_t system_name; /* the raw symbol for native code, else 0 */
    uint32_t file;
    uint8_t kind;         /* AGG_KIND_* */
} agg_function;

typedef struct agg_mapping {
    uint64_t start, limit, offset;
    uint32_t file;
    uint32_t build_id;      /* string: lowercase hex, 0 when none */
    uint32_t build_id_attr; /* attribute process.executable.build_id.gnu, 0 when none */
} agg_mapping;

typedef struct agg_line {
    uint32_t function;
    int32_t line;
} agg_line;

typedef struct agg_location {
    uint32_t mapping;
    uint32_t line_start, n_lines; /* in ss_agg.lines, innermost first */
    uint64_t address;
    uint8_t kind; /* ss_frame_kind of the outermost frame */
} agg_location;

typedef struct agg_stack {
    uint32_t start, n; /* in ss_agg.stack_locs, leaf first */
} agg_stack;

typedef struct agg_attr {
    uint32_t key;  /* string */
    uint32_t unit; /* string, 0 = none */
    bool is_int;
    uint32_t str; /* string value when !is_int */
    int64_t num;  /* int value when is_int */
} agg_attr;

/* The attributes of one thread, as attr indices and as raw values (pprof
 * wants labels, not table indices). */
typedef struct agg_attrset {
    uint32_t attr[3];     /* thread.name, thread.id, thread.state */
    uint32_t name, state; /* strings */
    int64_t id;
} agg_attrset;

typedef struct agg_link {
    uint8_t trace_id[16];
    uint8_t span_id[8];
} agg_link;

typedef struct agg_sample {
    uint32_t stack, attrset, link;
    uint32_t wall;   /* observations */
    uint32_t cpu;    /* observations on CPU */
    uint64_t cpu_ns; /* CPU time of the observations on CPU */
} agg_sample;

/* One observation: sample index, round index (low 31 bits) and the on-CPU
 * flag (top bit). */
typedef struct agg_obs {
    uint32_t sample;
    uint32_t round;
} agg_obs;
#define AGG_OBS_CPU 0x80000000u

/* Growable arrays: elements, count, capacity. */
#define AGG_ARRAY(type, name) \
    type *name;               \
    uint32_t n_##name, cap_##name

typedef struct ss_agg {
    ss_buf chars; /* string bytes, each NUL-terminated */
    AGG_ARRAY(agg_string, strings);
    AGG_ARRAY(agg_function, functions);
    AGG_ARRAY(agg_mapping, mappings);
    AGG_ARRAY(agg_location, locations);
    AGG_ARRAY(agg_line, lines);
    AGG_ARRAY(agg_stack, stacks);
    AGG_ARRAY(uint32_t, stack_locs);
    AGG_ARRAY(agg_attr, attrs);
    AGG_ARRAY(agg_attrset, attrsets);
    AGG_ARRAY(agg_link, links);
    AGG_ARRAY(agg_sample, samples);
    AGG_ARRAY(agg_obs, obs);
    AGG_ARRAY(uint64_t, round_times);

    agg_index ix_strings, ix_functions, ix_locations, ix_stacks, ix_attrs,
        ix_attrsets, ix_links, ix_samples;
    /* funcinfo / mapping pointer -> table index (both are interned by
     * content, so the pointer is the identity). */
    agg_index ix_fnptr, ix_mapptr;
    AGG_ARRAY(const void *, fnptr_keys);
    AGG_ARRAY(uint32_t, fnptr_vals);
    AGG_ARRAY(const void *, mapptr_keys);
    AGG_ARRAY(uint32_t, mapptr_vals);

    /* Scratch for one thread's stack and one location's lines. */
    AGG_ARRAY(uint32_t, scratch_locs);
    AGG_ARRAY(agg_line, scratch_lines);

    /* Well-known strings and attributes, present after every reset. */
    uint32_t s_samples, s_count, s_wall, s_cpu, s_nanoseconds;
    uint32_t s_thread_name, s_thread_id, s_thread_state;
    uint32_t s_frame_type, s_build_id_gnu;
    uint32_t a_frame_type[SS_FRAME_KINDS]; /* profile.frame.type of each ss_frame_kind */

    uint64_t start_ns, end_ns; /* first round's time, last round's time + interval */
    uint64_t interval_ns;      /* of the last round */
    uint64_t rounds;           /* in this period */
    uint64_t rounds_refused;   /* over the memory limit, since creation */
    ss_runtime runtime;

    /* stack_id -> index in stacks, this period: an unchanged stack is not
     * looked up frame by frame again (NULL: no memo). */
    ss_stack_memo *stack_memo;

    size_t bytes; /* allocated, charged to ss_mem */
    size_t limit;
    bool failed;  /* an allocation failed this period */
} ss_agg;

/* limit: bytes the tables may hold before add_round refuses rounds. */
ss_agg *ss_agg_create(size_t limit);
void ss_agg_destroy(ss_agg *a);
/* Forget the period's data, keep the memory. */
void ss_agg_reset(ss_agg *a);

/* Add every thread of a round. 0, -ENOSPC (over the limit: the round is not
 * added, the caller should flush) or -ENOMEM (the period's data is
 * incomplete; a->failed is set). */
int ss_agg_add_round(ss_agg *a, const ss_round *r);

static inline bool ss_agg_empty(const ss_agg *a) { return a->n_samples <= 1; }

static inline const char *ss_agg_str(const ss_agg *a, uint32_t i) {
    return a->chars.data + a->strings[i].off;
}
static inline uint32_t ss_agg_strlen(const ss_agg *a, uint32_t i) {
    return a->strings[i].len;
}

/* Intern a string into the table; returns its index, 0 on failure. */
uint32_t ss_agg_intern(ss_agg *a, const char *s, size_t len);

/* Observations grouped by sample: after the call, the observations of
 * sample i are obs[first[i] .. first[i+1]) of the returned array, in round
 * order. `first` has n_samples + 1 entries. Both arrays are owned by the
 * caller (free()). 0 or -ENOMEM. */
int ss_agg_group_obs(const ss_agg *a, agg_obs **obs, uint32_t **first);

#endif
