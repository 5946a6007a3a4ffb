/* signal_sampler.c: the signal handler, its slots, and signalling threads.
 *
 * Protocol of one slot (state is atomic; the sampler thread owns a slot
 * while it is FREE, the handler while it is BUSY):
 *
 *   FREE --sampler: assign + tgkill--> REQUESTED --handler CAS--> BUSY
 *   BUSY --handler: frames written--> DONE --sampler: read--> FREE
 *   REQUESTED --sampler CAS at the deadline--> FREE   (no answer: skipped)
 *
 * A slot still BUSY at the deadline is "quarantined": it is not handed to
 * another thread until its handler has set DONE, so a late handler never
 * writes into a slot that belongs to someone else.
 *
 * The handler finds its slot through an open-addressing table keyed by
 * tid that the sampler fills before signalling. Slots live in chunks
 * allocated with mmap and never freed; the table is replaced (the old one
 * kept, never freed) only when it must grow. So whatever a late handler
 * reads is memory that still exists.
 *
 * Copy mode (the default) sends rt_tgsigqueueinfo with the slot in
 * si_value (round generation << 32 | index): the handler claims that slot,
 * copies the registers and the stack from SP (rep movsb, bounded, see
 * copy_context) and answers with one FUTEX_WAKE, its only system call. The
 * in-handler modes send tgkill; their handler finds its slot by tid and
 * unwinds in place (libunwind, or libgcc's unwinder; no malloc) with a
 * few syscalls (gettid, the CPU clock, futex). Every handler saves errno.
 *
 * Cost of the unw_step path (STACKSHOT_UNWIND=step): Debian's libunwind (1.6) is built
 * without per-thread caches, so UNW_CACHE_PER_THREAD silently behaves as
 * UNW_CACHE_GLOBAL: every unw_step takes the global cache's mutex with all
 * signals blocked, i.e. two rt_sigprocmask syscalls per frame (measured
 * with strace: 112 per 55-frame unwind, the same with either policy). The
 * lock is signal-safe by construction (its holder blocks every signal),
 * but where a syscall is slow (about 1.3 us on the project's VM) a frame
 * costs about 2.7 us. SS_UNWIND_GCC avoids it: libgcc's unwinder finds a
 * module with glibc's lock-free _dl_find_object and makes no syscall. */
#include "agent/config.h"
#include "agent/log.h"
#include "agent/span.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "samplers/signal_sampler.h"
#include "samplers/unwind.h"

#include <dlfcn.h>
#include <errno.h>
/* local unwinding only: the fast, self-contained _UL* entry points */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <unwind.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef MADV_WIPEONFORK
#define SS_MADV_WIPEONFORK MADV_WIPEONFORK
#else
#define SS_MADV_WIPEONFORK 18
#endif

enum { SLOT_FREE = 0, SLOT_REQUESTED, SLOT_BUSY, SLOT_DONE };

struct ss_sig_slot {
    _Atomic int state;
    _Atomic pid_t tid;
    _Atomic uint32_t gen; /* copy mode: the round whose signal may claim it */
    uint32_t index;    /* its number (the signal carries it) */
    uint32_t cap;      /* ips capacity: max_depth + 1 when allocated */
    uint32_t depth;
    uint64_t pthread;
    uint64_t cpu_ns;
    bool has_span;
    bool no_room;      /* answered without a stack: too little stack left, or
                          not on an alternate stack (require_alt) */
    bool quarantined;  /* sampler-private: BUSY past a deadline */
    bool cut_copy;     /* copy mode: the stack went on past the copy */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags;
    uint16_t n_attrs;
    uint8_t attrs[SS_OTEL_ATTRS_MAX]; /* the span's attrs-data, copied by the handler */
    uint64_t *ips;
    /* copy mode: set by the sampler before signalling */
    uint64_t stack_lo, stack_hi; /* the thread's stack as known; 0: unknown */
    uint8_t *copy;               /* a buffer of copy_cap bytes from the pool */
    void *user;                  /* the sampler's, passed back with the copy */
    /* copy mode: written by the handler */
    uint64_t copy_sp, copy_hi;
    uint32_t copy_len;
    uint32_t cycles;             /* time in the handler (TSC) */
    uint64_t gregs[NGREG];
    /* copy mode, a runtime's thread (ss_sig_want_runtime): the runtime's
     * own walk from the interrupted context, SS_SIG_RT_FRAME bytes a frame */
    bool want_rt;
    int32_t rt_n;                /* frames, the walker's code (< 0), or SS_SIG_RT_NONE */
    uint8_t *rt;                 /* cap - HANDLER_FRAMES frames */
};

#define CHUNK_SLOTS 64u
#define MAX_CHUNKS 1024u /* 65,536 threads sampled at once */
#define BATCH 128u       /* signals in flight at once */
#define HANDLER_FRAMES 8u /* room for the handler's own frames (fast path) */

typedef struct tab_entry {
    _Atomic pid_t tid;
    _Atomic uint32_t slot;
} tab_entry;

/* The signal path keeps its own tid table and arrays, not agent/hmap.h or agent/grow.h:
 * the handler reads them lock-free while the sampler thread retires old tables (kept). */
typedef struct sig_table {
    uint32_t mask;
    struct sig_table *retired; /* older tables: kept, a late handler may read them */
    tab_entry e[];
} sig_table;

/* Shared with the handler. */
static ss_sig_slot *_Atomic chunks[MAX_CHUNKS];
static sig_table *_Atomic table;
static _Atomic bool active;
static _Atomic pid_t own_pid;
static _Atomic uint32_t answers; /* futex word: bumped by every answer */
static _Atomic uint64_t no_room_total; /* answers refused for stack room */
static _Atomic uint64_t off_stack_total; /* ... for running on the thread's own stack */
/* Every thread signalled is known to have an alternate stack (the
 * loader's registry): a handler that finds itself elsewhere answers
 * without working (ss_sig_require_altstack). */
static _Atomic bool require_alt;
/* ... and the handler in front of ours has SA_ONSTACK too: a host's
 * handler that passes our signal on without it puts the frame on the
 * thread's stack itself, and refusing then would only lose the sample
 * (set before every batch, handler_state) */
static _Atomic bool refuse_off_alt;
static uint64_t restorer;        /* the signal trampoline's address */
static int unwind_mode;          /* SS_UNWIND_* */
static uint32_t copy_cap;        /* copy mode: bytes of stack a handler copies at most */
/* copy mode: where glibc's thread descriptor keeps the thread's tid and
 * its stack (learned outside any handler; -1 unknown) */
static int pd_tid_off = -1, pd_stack_off = -1, pd_stack_size_off = -1;
/* copy mode: a runtime's stack walker (the JVM's AsyncGetCallTrace), run
 * for the slots marked with ss_sig_want_runtime */
static _Atomic(ss_sig_runtime_fn) runtime_walk;
/* libgcc's unwinder, bound by handle: libunwind (linked into the agent)
 * exports _Unwind_Backtrace and _Unwind_GetIPInfo too, and the global
 * names may resolve to libunwind's (which steps with unw_step). */
static _Unwind_Reason_Code (*gcc_backtrace)(_Unwind_Trace_Fn, void *);
static _Unwind_Ptr (*gcc_get_ip_info)(struct _Unwind_Context *, int *);

/* Sampler-private. */
static int the_signal;
static bool installed;
static bool lost; /* the host put its own handler on the signal: never signal again */
static uint32_t n_chunks;
static uint32_t slot_cap; /* ips per slot of newly allocated chunks */
static ss_sig_slot **round_slots;
static uint32_t n_round, cap_round;
static uint32_t next_slot; /* allocation cursor within a round */
static uint32_t n_sent;    /* round_slots[0, n_sent) were signalled */
static uint32_t n_quarantined;
static uint64_t sent_total; /* signals sent since the process started */
static uint32_t round_gen;  /* copy mode: carried by the signal (si_value) */
/* copy mode: stack buffers, BATCH at a time in use (plus the quarantined) */
static uint8_t **pool_free;
static uint32_t n_pool_free, cap_pool_free;
/* copy mode: recent handler times, and the TSC rate */
#define CYCLE_RING 4096u
static uint32_t cycle_ring[CYCLE_RING];
static uint32_t cycle_next, cycle_count;
static uint64_t tsc0, mono0;

static inline uint32_t hash_tid(pid_t tid) {
    return (uint32_t)tid * 2654435761u;
}

static ss_sig_slot *slot_at(uint32_t idx) {
    ss_sig_slot *c = atomic_load_explicit(&chunks[idx / CHUNK_SLOTS], memory_order_acquire);
    return c ? &c[idx % CHUNK_SLOTS] : NULL;
}

/* Async-signal-safe lookup of the slot prepared for tid. */
static ss_sig_slot *find_slot(pid_t tid) {
    sig_table *t = atomic_load_explicit(&table, memory_order_acquire);
    if (!t)
        return NULL;
    uint32_t h = hash_tid(tid) & t->mask;
    for (uint32_t probe = 0; probe <= t->mask; probe++) {
        pid_t k = atomic_load_explicit(&t->e[h].tid, memory_order_acquire);
        if (k == 0)
            return NULL;
        if (k == tid)
            return slot_at(atomic_load_explicit(&t->e[h].slot, memory_order_relaxed));
        h = (h + 1) & t->mask;
    }
    return NULL;
}

static void futex_wake(_Atomic uint32_t *word) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

/* Unwind from the interrupted context (not from here: the handler's own
 * frames and the signal trampoline are never recorded), one unw_step at a
 * time. The slow path: every step looks its module up again. */
static uint32_t unwind_steps(ss_sig_slot *s, void *uc) {
    unw_cursor_t c;
    if (unw_init_local2(&c, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) < 0)
        return 0;
    uint32_t n = 0, cap = s->cap - HANDLER_FRAMES;
    bool exact = true; /* the leaf is the interrupted instruction */
    for (;;) {
        unw_word_t ip;
        if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
            break;
        s->ips[n++] = (uint64_t)ip | (exact ? SS_IP_EXACT : 0);
        if (n >= cap)
            break;
        /* the frame above a signal trampoline was interrupted, too */
        exact = unw_is_signal_frame(&c) > 0;
        if (unw_step(&c) <= 0)
            break;
    }
    return n;
}

/* The fast path: unw_backtrace keeps a per-thread cache of frame shapes
 * keyed by address, so a stack seen before unwinds without looking any
 * module up (10-50x fewer cycles than unw_step on a process with many
 * libraries). It starts here, so the frames up to and including the
 * signal trampoline (__restore_rt, the sa_restorer the kernel returns
 * to) are dropped. Its addresses of callers may already be "return
 * address - 1"; the resolver's own -1 still lands inside the call
 * instruction, so lines do not change. Returns 0 when the trampoline is
 * not found (the caller then takes the slow path). */
static uint32_t unwind_fast(ss_sig_slot *s) {
    int n = unw_backtrace((void **)s->ips, (int)s->cap);
    int skip = -1;
    for (int i = 0; i < n && i < (int)HANDLER_FRAMES; i++) {
        uint64_t ip = s->ips[i];
        if (restorer && (ip == restorer || ip + 1 == restorer)) {
            skip = i + 1;
            break;
        }
    }
    if (skip < 0 || skip >= n)
        return 0;
    uint32_t m = (uint32_t)(n - skip);
    if (m > s->cap - HANDLER_FRAMES)
        m = s->cap - HANDLER_FRAMES;
    memmove(s->ips, s->ips + skip, (size_t)m * sizeof *s->ips);
    s->ips[0] |= SS_IP_EXACT;
    return m;
}

/* The libgcc path: _Unwind_Backtrace walks from here with the modules'
 * unwind tables, found through glibc's _dl_find_object (lock-free, no
 * syscall). Its first frames are ours and the signal trampoline; the
 * interrupted frame is the first one reached through a signal frame
 * (_Unwind_GetIPInfo says "ip before instruction"), and recording starts
 * there. A frame without unwind tables ends the stack (libunwind would
 * try frame pointers). */
typedef struct gcc_walk {
    ss_sig_slot *s;
    uint32_t n, cap, seen;
} gcc_walk;

static _Unwind_Reason_Code gcc_frame(struct _Unwind_Context *ctx, void *arg) {
    gcc_walk *w = arg;
    int before = 0;
    uint64_t ip = (uint64_t)gcc_get_ip_info(ctx, &before);
    if (w->n == 0) {
        if (!before) /* still in the handler's frames or the trampoline */
            return ++w->seen > HANDLER_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
    }
    if (ip == 0)
        return _URC_END_OF_STACK;
    w->s->ips[w->n++] = ip | (before ? SS_IP_EXACT : 0);
    return w->n >= w->cap ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static uint32_t unwind_gcc(ss_sig_slot *s) {
    gcc_walk w = {.s = s, .n = 0, .cap = s->cap - HANDLER_FRAMES, .seen = 0};
    gcc_backtrace(gcc_frame, &w);
    return w.n; /* 0: the interrupted frame was not found */
}

static uint32_t unwind_into(ss_sig_slot *s, void *uc) {
    uint32_t n = unwind_mode == SS_UNWIND_FAST  ? unwind_fast(s)
                 : unwind_mode == SS_UNWIND_GCC ? unwind_gcc(s)
                                                : 0;
    return n ? n : unwind_steps(s, uc);
}

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *ctx, void *arg) {
    int before;
    gcc_get_ip_info(ctx, &before);
    ++*(int *)arg;
    return _URC_NO_REASON;
}

/* Find libgcc's unwinder (once, outside any handler) and walk one stack
 * with it, so that its lazily bound calls are bound here. */
static int bind_libgcc(void) {
    if (gcc_backtrace && gcc_get_ip_info)
        return 0;
    void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -ENOENT;
    /* never dlclose'd: a handler may be using it */
    gcc_get_ip_info = (_Unwind_Ptr(*)(struct _Unwind_Context *, int *))dlsym(h, "_Unwind_GetIPInfo");
    gcc_backtrace = (_Unwind_Reason_Code(*)(_Unwind_Trace_Fn, void *))dlsym(h, "_Unwind_Backtrace");
    if (!gcc_backtrace || !gcc_get_ip_info) {
        gcc_backtrace = NULL;
        return -ENOENT;
    }
    int frames = 0;
    gcc_backtrace(count_frame, &frames);
    return frames > 0 ? 0 : -ENOENT;
}

/* Where the handler runs, and whether it may work there. */
enum { ROOM_OK = 0, ROOM_SHORT, ROOM_OFF_ALT };

/* The handler is installed with SA_ONSTACK: the kernel runs it on the
 * thread's alternate signal stack when it has one, else on the stack the
 * thread was on. With the loader's registry only threads with an
 * alternate stack are signalled, so a handler found elsewhere (the thread
 * disabled its stack after the sampler looked, a tid reused by a thread
 * the loader never saw) answers without copying or unwinding, and is
 * counted (ROOM_OFF_ALT): its frame is on the thread's own stack already,
 * the least it can do is add nothing to it. Unless a host's handler that
 * passes our signal on, installed without SA_ONSTACK, runs in front of
 * ours: the host chose that stack, and its thread is sampled as before.
 *
 * A thread interrupted while on its alternate signal stack (inside one of
 * its own SA_ONSTACK handlers) runs our handler there too: the kernel
 * only switches stacks when a thread is not on its alternate stack yet.
 * Such stacks are often small (MINSIGSTKSZ, 8 KiB), and unwinding needs
 * a few KiB (SS_SIG_STACK_NEED, measured by tests/hardening/signals):
 * without that much room below us the thread answers "not sampled".
 * uc_stack is the thread's sigaltstack as the kernel saved it for the
 * interrupted context, so no syscall here. Its ss_flags does not say
 * SS_ONSTACK (kernels since 4.7 store the flags the thread set), so "on
 * it" is decided from where our own frame is. */
/* always inlined: the frame measured is the calling handler's */
static inline __attribute__((always_inline)) int stack_room(const ucontext_t *uc, uint32_t need) {
    int off = atomic_load_explicit(&refuse_off_alt, memory_order_relaxed) ? ROOM_OFF_ALT : ROOM_OK;
    if (uc->uc_stack.ss_flags & SS_DISABLE)
        return off;
    uintptr_t lo = (uintptr_t)uc->uc_stack.ss_sp;
    uintptr_t hi = lo + uc->uc_stack.ss_size;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (here < lo || here >= hi)
        return off; /* on the thread's ordinary stack */
    return here - lo >= need ? ROOM_OK : ROOM_SHORT;
}

/* A refused answer, counted by why. */
static void count_refused(int room) {
    atomic_fetch_add_explicit(room == ROOM_OFF_ALT ? &off_stack_total : &no_room_total, 1,
                              memory_order_relaxed);
}

static inline uint64_t tsc(void) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
}

/* memcpy without a library call: under ASan, memcpy is the runtime's and
 * checks the shadow of what it reads, and the stack above SP holds the
 * instrumented frames' redzones. The kernel clears the direction flag
 * before running a handler. */
static void copy_bytes(void *dst, const void *src, size_t n) {
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

/* The thread's stack as its own glibc descriptor records it (stackblock,
 * stackblock_size), when the descriptor is one: it points at itself and
 * holds the slot's tid. A thread's own descriptor is mapped while it
 * runs, and the stack it records stays mapped until the thread is gone.
 * false: no such descriptor (the main thread's records none; a thread
 * that is not glibc's). */
static bool own_stack(const ss_sig_slot *s, uint64_t *lo, uint64_t *hi) {
    if (pd_tid_off < 0 || pd_stack_off < 0 || pd_stack_size_off < 0)
        return false;
    uintptr_t pd = (uintptr_t)pthread_self(); /* the thread pointer's self field */
    if (pd < 4096 || *(const uintptr_t *)(pd + 16) != pd ||
        *(const pid_t *)(pd + (uintptr_t)pd_tid_off) !=
            atomic_load_explicit(&s->tid, memory_order_relaxed))
        return false;
    uint64_t block = *(const uint64_t *)(pd + (uintptr_t)pd_stack_off);
    uint64_t size = *(const uint64_t *)(pd + (uintptr_t)pd_stack_size_off);
    if (!block || !size || block + size < block)
        return false;
    *lo = block;
    *hi = block + size;
    return true;
}

/* Copy mode, in the handler: the registers, and the stack from SP up to
 * the end of the thread's stack, at most copy_cap bytes. The end is one
 * that cannot be stale: the bounds the sampler gave the slot (the main
 * thread's stack, whose top never moves) when SP is in them, else the
 * stack the thread's own descriptor records when SP is in it, else the
 * end of SP's page (mapped: the thread is using it). Never a table of
 * mappings, which a thread being created or exiting meanwhile could make
 * wrong (and the copy would fault in the host's thread). */
static void copy_context(ss_sig_slot *s, const ucontext_t *uc) {
    const greg_t *g = uc->uc_mcontext.gregs;
    for (int i = 0; i < NGREG; i++)
        s->gregs[i] = (uint64_t)g[i];
    uint64_t sp = (uint64_t)g[REG_RSP];
    uint64_t lo, hi;
    if (sp >= s->stack_lo && sp < s->stack_hi)
        hi = s->stack_hi;
    else if (!own_stack(s, &lo, &hi) || sp < lo || sp >= hi)
        hi = (sp | 4095) + 1;
    uint64_t n = hi - sp;
    if (n > copy_cap)
        n = copy_cap;
    copy_bytes(s->copy, (const void *)(uintptr_t)sp, (size_t)n);
    s->copy_sp = sp;
    s->copy_len = (uint32_t)n;
    s->copy_hi = hi;
}

/* A runtime's thread: its own walker (HotSpot's AsyncGetCallTrace) from
 * the interrupted context, given the room an unwinder needs on an
 * alternate stack (on the thread's own stack, the runtime keeps its own
 * margins). The walker is the runtime's promise to be async-signal-safe. */
static void walk_runtime(ss_sig_slot *s, void *uc) {
    ss_sig_runtime_fn fn = atomic_load_explicit(&runtime_walk, memory_order_acquire);
    if (!fn || stack_room(uc, SS_SIG_STACK_NEED) == ROOM_SHORT)
        return; /* rt_n stays SS_SIG_RT_NONE */
    s->rt_n = fn(uc, s->copy, s->copy_sp, s->copy_len, s->rt, s->cap - HANDLER_FRAMES);
}

/* Copy mode: the signal names its slot (si_value: generation << 32 |
 * index), so the handler needs no gettid; a signal of an earlier round
 * finds another generation and does nothing. */
static void handler_copy(siginfo_t *si, void *uc) {
    uint64_t t0 = tsc();
    uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
    ss_sig_slot *s = slot_at((uint32_t)v);
    if (!s || atomic_load_explicit(&s->gen, memory_order_acquire) != (uint32_t)(v >> 32))
        return;
    int room = stack_room(uc, SS_SIG_COPY_STACK_NEED);
    int saved_errno = errno;
    int expected = SLOT_REQUESTED;
    if (!atomic_compare_exchange_strong(&s->state, &expected, SLOT_BUSY)) {
        errno = saved_errno;
        return;
    }
    if (atomic_load_explicit(&s->gen, memory_order_acquire) != (uint32_t)(v >> 32)) {
        atomic_store_explicit(&s->state, SLOT_REQUESTED, memory_order_release);
        errno = saved_errno;
        return;
    }
    s->no_room = room != ROOM_OK;
    if (room == ROOM_OK) {
        copy_context(s, uc);
        s->has_span = ss_otel_read_self(s->trace_id, s->span_id, &s->trace_flags, s->attrs,
                                           sizeof s->attrs, &s->n_attrs);
        s->pthread = (uint64_t)pthread_self();
        if (s->want_rt)
            walk_runtime(s, uc);
    } else {
        count_refused(room);
    }
    s->cycles = (uint32_t)(tsc() - t0);
    atomic_store_explicit(&s->state, SLOT_DONE, memory_order_release);
    atomic_fetch_add_explicit(&answers, 1, memory_order_release);
    futex_wake(&answers);
    errno = saved_errno;
}

static void handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    if (!atomic_load_explicit(&active, memory_order_acquire))
        return;
    /* only our own signals: never a kill(2) from elsewhere */
    if (si->si_pid != atomic_load_explicit(&own_pid, memory_order_relaxed))
        return;
    if (si->si_code == SI_QUEUE) {
        if (unwind_mode == SS_UNWIND_COPY)
            handler_copy(si, uc);
        return;
    }
    if (si->si_code != SI_TKILL)
        return;
    /* decided before any call: on a small alternate stack even a lazily
     * bound call (the dynamic linker saves every vector register) may not
     * fit; with too little room only tiny calls follow (gettid, futex) */
    int room = stack_room(uc, SS_SIG_STACK_NEED);
    int saved_errno = errno;
    pid_t me = ss_gettid();
    ss_sig_slot *s = find_slot(me);
    int expected = SLOT_REQUESTED;
    if (s && atomic_compare_exchange_strong(&s->state, &expected, SLOT_BUSY)) {
        if (atomic_load_explicit(&s->tid, memory_order_acquire) != me) {
            /* reassigned between lookup and claim: not ours */
            atomic_store_explicit(&s->state, SLOT_REQUESTED, memory_order_release);
        } else if (room != ROOM_OK) {
            s->depth = 0;
            s->no_room = true;
            count_refused(room);
            atomic_store_explicit(&s->state, SLOT_DONE, memory_order_release);
            atomic_fetch_add_explicit(&answers, 1, memory_order_release);
            futex_wake(&answers);
        } else {
            s->no_room = false;
            s->depth = unwind_into(s, uc);
            s->has_span = ss_otel_read_self(s->trace_id, s->span_id, &s->trace_flags, s->attrs,
                                           sizeof s->attrs, &s->n_attrs);
            s->pthread = (uint64_t)pthread_self();
            struct timespec cpu; /* clock_gettime is async-signal-safe */
            s->cpu_ns = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0
                            ? (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec
                            : 0;
            atomic_store_explicit(&s->state, SLOT_DONE, memory_order_release);
            atomic_fetch_add_explicit(&answers, 1, memory_order_release);
            futex_wake(&answers);
        }
    }
    errno = saved_errno;
}

static int install_handler(int sig) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0)
        return -errno;
    bool is_ours = (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == handler;
    if (!is_ours && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
        ss_error("signal %d already has a handler in this process; the native "
                 "sampler does not replace it (set STACKSHOT_SIGNAL to a free "
                 "signal); not sampling",
                 sig);
        return -EBUSY;
    }
    if (is_ours)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    /* SA_ONSTACK: on the thread's alternate stack when it has one (the
     * loader gives every host thread one), never on a stack that may be
     * nearly full or tiny; and Go's runtime requires it of every handler */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigfillset(&sa.sa_mask); /* no other handler may nest inside ours */
    if (sigaction(sig, &sa, NULL) != 0)
        return -errno;
    return 0;
}

/* The in-handler libunwind modes (step, fast), set up once outside any
 * handler: per-thread caches need no lock, and unw_backtrace's first call
 * sets up its cache key (pthread_once). Only for those modes: libunwind
 * calls mincore(2) there and in its handlers, which a service filtered
 * like systemd's @system-service is killed for (SIGSYS), so a process
 * under a seccomp filter gets the copy mode instead (one line). */
static int libunwind_ready(int unwind) {
    static bool ready;
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) > 0) {
        ss_config_bad("STACKSHOT_UNWIND", unwind == SS_UNWIND_STEP ? "step" : "fast",
                      "libunwind makes system calls a seccomp filter may kill (mincore), "
                      "and this process has a filter",
                      "using copy");
        return SS_UNWIND_COPY;
    }
    if (!ready) {
        ready = true;
        unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
        void *warm[4];
        unw_backtrace(warm, 4);
    }
    return unwind;
}

int ss_sig_start(int sig, uint32_t max_depth, int unwind, uint32_t copy_bytes_max) {
    if (lost)
        return -EBUSY; /* said once when it happened */
    if (installed && sig != the_signal) {
        ss_error("STACKSHOT_SIGNAL changed to %d after the handler for %d was "
                 "installed; keeping %d",
                 sig, the_signal, the_signal);
        sig = the_signal;
    }
    int rc = install_handler(sig);
    if (rc != 0)
        return rc;
    if (!installed) {
        slot_cap = max_depth + 1 + HANDLER_FRAMES;
        copy_cap = (copy_bytes_max + 7) & ~7u;
        tsc0 = tsc();
        mono0 = ss_mono_ns();
    }
    if (!installed) {
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) == 0)
            restorer = (uint64_t)(uintptr_t)cur.sa_restorer;
    }
    if (unwind == SS_UNWIND_GCC && bind_libgcc() != 0) {
        ss_config_bad("STACKSHOT_UNWIND", "gcc", "libgcc_s.so.1's unwinder not found",
                      "using step");
        unwind = SS_UNWIND_STEP;
    }
    if (unwind == SS_UNWIND_STEP || unwind == SS_UNWIND_FAST)
        unwind = libunwind_ready(unwind);
    /* written only when it changes: a late handler of the previous round
     * may be reading it (ss_native_sample_once starts once per round) */
    if (unwind_mode != unwind)
        unwind_mode = unwind;
    installed = true;
    the_signal = sig;
    atomic_store(&own_pid, getpid());
    atomic_store_explicit(&active, true, memory_order_release);
    return 0;
}

void ss_sig_stop(void) { atomic_store_explicit(&active, false, memory_order_release); }

int ss_sig_mode(void) { return unwind_mode; }

void ss_sig_descriptor_layout(int tid_off, int stack_off, int stack_size_off) {
    pd_tid_off = tid_off;
    pd_stack_off = stack_off;
    pd_stack_size_off = stack_size_off;
}

static int add_chunk(void) {
    if (n_chunks == MAX_CHUNKS)
        return -ENOMEM;
    size_t head = CHUNK_SLOTS * sizeof(ss_sig_slot);
    head = (head + 63) & ~(size_t)63;
    size_t ips_size = (size_t)CHUNK_SLOTS * slot_cap * sizeof(uint64_t);
    size_t size = head + ips_size + (size_t)CHUNK_SLOTS * slot_cap * SS_SIG_RT_FRAME;
    /* mmap: pages of ip arrays become resident only when written */
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -ENOMEM;
    ss_sig_slot *c = m;
    uint64_t *ips = (uint64_t *)((char *)m + head);
    for (uint32_t i = 0; i < CHUNK_SLOTS; i++) {
        c[i].cap = slot_cap;
        c[i].ips = ips + (size_t)i * slot_cap;
        c[i].rt = (uint8_t *)m + head + ips_size + (size_t)i * slot_cap * SS_SIG_RT_FRAME;
        c[i].index = n_chunks * CHUNK_SLOTS + i;
    }
    atomic_store_explicit(&chunks[n_chunks++], c, memory_order_release);
    return 0;
}

/* A table with room for n entries at load <= 1/2, emptied. */
static int prepare_table(uint32_t n) {
    sig_table *t = atomic_load(&table);
    uint32_t want = 64;
    while (want < 2 * n)
        want *= 2;
    if (!t || t->mask + 1 < want) {
        sig_table *nt = calloc(1, sizeof *nt + (size_t)want * sizeof(tab_entry));
        if (!nt)
            return -ENOMEM;
        nt->mask = want - 1;
        nt->retired = t;
        atomic_store_explicit(&table, nt, memory_order_release);
        return 0;
    }
    for (uint32_t i = 0; i <= t->mask; i++)
        atomic_store_explicit(&t->e[i].tid, 0, memory_order_relaxed);
    return 0;
}

/* ---- copy buffers ---------------------------------------------------- */

/* Buffers are allocated BATCH at a time with mmap and never freed: a late
 * handler may still write one (its slot is then quarantined and keeps
 * it). Resident memory is what handlers touched: the stacks' depth. */
static int pool_grow(void) {
    if (n_pool_free + BATCH > cap_pool_free) {
        uint32_t cap = cap_pool_free ? cap_pool_free * 2 : 2 * BATCH;
        uint8_t **p = realloc(pool_free, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        pool_free = p;
        cap_pool_free = cap;
    }
    uint8_t *m = mmap(NULL, (size_t)BATCH * copy_cap, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -ENOMEM;
    /* Scratch: a copy is read only within the round that made it, and a
     * forked child never carries on its parent's round (ss_sig_after_fork
     * forgets every slot's buffer). A fork then copies no page-table
     * entry of these pages and the child's exit zaps none: the child's
     * mapping reads as zeros (Linux 4.14; an older kernel refuses it and
     * the buffers are copied as before). */
    madvise(m, (size_t)BATCH * copy_cap, SS_MADV_WIPEONFORK);
    for (uint32_t i = 0; i < BATCH; i++)
        pool_free[n_pool_free++] = m + (size_t)i * copy_cap;
    return 0;
}

static bool pool_get(ss_sig_slot *s) {
    if (!n_pool_free && pool_grow() != 0)
        return false;
    s->copy = pool_free[--n_pool_free];
    return true;
}

static void pool_put(ss_sig_slot *s) {
    if (s->copy && n_pool_free < cap_pool_free)
        pool_free[n_pool_free++] = s->copy;
    s->copy = NULL;
}

static void release_quarantine(void) {
    if (!n_quarantined)
        return;
    for (uint32_t i = 0; i < n_chunks * CHUNK_SLOTS; i++) {
        ss_sig_slot *s = slot_at(i);
        if (!s->quarantined)
            continue;
        int st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == SLOT_DONE || st == SLOT_FREE) {
            atomic_store(&s->state, SLOT_FREE);
            s->quarantined = false;
            n_quarantined--;
            pool_put(s);
        }
    }
}

int ss_sig_begin(uint32_t n) {
    for (uint32_t i = 0; i < n_round; i++)
        if (!round_slots[i]->quarantined)
            atomic_store(&round_slots[i]->state, SLOT_FREE);
    if (++round_gen == 0)
        round_gen = 1; /* 0: a slot never assigned */
    n_sent = 0;
    n_round = 0;
    next_slot = 0;
    release_quarantine();
    if (n > cap_round) {
        ss_sig_slot **p = realloc(round_slots, (size_t)n * sizeof *p);
        if (!p)
            return -ENOMEM;
        round_slots = p;
        cap_round = n;
    }
    while ((uint64_t)n_chunks * CHUNK_SLOTS < (uint64_t)n + n_quarantined)
        if (add_chunk() != 0)
            break; /* assign() returns NULL past the last slot */
    return prepare_table(n);
}

ss_sig_slot *ss_sig_assign(pid_t tid, uint64_t stack_lo, uint64_t stack_hi, void *user) {
    if (n_round == cap_round)
        return NULL;
    ss_sig_slot *s = NULL;
    while (next_slot < n_chunks * CHUNK_SLOTS) {
        ss_sig_slot *c = slot_at(next_slot++);
        if (!c->quarantined) {
            s = c;
            break;
        }
    }
    if (!s)
        return NULL;
    atomic_store_explicit(&s->tid, tid, memory_order_release);
    s->depth = 0;
    s->no_room = false;
    s->cut_copy = false;
    s->stack_lo = stack_lo;
    s->stack_hi = stack_hi;
    s->user = user;
    s->want_rt = false;
    s->rt_n = SS_SIG_RT_NONE;
    atomic_store_explicit(&s->gen, round_gen, memory_order_release);
    uint32_t idx = next_slot - 1;
    sig_table *t = atomic_load(&table);
    uint32_t h = hash_tid(tid) & t->mask;
    while (atomic_load_explicit(&t->e[h].tid, memory_order_relaxed) != 0)
        h = (h + 1) & t->mask;
    atomic_store_explicit(&t->e[h].slot, idx, memory_order_relaxed);
    atomic_store_explicit(&t->e[h].tid, tid, memory_order_release);
    round_slots[n_round++] = s;
    return s;
}

static bool pending(ss_sig_slot *s) {
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    return st == SLOT_REQUESTED || st == SLOT_BUSY;
}

static void wait_batch(uint32_t from, uint32_t to, uint64_t deadline_ns) {
    for (;;) {
        uint32_t seen = atomic_load_explicit(&answers, memory_order_acquire);
        bool any = false;
        for (uint32_t i = from; i < to && !any; i++)
            any = pending(round_slots[i]);
        if (!any)
            return;
        uint64_t now = ss_mono_ns();
        if (now >= deadline_ns)
            return;
        futex_wait(&answers, seen, deadline_ns - now);
    }
}

/* Is our handler still the one on the signal? The host may install its
 * own at any time (sigaction is not ours to intercept); sending it our
 * signal would then run the host's handler for nothing, or worse. One
 * sigaction call, made before every batch of signals.
 *
 * A foreign handler is judged by answer, not by address: runtimes that
 * install a handler on every signal (HotSpot with libjsig, Android's
 * sigchain...) pass a signal they do not use on to the handler installed
 * before theirs, and the agent's signal still reaches the agent. So the
 * first batch after the change sends one signal only (a probe): if its
 * handler answers, the foreign handler forwards (remembered, sampling goes
 * on); if not, the host took the signal: the sampler never signals again,
 * never re-installs over the host, says so once, and native sampling by
 * signal ends. */
enum { HANDLER_OURS, HANDLER_FORWARDS, HANDLER_UNKNOWN, HANDLER_LOST };

static void *forwarder; /* a foreign handler seen to pass our signal on */
static bool go_program; /* for the message: the Go runtime takes every other signal */

void ss_sig_note_go(bool is_go) { go_program = is_go; }

static void *current_handler(const struct sigaction *cur) {
    return (cur->sa_flags & SA_SIGINFO) ? (void *)cur->sa_sigaction : (void *)cur->sa_handler;
}

static int handler_state(void) {
    if (lost)
        return HANDLER_LOST;
    struct sigaction cur;
    if (sigaction(the_signal, NULL, &cur) != 0)
        return HANDLER_OURS; /* cannot tell; the signal number was valid at start */
    bool alt = atomic_load_explicit(&require_alt, memory_order_relaxed);
    atomic_store_explicit(&refuse_off_alt, alt && (cur.sa_flags & SA_ONSTACK),
                          memory_order_relaxed);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == handler)
        return HANDLER_OURS;
    if (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)
        return HANDLER_LOST; /* no probe: the process reset it (a signal would kill it) */
    return current_handler(&cur) == forwarder ? HANDLER_FORWARDS : HANDLER_UNKNOWN;
}

static void declare_lost(void) {
    lost = true;
    atomic_store_explicit(&active, false, memory_order_release);
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    sigaction(the_signal, NULL, &cur);
    /* SIG_DFL or SIG_IGN count as taken over too: the process reset it */
    const char *what = (cur.sa_flags & SA_SIGINFO) ? "installed its own handler for"
                       : cur.sa_handler == SIG_DFL ? "reset to SIG_DFL"
                       : cur.sa_handler == SIG_IGN ? "set SIG_IGN on"
                                                   : "installed its own handler for";
    ss_error("the process %s signal %d (STACKSHOT_SIGNAL) after the agent started, which "
             "does not pass it on; the native sampler leaves it to the process and stops "
             "sampling (set STACKSHOT_SIGNAL to a signal the process does not use%s)",
             what, the_signal,
             go_program ? "; in a Go program, SIGRTMIN: the Go runtime handles every other" : "");
}bool ss_sig_lost(void) { return lost; }

uint64_t ss_sig_no_room_total(void) {
    return atomic_load_explicit(&no_room_total, memory_order_relaxed);
}

uint64_t ss_sig_off_stack_total(void) {
    return atomic_load_explicit(&off_stack_total, memory_order_relaxed);
}

void ss_sig_require_altstack(bool on) {
    atomic_store_explicit(&require_alt, on, memory_order_relaxed);
    atomic_store_explicit(&refuse_off_alt, on, memory_order_relaxed);
}

static void note_cycles(uint32_t c) {
    cycle_ring[cycle_next] = c;
    cycle_next = (cycle_next + 1) % CYCLE_RING;
    if (cycle_count < CYCLE_RING)
        cycle_count++;
}

/* Copy mode: send the signal that names the slot (rt_tgsigqueueinfo with
 * SI_QUEUE: the value travels with it; a process may queue these to its
 * own threads). */
static int send_copy(pid_t pid, ss_sig_slot *s) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = the_signal;
    si.si_code = SI_QUEUE;
    si.si_pid = pid;
    si.si_uid = getuid();
    si.si_value.sival_ptr = (void *)(uintptr_t)((uint64_t)round_gen << 32 | s->index);
    return (int)syscall(SYS_rt_tgsigqueueinfo, pid, atomic_load(&s->tid), the_signal, &si);
}

/* Copy mode: unwind the batch's answers now, and give their buffers back
 * for the next batch. */
static void unwind_batch(uint32_t from, uint32_t to, ss_sig_unwind_fn fn, void *arg) {
    for (uint32_t i = from; i < to; i++) {
        ss_sig_slot *s = round_slots[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_DONE)
            continue; /* not answered (yet): see the end of the round */
        note_cycles(s->cycles);
        if (!s->no_room && fn) {
            ss_sig_copy c = {s->gregs, s->copy, s->copy_len, s->copy_sp, s->copy_hi,
                             s->ips, s->cap - HANDLER_FRAMES, s->user};
            bool cut = false;
            s->depth = fn(arg, &c, &cut);
            s->cut_copy = cut;
        }
        pool_put(s);
    }
}

/* Request and signal one slot. false: not signalled (no buffer, or the
 * thread is gone). */
static bool send_one(pid_t pid, ss_sig_slot *s, bool copy) {
    if (copy && !pool_get(s))
        return false; /* no buffer (memory): stays FREE, not signalled */
    /* everything the handler reads is written before this store
     * (release), which its claim (acquire) pairs with */
    atomic_store_explicit(&s->state, SLOT_REQUESTED, memory_order_release);
    int rc = copy ? send_copy(pid, s)
                  : (int)syscall(SYS_tgkill, pid, atomic_load(&s->tid), the_signal);
    sent_total += rc == 0;
    if (rc != 0) {
        int expected = SLOT_REQUESTED; /* exited: nobody will answer */
        atomic_compare_exchange_strong(&s->state, &expected, SLOT_FREE);
        pool_put(s);
        return false;
    }
    return true;
}

static ss_log_limit forwarder_said; /* a host may swap handlers often */

/* A foreign handler is on the signal: send one signal (to the first slot
 * of [from, to) whose thread still exists) and see whether it comes back
 * to us. Returns the index after the probed slot, or `to` when lost. */
static uint32_t probe(pid_t pid, uint32_t from, uint32_t to, uint64_t deadline_ns, bool copy) {
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    sigaction(the_signal, NULL, &cur);
    for (uint32_t i = from; i < to; i++) {
        if (!send_one(pid, round_slots[i], copy))
            continue;
        wait_batch(i, i + 1, deadline_ns);
        if (atomic_load_explicit(&round_slots[i]->state, memory_order_acquire) == SLOT_DONE) {
            if (forwarder != current_handler(&cur))
                ss_log_limited(&forwarder_said, SS_LOG_INFO, "the process installed its own handler for signal %d (STACKSHOT_SIGNAL); "
                        "it passes the agent's signal on: native sampling goes on",
                        the_signal);
            forwarder = current_handler(&cur);
            return i + 1;
        }
        break; /* not answered: the signal stays with the process */
    }
    declare_lost();
    return to;
}

uint32_t ss_sig_collect(uint64_t deadline_ns, ss_sig_unwind_fn unwind, void *arg) {
    pid_t pid = atomic_load(&own_pid);
    bool copy = unwind_mode == SS_UNWIND_COPY;
    uint32_t first = n_sent;
    n_sent = n_round;
    for (uint32_t b = first; b < n_round; b += BATCH) {
        uint32_t e = n_round - b < BATCH ? n_round : b + BATCH;
        uint32_t from = b;
        int st = handler_state();
        if (st == HANDLER_UNKNOWN) {
            from = probe(pid, b, e, deadline_ns, copy);
            st = lost ? HANDLER_LOST : HANDLER_FORWARDS;
        } else if (st == HANDLER_LOST && !lost) {
            declare_lost();
        }
        if (st == HANDLER_LOST)
            break; /* nobody signalled from here on: their slots stay FREE */
        for (uint32_t i = from; i < e; i++)
            send_one(pid, round_slots[i], copy);
        wait_batch(b, e, deadline_ns);
        if (copy)
            unwind_batch(b, e, unwind, arg);
    }
    uint32_t done = 0;
    for (uint32_t i = first; i < n_round; i++) {
        ss_sig_slot *s = round_slots[i];
        int st = SLOT_REQUESTED;
        if (atomic_compare_exchange_strong(&s->state, &st, SLOT_FREE)) {
            pool_put(s);
            continue; /* never answered; a late signal finds it FREE */
        }
        if (st == SLOT_BUSY) {
            s->quarantined = true; /* keeps its buffer: the handler writes it */
            n_quarantined++;
        } else if (st == SLOT_DONE) {
            if (copy && s->copy) /* answered after its batch was unwound */
                unwind_batch(i, i + 1, unwind, arg);
            done++;
        } else {
            pool_put(s);
        }
    }
    return done;
}

bool ss_sig_result(ss_sig_slot *s, ss_sig_answer *out) {
    if (s->quarantined ||
        atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_DONE || s->no_room)
        return false;
    out->pthread = s->pthread;
    out->cpu_ns = s->cpu_ns;
    out->depth = s->depth;
    out->ips = s->ips;
    out->cut_copy = s->cut_copy;
    out->has_span = s->has_span;
    out->rt_n = s->rt_n;
    out->rt = s->rt;
    memcpy(out->trace_id, s->trace_id, 16);
    memcpy(out->span_id, s->span_id, 8);
    out->trace_flags = s->trace_flags;
    out->attrs = s->attrs;
    out->n_attrs = s->has_span ? s->n_attrs : 0;
    return true;
}

void ss_sig_after_fork(void) {
    /* The parent's threads are gone and none of their handlers can run
     * here: every slot is free again. The round list may be mid-update
     * by the parent's sampler at the fork: start a fresh one (the old
     * array stays reachable from a static, never freed). */
    /* volatile: a static that is only written is otherwise optimised
     * away, and the array then shows as a definite leak (valgrind) */
    static ss_sig_slot **volatile leftover;
    leftover = round_slots;
    (void)leftover;
    round_slots = NULL;
    n_round = cap_round = 0;
    next_slot = 0;
    n_quarantined = 0;
    for (uint32_t i = 0; i < n_chunks * CHUNK_SLOTS; i++) {
        ss_sig_slot *s = slot_at(i);
        atomic_store(&s->state, SLOT_FREE);
        atomic_store(&s->tid, 0);
        s->quarantined = false;
        s->copy = NULL; /* a buffer in use at the fork stays unused (mmap'd) */
    }
    sig_table *t = atomic_load(&table);
    if (t)
        for (uint32_t i = 0; i <= t->mask; i++)
            atomic_store(&t->e[i].tid, 0);
}

uint32_t ss_sig_quarantined(void) { return n_quarantined; }

void ss_sig_set_runtime_walk(ss_sig_runtime_fn fn) {
    atomic_store_explicit(&runtime_walk, fn, memory_order_release);
}

void ss_sig_want_runtime(ss_sig_slot *s) { s->want_rt = true; }

uint64_t ss_sig_sent(void) { return sent_total; }

int ss_sig_signal(void) { return installed && !lost ? the_signal : 0; }

uint32_t ss_sig_handler_cycles(uint32_t *out, uint32_t max) {
    uint32_t n = cycle_count < max ? cycle_count : max;
    for (uint32_t i = 0; i < n; i++)
        out[i] = cycle_ring[(cycle_next + CYCLE_RING - 1 - i) % CYCLE_RING];
    return n;
}

double ss_sig_cycles_per_ns(void) {
    uint64_t dt = ss_mono_ns() - mono0;
    if (!mono0 || dt < 1000000)
        return 0;
    return (double)(tsc() - tsc0) / (double)dt;
}
