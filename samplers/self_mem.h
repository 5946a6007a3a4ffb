/* self_mem.h: reads of this process's own memory that fail instead of
 * faulting (self_mem.c: pread on /proc/self/mem; process_vm_readv only
 * without /proc and without a seccomp filter). The read itself,
 * ss_uw_read_memory, is declared in unwind.h, where its users look. */
#ifndef SS_SELF_MEM_H
#define SS_SELF_MEM_H

#include "samplers/unwind.h"

#include <stdint.h>

typedef struct ss_self_mem_counts {
    uint64_t proc_mem; /* reads through /proc/self/mem */
    uint64_t vm_readv; /* through process_vm_readv (no /proc, no filter) */
    uint64_t refused;  /* neither possible: no /proc, and a seccomp filter */
    uint64_t reopened; /* mem file opened again: the host took the number, or a fork */
} ss_self_mem_counts;

void ss_self_mem_stats(ss_self_mem_counts *c);

#endif
