/* core_alloc.c: the core's malloc family (libstackshot-core.so only).
 *
 * The loader opens the core with RTLD_DEEPBIND, so every object loaded
 * with it (gRPC, abseil, libstdc++, libunwind, libdw...) binds its symbols
 * in the core's own dependency tree first. Left alone, their malloc/free
 * would bind to glibc's, while libc's own allocations (strdup, getline,
 * getaddrinfo) keep going through the global scope, i.e. to the host's
 * allocator if it replaced malloc (jemalloc, tcmalloc): memory crossing
 * between the two would be freed by the wrong allocator and crash the
 * host. So the core defines the whole family itself (first in its own
 * search list, so everything in its tree binds here) and forwards to the
 * allocator the process really uses, which the loader resolved in the
 * global scope and handed over (ss_core_alloc_install).
 *
 * Before the hand-over, while dlopen runs the constructors of the core's
 * dependencies (libstdc++'s exception pool, abseil's and gRPC's statics),
 * allocations come from a static bump arena: the host's allocator is not
 * known yet, and glibc's would be the wrong one. Arena memory is never
 * returned (free ignores it; realloc copies out of it); the constructors
 * take a few KiB, the arena is virtual memory until touched.
 *
 * Compiled with -fno-builtin: gcc must not turn malloc+memset here into a
 * call to calloc, which is this file's own. Not built with sanitizers:
 * their runtimes refuse RTLD_DEEPBIND, and without it the global scope
 * (the sanitizer's allocator) comes first for everything, so this file
 * would be dead code: sanitizer builds define SS_CORE_ALLOC_NO_FAMILY and
 * keep only the hand-over.
 *
 * libelf's large buffers live in mappings of their own. libelf
 * decompresses each compressed section of separate debuginfo (Debian's
 * -dbg packages: libc6-dbg's .debug_info, .debug_line... are about 12 MB
 * once decompressed) into a buffer of its own, written once and only read
 * after that. An allocation of 256 KiB or more asked for by libelf itself
 * (the caller's address is in libelf's code) is a MAP_SHARED anonymous
 * mapping: a fork does not copy its page tables (parent and child read
 * the same bytes, which neither writes again), placed in one 256 MiB range reserved at the first such allocation (free
 * tells them apart by address; none under an RLIMIT_AS) and unmapped at
 * free. Everything else libdw and libelf ask for comes from the core's
 * zone (core/core_heap.c), unmapped whenever libdw holds nothing: once
 * the resolver released its tables they neither stay resident nor make
 * every fork() of the host copy their page tables. The core's other allocations go to
 * the host's allocator (or to the core's main heap under an RLIMIT_AS). */
#include "loader/ss_core_api.h"
#include "core/core_heap.h"

#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

static ss_core_alloc real;
static _Atomic bool installed;
#ifndef SS_CORE_ALLOC_NO_FAMILY
static _Atomic bool own_heap; /* an RLIMIT_AS at the hand-over: core_heap.c */
#endif

#ifndef SS_CORE_ALLOC_NO_FAMILY
static void find_libelf_code(void);
#endif

int ss_core_alloc_install(const ss_core_alloc *a) {
    if (!a || !a->malloc || !a->free || !a->calloc || !a->realloc)
        return -EINVAL;
    /* The loader resolved these in the global scope, where the core (loaded
     * RTLD_LOCAL) is not: finding our own malloc would mean a loop. */
#ifndef SS_CORE_ALLOC_NO_FAMILY
    if ((void *)a->malloc == (void *)&malloc || (void *)a->free == (void *)&free)
        return -EINVAL;
#endif
    real = *a;
#ifndef SS_CORE_ALLOC_NO_FAMILY
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
        ss_core_heap_init() == 0)
        atomic_store_explicit(&own_heap, true, memory_order_relaxed);
#endif
    atomic_store_explicit(&installed, true, memory_order_release);
#ifndef SS_CORE_ALLOC_NO_FAMILY
    find_libelf_code();
    ss_core_zone_note_forks(); /* a host that forks often: its children lack the zone */
#endif
    return 0;
}

#ifndef SS_CORE_ALLOC_NO_FAMILY

#define ARENA_SIZE ((size_t)2 << 20)
#define ARENA_ALIGN 16

static _Alignas(64) unsigned char arena[ARENA_SIZE];
static _Atomic size_t arena_used;

/* Is the allocator handed over? (acquire: `real` is filled before.) */
static inline bool ready(void) {
    return atomic_load_explicit(&installed, memory_order_acquire);
}

/* Allocations go to the core's own heap (set before `installed`). */
static inline bool own(void) { return atomic_load_explicit(&own_heap, memory_order_relaxed); }

static bool in_arena(const void *p) {
    return (uintptr_t)p >= (uintptr_t)arena && (uintptr_t)p < (uintptr_t)arena + ARENA_SIZE;
}

/* Each arena block is preceded by its size (for realloc and
 * malloc_usable_size). Zero-filled: the arena is .bss and never reused. */
static void *arena_alloc(size_t size, size_t align) {
    if (align < ARENA_ALIGN)
        align = ARENA_ALIGN;
    if (size > ARENA_SIZE || align > ARENA_SIZE / 2) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = size + align + ARENA_ALIGN;
    size_t off = atomic_fetch_add_explicit(&arena_used, need, memory_order_relaxed);
    if (off + need > ARENA_SIZE) {
        errno = ENOMEM;
        return NULL;
    }
    uintptr_t base = (uintptr_t)arena + off + ARENA_ALIGN;
    uintptr_t p = (base + align - 1) & ~(uintptr_t)(align - 1);
    ((size_t *)p)[-1] = size;
    return (void *)p;
}

static size_t arena_size_of(const void *p) { return ((const size_t *)p)[-1]; }

static bool power_of_two(size_t n) { return n && !(n & (n - 1)); }

/* ---- libelf's large buffers, shared with forked children ----------- */

#define SHARED_MIN ((size_t)256 << 10)
#define SHARED_SPAN ((size_t)256 << 20)
#define SHARED_HEAD ((size_t)64) /* the block's size, and malloc's alignment kept */

static _Atomic uintptr_t shared_base;           /* the reserved range; 0: none yet */
static _Atomic int shared_state;                /* 0 none, 1 reserving, 2 ready, 3 failed */
static _Atomic size_t shared_next;              /* bump offset into the range */

/* The code of libelf and of libdw: [0] libelf, [1] libdw. */
static _Atomic uintptr_t code_lo[2], code_len[2];

static int note_code(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    const char *base = slash ? slash + 1 : info->dlpi_name;
    int which = !base                                 ? -1
                : strncmp(base, "libelf.so", 9) == 0 ? 0
                : strncmp(base, "libdw.so", 8) == 0  ? 1
                                                     : -1;
    for (int i = 0; which >= 0 && i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            atomic_store(&code_len[which], (uintptr_t)ph->p_memsz);
            atomic_store(&code_lo[which], (uintptr_t)(info->dlpi_addr + ph->p_vaddr));
            break;
        }
    }
    return 0;
}

/* At the hand-over (libelf and libdw are mapped with the core, no loader
 * lock is held): where their code is. */
static void find_libelf_code(void) { dl_iterate_phdr(note_code, NULL); }

static bool in_code(int which, const void *caller) {
    uintptr_t lo = atomic_load_explicit(&code_lo[which], memory_order_relaxed);
    return lo && (uintptr_t)caller - lo < atomic_load_explicit(&code_len[which],
                                                                memory_order_relaxed);
}

static bool from_libelf(const void *caller, size_t size) {
    return size >= SHARED_MIN && in_code(0, caller);
}

/* Asked for by libdw or libelf: the core's zone (core_heap.c). */
static bool for_zone(const void *caller) { return in_code(0, caller) || in_code(1, caller); }

static size_t page_round(size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) & ~(page - 1);
}

static bool in_shared(const void *p) {
    uintptr_t base = atomic_load_explicit(&shared_base, memory_order_acquire);
    return base && (uintptr_t)p - base < SHARED_SPAN;
}

/* The reserved range, made at the first use: PROT_NONE, no memory. It
 * takes address space, though: under an RLIMIT_AS it could leave the host
 * short of its own, so then there is none (libelf's buffers stay private). */
static uintptr_t shared_range(void) {
    int st = atomic_load(&shared_state);
    if (st == 0 && atomic_compare_exchange_strong(&shared_state, &st, 1)) {
        struct rlimit as;
        bool unlimited = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur == RLIM_INFINITY;
        void *m = !unlimited ? MAP_FAILED
                             : mmap(NULL, SHARED_SPAN, PROT_NONE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED)
            atomic_store_explicit(&shared_base, (uintptr_t)m, memory_order_release);
        atomic_store(&shared_state, m != MAP_FAILED ? 2 : 3);
    }
    return atomic_load_explicit(&shared_base, memory_order_acquire);
}

/* A zero-filled shared block of `size` bytes, or NULL (the caller falls
 * back to the host's allocator). */
static void *shared_alloc(size_t size) {
    uintptr_t base = shared_range();
    if (!base || size > SHARED_SPAN)
        return NULL;
    int saved = errno;
    size_t need = page_round(size + SHARED_HEAD);
    size_t off = atomic_fetch_add(&shared_next, need);
    if (off > SHARED_SPAN - need)
        return NULL; /* the range is used up: never reused, by design */
    void *m = mmap((void *)(base + off), need, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    errno = saved;
    if (m == MAP_FAILED)
        return NULL;
    *(size_t *)m = size;
    return (unsigned char *)m + SHARED_HEAD;
}

static size_t shared_size_of(const void *p) {
    return *(const size_t *)((const unsigned char *)p - SHARED_HEAD);
}

/* Unmapped for this process only (a child keeps its own view), and the
 * range left reserved. */
static void shared_free(void *p) {
    int saved = errno;
    unsigned char *m = (unsigned char *)p - SHARED_HEAD;
    mmap(m, page_round(shared_size_of(p) + SHARED_HEAD), PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    errno = saved;
}

/* libelf's large buffers shared, the rest of libdw's and libelf's memory
 * in the zone; NULL: the core's other allocations (or neither could). */
static void *resolver_alloc(const void *caller, size_t size) {
    void *p = from_libelf(caller, size) ? shared_alloc(size) : NULL;
    if (!p && for_zone(caller))
        p = ss_core_zone_alloc(size, ARENA_ALIGN);
    return p;
}

SS_EXPORT void *malloc(size_t size) {
    if (ready()) {
        void *p = resolver_alloc(__builtin_return_address(0), size);
        if (p)
            return p;
    }
    if (ready() && own())
        return ss_core_heap_alloc(size, ARENA_ALIGN);
    if (ready())
        return real.malloc(size);
    return arena_alloc(size, ARENA_ALIGN);
}

SS_EXPORT void free(void *p) {
    if (!p || in_arena(p))
        return;
    if (in_shared(p)) {
        shared_free(p);
        return;
    }
    if (ss_core_heap_owns(p)) {
        ss_core_heap_free(p);
        return;
    }
    if (ready())
        real.free(p);
    /* else: a pointer we never handed out, before any allocator is known;
     * leaking it is the only safe thing */
}

SS_EXPORT void *calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    if (ready()) {
        const void *caller = __builtin_return_address(0);
        void *p = resolver_alloc(caller, n * size);
        if (p) {
            if (!in_shared(p))
                memset(p, 0, n * size); /* a shared block is a fresh mapping */
            return p;
        }
    }
    if (ready() && own()) {
        void *p = ss_core_heap_alloc(n * size, ARENA_ALIGN);
        if (p)
            memset(p, 0, n * size);
        return p;
    }
    if (ready())
        return real.calloc(n, size);
    return arena_alloc(n * size, ARENA_ALIGN);
}

SS_EXPORT void *realloc(void *p, size_t size) {
    if (p && in_arena(p)) {
        if (size == 0)
            return NULL;
        void *q = malloc(size);
        if (q) {
            size_t old = arena_size_of(p);
            memcpy(q, p, old < size ? old : size);
        }
        return q;
    }
    if (p && in_shared(p)) { /* into the zone: libelf may write it again */
        if (size == 0) {
            shared_free(p);
            return NULL;
        }
        void *q = ss_core_zone_alloc(size, ARENA_ALIGN);
        if (!q)
            q = real.malloc(size);
        if (q) {
            size_t old = shared_size_of(p);
            memcpy(q, p, old < size ? old : size);
            shared_free(p);
        }
        return q;
    }
    if (p && ss_core_heap_owns(p)) {
        size_t old = ss_core_heap_usable(p);
        if (size <= old && size >= old / 2 && size)
            return p;
        if (size == 0) {
            ss_core_heap_free(p);
            return NULL;
        }
        /* libdw's and libelf's blocks stay in the zone */
        void *q = ss_core_heap_in_zone(p) ? ss_core_zone_alloc(size, ARENA_ALIGN) : malloc(size);
        if (q) {
            memcpy(q, p, old < size ? old : size);
            ss_core_heap_free(p);
        }
        return q;
    }
    if (!p && ready()) {
        void *q = resolver_alloc(__builtin_return_address(0), size);
        if (q)
            return q;
    }
    if (!p && ready() && own())
        return ss_core_heap_alloc(size, ARENA_ALIGN);
    if (ready()) /* a block of the host's allocator stays there */
        return real.realloc(p, size);
    if (p) { /* cannot happen: nothing foreign exists before the hand-over */
        errno = ENOMEM;
        return NULL;
    }
    return arena_alloc(size, ARENA_ALIGN);
}

SS_EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n * size);
}

SS_EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    if (!power_of_two(align) || align % sizeof(void *))
        return EINVAL;
    if (ready() && own()) {
        void *p = ss_core_heap_alloc(size, align);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (ready()) {
        if (real.posix_memalign)
            return real.posix_memalign(out, align, size);
        return ENOMEM;
    }
    int saved = errno;
    void *p = arena_alloc(size, align);
    errno = saved;
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

/* aligned_alloc and memalign: the same but for the host's function, the
 * field of `real` at real_fn (read only once ready() has said it is
 * filled; NULL when the host has none). */
typedef void *(*aligned_fn)(size_t, size_t);
static void *aligned_via(const aligned_fn *real_fn, size_t align, size_t size) {
    if (ready() && own() && power_of_two(align))
        return ss_core_heap_alloc(size, align);
    if (ready())
        return *real_fn ? (*real_fn)(align, size) : NULL;
    if (!power_of_two(align)) {
        errno = EINVAL;
        return NULL;
    }
    return arena_alloc(size, align);
}

SS_EXPORT void *aligned_alloc(size_t align, size_t size) {
    return aligned_via(&real.aligned_alloc, align, size);
}

SS_EXPORT void *memalign(size_t align, size_t size) {
    return aligned_via(&real.memalign, align, size);
}

SS_EXPORT void *valloc(size_t size) {
    if (ready() && own())
        return ss_core_heap_alloc(size, (size_t)sysconf(_SC_PAGESIZE));
    if (ready())
        return real.valloc ? real.valloc(size) : NULL;
    return arena_alloc(size, (size_t)sysconf(_SC_PAGESIZE));
}

SS_EXPORT void *pvalloc(size_t size) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (ready() && own())
        return ss_core_heap_alloc((size + pg - 1) & ~(pg - 1), pg);
    if (ready())
        return real.pvalloc ? real.pvalloc(size) : NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return arena_alloc((size + page - 1) & ~(page - 1), page);
}

SS_EXPORT size_t malloc_usable_size(void *p) {
    if (!p)
        return 0;
    if (in_arena(p))
        return arena_size_of(p);
    if (in_shared(p))
        return shared_size_of(p);
    if (ss_core_heap_owns(p))
        return ss_core_heap_usable(p);
    if (ready() && real.malloc_usable_size)
        return real.malloc_usable_size(p);
    return 0;
}

size_t ss_core_alloc_arena_used(void) {
    return atomic_load_explicit(&arena_used, memory_order_relaxed);
}

bool ss_core_alloc_own_heap(void) { return own(); }

void ss_core_alloc_after_fork_child(void) {
    ss_core_zone_after_fork_child();
    if (own())
        ss_core_heap_after_fork_child();
}

#else

size_t ss_core_alloc_arena_used(void) { return 0; }

bool ss_core_alloc_own_heap(void) { return false; }

void ss_core_alloc_after_fork_child(void) {}

#endif /* SS_CORE_ALLOC_NO_FAMILY */
