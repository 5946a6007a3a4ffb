/* main_arena.c: under an RLIMIT_AS, the agent's threads allocate through
 * glibc's main malloc arena instead of reserving arenas of their own.
 *
 * glibc gives every thread that enters its malloc (or free) an arena of
 * its own until the process has 8 per core, and an arena reserves 64 MiB
 * of address space (PROT_NONE, committed as used), which counts against an
 * RLIMIT_AS. The core allocates from its own heap there (core_heap.c), but
 * libc's own functions still call the process's malloc on the agent's
 * threads: the dynamic loader during the dlopen of the core on the
 * loader's start thread (link maps, scopes, search paths), and on the
 * core's threads libdw's fopen, strdup and tsearch, pthread_getattr_np...
 * One such arena was left: the start thread's, which the sampler took
 * over from glibc's free list.
 *
 * glibc picks a thread's arena at its first malloc or free, from a pointer
 * in the thread's thread-local storage (NULL until then; the main
 * thread's points to the main arena, a static of libc), and offers no way
 * to choose it: M_ARENA_MAX and the glibc.malloc.arena_max tunable hold
 * for the whole process and would change the host's own threads. So an
 * agent thread sets that pointer itself, before its first malloc, to the
 * main thread's value: glibc then serves it from the main arena, under
 * that arena's lock, as it serves any two threads sharing an arena, and
 * reserves nothing.
 *
 * Finding the pointer. libc's thread-local variables are in static TLS,
 * at the same offset from every thread's thread pointer; dl_iterate_phdr
 * gives the calling thread's block of libc's PT_TLS segment. The loader's
 * constructor notes the main thread's block. The start thread, before it
 * allocates anything, compares its own block with it word by word: the
 * arena pointer is NULL in a thread that has never allocated and, in the
 * main thread, points into libc's writable segment (tcache, the other
 * pointer a fresh thread lacks, points into the heap; the locale and
 * resolver pointers are set in every thread). Exactly one such word, or
 * nothing is done. The start thread writes it, then checks its first
 * allocation: a chunk of the main arena has NON_MAIN_ARENA (4) and
 * IS_MMAPPED (2) clear in the size word before it. If not, the word is put
 * back and nothing more is done: glibc gave the thread an arena, as
 * before. The core's threads get the offset and the value from the loader
 * (ss_core_host) and write the word only where it is still NULL.
 *
 * Leaving. glibc counts the threads attached to an arena and, at a
 * thread's end, puts its arena on the free list when the count drops to
 * zero. The agent's threads were never counted on the main arena, so each
 * sets its pointer back to NULL at its end (while it still holds the main
 * arena) and glibc's end of the thread leaves the main arena alone (a
 * thread that ended through pthread_exit would skip that: the agent's
 * never do).
 *
 * Only with glibc's malloc as the process's malloc (jemalloc, tcmalloc or
 * a sanitizer's allocator have no such arenas), and only under an
 * RLIMIT_AS: without one an arena costs nothing, and an arena of its own
 * keeps the agent's threads off the lock of the main arena, which the
 * host's main thread takes. Left: an allocation of an agent thread that
 * fails in the main arena (the process out of memory) has glibc move the
 * thread to another arena, and take one off the main arena's count, which
 * never held it: a count one short puts the main arena on the free list
 * while the main thread still uses it (threads then share it, which is
 * harmless); glibc asserts only if, after that, one more thread leaves
 * it. */
#include "agent/main_arena.h"

#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#define SS_MAIN_ARENA 1
#endif

static _Atomic intptr_t slot_off;  /* the pointer, from the thread pointer */
static void *_Atomic arena;        /* the main arena; NULL: nothing to do */

#ifdef SS_MAIN_ARENA

#define NON_MAIN_ARENA 4u
#define IS_MMAPPED 2u

typedef struct libc_tls {
    uintptr_t block;         /* the calling thread's block of libc's PT_TLS */
    size_t size;             /* its size */
    uintptr_t rw_lo, rw_hi;  /* libc's writable segment(s) */
    bool has_malloc;         /* the process's malloc is libc's */
} libc_tls;

static libc_tls main_tls; /* the main thread's, noted by the constructor */
static _Atomic int found; /* 0 not looked for, 1 found, -1 not found */

static int find_libc(struct dl_phdr_info *i, size_t size, void *data) {
    (void)size;
    const char *slash = strrchr(i->dlpi_name, '/');
    if (strncmp(slash ? slash + 1 : i->dlpi_name, "libc.so.", 8) != 0)
        return 0;
    libc_tls *o = data;
    /* the loader binds malloc in the global scope: the process's */
    uintptr_t m = (uintptr_t)(void *)&malloc;
    for (int k = 0; k < i->dlpi_phnum; k++) {
        const ElfW(Phdr) *p = &i->dlpi_phdr[k];
        uintptr_t lo = i->dlpi_addr + p->p_vaddr, hi = lo + p->p_memsz;
        if (p->p_type == PT_TLS)
            o->size = p->p_memsz;
        if (p->p_type != PT_LOAD)
            continue;
        if (m >= lo && m < hi)
            o->has_malloc = true;
        if (p->p_flags & PF_W) {
            o->rw_lo = o->rw_lo && o->rw_lo < lo ? o->rw_lo : lo;
            o->rw_hi = o->rw_hi > hi ? o->rw_hi : hi;
        }
    }
    o->block = (uintptr_t)i->dlpi_tls_data;
    return 1;
}

static bool limited(void);

void ss_main_arena_note_main(void) {
    if (!limited())
        return; /* the common case: one system call, nothing walked */
    libc_tls o = {0};
    dl_iterate_phdr(find_libc, &o);
    if (o.block && o.size >= sizeof(void *) && o.has_malloc && o.rw_lo)
        main_tls = o;
}

static bool limited(void) {
    struct rlimit as;
    return getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
}

static uintptr_t word_at(uintptr_t a) { return *(const volatile uintptr_t *)a; }

/* On a thread that has never allocated: the one word of libc's TLS that is
 * NULL here and points into libc's writable segment in the main thread. */
static bool discover(void) {
    if (!main_tls.block || !limited())
        return false;
    libc_tls me = {0};
    dl_iterate_phdr(find_libc, &me);
    if (!me.block || me.block == main_tls.block || me.size != main_tls.size)
        return false;
    size_t at = 0;
    int n = 0;
    for (size_t off = 0; off + sizeof(void *) <= me.size; off += sizeof(void *)) {
        uintptr_t theirs = word_at(main_tls.block + off);
        if (word_at(me.block + off) == 0 && theirs >= main_tls.rw_lo && theirs < main_tls.rw_hi) {
            at = off;
            n++;
        }
    }
    if (n != 1)
        return false;
    void *volatile *slot = (void *volatile *)(me.block + at);
    void *main_arena = (void *)word_at(main_tls.block + at);
    *slot = main_arena;
    /* glibc took it if the first chunk comes from the main arena */
    char *p = malloc(1);
    size_t head = p ? *(const volatile size_t *)((uintptr_t)p - sizeof(size_t)) : NON_MAIN_ARENA;
    bool ok = (head & (NON_MAIN_ARENA | IS_MMAPPED)) == 0 && *slot == main_arena;
    free(p);
    if (!ok) {
        if (*slot == main_arena)
            *slot = NULL;
        return false;
    }
    atomic_store(&slot_off, (intptr_t)((uintptr_t)slot - (uintptr_t)__builtin_thread_pointer()));
    atomic_store(&arena, main_arena);
    return true;
}

bool ss_main_arena_find(void) {
    int f = atomic_load(&found);
    if (f == 0) {
        f = discover() ? 1 : -1;
        atomic_store(&found, f);
        return f > 0; /* discover attached this thread */
    }
    return f > 0 && limited() && ss_main_arena_attach();
}

static void *volatile *my_slot(void) {
    return (void *volatile *)((uintptr_t)__builtin_thread_pointer() +
                              (uintptr_t)atomic_load(&slot_off));
}

bool ss_main_arena_attach(void) {
    void *a = atomic_load(&arena);
    if (!a)
        return false;
    void *volatile *slot = my_slot();
    if (*slot)
        return false; /* it has an arena already */
    *slot = a;
    return true;
}

void ss_main_arena_detach(void) {
    void *a = atomic_load(&arena);
    if (!a)
        return;
    void *volatile *slot = my_slot();
    /* glibc moved it elsewhere (counted there) when an allocation failed */
    if (*slot == a)
        *slot = NULL;
}

#else /* not glibc on x86-64 or AArch64: arenas as glibc gives them */

void ss_main_arena_note_main(void) {}
bool ss_main_arena_find(void) { return false; }
bool ss_main_arena_attach(void) { return false; }
void ss_main_arena_detach(void) {}

#endif

void ss_main_arena_get(intptr_t *tp_off, void **main_arena) {
    *main_arena = atomic_load(&arena);
    *tp_off = *main_arena ? atomic_load(&slot_off) : 0;
}

void ss_main_arena_use(intptr_t tp_off, void *main_arena) {
    atomic_store(&slot_off, tp_off);
    atomic_store(&arena, main_arena);
}

bool ss_main_arena_known(void) { return atomic_load(&arena) != NULL; }
