/* stack_memo.c: what an exporter made of a stack, kept by its identity.
 *
 * Most threads of a host sit in the same place round after round; their
 * stack's identity (ss_thread_sample.stack_id) stays the same, so the
 * text of its frames (or its index in a profile's tables) made last round
 * is still right. Entries live in a dense array with an open-addressing
 * index over it; a sweep at the end of each round drops the entries that
 * round did not use and rebuilds the index, so the memo never holds more
 * than one round's stacks. Everything it holds is charged to ss_mem. */
#include "agent/grow.h"
#include "agent/mem.h"
#include "agent/stack_memo.h"

#include <stdbool.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ss_stack_memo {
    ss_memo_entry *entries;
    uint32_t n, cap;
    uint32_t *index; /* entry index + 1; 0 empty */
    uint32_t mask;   /* index capacity - 1 (0: no index yet) */
    uint64_t gen;    /* the current sweep generation */
    size_t bytes, max_bytes;
    uint64_t hits, misses, refused;
};

static void charge(ss_stack_memo *m, size_t more, size_t less) {
    if (more)
        ss_mem_charge(more);
    if (less)
        ss_mem_release(less);
    m->bytes = m->bytes + more - less;
}

ss_stack_memo *ss_stack_memo_create(size_t max_bytes) {
    ss_stack_memo *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->max_bytes = max_bytes;
    m->gen = 1;
    return m;
}

void ss_stack_memo_clear(ss_stack_memo *m) {
    if (!m)
        return;
    size_t data = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        data += m->entries[i].len;
        free(m->entries[i].data);
    }
    m->n = 0;
    if (m->mask)
        memset(m->index, 0, ((size_t)m->mask + 1) * sizeof *m->index);
    charge(m, 0, data);
}

void ss_stack_memo_destroy(ss_stack_memo *m) {
    if (!m)
        return;
    ss_stack_memo_clear(m);
    free(m->entries);
    free(m->index);
    charge(m, 0, m->bytes);
    free(m);
}

static uint32_t slot_of(uint64_t id, uint32_t mask) {
    id *= 0x9e3779b97f4a7c15ull; /* ids are consecutive: spread them */
    return (uint32_t)(id >> 32) & mask;
}

/* The index slot of id: its entry's, or the empty slot where it goes. */
static uint32_t *find_slot(const ss_stack_memo *m, uint64_t id) {
    for (uint32_t i = slot_of(id, m->mask);; i = (i + 1) & m->mask) {
        uint32_t *s = &m->index[i];
        if (!*s || m->entries[*s - 1].id == id)
            return s;
    }
}

/* Index everything again, in a table of cap slots (a power of two, more
 * than twice the entries: probes stay short and a free slot exists). */
static int reindex(ss_stack_memo *m, uint32_t cap) {
    if (cap != m->mask + 1 || !m->index) {
        uint32_t *ix = calloc(cap, sizeof *ix);
        if (!ix)
            return -ENOMEM;
        size_t old = m->index ? ((size_t)m->mask + 1) * sizeof *ix : 0;
        free(m->index);
        m->index = ix;
        m->mask = cap - 1;
        charge(m, (size_t)cap * sizeof *ix, old);
    } else {
        memset(m->index, 0, (size_t)cap * sizeof *m->index);
    }
    for (uint32_t i = 0; i < m->n; i++)
        *find_slot(m, m->entries[i].id) = i + 1;
    return 0;
}

const ss_memo_entry *ss_stack_memo_get(ss_stack_memo *m, uint64_t id) {
    if (!m || !id || !m->n) {
        if (m && id)
            m->misses++;
        return NULL;
    }
    uint32_t s = *find_slot(m, id);
    if (!s) {
        m->misses++;
        return NULL;
    }
    ss_memo_entry *e = &m->entries[s - 1];
    e->used = m->gen;
    m->hits++;
    return e;
}

int ss_stack_memo_put(ss_stack_memo *m, uint64_t id, uint64_t value, const void *data,
                      size_t len) {
    if (!m || !id)
        return -EINVAL;
    /* room: the cap of this memo, and the agent's whole account (memo
     * bytes would push queued rounds out) */
    if (m->bytes + len + sizeof(ss_memo_entry) + 2 * sizeof(uint32_t) > m->max_bytes ||
        ss_mem_used() + len > ss_mem_limit()) {
        m->refused++;
        return -ENOSPC;
    }
    char *copy = NULL;
    if (len) {
        copy = malloc(len);
        if (!copy) {
            m->refused++;
            return -ENOMEM;
        }
        memcpy(copy, data, len);
    }
    uint32_t *s = m->mask ? find_slot(m, id) : NULL;
    if (s && *s) { /* the same id again: its new content replaces the old */
        ss_memo_entry *e = &m->entries[*s - 1];
        charge(m, len, e->len);
        free(e->data);
        e->data = copy;
        e->len = len;
        e->value = value;
        e->used = m->gen;
        return 0;
    }
    if (m->n == m->cap) {
        uint32_t cap = m->cap;
        if (ss_grow32((void **)&m->entries, &m->cap, m->n + 1, sizeof *m->entries, 64) != 0) {
            free(copy);
            m->refused++;
            return -ENOMEM;
        }
        charge(m, (size_t)(m->cap - cap) * sizeof *m->entries, 0);
    }
    m->entries[m->n++] = (ss_memo_entry){id, value, copy, len, m->gen};
    charge(m, len, 0);
    if ((size_t)m->n * 2 > (size_t)m->mask) {
        uint32_t cap = m->mask ? (m->mask + 1) * 2 : 128;
        while ((size_t)m->n * 2 > (size_t)cap - 1)
            cap *= 2;
        if (reindex(m, cap) != 0) { /* keep the old index whole: drop the new entry */
            ss_memo_entry *e = &m->entries[--m->n];
            charge(m, 0, e->len);
            free(e->data);
            m->refused++;
            return -ENOMEM;
        }
        return 0;
    }
    *find_slot(m, id) = m->n;
    return 0;
}

void ss_stack_memo_sweep(ss_stack_memo *m) {
    if (!m)
        return;
    uint32_t kept = 0;
    size_t freed = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        ss_memo_entry *e = &m->entries[i];
        if (e->used == m->gen) {
            m->entries[kept++] = *e;
        } else {
            freed += e->len;
            free(e->data);
        }
    }
    bool dropped = kept != m->n;
    m->n = kept;
    charge(m, 0, freed);
    m->gen++;
    if (dropped && m->mask)
        reindex(m, m->mask + 1); /* same size: cannot fail */
}

void ss_stack_memo_stats(const ss_stack_memo *m, ss_memo_stats *st) {
    memset(st, 0, sizeof *st);
    if (!m)
        return;
    st->hits = m->hits;
    st->misses = m->misses;
    st->refused = m->refused;
    st->entries = m->n;
    st->bytes = m->bytes;
}
