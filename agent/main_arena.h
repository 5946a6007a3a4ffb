/* main_arena.h: the agent's threads on glibc's main malloc arena under an
 * RLIMIT_AS (main_arena.c). Linked into the loader, which finds the
 * arena's thread-local pointer, and into the core, which gets it from the
 * loader (ss_core_host) for its own threads. */
#ifndef SS_MAIN_ARENA_H
#define SS_MAIN_ARENA_H

#include <stdbool.h>
#include <stdint.h>

/* Loader, on the main thread (its constructor): where the main thread's
 * thread-local variables of libc are. */
void ss_main_arena_note_main(void);
/* Loader, on a thread that has never entered malloc or free: find the
 * pointer (once per process) and attach this thread. True if attached. */
bool ss_main_arena_find(void);
/* What the loader hands the core: the pointer's offset from the thread
 * pointer and the main arena; 0 and NULL when there is nothing to do. */
void ss_main_arena_get(intptr_t *tp_off, void **arena);
/* Core: the loader's finding (before any agent thread starts). */
void ss_main_arena_use(intptr_t tp_off, void *arena);
/* Is there a finding (the agent's threads take no arena of their own)? */
bool ss_main_arena_known(void);
/* This thread, before its first malloc or free: on the main arena. True
 * if it was attached here (then ss_main_arena_detach before it ends). */
bool ss_main_arena_attach(void);
/* This thread, at its end: off the main arena again (glibc never counted
 * it there). */
void ss_main_arena_detach(void);

#endif
