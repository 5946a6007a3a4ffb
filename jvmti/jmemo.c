/* jmemo.c: what the sampler keeps of each Java thread from one round to
 * the next, by its Java id (java.lang.Thread.tid: the VM never gives an id
 * twice, so an id names one thread for good).
 *
 *   - its CPU clock at the previous round (cpu_delta_ns, on_cpu);
 *   - its last stack, resolved, with an identity (ss_thread_sample.stack_id):
 *     a stack equal to the previous one keeps its id, and the exporters copy
 *     what they made of it last round instead of making it again (a JVM's
 *     threads mostly sit in one place);
 *   - when that stack came from GetStackTrace: the thread's CPU clock read
 *     *before* it was taken, and its JVMTI state. A thread whose clock has
 *     not moved since did not run, so it cannot have changed its stack: the
 *     kept one is used again without a handshake (sampler.c, the reuse
 *     rule). Nothing else moves a thread's frames: a deoptimization or a
 *     GC changes how a frame is laid out, not its method and bci.
 *
 * Two tables swapped every round (as the native sampler keeps its
 * threads): an entry is moved to this round's table when its thread is
 * listed, so the threads that ended are the ones left behind, freed at the
 * end of the round. The frames are charged to the agent's memory account. */
#include "agent/mem.h"
#include "jvmti/jvmti_internal.h"

#include <stdlib.h>
#include <string.h>

#define MOVED (-1) /* a slot whose entry went to this round's table */

typedef struct table {
    ss_jthread_memo *slots;
    uint32_t cap, n;
} table;

struct ss_jmemo {
    table t[2];
    int cur;
    uint64_t kept_same, kept_new;
};

ss_jmemo *ss_jmemo_create(void) { return calloc(1, sizeof(ss_jmemo)); }

static void entry_free(ss_jthread_memo *e) {
    if (e->frames) {
        free(e->frames);
        ss_mem_release((size_t)e->cap_frames * sizeof *e->frames);
    }
    free(e->name);
    memset(e, 0, sizeof *e);
}

static void table_empty(table *t) {
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slots[i].id > 0)
            entry_free(&t->slots[i]);
    if (t->slots)
        memset(t->slots, 0, (size_t)t->cap * sizeof *t->slots);
    t->n = 0;
}

void ss_jmemo_destroy(ss_jmemo *m) {
    if (!m)
        return;
    for (int i = 0; i < 2; i++) {
        table_empty(&m->t[i]);
        free(m->t[i].slots);
    }
    free(m);
}

static ss_jthread_memo *slot_of(table *t, int64_t id, bool for_insert) {
    if (!t->cap)
        return NULL;
    uint32_t mask = t->cap - 1;
    uint32_t i = (uint32_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    for (uint32_t probes = 0; probes < t->cap; probes++, i = (i + 1) & mask) {
        ss_jthread_memo *e = &t->slots[i];
        if (e->id == id || e->id == 0)
            return e->id == 0 && !for_insert ? NULL : e;
        if (e->id == MOVED && for_insert)
            continue; /* never reused within a round: only the old table has them */
    }
    return NULL;
}

/* This round's table at half full: twice the room, the entries moved over
 * (it holds no MOVED slot: those are in the previous round's). */
static int grow(table *t) {
    uint32_t cap = t->cap ? t->cap * 2 : 256;
    ss_jthread_memo *p = calloc(cap, sizeof *p);
    if (!p)
        return -1;
    table bigger = {p, cap, t->n};
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->slots[i].id > 0)
            *slot_of(&bigger, t->slots[i].id, true) = t->slots[i];
    free(t->slots);
    *t = bigger;
    return 0;
}

int ss_jmemo_reserve(ss_jmemo *m, uint32_t n) {
    table *cur = &m->t[m->cur];
    while ((uint64_t)(cur->n + n + 1) * 2 >= cur->cap)
        if (grow(cur) != 0)
            return -1;
    return 0;
}

ss_jthread_memo *ss_jmemo_get(ss_jmemo *m, int64_t id) {
    table *cur = &m->t[m->cur], *prev = &m->t[1 - m->cur];
    if (id <= 0 || ((cur->n + 1) * 2 >= cur->cap && grow(cur) != 0))
        return NULL;
    ss_jthread_memo *e = slot_of(cur, id, true);
    if (!e || e->id == id)
        return e; /* listed twice in a round: the same entry */
    ss_jthread_memo *old = slot_of(prev, id, false);
    if (old) {
        *e = *old;
        memset(old, 0, sizeof *old);
        old->id = MOVED; /* keeps the probe chains of the others */
    } else {
        memset(e, 0, sizeof *e);
        e->id = id;
        e->cpu_prev = SS_UNKNOWN_U64;
    }
    cur->n++;
    return e;
}

void ss_jmemo_end(ss_jmemo *m) {
    table_empty(&m->t[1 - m->cur]); /* the threads not listed this round ended */
    m->cur = 1 - m->cur;
}

/* Every field of every frame (not memcmp: the padding is not set). */
static bool same_frames(const ss_jthread_memo *e, const ss_frame *f, uint32_t n) {
    if (e->n_frames != n)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        const ss_frame *a = &e->frames[i], *b = &f[i];
        if (a->fn != b->fn || a->map != b->map || a->addr != b->addr || a->line != b->line ||
            a->inlined != b->inlined)
            return false;
    }
    return true;
}

void ss_jmemo_keep(ss_jmemo *m, ss_jthread_memo *e, const ss_frame *f, uint32_t n,
                   bool truncated, ss_thread_sample *t) {
    bool same = e->have_stack && e->stack_id && e->truncated == truncated &&
                (f == e->frames || same_frames(e, f, n));
    if (!same) {
        if (n > e->cap_frames) {
            ss_frame *p = realloc(e->frames, (size_t)n * sizeof *p);
            if (!p) {
                e->have_stack = false;
                e->reusable = false;
                t->stack_id = 0;
                t->same_stack = false;
                e->emitted_id = 0;
                return;
            }
            ss_mem_charge((size_t)(n - e->cap_frames) * sizeof *p);
            e->frames = p;
            e->cap_frames = n;
        }
        if (n)
            memcpy(e->frames, f, (size_t)n * sizeof *f);
        e->n_frames = n;
        e->truncated = truncated;
        e->stack_id = ss_stack_id_next();
        e->have_stack = true;
        m->kept_new++;
    } else {
        m->kept_same++;
    }
    uint64_t id = ss_stack_reuse() ? e->stack_id : 0;
    t->stack_id = id;
    t->same_stack = id && id == e->emitted_id;
    e->emitted_id = id;
}

void ss_jmemo_stats(const ss_jmemo *m, uint64_t *same, uint64_t *changed) {
    *same = m->kept_same;
    *changed = m->kept_new;
}
