/*
 * unwind.h: the sampler-side unwinder, x86-64. Private to samplers/.
 *
 * A thread's stack is walked on the sampler thread, never in the thread
 * itself, from a few registers and a view of its stack:
 *
 *   - a running thread: every register and a copy of its stack from the
 *     stack pointer up, both made by the signal handler (signal_sampler.c);
 *   - a thread asleep in a system call: only the stack pointer and the
 *     program counter (/proc/self/task/<tid>/syscall), its stack read here
 *     with ss_uw_read_memory as the walk needs it (the thread does not run
 *     meanwhile; native_sampler.c checks that it did not).
 *
 * Frames are found with the DWARF call frame information of each module's
 * .eh_frame (found through .eh_frame_hdr, read from the process's own
 * memory, so the vDSO and deleted or replaced files are covered), compiled
 * per address into a small rule that is cached (unwind_cfi.c). Code
 * without CFI (JIT) is stepped through with frame pointers. Where a
 * register the CFI needs is unknown (the frame pointer of code built with
 * frame pointers, when only SP and PC are known), the frame pointer is
 * looked for on the stack: the first slot above SP that holds a return
 * address whose call went to the frame's own function (unwind.c).
 *
 * Every read of memory outside the stack copy goes through
 * ss_uw_read_memory (self_mem.c: pread on /proc/self/mem): a module
 * unloaded or a stack freed meanwhile gives an error, never a fault in
 * the host. Not thread-safe: one unwinder per
 * sampler thread.
 */
#ifndef SS_UNWIND_H
#define SS_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proc/maps.h"

/* DWARF register numbers of x86-64 (System V psABI, figure 3.36). */
enum {
    SS_UW_RAX = 0, SS_UW_RDX, SS_UW_RCX, SS_UW_RBX, SS_UW_RSI, SS_UW_RDI, SS_UW_RBP, SS_UW_RSP,
    SS_UW_R8, SS_UW_R9, SS_UW_R10, SS_UW_R11, SS_UW_R12, SS_UW_R13, SS_UW_R14, SS_UW_R15,
    SS_UW_RIP, /* the return address column */
    SS_UW_NREGS
};

typedef struct ss_uw_regs {
    uint64_t r[SS_UW_NREGS];
    uint32_t known; /* bit i: r[i] is known */
} ss_uw_regs;

/* A thread's stack as the walk sees it: [base, base + len) is served from
 * `data`. A live view (blocked threads) fills `data` from the process's
 * memory as the walk goes up, at most `cap` bytes. `map_hi` is the end of
 * the mapping the stack is in: a read in [base + cap, map_hi) is past the
 * copy, and ends the walk with a truncation mark. Reads elsewhere (an
 * alternate signal stack's interrupted stack, for instance) are made live. */
typedef struct ss_uw_stack {
    uint64_t base;
    uint8_t *data;
    size_t len;     /* bytes in data now */
    size_t cap;     /* bytes data may hold: STACKSHOT_STACK_COPY, or less at the mapping's end */
    uint64_t map_hi;
    bool live;      /* fill data with ss_uw_read_memory as needed */
} ss_uw_stack;

/* How a walk ended. */
typedef enum ss_uw_end {
    SS_UW_COMPLETE = 0, /* reached the thread's entry (return address undefined or 0) */
    SS_UW_CUT_COPY,     /* the stack goes on past the copy */
    SS_UW_CUT_DEPTH,    /* out of room for frames */
    SS_UW_NO_CFI,       /* an address without CFI and no frame pointer to follow */
    SS_UW_NO_REGISTER,  /* the CFI needs a register that is not known */
    SS_UW_BAD_MEMORY,   /* a read failed */
    SS_UW_BAD_FRAME,    /* a frame that makes no sense (stack going down, pc not code) */
} ss_uw_end;

typedef struct ss_uw_result {
    uint32_t n;          /* ips written, leaf first; bit 63 marks an exact pc */
    ss_uw_end end;
    bool fp_guessed;     /* a frame pointer was found by looking at the stack */
    uint32_t fp_frames;  /* frames stepped with frame pointers (no CFI) */
} ss_uw_result;

#define SS_UW_EXACT (1ull << 63)

typedef struct ss_unwinder ss_unwinder;

ss_unwinder *ss_unwinder_create(void);
void ss_unwinder_destroy(ss_unwinder *u);

/* Once per round: notices modules loaded or unloaded since the last call
 * (the loader's counters) and forgets what it cached about them, and
 * takes the process's pid (after a fork it changed). */
void ss_unwinder_round(ss_unwinder *u);

/* The mappings the walk checks addresses against (may be NULL). */
struct ss_maps;
void ss_unwinder_set_maps(ss_unwinder *u, const struct ss_maps *m);

/* Asked when a frame's return address is in no mapping of the table: the
 * table may be older than the code (a JIT's new pages). Reads it again
 * (calling ss_unwinder_set_maps) and returns true if it did. */
typedef bool (*ss_unwinder_refresh_fn)(void *arg);
void ss_unwinder_set_refresh(ss_unwinder *u, ss_unwinder_refresh_fn fn, void *arg);

/* Walk from regs over stack into ips (leaf first, at most max). `at_syscall`:
 * regs come from the syscall file (pc follows a syscall instruction, only
 * SP and PC known; frame pointers may be guessed). Returns res->end. */
ss_uw_end ss_unwind(ss_unwinder *u, const ss_uw_regs *regs, ss_uw_stack *stack, bool at_syscall,
                    uint64_t *ips, uint32_t max, ss_uw_result *res);

/* Counters: rules compiled from CFI, served from the cache. */
void ss_unwinder_stats(const ss_unwinder *u, uint64_t *compiled, uint64_t *cached);

/* Read n bytes of this process's memory at addr without faulting
 * (self_mem.c: pread on /proc/self/mem; process_vm_readv only without
 * /proc and without a seccomp filter). Bytes read (fewer when the range
 * runs into memory that cannot be read), or -errno. */
long ss_uw_read_memory(void *dst, uint64_t addr, size_t n);

/* ---- the CFI (unwind_cfi.c), used by unwind.c --------------------- */

enum { SS_CFA_NONE = 0, SS_CFA_REG, SS_CFA_EXPR };
enum {
    SS_RULE_SAME = 0, /* unchanged (callee-saved, not saved) */
    SS_RULE_UNDEF,    /* unknown in the caller */
    SS_RULE_OFFSET,   /* saved at CFA + off */
    SS_RULE_VAL_OFFSET, /* the value is CFA + off */
    SS_RULE_REG,      /* the value is in register off */
    SS_RULE_EXPR,     /* saved at the address the expression gives */
    SS_RULE_VAL_EXPR, /* the value is what the expression gives */
};

typedef struct ss_cfi_reg_rule {
    uint8_t reg, kind;
    uint16_t len;    /* expression length */
    int32_t off;     /* offset, register, or expression start in the arena */
} ss_cfi_reg_rule;

/* What the CFI says for one address. Pointers are valid until the next
 * lookup. */
typedef struct ss_cfi_row {
    bool found;           /* the address has CFI */
    bool signal_frame;    /* 'S': the caller's pc is exact (an interrupted instruction) */
    bool ra_undefined;    /* the outermost frame */
    uint8_t cfa_kind, cfa_reg;
    int32_t cfa_off;
    const uint8_t *cfa_expr;
    uint16_t cfa_expr_len;
    uint8_t n_rules;
    const ss_cfi_reg_rule *rules;
    const uint8_t *arena; /* expression bytes of the rules */
    uint64_t fn_start;    /* first address the FDE covers */
} ss_cfi_row;

typedef struct ss_cfi ss_cfi;
ss_cfi *ss_cfi_create(void);
void ss_cfi_destroy(ss_cfi *c);
/* Reload the module list when the loader's counters moved (true then). */
bool ss_cfi_refresh(ss_cfi *c);
/* The row in effect at addr (a return address already minus one). */
void ss_cfi_lookup(ss_cfi *c, uint64_t addr, ss_cfi_row *row);
/* Is addr in a module the loader knows (code with or without CFI)? */
bool ss_cfi_in_module(ss_cfi *c, uint64_t addr);
void ss_cfi_stats(const ss_cfi *c, uint64_t *compiled, uint64_t *cached);

#endif /* SS_UNWIND_H */
