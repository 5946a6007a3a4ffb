/* hmap.c: the one hash index (hmap.h). */
#include "agent/hmap.h"

#include "agent/mem.h"

#include <stdlib.h>
#include <string.h>

void ss_hmap_init(ss_hmap *h, uint32_t first, uint32_t load_pct, size_t *bytes) {
    memset(h, 0, sizeof *h);
    h->first = first ? first : 64;
    h->load_pct = load_pct && load_pct < 100 ? load_pct : 75;
    h->bytes = bytes;
}

static size_t slot_bytes(const ss_hmap *h) {
    return h->slots ? ((size_t)h->mask + 1) * sizeof *h->slots : 0;
}

static void account(ss_hmap *h, size_t released, size_t charged) {
    if (!h->uncharged) {
        ss_mem_release(released);
        ss_mem_charge(charged);
    }
    if (h->bytes)
        *h->bytes = *h->bytes - released + charged;
}

/* Rebuild into cap slots; the old slots stay whole on failure. */
static int resize(ss_hmap *h, size_t cap) {
    ss_hslot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    uint32_t mask = (uint32_t)(cap - 1);
    for (uint32_t i = 0; h->slots && i <= h->mask; i++) {
        ss_hslot s = h->slots[i];
        if (!s.idx1)
            continue;
        uint32_t j = s.hash & mask;
        while (slots[j].idx1)
            j = (j + 1) & mask;
        slots[j] = s;
    }
    size_t old = slot_bytes(h);
    free(h->slots);
    h->slots = slots;
    h->mask = mask;
    account(h, old, cap * sizeof *slots);
    return 0;
}

int ss_hmap_grow(ss_hmap *h) {
    size_t ncap = h->slots ? ((size_t)h->mask + 1) * 2 : h->first;
    if (ncap > (size_t)UINT32_MAX + 1 || resize(h, ncap) != 0)
        return -1;
    return 0;
}

void ss_hmap_clear(ss_hmap *h) {
    if (h->slots)
        memset(h->slots, 0, slot_bytes(h));
    h->count = 0;
}

void ss_hmap_free(ss_hmap *h) {
    account(h, slot_bytes(h), 0);
    free(h->slots);
    h->slots = NULL;
    h->mask = h->count = 0;
}
