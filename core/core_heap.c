/* core_heap.c: the core's own heap, used under an RLIMIT_AS.
 *
 * The core's malloc family forwards to the host's allocator
 * (core_alloc.c). With glibc's malloc, every thread that allocates or
 * frees gets an arena of its own (until the process has 8 per core), and
 * an arena reserves 64 MiB of address space. Without an RLIMIT_AS that
 * reservation costs nothing; under one, the agent's sampler and exporter
 * threads took 128 MiB of the host's share (`prlimit --as=200000000`: the
 * host's own malloc(100 MB) failed). Setting M_ARENA_MAX would change the
 * host's own threads' arenas, so instead, when the process has an
 * RLIMIT_AS at the hand-over, the core allocates from this heap: a few
 * mmap'd chunks, nothing reserved ahead, glibc's malloc never entered by
 * the core's own code.
 *
 * Size classes from 32 bytes to 32 KiB (steps of 1.5x and 2x) carved from
 * 1 MiB chunks, one free list each; larger blocks get a mapping of their
 * own, unmapped at free. Every block is preceded by a 16-byte header (its
 * class, its capacity, the offset of an aligned pointer from its start).
 * One mutex: the agent's threads allocate a few thousand times a round.
 *
 * free() must tell the heap's blocks from the host allocator's (memory
 * crosses both ways: libc's strdup, getline, opendir serve the core from
 * the host's allocator). A radix map of 64 KiB units says which units of
 * the address space are the heap's: chunks and large mappings are aligned
 * to 64 KiB and cover whole units, so no foreign block shares a unit with
 * ours. Lookups are lock-free (a unit is marked before a block in it is
 * handed out, unmarked before it is unmapped).
 *
 * A forked child inherits the chunks, the map and the blocks in use, but
 * perhaps a list caught mid-update by a thread that is gone: it starts
 * with empty lists and a new lock (the parent's free blocks are left
 * unused in the child). */
#include "core/core_heap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define UNIT_SHIFT 16
#define UNIT ((uintptr_t)1 << UNIT_SHIFT)
#define ADDR_BITS 47
#define LEAF_BITS 18
#define TOP_SIZE ((size_t)1 << (ADDR_BITS - UNIT_SHIFT - LEAF_BITS))
#define LEAF_SIZE ((size_t)1 << LEAF_BITS)
#define CHUNK ((size_t)1 << 20)
#define HDR 16
#define SMALL_MAX ((size_t)32 << 10)
#define NCLASS 21 /* 32, 48, 64, 96 ... 24K, 32K */

typedef struct hdr {
    uint32_t cls;  /* class, or LARGE */
    uint32_t off;  /* pointer - HDR - block start (aligned blocks) */
    uint64_t size; /* capacity from the pointer */
} hdr;

#define LARGE UINT32_MAX

typedef _Atomic unsigned char unit_mark;
static unit_mark *_Atomic top[TOP_SIZE];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *lists[NCLASS];
static unsigned char *bump, *bump_end;
static _Atomic size_t mapped; /* bytes of chunks and large mappings */

static size_t class_size(unsigned c) {
    size_t base = (size_t)32 << (c / 2);
    return c % 2 ? base + base / 2 : base;
}

static unsigned class_of(size_t block) {
    unsigned c = 0;
    while (class_size(c) < block)
        c++;
    return c;
}

static unit_mark *unit_slot(uintptr_t addr, bool make) {
    uintptr_t u = addr >> UNIT_SHIFT;
    size_t t = u >> LEAF_BITS;
    if (t >= TOP_SIZE)
        return NULL;
    unit_mark *leaf = atomic_load_explicit(&top[t], memory_order_acquire);
    if (!leaf && make) { /* under the lock: one maker */
        void *m = mmap(NULL, LEAF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        leaf = m;
        atomic_store_explicit(&top[t], leaf, memory_order_release);
    }
    return leaf ? &leaf[u & (LEAF_SIZE - 1)] : NULL;
}

/* Mark [addr, addr+len) as the heap's (1) or not (0); len in whole units. */
static bool mark(uintptr_t addr, size_t len, unsigned char v) {
    for (uintptr_t a = addr; a < addr + len; a += UNIT) {
        unit_mark *s = unit_slot(a, v != 0);
        if (!s)
            return false;
        atomic_store_explicit(s, v, memory_order_release);
    }
    return true;
}

bool ss_core_heap_owns(const void *p) {
    unit_mark *s = unit_slot((uintptr_t)p, false);
    return s && atomic_load_explicit(s, memory_order_acquire);
}

/* A mapping of len bytes (a multiple of UNIT) aligned to UNIT, marked. */
static void *map_units(size_t len) {
    int saved = errno;
    unsigned char *m = mmap(NULL, len + UNIT - 4096, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        errno = saved;
        return NULL;
    }
    unsigned char *a = (unsigned char *)(((uintptr_t)m + UNIT - 1) & ~(UNIT - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    size_t tail = (size_t)((m + len + UNIT - 4096) - (a + len));
    if (tail)
        munmap(a + len, tail);
    if (!mark((uintptr_t)a, len, 1)) {
        mark((uintptr_t)a, len, 0);
        munmap(a, len);
        errno = saved;
        return NULL;
    }
    atomic_fetch_add_explicit(&mapped, len, memory_order_relaxed);
    return a;
}

static void *place(unsigned char *block, size_t block_len, uint32_t cls, size_t align) {
    uintptr_t p = ((uintptr_t)block + HDR + align - 1) & ~(uintptr_t)(align - 1);
    hdr *h = (hdr *)(p - HDR);
    h->cls = cls;
    h->off = (uint32_t)(p - HDR - (uintptr_t)block);
    h->size = block_len - HDR - h->off;
    return (void *)p;
}

static unsigned char *small_block(unsigned c) {
    void *b = lists[c];
    if (b) {
        lists[c] = *(void **)b;
        return b;
    }
    size_t len = class_size(c);
    if ((size_t)(bump_end - bump) < len) {
        unsigned char *m = map_units(CHUNK);
        if (!m)
            return NULL;
        bump = m; /* the rest of the previous chunk is left unused */
        bump_end = m + CHUNK;
    }
    b = bump;
    bump += len;
    return b;
}

void *ss_core_heap_alloc(size_t size, size_t align) {
    if (align < HDR)
        align = HDR;
    if (size > SIZE_MAX / 2 || align > SIZE_MAX / 4) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = size + HDR + (align > HDR ? align : 0);
    if (need <= SMALL_MAX) {
        unsigned c = class_of(need);
        pthread_mutex_lock(&lock);
        unsigned char *b = small_block(c);
        pthread_mutex_unlock(&lock);
        if (!b) {
            errno = ENOMEM;
            return NULL;
        }
        return place(b, class_size(c), c, align);
    }
    size_t len = (need + UNIT - 1) & ~(UNIT - 1);
    pthread_mutex_lock(&lock); /* the map's leaves are made under it */
    unsigned char *m = map_units(len);
    pthread_mutex_unlock(&lock);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    return place(m, len, LARGE, align);
}

size_t ss_core_heap_usable(const void *p) { return (size_t)((const hdr *)p - 1)->size; }

void ss_core_heap_free(void *p) {
    hdr *h = (hdr *)p - 1;
    unsigned char *block = (unsigned char *)p - HDR - h->off;
    if (h->cls == LARGE) {
        size_t len = HDR + h->off + (size_t)h->size;
        int saved = errno;
        mark((uintptr_t)block, len, 0);
        atomic_fetch_sub_explicit(&mapped, len, memory_order_relaxed);
        munmap(block, len);
        errno = saved;
        return;
    }
    if (h->cls >= NCLASS)
        return; /* not a header of ours: leaking is the only safe thing */
    pthread_mutex_lock(&lock);
    *(void **)block = lists[h->cls];
    lists[h->cls] = block;
    pthread_mutex_unlock(&lock);
}

size_t ss_core_heap_mapped(void) { return atomic_load_explicit(&mapped, memory_order_relaxed); }

void ss_core_heap_after_fork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&lock, &fresh, sizeof lock);
    memset(lists, 0, sizeof lists);
    bump = bump_end = NULL;
}

int ss_core_heap_init(void) {
    static _Atomic bool done;
    if (atomic_exchange(&done, true))
        return 0;
    /* for a core whose at-fork handler is its own (loader/core_entry.c
     * calls it otherwise, before the agent's handler allocates) */
    return -pthread_atfork(NULL, NULL, ss_core_heap_after_fork_child);
}
