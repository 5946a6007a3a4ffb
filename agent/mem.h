/*
 * agent/mem.h: the account of memory queued (STACKSHOT_MAX_MEMORY).
 */
#ifndef SS_AGENT_MEM_H
#define SS_AGENT_MEM_H

#include <stddef.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* Everything queued (rounds, encoded batches waiting for a retry) is
 * charged here; the limit is STACKSHOT_MAX_MEMORY. */
void ss_mem_charge(size_t n);
void ss_mem_release(size_t n);
size_t ss_mem_used(void);
size_t ss_mem_limit(void);
void ss_mem_set_limit(size_t limit);

#pragma GCC visibility pop

/* The core's own (hidden from modules). */
void ss_mem_reset(void);
size_t ss_mem_peak(void);           /* the most held after a hand-over */
size_t ss_mem_peak_transient(void); /* the most ever charged at once */
void ss_mem_note_settled(void);     /* after a hand-over made room */

#endif /* SS_AGENT_MEM_H */
