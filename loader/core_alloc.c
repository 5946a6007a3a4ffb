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
 * keep only the hand-over. */
#include "loader/ss_core_api.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

static ss_core_alloc real;
static _Atomic bool installed;

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
    atomic_store_explicit(&installed, true, memory_order_release);
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

SS_EXPORT void *malloc(size_t size) {
    if (ready())
        return real.malloc(size);
    return arena_alloc(size, ARENA_ALIGN);
}

SS_EXPORT void free(void *p) {
    if (!p || in_arena(p))
        return;
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
    if (ready())
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

SS_EXPORT void *aligned_alloc(size_t align, size_t size) {
    if (ready())
        return real.aligned_alloc ? real.aligned_alloc(align, size) : NULL;
    if (!power_of_two(align)) {
        errno = EINVAL;
        return NULL;
    }
    return arena_alloc(size, align);
}

SS_EXPORT void *memalign(size_t align, size_t size) {
    if (ready())
        return real.memalign ? real.memalign(align, size) : NULL;
    if (!power_of_two(align)) {
        errno = EINVAL;
        return NULL;
    }
    return arena_alloc(size, align);
}

SS_EXPORT void *valloc(size_t size) {
    if (ready())
        return real.valloc ? real.valloc(size) : NULL;
    return arena_alloc(size, (size_t)sysconf(_SC_PAGESIZE));
}

SS_EXPORT void *pvalloc(size_t size) {
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
    if (ready() && real.malloc_usable_size)
        return real.malloc_usable_size(p);
    return 0;
}

size_t ss_core_alloc_arena_used(void) {
    return atomic_load_explicit(&arena_used, memory_order_relaxed);
}

#else

size_t ss_core_alloc_arena_used(void) { return 0; }

#endif /* SS_CORE_ALLOC_NO_FAMILY */
