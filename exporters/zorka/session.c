/* session.c: what the collector has been told in this session.
 *
 * Like the Zorka agent (spec §4.2): symbol IDs are the agent's own, kept
 * for the life of the process and never renumbered; method IDs are per
 * session, numbered from 1 and numbered again after a reset; both carry a
 * "sent" mark so each definition goes to the collector once per session,
 * in the agd before the first trc that uses it. A reset (any failed
 * exchange) clears the marks and the method table, so the next agd carries
 * everything the trace needs, with Reset: true.
 *
 * ZICO keeps symbol IDs in 21 bits (spec §14.1): before an ID would pass
 * 2^21 - 1 the whole registry starts again from 1, with a reset. */
#include "agent/module_abi.h"
#include "exporters/zorka/zorka.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym {
    char *text;      /* NULL: free slot */
    uint64_t hash;
    uint32_t id;
    uint32_t sent_gen; /* == session generation: sent in this session */
} sym;

/* Pairs of 64-bit keys -> IDs, open addressing (id 0: a free slot). The
 * session keeps two: methods, (class << 32 | name, signature) -> method ID;
 * and shortcuts, (pointer, pointer) of things that never change (an
 * interned function and its module, a string literal) -> an ID defined in
 * this session. Both are emptied by every reset. */
typedef struct pair {
    uint64_t a, b;
    uint32_t id;
} pair;

typedef struct pairmap {
    pair *e;
    uint32_t n, cap;
} pairmap;

struct zk_session {
    sym *syms;
    uint32_t n_syms, cap_syms;
    uint32_t next_sym;
    pairmap methods, shortcuts;
    uint32_t next_meth;
    uint32_t gen;       /* bumped by every reset: older sent marks are void */
    uint32_t epoch;     /* bumped when symbol IDs start again from 1 */
    uint32_t max_sym;   /* the largest symbol ID (ZK_MAX_SYMBOL; tests lower it) */
    bool reset_pending; /* the next agd must say Reset: true */
    size_t bytes;
};

static uint64_t hash_text(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static void account(zk_session *s, size_t add, size_t remove) {
    s->bytes += add;
    s->bytes -= remove;
    if (add)
        ss_mem_charge(add);
    if (remove)
        ss_mem_release(remove);
}

static uint32_t pair_slot(uint64_t a, uint64_t b, uint32_t cap) {
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(h ^ (h >> 29)) & (cap - 1);
}

static uint32_t pair_get(const pairmap *m, uint64_t a, uint64_t b) {
    if (!m->cap)
        return 0;
    for (uint32_t j = pair_slot(a, b, m->cap); m->e[j].id; j = (j + 1) & (m->cap - 1))
        if (m->e[j].a == a && m->e[j].b == b)
            return m->e[j].id;
    return 0;
}

/* Add or replace (a, b) -> id. 0 or -ENOMEM. */
static int pair_put(zk_session *s, pairmap *m, uint64_t a, uint64_t b, uint32_t id) {
    if ((m->n + 1) * 2 > m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 256;
        pair *tab = calloc(cap, sizeof *tab);
        if (!tab)
            return -ENOMEM;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->e[i].id)
                continue;
            uint32_t j = pair_slot(m->e[i].a, m->e[i].b, cap);
            while (tab[j].id)
                j = (j + 1) & (cap - 1);
            tab[j] = m->e[i];
        }
        account(s, (size_t)cap * sizeof *tab, (size_t)m->cap * sizeof *tab);
        free(m->e);
        m->e = tab;
        m->cap = cap;
    }
    uint32_t j = pair_slot(a, b, m->cap);
    while (m->e[j].id && !(m->e[j].a == a && m->e[j].b == b))
        j = (j + 1) & (m->cap - 1);
    if (!m->e[j].id)
        m->n++;
    m->e[j] = (pair){a, b, id};
    return 0;
}

static void pair_clear(zk_session *s, pairmap *m) {
    account(s, 0, (size_t)m->cap * sizeof *m->e);
    free(m->e);
    *m = (pairmap){0};
}

zk_session *zk_session_new(void) {
    zk_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->next_sym = 1;
    s->next_meth = 1;
    s->gen = 1;
    s->max_sym = ZK_MAX_SYMBOL;
    s->reset_pending = true; /* the first agd of the process */
    return s;
}

static void clear_methods(zk_session *s);

static void clear_symbols(zk_session *s) {
    size_t text = 0;
    for (uint32_t i = 0; i < s->cap_syms; i++)
        if (s->syms[i].text) {
            text += strlen(s->syms[i].text) + 1;
            free(s->syms[i].text);
        }
    account(s, 0, text + (size_t)s->cap_syms * sizeof *s->syms);
    free(s->syms);
    s->syms = NULL;
    s->n_syms = s->cap_syms = 0;
    s->next_sym = 1;
    s->epoch++;
    clear_methods(s); /* they name the old IDs */
}

static void clear_methods(zk_session *s) {
    pair_clear(s, &s->methods);
    pair_clear(s, &s->shortcuts);
    s->next_meth = 1;
}

void zk_session_free(zk_session *s) {
    if (!s)
        return;
    clear_symbols(s);
    clear_methods(s);
    free(s);
}

void zk_session_reset(zk_session *s) {
    s->gen++;
    s->reset_pending = true;
    clear_methods(s);
}

bool zk_session_reset_pending(const zk_session *s) { return s->reset_pending; }

void zk_session_reset_done(zk_session *s) { s->reset_pending = false; }

size_t zk_session_bytes(const zk_session *s) { return s->bytes; }

uint32_t zk_session_epoch(const zk_session *s) { return s->epoch; }

void zk_session_set_max_symbol(zk_session *s, uint32_t max) { s->max_sym = max ? max : 1; }

static int grow_syms(zk_session *s) {
    uint32_t cap = s->cap_syms ? s->cap_syms * 2 : 1024;
    sym *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->cap_syms; i++) {
        if (!s->syms[i].text)
            continue;
        uint32_t j = (uint32_t)s->syms[i].hash & (cap - 1);
        while (tab[j].text)
            j = (j + 1) & (cap - 1);
        tab[j] = s->syms[i];
    }
    account(s, (size_t)cap * sizeof *tab, (size_t)s->cap_syms * sizeof *tab);
    free(s->syms);
    s->syms = tab;
    s->cap_syms = cap;
    return 0;
}

uint32_t zk_session_symbol(zk_session *s, const char *text, bool *define) {
    *define = false;
    if ((s->n_syms + 1) * 4 > s->cap_syms * 3 && grow_syms(s) != 0)
        return 0;
    uint64_t h = hash_text(text);
    uint32_t j = (uint32_t)h & (s->cap_syms - 1);
    for (; s->syms[j].text; j = (j + 1) & (s->cap_syms - 1)) {
        sym *e = &s->syms[j];
        if (e->hash == h && strcmp(e->text, text) == 0) {
            if (e->sent_gen != s->gen) {
                e->sent_gen = s->gen;
                *define = true;
            }
            return e->id;
        }
    }
    if (s->next_sym > s->max_sym) {
        /* out of 21-bit IDs: start the registry again; the caller's trace
         * is encoded with the new IDs after a reset */
        clear_symbols(s);
        zk_session_reset(s);
        return zk_session_symbol(s, text, define);
    }
    size_t len = strlen(text) + 1;
    char *copy = malloc(len);
    if (!copy)
        return 0;
    memcpy(copy, text, len);
    account(s, len, 0);
    s->syms[j] = (sym){.text = copy, .hash = h, .id = s->next_sym++, .sent_gen = s->gen};
    s->n_syms++;
    *define = true;
    return s->syms[j].id;
}

uint32_t zk_session_method(zk_session *s, uint32_t cls, uint32_t name, uint32_t sig,
                           bool *define) {
    *define = false;
    if (!cls || !name || !sig)
        return 0;
    uint64_t a = (uint64_t)cls << 32 | name;
    uint32_t id = pair_get(&s->methods, a, sig);
    if (id)
        return id; /* defined when it was numbered, in this session */
    if (pair_put(s, &s->methods, a, sig, s->next_meth) != 0)
        return 0;
    *define = true;
    return s->next_meth++;
}

uint32_t zk_session_shortcut(const zk_session *s, const void *a, const void *b) {
    return pair_get(&s->shortcuts, (uintptr_t)a, (uintptr_t)b);
}

void zk_session_remember(zk_session *s, const void *a, const void *b, uint32_t id) {
    pair_put(s, &s->shortcuts, (uintptr_t)a, (uintptr_t)b, id); /* only a shortcut */
}
