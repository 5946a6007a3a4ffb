/* dict.c: the dictionary stream's words (spec §4.1). A word's id is its
 * ordinal: append-only for the life of the agent, and the whole list is
 * re-sent from id 0 after every reconnect. Two indexes (agent/hmap.h):
 * word -> id, and a cache funcinfo pointer -> method id (funcinfos are
 * interned, so the pointer identifies the method). */
#include "agent/grow.h"
#include "agent/hmap.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "exporters/qubership/qb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool word_eq(const void *ctx, uint32_t idx, const void *key) {
    const qb_dict *d = ctx;
    return strcmp(d->words[idx], key) == 0;
}

static bool fn_eq(const void *ctx, uint32_t idx, const void *key) {
    const qb_dict *d = ctx;
    return d->fns[idx].fn == key;
}

void qb_dict_init(qb_dict *d) {
    memset(d, 0, sizeof *d);
    ss_hmap_init(&d->ix, 256, 50, NULL);
    ss_hmap_init(&d->fn_ix, 256, 50, NULL);
}

void qb_dict_free(qb_dict *d) {
    for (uint32_t i = 0; i < d->n; i++)
        free(d->words[i]);
    free(d->words);
    free(d->fns);
    ss_hmap_free(&d->ix);
    ss_hmap_free(&d->fn_ix);
    ss_mem_release(d->bytes);
    qb_dict_init(d);
}

uint32_t qb_dict_id(qb_dict *d, const char *word) {
    uint32_t h = ss_hash_str(word);
    ss_hslot *slot;
    uint32_t id = ss_hmap_find(&d->ix, h, word_eq, d, word, &slot);
    if (id != SS_HMAP_NONE)
        return id;
    if (!slot || ss_grow32((void **)&d->words, &d->cap, d->n + 1, sizeof *d->words, 256) != 0)
        return QB_NO_ID;
    char *copy = strdup(word);
    if (!copy)
        return QB_NO_ID;
    id = d->n++;
    d->words[id] = copy;
    ss_hmap_put(&d->ix, slot, h, id);
    size_t charge = strlen(word) + 1 + sizeof(char *);
    d->bytes += charge;
    ss_mem_charge(charge);
    return id;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The Java agent writes "<return type> <class>.<method>(<args>) (<file>:<line>)
 * [<jar>]". A sample knows neither the return type nor the arguments nor
 * the method's first line, so those are "void", "()" and left out: one word
 * per method, whatever line the samples stopped at. */
void qb_method_word(const ss_frame *f, char *buf, size_t size) {
    const ss_funcinfo *fn = f->fn;
    const char *ns = fn && fn->ns ? fn->ns : "unknown";
    const char *name = fn && fn->name ? fn->name : "unknown";
    const char *file = fn && fn->file ? fn->file : "unknown";
    const char *module = fn && fn->module ? fn->module
                         : f->map && f->map->path ? base_name(f->map->path)
                                                  : NULL;
    if (module && *module)
        snprintf(buf, size, "void %s.%s() (%s) [%s]", ns, name, file, module);
    else
        snprintf(buf, size, "void %s.%s() (%s)", ns, name, file);
}

/* An unresolved native frame: "unknown" would merge every unresolved
 * function of a module into one method, so the word names the address
 * instead ("void libfoo.so+0x1a2b() (libfoo.so)"), uncached. */
static bool unresolved(const ss_frame *f) {
    return f->map && f->map->path && (!f->fn || !f->fn->name || !strcmp(f->fn->name, "unknown"));
}

uint32_t qb_dict_method(qb_dict *d, const ss_frame *f) {
    if (unresolved(f)) {
        char word[600];
        const char *mod = base_name(f->map->path);
        uint64_t off = f->addr - f->map->start + f->map->file_offset;
        snprintf(word, sizeof word, "void %.256s+0x%llx() (%.256s)", mod, (unsigned long long)off,
                 mod);
        return qb_dict_id(d, word);
    }
    const void *key = f->fn;
    uint32_t h = key ? ss_hash_ptr(key) : 0;
    ss_hslot *slot = NULL;
    if (key) {
        uint32_t at = ss_hmap_find(&d->fn_ix, h, fn_eq, d, key, &slot);
        if (at != SS_HMAP_NONE)
            return d->fns[at].id;
    }
    char word[1024];
    qb_method_word(f, word, sizeof word);
    uint32_t id = qb_dict_id(d, word);
    /* qb_dict_id touched the word index only: slot is still key's place */
    if (id == QB_NO_ID || !slot)
        return id; /* uncached when the cache could not grow, still correct */
    if (d->n_fn == d->cap_fn) {
        uint32_t cap = d->cap_fn;
        if (ss_grow32((void **)&d->fns, &d->cap_fn, d->n_fn + 1, sizeof *d->fns, 256) != 0)
            return id;
        size_t grown = (size_t)(d->cap_fn - cap) * sizeof *d->fns;
        d->bytes += grown;
        ss_mem_charge(grown);
    }
    d->fns[d->n_fn] = (qb_fn_id){key, id};
    ss_hmap_put(&d->fn_ix, slot, h, d->n_fn++);
    return id;
}
