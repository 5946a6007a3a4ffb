/* core_heap.h: the core's own heaps (core_heap.c). The main heap serves
 * the core's malloc family instead of the host's allocator when the
 * process has an RLIMIT_AS (glibc's arenas would take 64 MiB of it per
 * agent thread); the zone serves libdw and libelf, always, is unmapped
 * whenever it holds nothing, and is not inherited by the children of a
 * process that forks often. */
#ifndef SS_CORE_HEAP_H
#define SS_CORE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int ss_core_heap_init(void);                       /* 0 or -errno */
void *ss_core_heap_alloc(size_t size, size_t align); /* NULL + ENOMEM */
void ss_core_heap_free(void *p);                   /* p: owned */
size_t ss_core_heap_usable(const void *p);         /* p: owned */
bool ss_core_heap_owns(const void *p);             /* lock-free */
size_t ss_core_heap_mapped(void);                  /* bytes mapped now */
void ss_core_heap_after_fork_child(void);          /* fresh lock and lists */
void *ss_core_zone_alloc(size_t size, size_t align); /* NULL + ENOMEM */
bool ss_core_heap_in_zone(const void *p);          /* the zone's block */
uint64_t ss_core_zone_emptied(void);               /* times given back whole */
void ss_core_zone_after_fork_child(void);          /* fresh lock and lists */
void ss_core_zone_note_forks(void);                /* counts forks from now on */
uint64_t ss_core_zone_unforks(void);               /* times made not inherited */
/* In a forked child: whether the parent's zone came along (it does not
 * when the parent forked often: MADV_DONTFORK, core_heap.c). */
bool ss_core_zone_inherited(void);

#endif
