/* hmap.h: the one hash index of the agent's tables.
 *
 * Open addressing with linear probing over slots {hash, index + 1}: the
 * table stores no keys. The caller keeps its elements in an array of its
 * own (strings, functions, words...) and the index maps a key to the
 * element's position in it; the caller's hash says where to look and its
 * eq callback compares a candidate element with the key. Keeping the hash
 * in the slot means a probe compares elements only when 32 bits agree.
 *
 * The slots are charged to the memory account (agent/mem.h) as they are
 * allocated and released (unless the table says uncharged), and added to
 * the caller's own byte count when it gives one. Not for the signal
 * handler (it allocates): the signal path keeps its own fixed tables. Not
 * thread-safe: each table has one owner, or its owner's lock. */
#ifndef SS_HMAP_H
#define SS_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SS_HMAP_NONE UINT32_MAX

typedef struct ss_hslot {
    uint32_t hash;
    uint32_t idx1; /* the element's index + 1; 0: an empty slot */
} ss_hslot;

typedef struct ss_hmap {
    ss_hslot *slots; /* mask + 1 of them (a power of two), or NULL */
    uint32_t mask;
    uint32_t count;
    uint32_t first;    /* the slots of the first allocation */
    uint32_t load_pct; /* grows before an insert would pass this load */
    size_t *bytes;     /* when not NULL: the slots' bytes are added here too */
    bool uncharged;    /* not in the memory account (the intern table never was) */
} ss_hmap;

/* Does element `idx` of the caller's array (ctx) equal key? */
typedef bool (*ss_hmap_eq)(const void *ctx, uint32_t idx, const void *key);

/* An empty index; nothing allocated until the first find. first: the
 * slots allocated then (a power of two; 0: 64); load_pct: the load an
 * insert may reach (0: 75). */
void ss_hmap_init(ss_hmap *h, uint32_t first, uint32_t load_pct, size_t *bytes);

/* Allocate the first slots, or double them (ss_hmap_find calls it): 0,
 * or -1 with the table as it was. */
int ss_hmap_grow(ss_hmap *h);

/* The index of the element equal to key, or SS_HMAP_NONE with *slot the
 * empty slot where it goes (pass it to ss_hmap_put). Grows the table
 * first when one more element would pass its load; when that fails,
 * SS_HMAP_NONE with *slot NULL (the table is left as it was). Inline: a
 * table's lookups are its hot path, and its eq is then a direct call. */
static inline uint32_t ss_hmap_find(ss_hmap *h, uint32_t hash, ss_hmap_eq eq, const void *ctx,
                                    const void *key, ss_hslot **slot) {
    *slot = NULL;
    if ((!h->slots || ((uint64_t)h->count + 1) * 100 > ((uint64_t)h->mask + 1) * h->load_pct) &&
        ss_hmap_grow(h) != 0)
        return SS_HMAP_NONE;
    for (uint32_t j = hash & h->mask;; j = (j + 1) & h->mask) {
        ss_hslot *s = &h->slots[j];
        if (!s->idx1) {
            *slot = s;
            return SS_HMAP_NONE;
        }
        if (s->hash == hash && eq(ctx, s->idx1 - 1, key))
            return s->idx1 - 1;
    }
}

/* Fill the slot ss_hmap_find returned with element idx. */
static inline void ss_hmap_put(ss_hmap *h, ss_hslot *slot, uint32_t hash, uint32_t idx) {
    slot->hash = hash;
    slot->idx1 = idx + 1;
    h->count++;
}

/* Forget every element, keep the slots. */
void ss_hmap_clear(ss_hmap *h);

/* Release the slots (the index is empty and may be used again). */
void ss_hmap_free(ss_hmap *h);

/* Hashes for the keys the tables use (inline: a lookup's hash is on
 * the same hot path as its probe). */

/* 64 bits of hash to 32 (a finaliser's last steps). */
static inline uint32_t ss_hash_fold(uint64_t h) {
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return (uint32_t)h;
}

/* FNV-1a 64 of n bytes, going on from h (SS_FNV1A64_SEED to begin). */
#define SS_FNV1A64_SEED 0xcbf29ce484222325ull
static inline uint64_t ss_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a 64 of n bytes, folded. */
static inline uint32_t ss_hash_bytes(const void *p, size_t n) {
    return ss_hash_fold(ss_fnv1a64(SS_FNV1A64_SEED, p, n));
}

/* The same, up to the NUL. */
static inline uint32_t ss_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return ss_hash_fold(h);
}

/* A 64-bit key (an id, an address). */
static inline uint32_t ss_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return ss_hash_fold(x);
}

static inline uint32_t ss_hash_ptr(const void *p) { return ss_hash_u64((uint64_t)(uintptr_t)p); }

#endif
