/*
 * aggregate.c: the interned tables of one export period (aggregate.h).
 *
 * Every table is a growable array plus an open-addressing hash index that
 * stores each element's hash next to its index, so growing the index never
 * rehashes contents. A round of T threads of depth D costs about T*D pointer
 * lookups (funcinfo/mapping -> function/mapping), T*D location lookups and T
 * stack and sample lookups; nothing is allocated once the tables have grown
 * to the period's working set.
 */
#include "agent/buf.h"
#include "agent/grow.h"
#include "agent/hmap.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "exporters/common/aggregate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Hashing                                                              */
/* ------------------------------------------------------------------ */

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* ------------------------------------------------------------------ */
/* Memory                                                               */
/* ------------------------------------------------------------------ */

/* Grow an array to hold `need` elements; the growth is charged to ss_mem. */
static int grow(ss_agg *a, void **arr, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap) /* the common case: no call, no charge */
        return 0;
    uint32_t old = *cap;
    if (ss_grow32(arr, cap, need, elem, 16) != 0) {
        a->failed = true;
        return -ENOMEM;
    }
    size_t delta = (size_t)(*cap - old) * elem;
    ss_mem_charge(delta);
    a->bytes += delta;
    return 0;
}

#define GROW(a, name, need) \
    grow((a), (void **)&(a)->name, &(a)->cap_##name, (need), sizeof *(a)->name)

static void free_array(ss_agg *a, void **arr, uint32_t *n, uint32_t *cap, size_t elem) {
    free(*arr);
    ss_mem_release((size_t)*cap * elem);
    a->bytes -= (size_t)*cap * elem;
    *arr = NULL;
    *n = *cap = 0;
}

#define FREE_ARRAY(a, name) \
    free_array((a), (void **)&(a)->name, &(a)->n_##name, &(a)->cap_##name, sizeof *(a)->name)

/* ------------------------------------------------------------------ */
/* Hash index                                                           */
/* ------------------------------------------------------------------ */

/* The indexes are agent/hmap.h's, their slots counted in a->bytes (set up
 * by ss_agg_create). Index 0 is never a hit: the zero elements are not in
 * the indexes, so 0 means "not there" (with *slot where it goes, or NULL
 * when the index could not grow). */
static uint32_t ix_find(ss_agg *a, agg_index *ix, uint32_t h, ss_hmap_eq eq, const void *key,
                        agg_slot **slot) {
    uint32_t idx = ss_hmap_find(ix, h, eq, a, key, slot);
    if (idx != SS_HMAP_NONE)
        return idx;
    if (!*slot)
        a->failed = true;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Strings                                                              */
/* ------------------------------------------------------------------ */

typedef struct str_key {
    const char *s;
    size_t len;
} str_key;

static bool str_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const str_key *k = key;
    return a->strings[idx].len == k->len &&
           memcmp(a->chars.data + a->strings[idx].off, k->s, k->len) == 0;
}

uint32_t ss_agg_intern(ss_agg *a, const char *s, size_t len) {
    if (len == 0 && a->n_strings > 0)
        return 0;
    str_key k = {s, len};
    uint32_t h = ss_hash_bytes(s, len);
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_strings, h, str_eq, &k, &slot);
    if (idx || !slot)
        return idx;
    if (GROW(a, strings, a->n_strings + 1) != 0)
        return 0;
    size_t before = a->chars.cap;
    size_t off = a->chars.len;
    if (ss_buf_append(&a->chars, s, len) != 0 || ss_buf_putc(&a->chars, '\0') != 0) {
        a->failed = true;
        return 0;
    }
    if (a->chars.cap > before) {
        ss_mem_charge(a->chars.cap - before);
        a->bytes += a->chars.cap - before;
    }
    idx = a->n_strings++;
    a->strings[idx] = (agg_string){(uint32_t)off, (uint32_t)len};
    ss_hmap_put(&a->ix_strings, slot, h, idx);
    return idx;
}

static uint32_t intern_z(ss_agg *a, const char *s) {
    return ss_agg_intern(a, s ? s : "", s ? strlen(s) : 0);
}

/* ------------------------------------------------------------------ */
/* Attributes                                                           */
/* ------------------------------------------------------------------ */

static bool attr_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_attr *x = &a->attrs[idx], *y = key;
    return x->key == y->key && x->unit == y->unit && x->is_int == y->is_int &&
           x->str == y->str && x->num == y->num;
}

static uint32_t attr_intern(ss_agg *a, const agg_attr *k) {
    uint32_t h = ss_hash_fold(mix(mix(mix(mix(k->key, k->unit), k->is_int), k->str), (uint64_t)k->num));
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_attrs, h, attr_eq, k, &slot);
    if (idx || !slot)
        return idx;
    if (GROW(a, attrs, a->n_attrs + 1) != 0)
        return 0;
    idx = a->n_attrs++;
    a->attrs[idx] = *k;
    ss_hmap_put(&a->ix_attrs, slot, h, idx);
    return idx;
}

static uint32_t attr_str(ss_agg *a, uint32_t key, uint32_t val) {
    agg_attr k = {.key = key, .str = val};
    return attr_intern(a, &k);
}

static uint32_t attr_int(ss_agg *a, uint32_t key, int64_t v) {
    agg_attr k = {.key = key, .is_int = true, .num = v};
    return attr_intern(a, &k);
}

/* ------------------------------------------------------------------ */
/* Functions and mappings (by interned pointer, then by content)        */
/* ------------------------------------------------------------------ */

static bool fnptr_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    return a->fnptr_keys[idx] == key;
}

static bool mapptr_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    return a->mapptr_keys[idx] == key;
}

static bool func_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_function *x = &a->functions[idx], *y = key;
    return x->name == y->name && x->system_name == y->system_name && x->file == y->file &&
           x->kind == y->kind;
}


/* A function's name in profiles, as profilers spell it (async-profiler,
 * perf, pprof): qualified as its kind says (Java "pkg.Class.method");
 * native code its plain name
 * ("compute_primes", "std::vector<int>::push_back"). The "global." and
 * "unknown." namespaces are the Splunk call-stack text's convention and
 * stay there (text_format.c). */
static uint32_t join_name(ss_agg *a, const char *ns, const char *sep, const char *name) {
    size_t nl = strlen(ns), sl = strlen(sep), ml = strlen(name);
    char small[512];
    char *buf = nl + sl + ml + 1 <= sizeof small ? small : malloc(nl + sl + ml + 1);
    if (!buf) {
        a->failed = true;
        return 0;
    }
    memcpy(buf, ns, nl);
    memcpy(buf + nl, sep, sl);
    memcpy(buf + nl + sl, name, ml);
    uint32_t idx = ss_agg_intern(a, buf, nl + sl + ml);
    if (buf != small)
        free(buf);
    return idx;
}

static uint32_t func_name(ss_agg *a, const ss_funcinfo *fn) {
    const char *ns = fn->ns ? fn->ns : "";
    const char *name = fn->name ? fn->name : "unknown";
    const char *qualify = ss_frame_kind_about(fn->kind)->qualify;
    if (qualify)
        return join_name(a, ns, ns[0] ? qualify : "", name);
    if (!ns[0] || strcmp(ns, "global") == 0 || strcmp(ns, "jit") == 0)
        return intern_z(a, name);
    if (strcmp(ns, "stackshot") == 0) /* the agent's own markers: stackshot.truncated */
        return join_name(a, ns, ".", name);
    return join_name(a, ns, "::", name); /* C++ / Rust scope split by the resolver */
}

/* The flame graph's colours: code without an address (a VM's methods, by
 * bytecode index) is the "java" colour; native code by what it is. */
static uint8_t func_kind(const ss_funcinfo *fn, const ss_mapping *m) {
    if (fn && !ss_frame_kind_about(fn->kind)->addressed)
        return AGG_KIND_JAVA;
    if (fn && fn->ns && strcmp(fn->ns, "jit") == 0)
        return AGG_KIND_JIT;
    /* Kernel stacks are not sampled: the only kernel-provided code in a
     * stack is the vDSO (clock_gettime, gettimeofday). */
    if (m && m->path && (strcmp(m->path, "[vdso]") == 0 || strcmp(m->path, "[vsyscall]") == 0))
        return AGG_KIND_KERNEL;
    return AGG_KIND_NATIVE;
}

/* Without a symbol: only a frame with an address has a module and an
 * offset to be named by (unresolved_function). */
static bool unresolved(const ss_funcinfo *fn) {
    return !fn || (ss_frame_kind_about(fn->kind)->addressed && fn->name && fn->ns &&
                   strcmp(fn->name, "unknown") == 0 && strcmp(fn->ns, "unknown") == 0);
}

static uint32_t add_function(ss_agg *a, agg_function f) {
    uint32_t fh = ss_hash_fold(mix(mix(mix(f.name, f.system_name), f.file), f.kind));
    agg_slot *fslot;
    uint32_t idx = ix_find(a, &a->ix_functions, fh, func_eq, &f, &fslot);
    if (idx)
        return idx;
    if (!fslot || GROW(a, functions, a->n_functions + 1) != 0)
        return 0;
    idx = a->n_functions++;
    a->functions[idx] = f;
    ss_hmap_put(&a->ix_functions, fslot, fh, idx);
    return idx;
}

/* A native frame without a symbol: named by its module and the offset in
 * it ("libfoo.so+0x1234", the offset addr2line and symbolizers take with
 * the module's build id, carried by the location's mapping), or by its
 * address when no module holds it ("[unknown]+0x7f..."), so that the
 * unknown frames of different code stay apart. */
static uint32_t unresolved_function(ss_agg *a, const ss_frame *f) {
    char name[320];
    const ss_mapping *m = f->map;
    if (m && m->path && m->path[0]) {
        const char *base = strrchr(m->path, '/');
        base = base ? base + 1 : m->path;
        uint64_t off = f->addr - m->start + m->file_offset;
        snprintf(name, sizeof name, "%.256s+0x%llx", base, (unsigned long long)off);
    } else {
        snprintf(name, sizeof name, "[unknown]+0x%llx", (unsigned long long)f->addr);
    }
    const char *file = f->fn && f->fn->file ? f->fn->file : "unknown";
    agg_function fn = {.name = intern_z(a, name), .file = intern_z(a, file),
                       .kind = func_kind(f->fn, m)};
    return add_function(a, fn);
}

static uint32_t function_of(ss_agg *a, const ss_frame *fr) {
    const ss_funcinfo *fn = fr->fn;
    if (unresolved(fn))
        return unresolved_function(a, fr);
    uint32_t h = ss_hash_ptr(fn);
    agg_slot *slot;
    uint32_t at = ix_find(a, &a->ix_fnptr, h, fnptr_eq, fn, &slot);
    if (at)
        return a->fnptr_vals[at];
    if (!slot)
        return 0;
    /* A miss: the function by content. (A vDSO function's funcinfo is the
     * vDSO's own, file "[vdso]": its kind does not depend on the frame.) */
    agg_function f = {.name = func_name(a, fn),
                      .file = intern_z(a, fn->file ? fn->file : "unknown"),
                      .kind = func_kind(fn, fr->map)};
    uint32_t idx = add_function(a, f);
    if (!idx)
        return 0;
    if (GROW(a, fnptr_keys, a->n_fnptr_keys + 1) != 0 ||
        GROW(a, fnptr_vals, a->n_fnptr_vals + 1) != 0)
        return idx;
    /* ix_find may have been called on other indexes meanwhile, never on
     * this one: the slot is still the empty one we found. */
    uint32_t k = a->n_fnptr_keys++;
    a->n_fnptr_vals++;
    a->fnptr_keys[k] = fn;
    a->fnptr_vals[k] = idx;
    ss_hmap_put(&a->ix_fnptr, slot, h, k);
    return idx;
}

static uint32_t mapping_of(ss_agg *a, const ss_mapping *m) {
    if (!m)
        return 0;
    uint32_t h = ss_hash_ptr(m);
    agg_slot *slot;
    uint32_t at = ix_find(a, &a->ix_mapptr, h, mapptr_eq, m, &slot);
    if (at)
        return a->mapptr_vals[at];
    if (!slot)
        return 0;
    agg_mapping am = {.start = m->start, .limit = m->limit, .offset = m->file_offset,
                      .file = intern_z(a, m->path)};
    if (m->build_id && m->build_id[0]) {
        am.build_id = intern_z(a, m->build_id);
        am.build_id_attr = attr_str(a, a->s_build_id_gnu, am.build_id);
    }
    if (GROW(a, mappings, a->n_mappings + 1) != 0 ||
        GROW(a, mapptr_keys, a->n_mapptr_keys + 1) != 0 ||
        GROW(a, mapptr_vals, a->n_mapptr_vals + 1) != 0)
        return 0;
    uint32_t idx = a->n_mappings++;
    a->mappings[idx] = am;
    uint32_t k = a->n_mapptr_keys++;
    a->n_mapptr_vals++;
    a->mapptr_keys[k] = m;
    a->mapptr_vals[k] = idx;
    ss_hmap_put(&a->ix_mapptr, slot, h, k);
    return idx;
}

/* ------------------------------------------------------------------ */
/* Locations and stacks                                                 */
/* ------------------------------------------------------------------ */

static bool loc_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_location *x = &a->locations[idx], *y = key;
    if (x->mapping != y->mapping || x->address != y->address || x->kind != y->kind ||
        x->n_lines != y->n_lines)
        return false;
    return memcmp(a->lines + x->line_start, a->scratch_lines, x->n_lines * sizeof(agg_line)) == 0;
}

/* The location of the frames f[0..n): f[0..n-1) inlined into f[n-1]. */
static uint32_t location_of(ss_agg *a, const ss_frame *f, uint32_t n) {
    if (GROW(a, scratch_lines, n) != 0)
        return 0;
    const ss_frame *outer = &f[n - 1];
    /* a frame without a function is native code nothing resolved */
    uint8_t kind = outer->fn ? outer->fn->kind : SS_FRAME_NATIVE;
    bool addressed = ss_frame_kind_about(kind)->addressed;
    agg_location key = {.mapping = addressed ? mapping_of(a, outer->map) : 0,
                        .address = addressed ? outer->addr : 0,
                        .n_lines = n,
                        .kind = kind};
    uint64_t h = mix(mix(mix(key.mapping, key.address), key.kind), n);
    for (uint32_t i = 0; i < n; i++) {
        agg_line l;
        memset(&l, 0, sizeof l);
        l.function = function_of(a, &f[i]);
        l.line = f[i].line > 0 ? f[i].line : 0;
        a->scratch_lines[i] = l;
        h = mix(mix(h, l.function), (uint32_t)l.line);
    }
    uint32_t fh = ss_hash_fold(h);
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_locations, fh, loc_eq, &key, &slot);
    if (idx || !slot)
        return idx;
    if (GROW(a, locations, a->n_locations + 1) != 0 || GROW(a, lines, a->n_lines + n) != 0)
        return 0;
    key.line_start = a->n_lines;
    memcpy(a->lines + a->n_lines, a->scratch_lines, n * sizeof(agg_line));
    a->n_lines += n;
    idx = a->n_locations++;
    a->locations[idx] = key;
    ss_hmap_put(&a->ix_locations, slot, fh, idx);
    return idx;
}

static bool stack_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_stack *x = &a->stacks[idx];
    const uint32_t *n = key;
    return x->n == *n &&
           memcmp(a->stack_locs + x->start, a->scratch_locs, x->n * sizeof(uint32_t)) == 0;
}

static uint32_t intern_stack(ss_agg *a, const ss_round *r, const ss_thread_sample *t);

/* The stack of t: kept from an earlier round of the period when its frames
 * did not change (its stack_id: the index is valid until the reset). */
static uint32_t stack_of(ss_agg *a, const ss_round *r, const ss_thread_sample *t) {
    const ss_memo_entry *e = ss_stack_memo_get(a->stack_memo, t->stack_id);
    if (e)
        return (uint32_t)e->value;
    uint32_t idx = intern_stack(a, r, t);
    if (idx && t->stack_id)
        ss_stack_memo_put(a->stack_memo, t->stack_id, idx, NULL, 0);
    return idx;
}

static uint32_t intern_stack(ss_agg *a, const ss_round *r, const ss_thread_sample *t) {
    const ss_frame *f = ss_thread_frames(r, t);
    if (GROW(a, scratch_locs, t->frame_count + 1) != 0)
        return 0;
    uint32_t n = 0;
    uint64_t h = 7;
    for (uint32_t i = 0; i < t->frame_count;) {
        uint32_t j = i;
        while (j + 1 < t->frame_count && f[j].inlined)
            j++;
        uint32_t loc = location_of(a, f + i, j - i + 1);
        if (!loc)
            return 0;
        a->scratch_locs[n++] = loc;
        h = mix(h, loc);
        i = j + 1;
    }
    if (n == 0)
        return 0; /* the zero stack is the empty stack */
    uint32_t fh = ss_hash_fold(h);
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_stacks, fh, stack_eq, &n, &slot);
    if (idx || !slot)
        return idx;
    if (GROW(a, stacks, a->n_stacks + 1) != 0 || GROW(a, stack_locs, a->n_stack_locs + n) != 0)
        return 0;
    memcpy(a->stack_locs + a->n_stack_locs, a->scratch_locs, n * sizeof(uint32_t));
    idx = a->n_stacks++;
    a->stacks[idx] = (agg_stack){a->n_stack_locs, n};
    a->n_stack_locs += n;
    ss_hmap_put(&a->ix_stacks, slot, fh, idx);
    return idx;
}

/* ------------------------------------------------------------------ */
/* Attribute sets, links, samples                                       */
/* ------------------------------------------------------------------ */

static bool attrset_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_attrset *x = &a->attrsets[idx], *y = key;
    return x->name == y->name && x->state == y->state && x->id == y->id;
}

static uint32_t attrset_of(ss_agg *a, const ss_thread_sample *t) {
    agg_attrset k = {.name = intern_z(a, t->name),
                     .state = intern_z(a, ss_thread_state_name(t->state)),
                     .id = t->nid ? t->nid : t->number};
    uint32_t h = ss_hash_fold(mix(mix(k.name, k.state), (uint64_t)k.id));
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_attrsets, h, attrset_eq, &k, &slot);
    if (idx || !slot)
        return idx;
    k.attr[0] = attr_str(a, a->s_thread_name, k.name);
    k.attr[1] = attr_int(a, a->s_thread_id, k.id);
    k.attr[2] = attr_str(a, a->s_thread_state, k.state);
    if (GROW(a, attrsets, a->n_attrsets + 1) != 0)
        return 0;
    idx = a->n_attrsets++;
    a->attrsets[idx] = k;
    ss_hmap_put(&a->ix_attrsets, slot, h, idx);
    return idx;
}

static bool link_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    return memcmp(&a->links[idx], key, sizeof(agg_link)) == 0;
}

static uint32_t link_of(ss_agg *a, const ss_thread_sample *t) {
    if (!t->has_span)
        return 0;
    agg_link k;
    memcpy(k.trace_id, t->trace_id, 16);
    memcpy(k.span_id, t->span_id, 8);
    static const agg_link zero;
    if (memcmp(&k, &zero, sizeof k) == 0)
        return 0;
    uint32_t h = ss_hash_bytes(&k, sizeof k);
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_links, h, link_eq, &k, &slot);
    if (idx || !slot)
        return idx;
    if (GROW(a, links, a->n_links + 1) != 0)
        return 0;
    idx = a->n_links++;
    a->links[idx] = k;
    ss_hmap_put(&a->ix_links, slot, h, idx);
    return idx;
}

static bool sample_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_agg *a = ctx;
    const agg_sample *x = &a->samples[idx], *y = key;
    return x->stack == y->stack && x->attrset == y->attrset && x->link == y->link;
}

/* The CPU view. A thread that ran for less than 1% of the interval only
 * woke up briefly (often for the sampler's own signal, which interrupts
 * sleeps): counting it as a full CPU sample would paint idle threads as
 * busy, so it counts as off CPU. Its CPU time is small either way. */
static bool on_cpu(const ss_round *r, const ss_thread_sample *t) {
    if (!t->on_cpu)
        return false;
    uint64_t d = t->cpu_delta_ns;
    if (d == 0 || d == SS_UNKNOWN_U64)
        return true; /* no CPU clock: the sampler's judgement stands */
    return d * 100 >= (uint64_t)r->interval_ms * 1000000ull;
}

static int add_thread(ss_agg *a, const ss_round *r, const ss_thread_sample *t, uint32_t round) {
    agg_sample k = {.attrset = attrset_of(a, t), .link = link_of(a, t)};
    k.stack = stack_of(a, r, t);
    if (a->failed || !k.attrset)
        return -ENOMEM;
    uint32_t h = ss_hash_fold(mix(mix(k.stack, k.attrset), k.link));
    agg_slot *slot;
    uint32_t idx = ix_find(a, &a->ix_samples, h, sample_eq, &k, &slot);
    if (!idx) {
        if (!slot || GROW(a, samples, a->n_samples + 1) != 0)
            return -ENOMEM;
        idx = a->n_samples++;
        a->samples[idx] = k;
        ss_hmap_put(&a->ix_samples, slot, h, idx);
    }
    if (GROW(a, obs, a->n_obs + 1) != 0)
        return -ENOMEM;
    agg_sample *s = &a->samples[idx];
    s->wall++;
    uint32_t flag = 0;
    if (on_cpu(r, t)) {
        s->cpu++;
        uint64_t d = t->cpu_delta_ns;
        s->cpu_ns += d && d != SS_UNKNOWN_U64 ? d : (uint64_t)r->interval_ms * 1000000ull;
        flag = AGG_OBS_CPU;
    }
    a->obs[a->n_obs++] = (agg_obs){idx, round | flag};
    return 0;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                           */
/* ------------------------------------------------------------------ */

/* The zero elements and the well-known strings every period starts with. */
static int seed(ss_agg *a) {
    if (GROW(a, strings, 1) || GROW(a, functions, 1) || GROW(a, mappings, 1) ||
        GROW(a, locations, 1) || GROW(a, stacks, 1) || GROW(a, attrs, 1) ||
        GROW(a, attrsets, 1) || GROW(a, links, 1) || GROW(a, samples, 1) ||
        GROW(a, fnptr_keys, 1) || GROW(a, fnptr_vals, 1) || GROW(a, mapptr_keys, 1) ||
        GROW(a, mapptr_vals, 1))
        return -ENOMEM;
    /* Pointer tables start with a dummy too, so that 0 means "not found". */
    a->fnptr_keys[0] = a->mapptr_keys[0] = NULL;
    a->fnptr_vals[0] = a->mapptr_vals[0] = 0;
    a->n_fnptr_keys = a->n_fnptr_vals = a->n_mapptr_keys = a->n_mapptr_vals = 1;
    a->n_strings = 0;
    ss_buf_reset(&a->chars);
    if (ss_buf_putc(&a->chars, '\0') != 0)
        return -ENOMEM;
    a->strings[0] = (agg_string){0, 0};
    a->n_strings = 1;
    memset(a->functions, 0, sizeof *a->functions);
    memset(a->mappings, 0, sizeof *a->mappings);
    memset(a->locations, 0, sizeof *a->locations);
    memset(a->stacks, 0, sizeof *a->stacks);
    memset(a->attrs, 0, sizeof *a->attrs);
    memset(a->attrsets, 0, sizeof *a->attrsets);
    memset(a->links, 0, sizeof *a->links);
    memset(a->samples, 0, sizeof *a->samples);
    a->n_functions = a->n_mappings = a->n_locations = a->n_stacks = 1;
    a->n_attrs = a->n_attrsets = a->n_links = a->n_samples = 1;
    a->s_samples = intern_z(a, "samples");
    a->s_count = intern_z(a, "count");
    a->s_wall = intern_z(a, "wall");
    a->s_cpu = intern_z(a, "cpu");
    a->s_nanoseconds = intern_z(a, "nanoseconds");
    a->s_thread_name = intern_z(a, "thread.name");
    a->s_thread_id = intern_z(a, "thread.id");
    a->s_thread_state = intern_z(a, "thread.state");
    a->s_frame_type = intern_z(a, "profile.frame.type");
    a->s_build_id_gnu = intern_z(a, "process.executable.build_id.gnu");
    /* every kind's profile.frame.type, last kind first (the order the
     * strings and attributes always had: "jvm", then "native") */
    for (unsigned k = SS_FRAME_KINDS; k-- > 0;)
        a->a_frame_type[k] =
            attr_str(a, a->s_frame_type, intern_z(a, ss_frame_kind_about(k)->type));
    return a->failed ? -ENOMEM : 0;
}

ss_agg *ss_agg_create(size_t limit) {
    ss_agg *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    ss_buf_init(&a->chars);
    agg_index *ixs[] = {&a->ix_strings, &a->ix_functions, &a->ix_locations, &a->ix_stacks,
                        &a->ix_attrs,   &a->ix_attrsets,  &a->ix_links,     &a->ix_samples,
                        &a->ix_fnptr,   &a->ix_mapptr};
    for (size_t i = 0; i < sizeof ixs / sizeof *ixs; i++)
        ss_hmap_init(ixs[i], 64, 75, &a->bytes);
    a->limit = limit;
    a->stack_memo = ss_stack_memo_create(limit / 16 + 4096);
    ss_agg_reset(a);
    if (a->failed) {
        ss_agg_destroy(a);
        return NULL;
    }
    return a;
}

static void free_all(ss_agg *a) {
    FREE_ARRAY(a, strings);
    FREE_ARRAY(a, functions);
    FREE_ARRAY(a, mappings);
    FREE_ARRAY(a, locations);
    FREE_ARRAY(a, lines);
    FREE_ARRAY(a, stacks);
    FREE_ARRAY(a, stack_locs);
    FREE_ARRAY(a, attrs);
    FREE_ARRAY(a, attrsets);
    FREE_ARRAY(a, links);
    FREE_ARRAY(a, samples);
    FREE_ARRAY(a, obs);
    FREE_ARRAY(a, round_times);
    FREE_ARRAY(a, fnptr_keys);
    FREE_ARRAY(a, fnptr_vals);
    FREE_ARRAY(a, mapptr_keys);
    FREE_ARRAY(a, mapptr_vals);
    FREE_ARRAY(a, scratch_locs);
    FREE_ARRAY(a, scratch_lines);
    agg_index *ixs[] = {&a->ix_strings, &a->ix_functions, &a->ix_locations, &a->ix_stacks,
                        &a->ix_attrs,   &a->ix_attrsets,  &a->ix_links,     &a->ix_samples,
                        &a->ix_fnptr,   &a->ix_mapptr};
    for (size_t i = 0; i < sizeof ixs / sizeof *ixs; i++)
        ss_hmap_free(ixs[i]);
    ss_mem_release(a->chars.cap);
    a->bytes -= a->chars.cap;
    ss_buf_free(&a->chars);
}

void ss_agg_destroy(ss_agg *a) {
    if (!a)
        return;
    free_all(a);
    ss_stack_memo_destroy(a->stack_memo);
    free(a);
}

void ss_agg_reset(ss_agg *a) {
    /* A period that grew past the limit gives its memory back; otherwise
     * the next period reuses it. */
    if (a->bytes >= a->limit || a->failed)
        free_all(a);
    agg_index *ixs[] = {&a->ix_strings, &a->ix_functions, &a->ix_locations, &a->ix_stacks,
                        &a->ix_attrs,   &a->ix_attrsets,  &a->ix_links,     &a->ix_samples,
                        &a->ix_fnptr,   &a->ix_mapptr};
    for (size_t i = 0; i < sizeof ixs / sizeof *ixs; i++)
        ss_hmap_clear(ixs[i]);
    a->n_lines = a->n_stack_locs = a->n_obs = a->n_round_times = 0;
    a->n_fnptr_keys = a->n_fnptr_vals = a->n_mapptr_keys = a->n_mapptr_vals = 0;
    a->start_ns = a->end_ns = a->interval_ns = 0;
    a->rounds = 0;
    a->failed = false;
    ss_stack_memo_clear(a->stack_memo); /* its indices were this period's */
    if (seed(a) != 0)
        a->failed = true;
    /* The zero elements are not in the indexes: index 0 is never a hit, so
     * interning "" explicitly returns 0 via the len == 0 shortcut. */
}

int ss_agg_add_round(ss_agg *a, const ss_round *r) {
    if (a->failed)
        return -ENOMEM;
    if (a->bytes >= a->limit) {
        a->rounds_refused++;
        return -ENOSPC;
    }
    if (GROW(a, round_times, a->n_round_times + 1) != 0)
        return -ENOMEM;
    uint32_t round = a->n_round_times++;
    a->round_times[round] = r->time_ns;
    uint64_t interval = (uint64_t)r->interval_ms * 1000000ull;
    if (a->rounds == 0)
        a->start_ns = r->time_ns;
    if (r->time_ns < a->start_ns)
        a->start_ns = r->time_ns;
    if (r->time_ns + (interval ? interval : 1) > a->end_ns)
        a->end_ns = r->time_ns + (interval ? interval : 1);
    a->interval_ns = interval;
    a->runtime = r->runtime;
    a->rounds++;
    for (uint32_t i = 0; i < r->n_threads; i++)
        if (add_thread(a, r, &r->threads[i], round) != 0) {
            a->failed = true;
            return -ENOMEM;
        }
    ss_stack_memo_sweep(a->stack_memo);
    return 0;
}

int ss_agg_group_obs(const ss_agg *a, agg_obs **obs_out, uint32_t **first_out) {
    uint32_t *first = calloc((size_t)a->n_samples + 1, sizeof *first);
    agg_obs *obs = malloc(((size_t)a->n_obs + 1) * sizeof *obs);
    if (!first || !obs) {
        free(first);
        free(obs);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < a->n_obs; i++)
        first[a->obs[i].sample + 1]++;
    for (uint32_t i = 0; i < a->n_samples; i++)
        first[i + 1] += first[i];
    uint32_t *pos = calloc((size_t)a->n_samples + 1, sizeof *pos);
    if (!pos) {
        free(first);
        free(obs);
        return -ENOMEM;
    }
    memcpy(pos, first, (size_t)a->n_samples * sizeof *pos);
    for (uint32_t i = 0; i < a->n_obs; i++)
        obs[pos[a->obs[i].sample]++] = a->obs[i];
    free(pos);
    *obs_out = obs;
    *first_out = first;
    return 0;
}
