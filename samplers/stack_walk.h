/*
 * stack_walk.h: what the native sampler needs to take a stack off the
 * thread: the walks themselves (unwind.h), the mappings they are bounded
 * by, and the facts a thread's handler used to give (its pthread_t, its
 * span context) read from memory instead. Private to samplers/; one per
 * sampler, used on its thread only.
 */
#ifndef SS_STACK_WALK_H
#define SS_STACK_WALK_H

#include "agent/span.h"
#include "samplers/signal_sampler.h"
#include "samplers/unwind.h"

#include <sys/types.h>

typedef struct ss_walker ss_walker;

/* copy_bytes: STACKSHOT_STACK_COPY; max_ips: frames a walk may give. */
ss_walker *ss_walker_create(uint32_t copy_bytes, uint32_t max_ips);
void ss_walker_destroy(ss_walker *w);

/* Start of a round: modules loaded or unloaded are noticed; mapping
 * tables no handler can read any more are freed. */
void ss_walker_round(ss_walker *w);

/* The stack mapping holding sp: [*lo, *hi). Reads /proc/self/maps at most
 * once a round (and only when sp is in no mapping of the table kept).
 * false when sp is in no writable mapping. */
bool ss_walker_bounds(ss_walker *w, uint64_t sp, uint64_t *lo, uint64_t *hi);

/* The offsets in glibc's thread descriptor of the tid, stackblock and
 * stackblock_size, learned from the thread that created the walker (-1
 * unknown); see ss_sig_descriptor_layout. */
void ss_walker_descriptor_layout(const ss_walker *w, int *tid_off, int *stack_off,
                                 int *stack_size_off);

/* A thread asleep: only SP and PC known (in_syscall: PC follows a syscall
 * instruction). Its stack is read live, at most copy_bytes from sp and
 * not past hi (0: unknown). *ips (leaf first) is valid until the next
 * walk. */
ss_uw_end ss_walker_asleep(ss_walker *w, uint64_t sp, uint64_t pc, bool in_syscall, uint64_t hi,
                           const uint64_t **ips, ss_uw_result *res);

/* A copy a handler made: every register, the stack from SP. */
ss_uw_end ss_walker_copy(ss_walker *w, const ss_sig_copy *c, uint64_t hi, uint64_t *ips,
                         uint32_t cap, ss_uw_result *res);

/* pthread_self() of a thread found in its memory: glibc puts the thread's
 * descriptor (the thread pointer) at the top of the stack it allocates;
 * the one that points at itself and holds the tid is the one. 0 when not
 * found (a stack the host allocated, the main thread: see
 * ss_walker_note_main). */
uint64_t ss_walker_pthread(ss_walker *w, pid_t tid, uint64_t stack_hi);

/* The main thread's pthread_self(), when known (it is not on its stack). */
void ss_walker_note_main(uint64_t pthread);
uint64_t ss_walker_main_pthread(void);

/* The span context of a thread from its memory (thread pointer `pthread`;
 * the cache is the thread's, see ss_otel_read_thread). */
bool ss_walker_span(ss_walker *w, uint64_t pthread, ss_otel_cache *cache, ss_otel_rec *out);

/* Counters of the unwinder's rule cache. */
void ss_walker_stats(const ss_walker *w, uint64_t *compiled, uint64_t *cached);

#endif /* SS_STACK_WALK_H */
