/*
 * ss_samplers.h: how stacks are taken, as the rest of the agent sees it.
 *
 *   - the native sampler (signal + libunwind), a source of rounds for any
 *     Linux process the library is preloaded into;
 *   - the symbol resolver (elfutils libdw), addresses to functions, files,
 *     lines and inline chains, cached by address;
 *   - thread facts read from /proc (name, state, nice, CPU, start time, I/O).
 */
#ifndef SS_SAMPLERS_H
#define SS_SAMPLERS_H

#include "../agent/ss_agent.h"

/* The native sampler: a "stackshot-sampler" thread that signals every
 * thread of the process once per interval. */
extern const ss_source_ops ss_native_source;

/* Take one round now on the calling thread (which is left out of it),
 * without the sampler thread: for benchmarks and tests. Installs the
 * handler on first use. 0 and *out (one reference) or -errno; -EBUSY when
 * the sampler thread runs. */
int ss_native_sample_once(const ss_config *cfg, ss_round **out);
/* Counters of the native sampler: rounds, stacks taken by signal, stacks
 * reused because the thread was idle. */
void ss_native_sample_stats(uint64_t *rounds, uint64_t *signalled, uint64_t *reused);
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

/* Counters: lookups served from the cache vs. resolved with DWARF. */
void ss_symbols_stats(const ss_symbols *s, uint64_t *hits, uint64_t *misses);

/* Called once by the core's entry point when the loader opened it with
 * dlopen: the libraries' thread-local storage is then allocated lazily,
 * with malloc, on each thread's first access, which rules out unwinders
 * that touch it inside the signal handler (STACKSHOT_UNWIND=fast). */
void ss_native_note_dlopened(void);

#endif /* SS_SAMPLERS_H */
