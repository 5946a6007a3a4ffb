/* dict.c: the dictionary stream's words (spec §4.1). A word's id is its
 * ordinal: append-only for the life of the agent, and the whole list is
 * re-sent from id 0 after every reconnect. Two hash tables: word -> id,
 * and a cache funcinfo pointer -> method id (funcinfos are interned, so
 * the pointer identifies the method). */
#include "agent/mem.h"
#include "agent/round.h"
#include "exporters/qubership/qb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_str(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static uint32_t hash_ptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

void qb_dict_init(qb_dict *d) { memset(d, 0, sizeof *d); }

void qb_dict_free(qb_dict *d) {
    for (uint32_t i = 0; i < d->n; i++)
        free(d->words[i]);
    free(d->words);
    free(d->slots);
    free(d->fn_keys);
    free(d->fn_ids);
    ss_mem_release(d->bytes);
    memset(d, 0, sizeof *d);
}

static bool rehash(qb_dict *d) {
    uint32_t n = d->n_slots ? d->n_slots * 2 : 256;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return false;
    for (uint32_t id = 0; id < d->n; id++) {
        uint32_t i = hash_str(d->words[id]) & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    ss_mem_release((size_t)d->n_slots * sizeof *slots);
    ss_mem_charge((size_t)n * sizeof *slots);
    free(d->slots);
    d->slots = slots;
    d->n_slots = n;
    return true;
}

uint32_t qb_dict_id(qb_dict *d, const char *word) {
    if (d->n_slots == 0 && !rehash(d))
        return QB_NO_ID;
    uint32_t mask = d->n_slots - 1;
    uint32_t i = hash_str(word) & mask;
    for (; d->slots[i]; i = (i + 1) & mask)
        if (strcmp(d->words[d->slots[i] - 1], word) == 0)
            return d->slots[i] - 1;
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 256;
        char **w = realloc(d->words, cap * sizeof *w);
        if (!w)
            return QB_NO_ID;
        d->words = w;
        d->cap = cap;
    }
    char *copy = strdup(word);
    if (!copy)
        return QB_NO_ID;
    uint32_t id = d->n++;
    d->words[id] = copy;
    d->slots[i] = id + 1;
    size_t charge = strlen(word) + 1 + sizeof(char *);
    d->bytes += charge;
    ss_mem_charge(charge);
    if (d->n * 2 > d->n_slots)
        rehash(d); /* on failure the table just gets fuller */
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

static bool fn_rehash(qb_dict *d) {
    uint32_t n = d->n_fn_slots ? d->n_fn_slots * 2 : 256;
    const void **keys = calloc(n, sizeof *keys);
    uint32_t *ids = calloc(n, sizeof *ids);
    if (!keys || !ids) {
        free(keys);
        free(ids);
        return false;
    }
    for (uint32_t k = 0; k < d->n_fn_slots; k++) {
        if (!d->fn_keys[k])
            continue;
        uint32_t i = hash_ptr(d->fn_keys[k]) & (n - 1);
        while (keys[i])
            i = (i + 1) & (n - 1);
        keys[i] = d->fn_keys[k];
        ids[i] = d->fn_ids[k];
    }
    ss_mem_release((size_t)d->n_fn_slots * (sizeof *keys + sizeof *ids));
    ss_mem_charge((size_t)n * (sizeof *keys + sizeof *ids));
    free(d->fn_keys);
    free(d->fn_ids);
    d->fn_keys = keys;
    d->fn_ids = ids;
    d->n_fn_slots = n;
    return true;
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
    if (key) {
        if (d->n_fn_slots == 0 && !fn_rehash(d))
            return QB_NO_ID;
        uint32_t mask = d->n_fn_slots - 1;
        for (uint32_t i = hash_ptr(key) & mask; d->fn_keys[i]; i = (i + 1) & mask)
            if (d->fn_keys[i] == key)
                return d->fn_ids[i];
    }
    char word[1024];
    qb_method_word(f, word, sizeof word);
    uint32_t id = qb_dict_id(d, word);
    if (id == QB_NO_ID || !key)
        return id;
    if ((d->n_fn + 1) * 2 > d->n_fn_slots && !fn_rehash(d))
        return id; /* uncached, still correct */
    uint32_t mask = d->n_fn_slots - 1;
    uint32_t i = hash_ptr(key) & mask;
    while (d->fn_keys[i])
        i = (i + 1) & mask;
    d->fn_keys[i] = key;
    d->fn_ids[i] = id;
    d->n_fn++;
    return id;
}
