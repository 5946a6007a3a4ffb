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
#include "zorka.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym {
    char *text;      /* NULL: free slot */
    uint64_t hash;
    uint32_t id;
    uint32_t sent_gen; /* == session generation: sent in this session */
} sym;

typedef struct meth {
    uint32_t cls, name, sig; /* symbol IDs; cls 0: free slot */
    uint32_t id;
} meth;

struct zk_session {
    sym *syms;
    uint32_t n_syms, cap_syms;
    uint32_t next_sym;
    meth *meths;
    uint32_t n_meths, cap_meths;
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

static uint64_t hash_method(uint32_t c, uint32_t n, uint32_t s) {
    uint64_t h = (uint64_t)c * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)n * 0xC2B2AE3D27D4EB4Full;
    h ^= (uint64_t)s * 0x165667B19E3779F9ull;
    return h ^ (h >> 29);
}

static void account(zk_session *s, size_t add, size_t remove) {
    s->bytes += add;
    s->bytes -= remove;
    if (add)
        ss_mem_charge(add);
    if (remove)
        ss_mem_release(remove);
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
}

static void clear_methods(zk_session *s) {
    account(s, 0, (size_t)s->cap_meths * sizeof *s->meths);
    free(s->meths);
    s->meths = NULL;
    s->n_meths = s->cap_meths = 0;
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

static int grow_meths(zk_session *s) {
    uint32_t cap = s->cap_meths ? s->cap_meths * 2 : 1024;
    meth *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->cap_meths; i++) {
        meth *m = &s->meths[i];
        if (!m->cls)
            continue;
        uint32_t j = (uint32_t)hash_method(m->cls, m->name, m->sig) & (cap - 1);
        while (tab[j].cls)
            j = (j + 1) & (cap - 1);
        tab[j] = *m;
    }
    account(s, (size_t)cap * sizeof *tab, (size_t)s->cap_meths * sizeof *tab);
    free(s->meths);
    s->meths = tab;
    s->cap_meths = cap;
    return 0;
}

uint32_t zk_session_method(zk_session *s, uint32_t cls, uint32_t name, uint32_t sig,
                           bool *define) {
    *define = false;
    if (!cls || !name || !sig)
        return 0;
    if ((s->n_meths + 1) * 4 > s->cap_meths * 3 && grow_meths(s) != 0)
        return 0;
    uint32_t j = (uint32_t)hash_method(cls, name, sig) & (s->cap_meths - 1);
    for (; s->meths[j].cls; j = (j + 1) & (s->cap_meths - 1)) {
        meth *m = &s->meths[j];
        if (m->cls == cls && m->name == name && m->sig == sig)
            return m->id; /* defined when it was numbered, in this session */
    }
    s->meths[j] = (meth){.cls = cls, .name = name, .sig = sig, .id = s->next_meth++};
    s->n_meths++;
    *define = true;
    return s->meths[j].id;
}
