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
 * unused in the child).
 *
 * The zone: a second heap of the same kind, for what libdw and libelf
 * allocate (the caller's address says so, core_alloc.c), used whatever
 * the limits. Their tables (a module's symbols, CUs, abbreviations, line
 * tables: ~2.5 MiB for libc with libc6-dbg) are the agent's largest
 * private memory. In glibc's arena, once the resolver released them
 * (samplers/symbols.c), they stayed resident, and every fork() of the host
 * copied their page tables. Here, when the zone's last block in use is
 * freed (the release), every chunk is unmapped: resident memory and forks
 * lose them until the next miss. While they are held a forked child
 * inherits them like any memory and its resolver goes on using them (a
 * cold one would read the DWARF again in every child that lives past its
 * restart). A child starts with empty lists and a new lock, as the main
 * heap; it keeps the chunk list and the count of blocks in use, which a
 * fork cannot leave too low (an operation cut short leaves one block too
 * many at most, and the zone is then never emptied in that child).
 *
 * A process that forks often (ZONE_FORKS_PER_S within a second, counted
 * before each fork while the zone holds anything) pays for those tables
 * at every fork: the kernel copies their page tables into the child and
 * tears them down at its exit (about 900 pages with libc6-dbg: most of
 * what a fork+exit costs with the agent running). Its children rarely
 * live long (a forking server's connections, a build's compilers, a
 * shell's commands), so from then until the zone is next emptied its
 * mappings are MADV_DONTFORK: a child has none of them, its resolver
 * forgets the parent's tables unread and keeps its cache of names
 * (samplers/symbols.c, ss_symbols_adopt), and its zone starts empty under
 * a mark of its own, so that a block of the parent's (its mark still in
 * the inherited map, its memory not here) is never taken for one of its
 * own. Such a child that meets an address new to its cache reads that
 * module's DWARF again. The flag is set before the mappings are marked
 * (a child forked in between forgets tables it has: harmless), and a
 * mapping made meanwhile is marked before it is used. */
#include "core/core_heap.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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
static pthread_mutex_t leaves_lock = PTHREAD_MUTEX_INITIALIZER; /* one leaf maker */

/* One heap: its lock, free lists and bump range, and (the zone) its
 * chunks, linked through their first word, and its blocks in use. */
typedef struct heap {
    pthread_mutex_t lock;
    void *lists[NCLASS];
    unsigned char *bump, *bump_end;
    unsigned char *chunks;
    size_t live;
} heap;

#define MAIN_MARK 1
#define ZONE_MARK_FIRST 2
static heap main_heap = {.lock = PTHREAD_MUTEX_INITIALIZER};
static heap zone = {.lock = PTHREAD_MUTEX_INITIALIZER};
static _Atomic unsigned char zone_mark = ZONE_MARK_FIRST; /* this process's */
static _Atomic size_t mapped; /* bytes of chunks and large mappings */
static _Atomic uint64_t zone_emptied;

/* Forks per second past which the zone is not inherited (see above). */
#define ZONE_FORKS_PER_S 20
/* The zone's large blocks (own mappings), for MADV_DONTFORK: past this
 * many, the zone stays inherited. Under zone.lock. */
#define ZONE_LARGE_MAX 256
static struct {
    unsigned char *at;
    size_t len;
} zone_large[ZONE_LARGE_MAX];
static size_t n_zone_large;
static _Atomic size_t zone_bytes; /* mapped for the zone (changed under zone.lock) */
static _Atomic bool zone_unforked;    /* its mappings are MADV_DONTFORK */
static _Atomic uint64_t zone_unforks; /* times the zone was made so */
static bool zone_inherited = true;    /* in a child: the parent's zone came along */
/* forks counted since (by the forking thread; reset when the zone empties) */
static _Atomic uint64_t fork_window_ns;
static _Atomic uint32_t fork_window_n;

/* ---- the zone's mappings, for MADV_DONTFORK (under zone.lock) ---- */

/* Past ZONE_LARGE_MAX, one not listed could not be marked: the zone is
 * inherited again until it is next emptied. */
static bool zone_large_overflow;

static void zone_large_add(unsigned char *at, size_t len) {
    zone_bytes += len;
    if (n_zone_large == ZONE_LARGE_MAX) {
        zone_large_overflow = true;
        atomic_store(&zone_unforked, false);
        return;
    }
    zone_large[n_zone_large].at = at;
    zone_large[n_zone_large].len = len;
    n_zone_large++;
}

static void zone_large_remove(unsigned char *at, size_t len) {
    zone_bytes -= len;
    for (size_t i = 0; i < n_zone_large; i++)
        if (zone_large[i].at == at) {
            zone_large[i] = zone_large[--n_zone_large];
            return;
        }
}

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
    if (!leaf && make) {
        pthread_mutex_lock(&leaves_lock);
        leaf = atomic_load_explicit(&top[t], memory_order_acquire);
        if (!leaf) {
            void *m = mmap(NULL, LEAF_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            if (m != MAP_FAILED) {
                leaf = m;
                atomic_store_explicit(&top[t], leaf, memory_order_release);
            }
        }
        pthread_mutex_unlock(&leaves_lock);
    }
    return leaf ? &leaf[u & (LEAF_SIZE - 1)] : NULL;
}

/* Mark [addr, addr+len) with v (0: not the heap's); len in whole units. */
static bool mark(uintptr_t addr, size_t len, unsigned char v) {
    for (uintptr_t a = addr; a < addr + len; a += UNIT) {
        unit_mark *s = unit_slot(a, v != 0);
        if (!s)
            return false;
        atomic_store_explicit(s, v, memory_order_release);
    }
    return true;
}

static unsigned char mark_of(const void *p) {
    unit_mark *s = unit_slot((uintptr_t)p, false);
    return s ? atomic_load_explicit(s, memory_order_acquire) : 0;
}

/* The heap a block is in; NULL for memory of neither. */
static heap *heap_of(const void *p) {
    unsigned char m = mark_of(p);
    if (m == MAIN_MARK)
        return &main_heap;
    if (m && m == atomic_load_explicit(&zone_mark, memory_order_relaxed))
        return &zone;
    return NULL; /* neither, or the zone of a parent, not inherited */
}

bool ss_core_heap_owns(const void *p) { return heap_of(p) != NULL; }

bool ss_core_heap_in_zone(const void *p) { return heap_of(p) == &zone; }

/* A mapping of len bytes (a multiple of UNIT) aligned to UNIT, marked v. */
static void *map_units(size_t len, unsigned char v) {
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
    /* the zone's (v != MAIN_MARK, under zone.lock) while it is not inherited */
    bool dontfork = v != MAIN_MARK && atomic_load_explicit(&zone_unforked, memory_order_relaxed);
    if ((dontfork && madvise(a, len, MADV_DONTFORK) != 0) || !mark((uintptr_t)a, len, v)) {
        mark((uintptr_t)a, len, 0);
        munmap(a, len);
        errno = saved;
        return NULL;
    }
    atomic_fetch_add_explicit(&mapped, len, memory_order_relaxed);
    errno = saved;
    return a;
}

static void unmap_units(unsigned char *a, size_t len) {
    int saved = errno;
    mark((uintptr_t)a, len, 0);
    atomic_fetch_sub_explicit(&mapped, len, memory_order_relaxed);
    munmap(a, len);
    errno = saved;
}

static void *place(unsigned char *block, size_t block_len, uint32_t cls, size_t align) {
    uintptr_t p = ((uintptr_t)block + HDR + align - 1) & ~(uintptr_t)(align - 1);
    hdr *h = (hdr *)(p - HDR);
    h->cls = cls;
    h->off = (uint32_t)(p - HDR - (uintptr_t)block);
    h->size = block_len - HDR - h->off;
    return (void *)p;
}

/* A chunk's first HDR bytes link it to the heap's previous chunk. */
static unsigned char *small_block(heap *h, unsigned c, unsigned char v) {
    void *b = h->lists[c];
    if (b) {
        h->lists[c] = *(void **)b;
        return b;
    }
    size_t len = class_size(c);
    if ((size_t)(h->bump_end - h->bump) < len) {
        unsigned char *m = map_units(CHUNK, v);
        if (!m)
            return NULL;
        *(unsigned char **)m = h->chunks;
        h->chunks = m;
        if (h == &zone)
            zone_bytes += CHUNK;
        h->bump = m + HDR; /* the rest of the previous chunk is left unused */
        h->bump_end = m + CHUNK;
    }
    b = h->bump;
    h->bump += len;
    return b;
}

static void *heap_alloc(heap *h, unsigned char v, size_t size, size_t align) {
    if (align < HDR)
        align = HDR;
    if (size > SIZE_MAX / 2 || align > SIZE_MAX / 4) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = size + HDR + (align > HDR ? align : 0);
    unsigned char *b;
    size_t len;
    uint32_t cls;
    pthread_mutex_lock(&h->lock);
    if (need <= SMALL_MAX) {
        cls = class_of(need);
        len = class_size(cls);
        b = small_block(h, cls, v);
    } else {
        cls = LARGE;
        len = (need + UNIT - 1) & ~(UNIT - 1);
        b = map_units(len, v);
        if (b && h == &zone)
            zone_large_add(b, len);
    }
    if (b)
        h->live++;
    pthread_mutex_unlock(&h->lock);
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    return place(b, len, cls, align);
}

void *ss_core_heap_alloc(size_t size, size_t align) {
    return heap_alloc(&main_heap, MAIN_MARK, size, align);
}

void *ss_core_zone_alloc(size_t size, size_t align) {
    return heap_alloc(&zone, atomic_load_explicit(&zone_mark, memory_order_relaxed), size,
                      align);
}

size_t ss_core_heap_usable(const void *p) { return (size_t)((const hdr *)p - 1)->size; }

/* The zone's last block in use is gone (libdw's tables all released):
 * its chunks go back to the system, so neither the process's resident
 * memory nor a fork carries them. */
static void zone_empty_locked(void) {
    unsigned char *c = zone.chunks;
    zone.chunks = NULL; /* first: a child forked meanwhile never walks it */
    while (c) {
        unsigned char *next = *(unsigned char **)c;
        unmap_units(c, CHUNK);
        c = next;
    }
    memset(zone.lists, 0, sizeof zone.lists);
    zone.bump = zone.bump_end = NULL;
    zone_bytes = 0;
    n_zone_large = 0;
    zone_large_overflow = false;
    atomic_store(&zone_unforked, false); /* judged again, afresh, when it fills */
    atomic_store_explicit(&fork_window_n, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&zone_emptied, 1, memory_order_relaxed);
}

/* The flag first: a child forked before a mapping is marked forgets a
 * zone it has (its copy of the flag says so), never uses one it lacks. */
static void zone_unfork_locked(void) {
    if (zone_large_overflow || atomic_load(&zone_unforked))
        return;
    atomic_store(&zone_unforked, true);
    for (unsigned char *c = zone.chunks; c; c = *(unsigned char **)c)
        madvise(c, CHUNK, MADV_DONTFORK);
    for (size_t i = 0; i < n_zone_large; i++)
        madvise(zone_large[i].at, zone_large[i].len, MADV_DONTFORK);
    atomic_fetch_add_explicit(&zone_unforks, 1, memory_order_relaxed);
}

/* Before each fork, on the forking thread (the host's): counts forks while
 * the zone holds anything, and past ZONE_FORKS_PER_S within a second makes
 * it not inherited. Never waits: when an agent thread holds the zone's
 * lock, a later fork does it. An empty zone costs a read. */
static void zone_before_fork(void) {
    if (!atomic_load_explicit(&zone_bytes, memory_order_relaxed) ||
        atomic_load_explicit(&zone_unforked, memory_order_relaxed))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (now - atomic_load_explicit(&fork_window_ns, memory_order_relaxed) > 1000000000ull) {
        atomic_store_explicit(&fork_window_ns, now, memory_order_relaxed);
        atomic_store_explicit(&fork_window_n, 0, memory_order_relaxed);
    }
    if (atomic_fetch_add_explicit(&fork_window_n, 1, memory_order_relaxed) + 1 < ZONE_FORKS_PER_S ||
        pthread_mutex_trylock(&zone.lock) != 0)
        return;
    zone_unfork_locked();
    pthread_mutex_unlock(&zone.lock);
}

void ss_core_zone_note_forks(void) {
    static _Atomic bool done;
    if (!atomic_exchange(&done, true))
        pthread_atfork(zone_before_fork, NULL, NULL);
}

uint64_t ss_core_zone_unforks(void) {
    return atomic_load_explicit(&zone_unforks, memory_order_relaxed);
}

bool ss_core_zone_inherited(void) { return zone_inherited; }

void ss_core_heap_free(void *p) {
    heap *h = heap_of(p);
    if (!h)
        return; /* not ours (the caller asked ss_core_heap_owns first) */
    hdr *hd = (hdr *)p - 1;
    unsigned char *block = (unsigned char *)p - HDR - hd->off;
    if (hd->cls != LARGE && hd->cls >= NCLASS)
        return; /* not a header of ours: leaking is the only safe thing */
    pthread_mutex_lock(&h->lock);
    if (hd->cls == LARGE) {
        size_t len = HDR + hd->off + (size_t)hd->size;
        if (h == &zone)
            zone_large_remove(block, len);
        unmap_units(block, len);
    } else {
        *(void **)block = h->lists[hd->cls];
        h->lists[hd->cls] = block;
    }
    if (h->live)
        h->live--;
    if (h == &zone && h->live == 0 && h->chunks)
        zone_empty_locked();
    pthread_mutex_unlock(&h->lock);
}

size_t ss_core_heap_mapped(void) { return atomic_load_explicit(&mapped, memory_order_relaxed); }

uint64_t ss_core_zone_emptied(void) {
    return atomic_load_explicit(&zone_emptied, memory_order_relaxed);
}

/* A child: a fresh lock, empty lists (a list caught mid-update by a
 * thread that is gone is not used; its free blocks are left). */
static void heap_forget(heap *h) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&h->lock, &fresh, sizeof h->lock);
    memset(h->lists, 0, sizeof h->lists);
    h->bump = h->bump_end = NULL;
}

static void leaves_forget(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&leaves_lock, &fresh, sizeof leaves_lock);
}

void ss_core_heap_after_fork_child(void) {
    leaves_forget();
    heap_forget(&main_heap);
}

void ss_core_zone_after_fork_child(void) {
    leaves_forget();
    heap_forget(&zone);
    zone_inherited = !atomic_load(&zone_unforked);
    if (zone_inherited)
        return;
    /* The parent's zone is not here (MADV_DONTFORK): this child's starts
     * empty under a mark of its own. */
    zone.chunks = NULL;
    zone.live = 0;
    atomic_fetch_sub_explicit(&mapped, atomic_exchange(&zone_bytes, 0), memory_order_relaxed);
    n_zone_large = 0;
    zone_large_overflow = false;
    atomic_store(&zone_unforked, false);
    atomic_store_explicit(&fork_window_n, 0, memory_order_relaxed);
    unsigned char m = atomic_load_explicit(&zone_mark, memory_order_relaxed);
    atomic_store_explicit(&zone_mark, m == UCHAR_MAX ? ZONE_MARK_FIRST : (unsigned char)(m + 1),
                          memory_order_relaxed);
}

int ss_core_heap_init(void) {
    static _Atomic bool done;
    if (atomic_exchange(&done, true))
        return 0;
    /* for a core whose at-fork handler is its own (loader/core_entry.c
     * calls it otherwise, before the agent's handler allocates) */
    return -pthread_atfork(NULL, NULL, ss_core_heap_after_fork_child);
}
