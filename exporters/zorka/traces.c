/* traces.c: rounds -> Zorka traces.
 *
 * A sampler does not see method calls, only stacks; this file turns the
 * stacks of one thread into the record trees a Zorka agent would have
 * written. Per thread, consecutive samples that share their root frame
 * make one trace. Within it, a frame that appears at some depth under the
 * same parent record opens a record; the record stays open as long as the
 * following samples show the same frame at that depth under that parent,
 * and closes when a sample does not. So a record is one frame over a run
 * of consecutive samples: its duration is samples x interval, its "calls"
 * the number of samples, and a parent is never shorter than a child (a
 * child's samples are a run inside its parent's).
 *
 * Times are on the trace's own sample clock: record starts at
 * start + first x interval. A trace ends (and a new one starts with the
 * next sample) when the root frame changes, when the thread missed a
 * round (a gap would make the durations lie), when its span context or
 * the interval changes, when it reaches ZK_MAX_RECORDS records, and at the
 * end of every period (zk_builder_close_all). */
#include "agent/module_abi.h"
#include "exporters/zorka/zorka.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* A state the trace's samples were in, and how often. */
typedef struct state_count {
    ss_thread_state state;
    const char *detail;
    uint32_t n;
} state_count;

#define ZK_STATES 4

typedef struct zk_thread {
    int32_t nid;
    int64_t number;
    bool used;
    bool seen;               /* had a sample since the last close_all */
    uint64_t last_seq;       /* round of its last sample */
    zk_trace *open;          /* NULL: none open */
    uint32_t *path;          /* open records, root first (indices into open->recs) */
    uint32_t depth, cap_path;
    state_count states[ZK_STATES];
    uint32_t n_states;
} zk_thread;

struct zk_builder {
    zk_thread *threads;      /* open addressing on (nid, number) */
    uint32_t n_threads, cap_threads;
    zk_emit_fn emit;
    void *owner;
    size_t bytes;            /* charged: thread table, paths, open traces */
    uint64_t samples;
    uint64_t round_no; /* of the round being added */
    const ss_funcinfo *truncated_fn, *no_frames_fn;
};

/* ---- memory ------------------------------------------------------------- */

static void charge(zk_builder *b, size_t add, size_t remove) {
    if (add > remove) {
        ss_mem_charge(add - remove);
        b->bytes += add - remove;
    } else if (remove > add) {
        ss_mem_release(remove - add);
        b->bytes -= remove - add;
    }
}

void zk_trace_free(zk_trace *t) {
    if (!t)
        return;
    ss_mem_release(t->bytes);
    free(t->recs);
    free(t->thread_name);
    free(t);
}

/* ---- the thread table --------------------------------------------------- */

static uint32_t thread_hash(int32_t nid, int64_t number) {
    uint64_t h = (uint64_t)(uint32_t)nid * 0x9E3779B97F4A7C15ull ^ (uint64_t)number * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(h >> 32);
}

static zk_thread *slot_for(zk_thread *tab, uint32_t cap, int32_t nid, int64_t number) {
    uint32_t i = thread_hash(nid, number) & (cap - 1);
    while (tab[i].used && !(tab[i].nid == nid && tab[i].number == number))
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

static int grow_threads(zk_builder *b) {
    uint32_t cap = b->cap_threads ? b->cap_threads * 2 : 64;
    zk_thread *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -ENOMEM;
    for (uint32_t i = 0; i < b->cap_threads; i++)
        if (b->threads[i].used)
            *slot_for(tab, cap, b->threads[i].nid, b->threads[i].number) = b->threads[i];
    free(b->threads);
    charge(b, (size_t)cap * sizeof *tab, (size_t)b->cap_threads * sizeof *tab);
    b->threads = tab;
    b->cap_threads = cap;
    return 0;
}

static zk_thread *find_thread(zk_builder *b, int32_t nid, int64_t number) {
    if ((b->n_threads + 1) * 4 > b->cap_threads * 3 && grow_threads(b) != 0)
        return NULL;
    zk_thread *t = slot_for(b->threads, b->cap_threads, nid, number);
    if (!t->used) {
        memset(t, 0, sizeof *t);
        t->used = true;
        t->nid = nid;
        t->number = number;
        b->n_threads++;
    }
    return t;
}

/* ---- building one trace ------------------------------------------------- */

static const char *state_text(ss_thread_state s, const char *detail, char *out, size_t n) {
    if (detail)
        snprintf(out, n, "%s (%s)", ss_thread_state_name(s), detail);
    else
        snprintf(out, n, "%s", ss_thread_state_name(s));
    return out;
}

static void note_state(zk_thread *th, const ss_thread_sample *s) {
    for (uint32_t i = 0; i < th->n_states; i++)
        if (th->states[i].state == s->state &&
            (th->states[i].detail == s->state_detail ||
             (th->states[i].detail && s->state_detail &&
              strcmp(th->states[i].detail, s->state_detail) == 0))) {
            th->states[i].n++;
            return;
        }
    if (th->n_states < ZK_STATES)
        th->states[th->n_states++] = (state_count){s->state, s->state_detail, 1};
}

static void random_bytes(void *p, size_t n) {
    if (getrandom(p, n, GRND_NONBLOCK) == (ssize_t)n)
        return;
    /* no entropy yet (early boot): a weak but unique-enough fallback */
    uint64_t x = ss_mono_ns() ^ ((uint64_t)ss_process()->pid << 32) ^ (uintptr_t)p;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ((uint8_t *)p)[i] = (uint8_t)x;
    }
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Close th's open trace and hand it over. */
static void close_trace(zk_builder *b, zk_thread *th) {
    zk_trace *t = th->open;
    if (!t)
        return;
    th->open = NULL;
    th->depth = 0;
    uint32_t best = 0;
    for (uint32_t i = 1; i < th->n_states; i++)
        if (th->states[i].n > th->states[best].n)
            best = i;
    if (th->n_states)
        state_text(th->states[best].state, th->states[best].detail, t->state, sizeof t->state);
    else
        snprintf(t->state, sizeof t->state, "UNKNOWN");
    th->n_states = 0;
    /* the trace ID goes in X-Zorka-Trace-ID: the span context's when the
     * thread had one (with both halves non-zero, as the agent requires),
     * else a random one; the record's own span ID is always random */
    if (t->has_span && !all_zero(t->trace_id, 8) && !all_zero(t->trace_id + 8, 8)) {
        memcpy(t->header_id, t->trace_id, 16);
    } else {
        do
            random_bytes(t->header_id, 16);
        while (all_zero(t->header_id, 8) || all_zero(t->header_id + 8, 8));
    }
    do
        random_bytes(&t->zorka_span, sizeof t->zorka_span);
    while (t->zorka_span == 0);
    /* from here the trace's memory is the sender's to account for */
    b->bytes -= t->bytes;
    b->emit(b->owner, t);
}

static zk_trace *open_trace(zk_builder *b, zk_thread *th, const ss_round *r,
                            const ss_thread_sample *s) {
    zk_trace *t = calloc(1, sizeof *t);
    char *name = strdup(s->name ? s->name : "");
    if (!t || !name) {
        free(t);
        free(name);
        return NULL;
    }
    t->thread_name = name;
    t->start_ns = r->time_ns;
    t->round_lo = b->round_no;
    t->interval_ns = (uint64_t)(r->interval_ms ? r->interval_ms : 1000) * 1000000ull;
    /* the id readers know the thread by: the runtime's number, or the kernel's */
    t->thread_id = ss_runtime_about(r->runtime)->numbers_threads ? s->number : (int64_t)s->nid;
    t->has_span = s->has_span;
    if (s->has_span) {
        memcpy(t->trace_id, s->trace_id, 16);
        memcpy(t->span_id, s->span_id, 8);
    }
    t->bytes = sizeof *t + strlen(name) + 1;
    ss_mem_charge(t->bytes);
    b->bytes += t->bytes;
    th->open = t;
    th->depth = 0;
    th->n_states = 0;
    return t;
}

/* A record's module: only a frame with an address has one (its kind says). */
static const ss_mapping *frame_map(const ss_frame *f) {
    return f->fn && ss_frame_kind_about(f->fn->kind)->addressed ? f->map : NULL;
}

static int add_record(zk_builder *b, zk_thread *th, const ss_frame *f, uint32_t depth) {
    zk_trace *t = th->open;
    if (t->n_recs == t->cap_recs) {
        uint32_t cap = t->cap_recs;
        if (ss_grow32((void **)&t->recs, &t->cap_recs, t->n_recs + 1, sizeof *t->recs, 16) != 0)
            return -ENOMEM;
        size_t add = (size_t)(t->cap_recs - cap) * sizeof *t->recs;
        t->bytes += add;
        charge(b, add, 0);
    }
    if (depth >= th->cap_path) {
        uint32_t cap = th->cap_path;
        if (depth == UINT32_MAX ||
            ss_grow32((void **)&th->path, &th->cap_path, depth + 1, sizeof *th->path, 32) != 0)
            return -ENOMEM;
        charge(b, (size_t)th->cap_path * sizeof *th->path, (size_t)cap * sizeof *th->path);
    }
    zk_rec *rec = &t->recs[t->n_recs];
    memset(rec, 0, sizeof *rec);
    rec->fn = f->fn;
    rec->map = frame_map(f);
    rec->depth = depth;
    rec->first = t->n_samples;
    th->path[depth] = t->n_recs++;
    return 0;
}

static void note_line(zk_rec *rec, int32_t line) {
    if (line <= 0)
        return;
    for (uint8_t i = 0; i < rec->n_lines; i++)
        if (rec->lines[i] == line)
            return;
    if (rec->n_lines < ZK_LINES)
        rec->lines[rec->n_lines++] = line;
    else
        rec->more_lines = true;
}

static bool same_frame(const zk_rec *rec, const ss_frame *f) {
    return rec->fn == f->fn && rec->map == frame_map(f);
}

static bool same_span(const zk_trace *t, const ss_thread_sample *s) {
    if (t->has_span != s->has_span)
        return false;
    return !s->has_span || (memcmp(t->trace_id, s->trace_id, 16) == 0 &&
                            memcmp(t->span_id, s->span_id, 8) == 0);
}

/* The frames of s root first, with the synthetic root of a cut stack
 * (stackshot.truncated) or of an empty one (stackshot.no_frames). */
static uint32_t root_first(zk_builder *b, const ss_round *r, const ss_thread_sample *s,
                           const ss_frame **frames, ss_frame *synthetic) {
    *frames = ss_thread_frames(r, s);
    if (s->frame_count == 0 || s->truncated) {
        *synthetic = (ss_frame){.fn = s->frame_count ? b->truncated_fn : b->no_frames_fn};
        return s->frame_count + 1;
    }
    return s->frame_count;
}

/* The frame at depth d (root = 0) of a sample with n frames in all. */
static const ss_frame *frame_at(const ss_thread_sample *s, const ss_frame *frames,
                                const ss_frame *synthetic, uint32_t n, uint32_t d) {
    if (n > s->frame_count) { /* a synthetic root first */
        if (d == 0)
            return synthetic;
        d--;
        n--;
    }
    return &frames[n - 1 - d];
}

static void add_sample(zk_builder *b, const ss_round *r, const ss_thread_sample *s) {
    zk_thread *th = find_thread(b, s->nid, s->number);
    if (!th)
        return; /* out of memory: the sample is lost with the round */
    th->seen = true;
    const ss_frame *frames;
    ss_frame synthetic;
    uint32_t n = root_first(b, r, s, &frames, &synthetic);
    uint64_t interval_ns = (uint64_t)(r->interval_ms ? r->interval_ms : 1000) * 1000000ull;
    zk_trace *t = th->open;
    /* how deep the open path matches this sample */
    uint32_t keep = 0;
    if (t) {
        bool breaks = r->seq != th->last_seq + 1 || !same_span(t, s) ||
                      t->interval_ns != interval_ns || t->n_recs >= ZK_MAX_RECORDS ||
                      t->n_samples == UINT32_MAX;
        while (!breaks && keep < th->depth && keep < n &&
               same_frame(&t->recs[th->path[keep]], frame_at(s, frames, &synthetic, n, keep)))
            keep++;
        if (breaks || keep == 0) {
            close_trace(b, th);
            t = NULL;
            keep = 0;
        }
    }
    if (!t && !(t = open_trace(b, th, r, s)))
        return;
    th->last_seq = r->seq;
    for (uint32_t d = 0; d < keep; d++) {
        zk_rec *rec = &t->recs[th->path[d]];
        rec->samples++;
        note_line(rec, frame_at(s, frames, &synthetic, n, d)->line);
    }
    th->depth = keep;
    for (uint32_t d = keep; d < n; d++) {
        const ss_frame *f = frame_at(s, frames, &synthetic, n, d);
        if (add_record(b, th, f, d) != 0)
            break; /* out of memory: the stack is cut here */
        zk_rec *rec = &t->recs[th->path[d]];
        rec->samples = 1;
        note_line(rec, f->line);
        th->depth = d + 1;
    }
    t->n_samples++;
    t->round_hi = b->round_no;
    note_state(th, s);
    b->samples++;
}

/* ---- public ------------------------------------------------------------- */

zk_builder *zk_builder_new(zk_emit_fn emit, void *owner) {
    zk_builder *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->emit = emit;
    b->owner = owner;
    b->truncated_fn = ss_funcinfo_intern("stackshot", "truncated", "unknown", NULL, SS_FRAME_NATIVE);
    b->no_frames_fn = ss_funcinfo_intern("stackshot", "no_frames", "unknown", NULL, SS_FRAME_NATIVE);
    if (!b->truncated_fn || !b->no_frames_fn || grow_threads(b) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

void zk_builder_add_round(zk_builder *b, const ss_round *r, uint64_t round_no) {
    b->round_no = round_no;
    for (uint32_t i = 0; i < r->n_threads; i++)
        add_sample(b, r, &r->threads[i]);
}

void zk_builder_close_all(zk_builder *b) {
    /* close every trace; forget the threads not seen since last time */
    zk_thread *old = b->threads;
    uint32_t old_cap = b->cap_threads;
    for (uint32_t i = 0; i < old_cap; i++) {
        zk_thread *th = &old[i];
        if (!th->used)
            continue;
        close_trace(b, th);
    }
    /* rebuild the table without the threads that are gone */
    zk_thread *tab = calloc(old_cap, sizeof *tab);
    if (!tab)
        return; /* keep them all: no harm but memory */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < old_cap; i++) {
        zk_thread *th = &old[i];
        if (!th->used)
            continue;
        if (!th->seen) {
            charge(b, 0, (size_t)th->cap_path * sizeof *th->path);
            free(th->path);
            continue;
        }
        th->seen = false;
        *slot_for(tab, old_cap, th->nid, th->number) = *th;
        kept++;
    }
    free(old);
    b->threads = tab;
    b->n_threads = kept;
}

void zk_builder_free(zk_builder *b) {
    if (!b)
        return;
    for (uint32_t i = 0; i < b->cap_threads; i++) {
        zk_thread *th = &b->threads[i];
        if (!th->used)
            continue;
        if (th->open) {
            b->bytes -= th->open->bytes;
            zk_trace_free(th->open);
        }
        free(th->path);
    }
    free(b->threads);
    ss_mem_release(b->bytes);
    free(b);
}

size_t zk_builder_bytes(const zk_builder *b) { return b->bytes; }

uint64_t zk_builder_samples(const zk_builder *b) { return b->samples; }

/* ---- names ---------------------------------------------------------------- */

static bool is_namespace(const char *ns) {
    return ns && *ns && strcmp(ns, "global") != 0 && strcmp(ns, "unknown") != 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

void zk_names_of(const zk_rec *r, zk_method_names *out) {
    const ss_funcinfo *fn = r->fn;
    const char *file = fn && fn->file ? fn->file : "unknown";
    out->method = fn && fn->name ? fn->name : "unknown";
    /* The class: the namespace, else the module of a frame that has one
     * (a frame without an address has none: its namespace, even "unknown",
     * is its class); the signature when the source gave one. */
    out->cls = is_namespace(fn ? fn->ns : NULL) ? fn->ns
               : r->map && r->map->path ? base_name(r->map->path)
               : fn && fn->ns ? fn->ns : "unknown";
    out->signature = fn && fn->signature ? fn->signature : "()";
    /* a source file, not a placeholder or the module's own name */
    bool placeholder = !strcmp(file, "unknown") || !strcmp(file, "Native Method") ||
                       !strcmp(file, "Unknown Source") ||
                       (r->map && r->map->path && !strcmp(file, base_name(r->map->path)));
    out->file = placeholder ? NULL : file;
}
