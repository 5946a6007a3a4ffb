/* intern.c: strings, functions and mappings, interned for the life of the
 * agent.
 *
 * Frames point at interned ss_funcinfo / ss_mapping records instead of
 * carrying strings, so a round of 5,000 frames is 5,000 small structs and
 * rounds can outlive the module or class they describe (a dlclose or a
 * class unload never leaves a dangling pointer in a queued round).
 * Records are deduplicated by content, so the table grows with the number
 * of distinct functions ever seen, not with the number of samples. */
#include "agent/grow.h"
#include "agent/hmap.h"
#include "agent/round.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    uint64_t hash;
    int type; /* 0 string, 1 funcinfo, 2 mapping */
    union {
        const char *str;
        ss_funcinfo fn;
        ss_mapping map;
    } u;
} entry;

/* Records are allocated one by one and never move (callers keep pointers
 * into them); the index (agent/hmap.h) maps a record's content to its
 * place in `entries`. Neither was ever in the memory account: interned
 * records live as long as the agent, whatever rounds are queued. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry **entries;
static uint32_t n_entries, cap_entries;
#define INDEX_EMPTY {.first = 1024, .load_pct = 75, .uncharged = true}
static ss_hmap index_ = INDEX_EMPTY;

/* A fork never copies the table half-changed, nor the lock held by a
 * thread the child does not have (the child's sampler would wait for it
 * forever, and a forked child keeps its parent's sampler and resolver).
 * The forking thread (the host's) never waits for the lock: it is held
 * only for a lookup or an insert, microseconds, but by an agent thread
 * that a host whose CPUs are busy may keep preempted for milliseconds,
 * and every fork() of the host would wait as long. So the lock is taken
 * around fork only when it is free; when an agent thread held it, the
 * child starts a table of its own (the records already handed out stay
 * where they are: they are never freed, and pointers to them stay valid;
 * a record interned again in the child is a second copy of the same
 * content). */
static bool fork_locked; /* the forking thread took the lock (fork is serialised) */

static void lock_for_fork(void) { fork_locked = pthread_mutex_trylock(&lock) == 0; }

static void unlock_after_fork(void) {
    if (fork_locked)
        pthread_mutex_unlock(&lock);
}

static void forget_after_fork(void) {
    if (fork_locked) {
        pthread_mutex_unlock(&lock);
        return;
    }
    /* volatile: kept reachable (valgrind), never read */
    static entry **volatile leftover;
    static ss_hslot *volatile leftover_slots;
    leftover = entries;
    leftover_slots = index_.slots;
    (void)leftover;
    (void)leftover_slots;
    pthread_mutex_init(&lock, NULL);
    entries = NULL;
    n_entries = cap_entries = 0;
    index_ = (ss_hmap)INDEX_EMPTY;
}

void ss_intern_hold(bool hold) {
    if (hold)
        pthread_mutex_lock(&lock);
    else
        pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void intern_atfork(void) {
    pthread_atfork(lock_for_fork, unlock_after_fork, forget_after_fork);
}

static uint64_t mix_str(uint64_t h, const char *s) {
    if (!s)
        return ss_fnv1a64(h, "\xff", 1);
    return ss_fnv1a64(h, s, strlen(s) + 1);
}

static bool str_eq(const char *a, const char *b) {
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

static bool same(const entry *e, int type, const void *key) {
    if (e->type != type)
        return false;
    if (type == 0)
        return strcmp(e->u.str, key) == 0;
    if (type == 1) {
        const ss_funcinfo *a = &e->u.fn, *b = key;
        return a->kind == b->kind && str_eq(a->ns, b->ns) &&
               str_eq(a->name, b->name) && str_eq(a->file, b->file) &&
               str_eq(a->module, b->module) && str_eq(a->signature, b->signature);
    }
    const ss_mapping *a = &e->u.map, *b = key;
    return a->start == b->start && a->limit == b->limit &&
           a->file_offset == b->file_offset && str_eq(a->path, b->path) &&
           str_eq(a->build_id, b->build_id);
}

typedef struct probe {
    uint64_t hash;
    int type;
    const void *key;
} probe;

static bool entry_eq(const void *ctx, uint32_t idx, const void *key) {
    (void)ctx;
    const probe *p = key;
    const entry *e = entries[idx];
    return e->hash == p->hash && same(e, p->type, p->key);
}

/* Called with the lock held. The record equal to key, or NULL with *slot
 * where a new one goes (NULL when the index could not grow). */
static entry *find(uint64_t h, int type, const void *key, ss_hslot **slot) {
    probe p = {h, type, key};
    uint32_t i = ss_hmap_find(&index_, ss_hash_fold(h), entry_eq, NULL, &p, slot);
    return i == SS_HMAP_NONE ? NULL : entries[i];
}

static entry *insert(uint64_t h, int type, size_t extra, ss_hslot *slot) {
    if (!slot ||
        ss_grow32((void **)&entries, &cap_entries, n_entries + 1, sizeof *entries, 1024) != 0)
        return NULL;
    entry *e = calloc(1, sizeof *e + extra);
    if (!e)
        return NULL;
    e->hash = h;
    e->type = type;
    entries[n_entries] = e;
    ss_hmap_put(&index_, slot, ss_hash_fold(h), n_entries++);
    return e;
}

/* Copy s into the tail area at *tail. */
static const char *stash(char **tail, const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    memcpy(*tail, s, n);
    const char *r = *tail;
    *tail += n;
    return r;
}

static size_t len0(const char *s) { return s ? strlen(s) + 1 : 0; }

const char *ss_intern(const char *s) {
    if (!s)
        return NULL;
    uint64_t h = mix_str(SS_FNV1A64_SEED, s);
    pthread_mutex_lock(&lock);
    ss_hslot *slot;
    entry *e = find(h, 0, s, &slot);
    if (!e) {
        e = insert(h, 0, len0(s), slot);
        if (e) {
            char *tail = (char *)(e + 1);
            e->u.str = stash(&tail, s);
        }
    }
    pthread_mutex_unlock(&lock);
    return e ? e->u.str : NULL;
}

const ss_funcinfo *ss_funcinfo_intern(const char *ns, const char *name,
                                      const char *file, const char *module,
                                      ss_frame_kind kind) {
    return ss_funcinfo_intern_sig(ns, name, file, module, kind, NULL);
}

const ss_funcinfo *ss_funcinfo_intern_sig(const char *ns, const char *name,
                                          const char *file, const char *module,
                                          ss_frame_kind kind, const char *signature) {
    ss_funcinfo key = {ns ? ns : "unknown", name ? name : "unknown",
                       file ? file : "unknown", module, (uint8_t)kind, signature};
    uint64_t h = SS_FNV1A64_SEED ^ (uint64_t)kind;
    h = mix_str(mix_str(mix_str(mix_str(h, key.ns), key.name), key.file), module);
    if (signature) /* unchanged hashes for functions without one */
        h = mix_str(h, signature);
    pthread_mutex_lock(&lock);
    ss_hslot *slot;
    entry *e = find(h, 1, &key, &slot);
    if (!e) {
        e = insert(h, 1,
                   len0(key.ns) + len0(key.name) + len0(key.file) + len0(module) +
                       len0(signature),
                   slot);
        if (e) {
            char *tail = (char *)(e + 1);
            e->u.fn.ns = stash(&tail, key.ns);
            e->u.fn.name = stash(&tail, key.name);
            e->u.fn.file = stash(&tail, key.file);
            e->u.fn.module = stash(&tail, module);
            e->u.fn.kind = key.kind;
            e->u.fn.signature = stash(&tail, signature);
        }
    }
    pthread_mutex_unlock(&lock);
    return e ? &e->u.fn : NULL;
}

const ss_mapping *ss_mapping_intern(const char *path, const char *build_id,
                                    uint64_t start, uint64_t limit,
                                    uint64_t file_offset) {
    ss_mapping key = {path ? path : "unknown", build_id ? build_id : "", start,
                      limit, file_offset};
    uint64_t h = ss_fnv1a64(ss_fnv1a64(ss_fnv1a64(SS_FNV1A64_SEED, &start, 8), &limit, 8),
                     &file_offset, 8);
    h = mix_str(mix_str(h, key.path), key.build_id);
    pthread_mutex_lock(&lock);
    ss_hslot *slot;
    entry *e = find(h, 2, &key, &slot);
    if (!e) {
        e = insert(h, 2, len0(key.path) + len0(key.build_id), slot);
        if (e) {
            char *tail = (char *)(e + 1);
            e->u.map = key;
            e->u.map.path = stash(&tail, key.path);
            e->u.map.build_id = stash(&tail, key.build_id);
        }
    }
    pthread_mutex_unlock(&lock);
    return e ? &e->u.map : NULL;
}
