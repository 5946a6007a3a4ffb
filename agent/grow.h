/* grow.h: the one doubling growth of an array.
 *
 * Every table the agent keeps grows the same way: start at a first
 * capacity, double until the needed count fits, realloc once. Written out
 * at each site it was a copy with or without the overflow check; here it
 * is checked once. On failure the array and its capacity are left as they
 * were (still valid, still owned by the caller), so a site may count the
 * refusal and go on with what it has.
 *
 * The signal handler never grows anything (it uses slots the sampler
 * thread preallocated), so nothing here needs to be async-signal-safe.
 * Memory accounting stays at the site: it knows the capacity before and
 * after, and charges the difference as it did, only when the array grew
 * (the account is one atomic counter every thread touches: an add per
 * element appended is measurable, docs/architecture.md). */
#ifndef SS_GROW_H
#define SS_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* The capacity that holds `need` elements of `elem` bytes: `cap` (or
 * `first` when it is 0) doubled until it does. 0 when that would pass
 * `max` elements or SIZE_MAX bytes. */
static inline size_t ss_grow_cap(size_t cap, size_t need, size_t first, size_t elem,
                                 size_t max) {
    size_t n = cap ? cap : first;
    if (n == 0)
        n = 1;
    while (n < need) {
        if (n > max / 2)
            return 0;
        n *= 2;
    }
    if (n > max || (elem && n > SIZE_MAX / elem))
        return 0;
    return n;
}

/* realloc *p to the capacity that holds `need` (ss_grow_cap); returns
 * that capacity, or 0 with *p unchanged. */
static inline size_t ss_grow_realloc(void **p, size_t cap, size_t need, size_t elem,
                                     size_t first, size_t max) {
    size_t n = ss_grow_cap(cap, need, first, elem, max);
    void *q = n ? realloc(*p, n * elem) : NULL;
    if (!q)
        return 0;
    *p = q;
    return n;
}

/* Make *p hold at least `need` elements of `elem` bytes. 0 (done, or
 * nothing to do), or -ENOMEM with *p and *cap unchanged. */
static inline int ss_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
    size_t n = need <= *cap ? *cap : ss_grow_realloc(p, *cap, need, elem, first, SIZE_MAX);
    *cap = n ? n : *cap;
    return n ? 0 : -ENOMEM;
}

/* The same for the tables that count in uint32_t (their capacity never
 * passes UINT32_MAX). */
static inline int ss_grow32(void **p, uint32_t *cap, uint32_t need, size_t elem,
                            uint32_t first) {
    size_t n = need <= *cap ? *cap : ss_grow_realloc(p, *cap, need, elem, first, UINT32_MAX);
    *cap = n ? (uint32_t)n : *cap;
    return n ? 0 : -ENOMEM;
}

#endif
