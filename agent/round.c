/* round.c: building immutable rounds.
 *
 * A sampler adds threads and frames to a builder, whose scratch arrays are
 * reused from round to round; finish() copies them into one allocation
 * (header, threads, frames, thread names) that every exporter shares by
 * reference count. One allocation per round keeps the memory accounting
 * exact and freeing trivial. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/grow.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/time.h"

#include <stdlib.h>
#include <string.h>

struct ss_round_builder {
    ss_thread_sample *threads;
    uint32_t n_threads, cap_threads;
    ss_frame *frames;
    uint32_t n_frames, cap_frames;
    ss_buf names;      /* thread names, NUL-separated */
    size_t *name_off;  /* per thread: offset in names */
    size_t *attr_off;  /* per thread: its span attributes in names, SIZE_MAX none */
    uint64_t time_ns, started_mono;
    uint32_t interval_ms;
    ss_runtime runtime;
    uint64_t seq;
    bool in_thread;
    bool failed;
};

static const char *const state_names[] = {
    [SS_STATE_UNKNOWN] = "UNKNOWN",       [SS_STATE_NEW] = "NEW",
    [SS_STATE_RUNNABLE] = "RUNNABLE",     [SS_STATE_BLOCKED] = "BLOCKED",
    [SS_STATE_WAITING] = "WAITING",       [SS_STATE_TIMED_WAITING] = "TIMED_WAITING",
    [SS_STATE_TERMINATED] = "TERMINATED", [SS_STATE_STOPPED] = "STOPPED",
};

const char *ss_thread_state_name(ss_thread_state s) {
    if ((unsigned)s >= sizeof state_names / sizeof state_names[0])
        return "UNKNOWN";
    return state_names[s];
}

/* The rows a source's kinds and runtime are described by (agent/round.h):
 * exporters read these instead of branching on the runtime. */
static const ss_frame_kind_info frame_kinds[SS_FRAME_KINDS] = {
    [SS_FRAME_NATIVE] = {.type = "native", .qualify = NULL, .addressed = true},
    [SS_FRAME_JAVA] = {.type = "jvm", .qualify = ".", .addressed = false},
};

const ss_frame_kind_info *ss_frame_kind_about(unsigned kind) {
    return &frame_kinds[kind < SS_FRAME_KINDS ? kind : SS_FRAME_NATIVE];
}

static const ss_runtime_info runtimes[] = {
    [SS_RUNTIME_NATIVE] = {.name = "native", .numbers_threads = false, .state_label = NULL},
    [SS_RUNTIME_JVM] = {.name = "jvm", .numbers_threads = true,
                        .state_label = "java.lang.Thread.State"},
};

const ss_runtime_info *ss_runtime_about(unsigned runtime) {
    return &runtimes[runtime < sizeof runtimes / sizeof runtimes[0] ? runtime
                                                                    : SS_RUNTIME_NATIVE];
}

ss_round_builder *ss_round_builder_create(void) {
    ss_round_builder *b = calloc(1, sizeof *b);
    if (b)
        ss_buf_init(&b->names);
    return b;
}

void ss_round_builder_destroy(ss_round_builder *b) {
    if (!b)
        return;
    free(b->threads);
    free(b->frames);
    free(b->name_off);
    free(b->attr_off);
    ss_buf_free(&b->names);
    free(b);
}

void ss_round_builder_begin(ss_round_builder *b, uint64_t time_ns,
                            uint32_t interval_ms, ss_runtime rt) {
    b->n_threads = b->n_frames = 0;
    ss_buf_reset(&b->names);
    b->time_ns = time_ns;
    b->started_mono = ss_mono_ns();
    b->interval_ms = interval_ms;
    b->runtime = rt;
    b->in_thread = false;
    b->failed = false;
}

/* The builder's arrays start at 64 elements and double (agent/grow.h). */
static int grow(void **p, uint32_t *cap, size_t elem, uint32_t need) {
    return ss_grow32(p, cap, need, elem, 64);
}

ss_thread_sample *ss_round_builder_add_thread(ss_round_builder *b,
                                              const char *name) {
    uint32_t cap = b->cap_threads;
    if (grow((void **)&b->threads, &b->cap_threads, sizeof *b->threads,
             b->n_threads + 1) != 0) {
        b->failed = true;
        return NULL;
    }
    if (cap != b->cap_threads) {
        size_t *no = realloc(b->name_off, b->cap_threads * sizeof *no);
        if (!no) {
            b->failed = true;
            return NULL;
        }
        b->name_off = no;
        size_t *ao = realloc(b->attr_off, b->cap_threads * sizeof *ao);
        if (!ao) {
            b->failed = true;
            return NULL;
        }
        b->attr_off = ao;
    }
    b->name_off[b->n_threads] = b->names.len;
    b->attr_off[b->n_threads] = SIZE_MAX;
    ss_buf_append(&b->names, name ? name : "", strlen(name ? name : "") + 1);
    if (b->names.failed) {
        b->failed = true;
        return NULL;
    }
    ss_thread_sample *t = &b->threads[b->n_threads++];
    memset(t, 0, sizeof *t);
    t->cpu_ns = t->elapsed_ns = SS_UNKNOWN_U64;
    t->io_read_bytes = t->io_write_bytes = t->alloc_bytes = SS_UNKNOWN_U64;
    t->wait_ns = SS_UNKNOWN_U64;
    t->frame_start = b->n_frames;
    b->in_thread = true;
    return t;
}

int ss_round_builder_add_frame(ss_round_builder *b, const ss_frame *f) {
    if (!b->in_thread)
        return -1;
    if (grow((void **)&b->frames, &b->cap_frames, sizeof *b->frames,
             b->n_frames + 1) != 0) {
        b->failed = true;
        return -1;
    }
    b->frames[b->n_frames++] = *f;
    b->threads[b->n_threads - 1].frame_count++;
    return 0;
}

int ss_round_builder_add_frames(ss_round_builder *b, const ss_frame *f, uint32_t n) {
    if (!b->in_thread)
        return -1;
    if (!n)
        return 0;
    if (grow((void **)&b->frames, &b->cap_frames, sizeof *b->frames, b->n_frames + n) != 0) {
        b->failed = true;
        return -1;
    }
    memcpy(b->frames + b->n_frames, f, (size_t)n * sizeof *f);
    b->n_frames += n;
    b->threads[b->n_threads - 1].frame_count += n;
    return 0;
}

int ss_round_builder_set_span_attrs(ss_round_builder *b, const char *text, size_t len) {
    if (!b->in_thread || !len)
        return 0;
    b->attr_off[b->n_threads - 1] = b->names.len;
    ss_buf_append(&b->names, text, len);
    ss_buf_putc(&b->names, '\0');
    if (b->names.failed) {
        b->failed = true;
        return -1;
    }
    return 0;
}

void ss_round_builder_drop_thread(ss_round_builder *b) {
    if (!b->in_thread || b->n_threads == 0)
        return;
    ss_thread_sample *t = &b->threads[--b->n_threads];
    b->n_frames = t->frame_start;
    b->names.len = b->name_off[b->n_threads];
    b->in_thread = false;
}

ss_round *ss_round_builder_finish(ss_round_builder *b, uint32_t skipped,
                                  uint32_t blocked) {
    b->in_thread = false;
    if (b->failed)
        return NULL;
    size_t threads_sz = (size_t)b->n_threads * sizeof(ss_thread_sample);
    size_t frames_sz = (size_t)b->n_frames * sizeof(ss_frame);
    size_t total = sizeof(ss_round) + threads_sz + frames_sz + b->names.len;
    ss_round *r = malloc(total);
    if (!r)
        return NULL;
    memset(r, 0, sizeof *r);
    atomic_init(&r->refs, 1);
    r->seq = ++b->seq;
    r->time_ns = b->time_ns;
    r->took_ns = ss_mono_ns() - b->started_mono;
    r->interval_ms = b->interval_ms;
    r->runtime = b->runtime;
    r->n_threads = b->n_threads;
    r->n_frames = b->n_frames;
    r->threads = (ss_thread_sample *)(r + 1);
    r->frames = (ss_frame *)((char *)r->threads + threads_sz);
    char *names = (char *)r->frames + frames_sz;
    if (threads_sz)
        memcpy(r->threads, b->threads, threads_sz);
    if (frames_sz)
        memcpy(r->frames, b->frames, frames_sz);
    if (b->names.len)
        memcpy(names, b->names.data, b->names.len);
    for (uint32_t i = 0; i < r->n_threads; i++) {
        r->threads[i].name = names + b->name_off[i];
        r->threads[i].span_attrs =
            b->attr_off[i] == SIZE_MAX ? NULL : names + b->attr_off[i];
    }
    r->threads_skipped = skipped;
    r->threads_blocked = blocked;
    r->bytes = total;
    ss_mem_charge(total);
    return r;
}

void ss_round_ref(ss_round *r) { atomic_fetch_add(&r->refs, 1); }

void ss_round_unref(ss_round *r) {
    if (!r)
        return;
    if (atomic_fetch_sub(&r->refs, 1) == 1) {
        ss_mem_release(r->bytes);
        free(r);
    }
}

/* ---- stack identities ---------------------------------------------- */

static _Atomic uint64_t last_stack_id;

uint64_t ss_stack_id_next(void) { return atomic_fetch_add(&last_stack_id, 1) + 1; }

/* -1: not read yet; 0 / 1 */
static _Atomic int stack_reuse = -1;

bool ss_stack_reuse(void) {
    int v = atomic_load(&stack_reuse);
    if (v < 0) {
        v = ss_config_bool("STACKSHOT_STACK_REUSE", true) ? 1 : 0;
        atomic_store(&stack_reuse, v);
    }
    return v == 1;
}

void ss_stack_reuse_set(bool on) { atomic_store(&stack_reuse, on ? 1 : 0); }
