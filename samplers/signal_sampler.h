/*
 * signal_sampler.h: taking the stacks of running threads with a signal.
 * Private to samplers/.
 *
 * The sampler thread owns a set of preallocated slots. For one round it
 * assigns a slot to each thread it wants (ss_sig_assign), then signals
 * them all and waits a bounded time for the answers (ss_sig_collect). In
 * copy mode (the default) each handler copies its registers and the top
 * of its stack into a buffer and answers; the sampler unwinds the copies
 * batch by batch (the ss_sig_unwind_fn callback). In the in-handler modes
 * (step, fast, gcc) each handler finds its slot by tid and unwinds its
 * own stack into the slot's ip array.
 *
 * Slots and copy buffers are never freed or moved while the handler is
 * installed (it stays installed for the life of the process, a no-op once
 * stopped), so a late handler never touches freed memory; a slot whose
 * handler is still running at the deadline is not handed to another
 * thread, nor its buffer, until it ends.
 */
#ifndef SS_SIGNAL_SAMPLER_H
#define SS_SIGNAL_SAMPLER_H

#include "samplers/ss_samplers.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The ip of a frame reached through a signal frame (the interrupted
 * instruction itself, not a return address) carries this bit. */
#define SS_IP_EXACT (1ull << 63)

typedef struct ss_sig_slot ss_sig_slot;

/* What a handler stored, copied out by ss_sig_result. */
typedef struct ss_sig_answer {
    uint64_t pthread;         /* pthread_self() of the thread */
    uint64_t cpu_ns;          /* in-handler modes: its CPU clock as the handler ended; 0 copy mode */
    uint32_t depth;           /* ips written; max_depth + 1 means cut */
    const uint64_t *ips;      /* leaf first; valid until the next round */
    bool cut_copy;            /* copy mode: the stack went on past the copy */
    bool has_span;
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags;
    uint16_t n_attrs;         /* the span's attrs-data (OTEP 4947) */
    const uint8_t *attrs;     /* valid until the next round */
    int32_t rt_n;             /* the runtime's walk: frames, its code (< 0), or SS_SIG_RT_NONE */
    const uint8_t *rt;        /* its frames, SS_SIG_RT_FRAME bytes each */
} ss_sig_answer;

/* A runtime's walker (ss_native_set_runtime_walk): called in the handler
 * of a slot marked with ss_sig_want_runtime, copy mode only, after the
 * copy; writes at most cap frames of SS_SIG_RT_FRAME bytes. */
#define SS_SIG_RT_FRAME 16u
#define SS_SIG_RT_NONE INT32_MIN
void ss_sig_set_runtime_walk(ss_sig_runtime_fn fn);
void ss_sig_want_runtime(ss_sig_slot *s);

/* Copy mode: what the handler saved, for the sampler to unwind (valid in
 * the ss_sig_collect callback only). */
typedef struct ss_sig_copy {
    const uint64_t *gregs;    /* the interrupted context, indexed by REG_* of <sys/ucontext.h> */
    const uint8_t *stack;     /* bytes from the stack pointer up */
    uint32_t len;
    uint64_t sp;              /* where the copy starts */
    uint64_t map_hi;          /* end of the mapping the stack is in (0 unknown) */
    uint64_t *ips;            /* where the frames go (cap ips) */
    uint32_t cap;
    void *user;               /* what ss_sig_assign was given */
} ss_sig_copy;

/* How the handler takes the stack (STACKSHOT_UNWIND). */
enum {
    SS_UNWIND_STEP = 0, /* libunwind unw_step from the signal context */
    SS_UNWIND_FAST,     /* libunwind unw_backtrace: per-thread cache, ~256 KiB each */
    SS_UNWIND_GCC,      /* libgcc _Unwind_Backtrace (_dl_find_object, no syscalls) */
    SS_UNWIND_COPY,     /* copy registers and stack; the sampler unwinds (unwind.c) */
};

/* Install the handler for `sig` (once per process; later calls with the
 * same signal only re-enable it). Refuses with -EBUSY when another
 * handler owns the signal. Frames buffers hold max_depth + 1 ips.
 * `unwind`: one of SS_UNWIND_*; `copy_bytes`: most stack a handler
 * copies in copy mode (fixed at the first start). */
int ss_sig_start(int sig, uint32_t max_depth, int unwind, uint32_t copy_bytes);

/* The unwinding mode in force (SS_UNWIND_*). */
int ss_sig_mode(void);

/* Copy mode: offsets in glibc's thread descriptor (struct pthread) of the
 * tid, of stackblock and of stackblock_size (-1: unknown). A handler
 * bounds its copy by the stack its own descriptor records. Set before
 * signalling. */
void ss_sig_descriptor_layout(int tid_off, int stack_off, int stack_size_off);

/* Stack room the handler insists on in copy mode (it only copies); also
 * what the loader wants above AT_MINSIGSTKSZ of a host's alternate stack
 * (SS_SIGNAL_ROOM_NEED of loader/ss_core_api.h, checked equal). */
#define SS_SIG_COPY_STACK_NEED (2u * 1024u)

/* Stack a thread must have left below our handler's frame, when it is
 * interrupted on its alternate signal stack, to be unwound (measured
 * with every unwinder by tests/hardening/signals/test_sig_altstack.c,
 * plus margin). With less, it answers "not sampled". */
#define SS_SIG_STACK_NEED (16u * 1024u)

/* The host replaced our handler after start with one that does not pass
 * our signal on (judged by answer: one probe signal): the sampler stopped
 * signalling (said once on stderr). Sticky for the process. */
bool ss_sig_lost(void);

/* The process is a Go program (said in the message when the signal is
 * lost: the Go runtime handles every signal but 32-34). */
void ss_sig_note_go(bool is_go);

/* Answers refused since start for lack of stack room (alternate stacks). */
uint64_t ss_sig_no_room_total(void);
/* Answers refused since start because the handler ran on the thread's own
 * stack while ss_sig_require_altstack was on. */
uint64_t ss_sig_off_stack_total(void);

/* On: every thread signalled is known to have an alternate signal stack
 * (the loader's registry); a handler that finds itself off one answers
 * "not sampled" without copying or unwinding. Off (the default): the
 * handler works wherever the kernel runs it. */
void ss_sig_require_altstack(bool on);

/* Make the handler a no-op (it stays installed: a late signal must never
 * meet SIG_DFL, which would kill the process). */
void ss_sig_stop(void);

/* Begin a round: frees the slots of the previous round (except those
 * whose handler still runs) and makes room for n threads. 0 or -ENOMEM. */
int ss_sig_begin(uint32_t n);

/* Assign a slot to tid for this round; NULL when out of slots. In copy
 * mode [stack_lo, stack_hi) is a stack whose end cannot move (the main
 * thread's; 0, 0: none): the handler copies within it when the thread's
 * stack pointer is there, else within the stack its glibc descriptor
 * records, else to the end of SP's page. */
ss_sig_slot *ss_sig_assign(pid_t tid, uint64_t stack_lo, uint64_t stack_hi, void *user);

/* Copy mode: called on the sampler thread for each answer, right after its
 * batch (so the copy buffers of a batch serve the next): unwind copy->stack
 * into copy->ips and return the frame count; *cut: the stack went on past
 * the copy. */
typedef uint32_t (*ss_sig_unwind_fn)(void *arg, const ss_sig_copy *copy, bool *cut);

/* Signal every thread assigned since the last call of the round (in
 * batches) and wait for the answers until deadline_ns (monotonic). Returns
 * how many answered. `unwind` is used in copy mode (may be NULL otherwise).
 * A round may assign and collect more than once. */
uint32_t ss_sig_collect(uint64_t deadline_ns, ss_sig_unwind_fn unwind, void *arg);

/* Copy mode: the time handlers took (cycles of the time-stamp counter),
 * the most recent first; returns how many were copied (at most max). And
 * the counter's rate, measured since the first start (0 unknown). */
uint32_t ss_sig_handler_cycles(uint32_t *out, uint32_t max);
double ss_sig_cycles_per_ns(void);

/* The answer of a slot after ss_sig_collect: true when it answered. */
bool ss_sig_result(ss_sig_slot *slot, ss_sig_answer *out);

/* In a forked child: only the calling thread exists. Forget every slot's
 * round state (no handler of the parent's threads can run here). */
void ss_sig_after_fork(void);

/* Counters since start: slots currently held by a late handler. */
uint32_t ss_sig_quarantined(void);
/* Signals sent since the process started. */
uint64_t ss_sig_sent(void);
/* The signal the sampler sends (its handler installed), else 0. */
int ss_sig_signal(void);

#endif /* SS_SIGNAL_SAMPLER_H */
