/*
 * ss_samplers.h: how stacks are taken, as the rest of the agent sees it.
 *
 *   - the native sampler, a source of rounds for any Linux process the
 *     library is preloaded into: sleeping threads read from /proc and
 *     their memory, running ones by a signal whose handler copies their
 *     stack, unwound on the sampler thread (docs/native.md);
 *   - the symbol resolver (elfutils libdw), addresses to functions, files,
 *     lines and inline chains, cached by address;
 *   - thread facts read from /proc (name, state, nice, CPU, start time), in
 *     one place for both samplers.
 */
#ifndef SS_SAMPLERS_H
#define SS_SAMPLERS_H

#include "agent/config.h"
#include "agent/source.h"
#include "agent/round.h"

#include <sys/types.h>

/* The native sampler: a "stackshot-sampler" thread that takes the stack
 * of every thread of the process once per interval. */
extern const ss_source_ops ss_native_source;

/* Take one round now on the calling thread (which is left out of it),
 * without the sampler thread: for benchmarks and tests. Installs the
 * handler on first use. 0 and *out (one reference) or -errno; -EBUSY when
 * the sampler thread runs. */
int ss_native_sample_once(const ss_config *cfg, ss_round **out);
/* A runtime's own sampler (the JVMTI one) takes the rest of the process
 * into its round, in two steps. ss_native_gather samples now, as the
 * native sampler does, every thread of the process but the agent's and
 * those in skip (sorted ascending: the runtime's own threads, as last
 * known); with walk, those of them running now (R in /proc) are
 * signalled too and walked by the runtime's walker (ss_native_walked);
 * without others, only those (nothing for ss_native_emit).
 * The handler and the sampler's state are set up on first use and kept. ss_native_emit then appends them to b (begun by the caller), with
 * number -tid, leaving out those in its skip (the runtime's threads as known
 * now); rename (may be NULL) turns a /proc comm into the name printed.
 * Caller's thread only; never while the native sampler thread runs
 * (-EBUSY). 0 or -errno; *skipped and *blocked are added to. */
int ss_native_gather(const ss_config *cfg, const pid_t *skip, uint32_t n_skip, bool walk,
                     bool others, uint32_t *skipped, uint32_t *blocked);
void ss_native_emit(ss_round_builder *b, const pid_t *skip, uint32_t n_skip,
                    const char *(*rename)(const char *comm), uint32_t *skipped);
/* A runtime's stack walker, run inside the sampling signal's handler on
 * the runtime's running threads (ss_native_gather's `walk`): from the
 * interrupted context (ucontext_t *), at most cap frames of 16 bytes into
 * frames; returns the count or the walker's own negative code. `stack`:
 * the copy the handler just made of the thread's stack, len bytes from
 * sp (memory it may read without fault). Must be async-signal-safe.
 * NULL: none. */
typedef int32_t (*ss_sig_runtime_fn)(void *ucontext, const uint8_t *stack, uint64_t sp,
                                     uint32_t len, void *frames, uint32_t cap);
void ss_native_set_runtime_walk(ss_sig_runtime_fn fn);

/* After ss_native_gather with walk: what the walker gave for a running
 * runtime thread (*n frames at *frames, or its code < 0; INT32_MIN: not
 * walked), and its native frames unwound from the same signal (leaf
 * first, resolved). false: the thread was not signalled or did not
 * answer. Valid until the next gather. */
bool ss_native_walked(pid_t tid, const void **frames, int32_t *n, const ss_frame **native,
                      uint32_t *n_native);

/* After ss_native_gather with walk, until ss_native_emit: the CPU clock of
 * a runtime thread as the gather read it (before any of the runtime's own
 * stacks), SS_UNKNOWN_U64 when it did not. */
uint64_t ss_native_gathered_cpu(pid_t tid);

/* Counters of the native sampler: rounds, stacks taken by signal, stacks
 * reused because the thread was idle. */
void ss_native_sample_stats(uint64_t *rounds, uint64_t *signalled, uint64_t *reused);
/* All the counters: stacks read asleep without a signal, asleep threads
 * that had to be signalled after all (fallbacks), stacks cut at
 * STACKSHOT_STACK_COPY, walks that found a frame pointer on the stack. */
typedef struct ss_native_counts {
    uint64_t rounds, signalled, asleep, reused;
    uint64_t fallbacks, cut_copy, fp_guessed;
    uint64_t sent; /* signals sent by the process's sampler, ever */
    /* running threads not signalled: the registry (ss_native_set_signal_room)
     * did not know them safe (no alternate signal stack, or one too small) */
    uint64_t no_altstack;
    /* answers refused because the handler found itself on the thread's
     * own stack, not an alternate one (registry present only), ever */
    uint64_t off_stack;
    /* rounds that kept the thread list instead of listing /proc/self/task
     * (as many threads as listed, none gone) */
    uint64_t lists_saved;
} ss_native_counts;
/* Benchmarks: signal (and in copy mode, copy) every thread that ran,
 * asleep or not, to measure the signal path on a machine with fewer cores
 * than threads. */
void ss_native_bench_force_signal(bool on);
/* Tests: act as where thread CPU clocks count ticks (the syscall line of
 * a thread read asleep is read again after its walk, its file held open
 * between the two reads); off: as the clock was found. */
void ss_native_test_coarse_clock(bool on);
void ss_native_sample_counts(ss_native_counts *c);
/* Copy mode: how long the most recent handlers took, ns, newest first;
 * returns how many (at most max, at most 4096). */
uint32_t ss_native_handler_ns(double *out, uint32_t max);
/* Free what ss_native_sample_once set up (the handler stays, a no-op). */
void ss_native_release(void);

/* ---- symbols --------------------------------------------------------- */

typedef struct ss_symbols ss_symbols;

ss_symbols *ss_symbols_create(void);
void ss_symbols_destroy(ss_symbols *s);

/* Resolve one address into frames, innermost inline first, physical
 * function last (its `inlined` is 0, the others' 1). `return_address`:
 * the address is a return address (every frame but the leaf), so the call
 * instruction before it is looked up. Writes at most `max` frames and
 * returns how many (at least 1 when max >= 1: an unknown address still
 * gives a frame naming its module or "unknown"). Not thread-safe: one
 * resolver per sampler thread. */
int ss_symbols_resolve(ss_symbols *s, uint64_t addr, bool return_address,
                       ss_frame *out, int max);

/* True while ss_symbols_resolve runs on s. A child forked then holds a
 * copy that may be half-updated (a cache slot, libdw's state of a module);
 * one forked at any other moment may go on using its copy (the same
 * mappings, the same addresses). */
bool ss_symbols_busy(const ss_symbols *s);

/* In a forked child whose parent's libdw tables did not come with the
 * fork (core/core_heap.c: a parent that forks often), before any other use
 * of a resolver made by the parent: those tables are forgotten unread (a
 * fresh Dwfl opens modules again on a miss); the cache of names stays.
 * True when s may be used (false for NULL, or no fresh Dwfl: one is tried
 * again at the next lookup). */
bool ss_symbols_adopt(ss_symbols *s);

/* Once per round: when no address has missed the cache for a while (5 s,
 * longer after each reload), close what libdw read (decompressed DWARF,
 * line tables, symbol indexes); the cache keeps every name. NULL: no-op. */
void ss_symbols_idle(ss_symbols *s);

/* Counters: lookups served from the cache vs. resolved with DWARF. */
void ss_symbols_stats(const ss_symbols *s, uint64_t *hits, uint64_t *misses);

/* Called once by the core's entry point when the loader opened it with
 * dlopen: the libraries' thread-local storage is then allocated lazily,
 * with malloc, on each thread's first access, which rules out unwinders
 * that touch it inside the signal handler (STACKSHOT_UNWIND=fast). */
void ss_native_note_dlopened(void);

/* Which threads can take the sampling signal on an alternate stack (the
 * loader's registry, handed over by the core's entry point): fn(tid) == 0
 * means "do not signal it" (counted as no_altstack), and the handler then
 * refuses to work off an alternate stack. NULL (the default: in-process
 * tests, a JVM, stackshot_start without a preloaded enabled agent): every
 * thread is signalled, the handler runs wherever the kernel puts it.
 * Set before the sampler starts. */
void ss_native_set_signal_room(int (*fn)(pid_t tid));

#endif /* SS_SAMPLERS_H */
