/* native_sampler.c: the native source of rounds.
 *
 * A "stackshot-sampler" thread wakes every interval (absolute deadlines on
 * the monotonic clock, so rounds do not drift), lists /proc/self/task in
 * tid order, and for each thread of the host:
 *
 *   - leaves it out when it is one of ours;
 *   - reuses its previous stack when it has not run since (its CPU clock
 *     has not moved and its stack was taken while it slept): nothing is
 *     read, nothing is sent;
 *   - reads where it is (/proc/self/task/<tid>/syscall). A thread asleep
 *     in a system call is read without a signal (STACKSHOT_UNWIND=copy):
 *     its stack is walked from the SP and PC the kernel gives, over the
 *     process's own memory (stack_walk.c), and the result is used only if
 *     the thread did not run meanwhile (its CPU clock is the same after the
 *     walk; where that clock counts ticks, its syscall line too) and the
 *     walk reached the thread's entry. A thread seen for the first time is
 *     read without keeping its files open. Threads that block the sampling
 *     signal are read the same way;
 *   - otherwise (running, or the walk failed) assigns it a slot to be
 *     signalled (signal_sampler.c); its handler copies its registers and
 *     stack, and the copy is unwound here. A thread that blocks the signal
 *     and is running is counted as `blocked`. When the loader keeps a
 *     registry of the threads that have an alternate signal stack
 *     (loader/loader_altstack.c), a running thread it does not know safe
 *     is not signalled either: left out, counted as `no_altstack`.
 *
 * With STACKSHOT_UNWIND=step, fast or gcc every thread that ran is
 * signalled and its handler unwinds in place, as before the copy mode
 * existed (kept to compare).
 *
 * The frames are resolved to symbols (cached by address), each thread's
 * state is decided from /proc and its leaf frames, and the round goes to
 * the exporters. Everything here runs on the sampler thread (or on the
 * caller of ss_native_sample_once), never in a host thread. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/source.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/span.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "proc/threads.h"
#include "samplers/perf_thread.h"
#include "samplers/signal_sampler.h"
#include "samplers/stack_walk.h"
#include "samplers/unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK_RECHECK 16u /* rounds between SigBlk re-reads */
#define RESOLVE_MAX 16    /* frames one address may expand to (inlining) */

/* What the sampler remembers about a thread from round to round. */
typedef struct known {
    pid_t tid;
    int64_t number;          /* order first seen: main thread #1 */
    uint64_t last_cpu;       /* CPU clock after the previous round */
    bool settled;            /* its stack may be reused while its CPU clock stands */
    uint64_t refreshed;      /* round of the last full /proc read */
    bool seen;               /* facts below were read at least once */
    bool blocks;             /* blocks the sampling signal (as of mask_round) */
    bool mask_trusted;       /* a look at its mask was believed: see look_at_mask */
    bool blocked_once;       /* was read blocking it */
    bool mask_retry;         /* the last look was unsure, and a later one may prove it */
    bool open_look;          /* the last look found it open, unproved: */
    uint64_t open_slept;     /*   its sleeps then */
    uint64_t open_cpu;       /*   and its CPU clock */
    bool swap_waiter;        /* was seen asleep in a wait with a mask of its own */
    uint8_t unsure;          /* unsure looks in a row */
    uint8_t opens;           /* open looks in a row since it was read blocking */
    uint64_t mask_round;     /* round SigBlk was read in; UINT64_MAX never */
    bool have_stack;         /* frames below hold the previous stack */
    bool truncated;
    bool has_span;
    bool pthread_looked;     /* its pthread_t was looked for in its memory */
    bool read_asleep;        /* its last stack was read without a signal */
    ss_proc_stat st;         /* name, state, nice, start: last read */
    ss_task_files files;     /* its /proc files kept open */
    uint32_t idle_rounds;    /* rounds in a row its stack was reused */
    long syscall_nr;         /* at the previous stack */
    uint64_t io_read, io_write; /* SS_UNKNOWN_U64: unreadable */
    uint64_t pthread;
    uint32_t cut_short;      /* copy mode: the last copy ended at SP's page end,
                                short of the stack's known end: its length */
    uint64_t answer_cpu;     /* copy mode: its CPU clock as its answer was unwound */
    uint64_t stack_lo, stack_hi; /* the mapping its stack is in; 0 unknown */
    ss_perf_thread perf;     /* running while it may not be signalled: the kernel samples it */
    bool perf_refused;       /* its event could not be opened: not tried again */
    uint32_t perf_quiet;     /* rounds since its event gave a sample */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags;
    uint16_t n_attrs;        /* its span's attrs-data (OTEP 4947), as read */
    uint8_t attrs[SS_OTEL_ATTRS_MAX];
    ss_otel_cache otel;      /* where its otel_thread_ctx_v1 variables are */
    ss_frame *frames;
    uint32_t n_frames, cap_frames;
    uint64_t stack_id;       /* identity of frames (ss_thread_sample.stack_id) */
    uint64_t emitted_id;     /* the stack_id it had in the previous round, 0 none */
    /* the state decided for (state_letter, state_nr, state_of): a function of
     * these alone, kept while they stay (state_of 0: none) */
    uint64_t state_of;
    long state_nr;
    char state_letter;
    ss_thread_state state;
    const char *status, *state_detail;
    /* a runtime's thread walked by its walker (ss_native_gather's walk) */
    uint64_t walk_gen;       /* the gather it was walked in (0: never) */
    uint64_t walk_cpu;       /* its CPU clock at the previous gather */
    uint64_t walk_cpu_gen;   /* the gather walk_cpu was read in */
    bool walk_answered;
    int32_t walk_n;
    const uint8_t *walk_frames;
} known;

/* One thread's work in the current round. */
typedef struct pending {
    known *k;
    ss_sig_slot *slot;       /* NULL: no signal (reused, or read asleep) */
    uint64_t cpu;            /* CPU clock before signalling */
    uint64_t prev_cpu;       /* SS_UNKNOWN_U64 the first time */
    uint64_t handler_cpu;    /* in-handler modes: its CPU clock as our handler ended */
    bool same_stack;         /* the stack taken equals the one before */
    bool asleep;             /* its stack was just read without a signal */
    bool perf;               /* its stack is the kernel's sample (take_perf) */
    bool deferred;           /* asleep last time, running now: looked at again last */
    bool gone;               /* deferred, then exited or never on a CPU: no entry */
    uint64_t look_ns;        /* deferred: when it was last looked at */
} pending;

typedef struct sampler {
    ss_config cfg;
    uint64_t agent_mask;     /* SigBlk of the agent's threads (0: unknown) */
    int mode;                /* SS_UNWIND_* */
    uint32_t copy_bytes;     /* STACKSHOT_STACK_COPY */
    ss_symbols *symbols;
    ss_walker *walker;
    ss_round_builder *builder;
    pid_t *tids;
    size_t cap_tids;
    known *threads;          /* sorted by tid */
    uint32_t n_threads, cap_threads;
    known *next;             /* scratch for the merge */
    uint32_t cap_next;
    pending *work;
    uint32_t cap_work;
    ss_frame *scratch;       /* resolved frames of one thread */
    uint32_t cap_scratch;
    int64_t next_number;
    uint64_t rounds;
    uint64_t keymap_round;   /* 1 + the round the OTEP 4947 key map was last read again */
    uint64_t reused, signalled, asleep, skipped_total;
    uint64_t unread;         /* asleep, syscall file unreadable, not signalled: see unread_asleep */
    int tracer;              /* this round: the process's tracer (a debugger), 0 none */
    uint64_t traced_left;    /* threads not signalled because a tracer was attached */
    uint64_t fallbacks;      /* asleep but read with a signal: the walk failed */
    uint32_t fallbacks_round;
    uint64_t fell_by[SS_UW_BAD_FRAME + 2]; /* ... by how the walk ended; last: ran meanwhile */
    uint64_t cut_copy;       /* stacks cut at STACKSHOT_STACK_COPY */
    uint64_t fp_guessed;     /* walks that found a frame pointer on the stack */
    uint64_t no_altstack;    /* running, not signalled: no alternate stack known */
    uint64_t perf_taken;     /* stacks of threads not signalled, sampled by the kernel */
    bool perf_said;          /* the line about a refused perf event was written */
    uint8_t *perf_stack;     /* one sample's stack (ss_perf_stack_bytes) */
    uint64_t *perf_ips;      /* its frames (max_depth + 1) */
    uint64_t round_ns, prev_round_ns; /* monotonic starts of this round and the one before */
    uint32_t no_altstack_round;
    /* /proc/self/task listed afresh next round (a known thread is gone) */
    bool relist;
    uint64_t listed_round;   /* the round of the last listing */
    uint64_t lists_saved;    /* rounds that did not need one */
    /* ss_native_sample_into: tids a runtime's sampler takes itself (sorted),
     * and how its round names and numbers the others */
    const pid_t *skip;
    uint32_t n_skip;
    bool in_runtime;
    const char *(*rename)(const char *comm);
    bool walk;               /* the runtime's running threads: signalled, walked */
    bool walk_only;          /* ... and nothing else */
    uint64_t gathers;
    pid_t pid;               /* getpid(), read once a gather (a system call) */
    bool clock_exact;        /* thread CPU clocks count ns, not ticks (cpu_clock_exact) */
    known **walking;         /* this gather's walked threads, and their slots */
    ss_sig_slot **walk_slots;
    uint32_t n_walking, cap_walking;
} sampler;

/* Stop handshake with the sampler thread. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static bool stopping;
static bool thread_running;
static pthread_t thread;
static sampler *active;
/* Kept reachable after a fork (the parent's copy may be mid-update).
 * volatile: nothing reads it, and the compiler dropped the stores of a
 * plain static, which left the sampler "definitely lost" to valgrind in a
 * child forked inside a round (valgrind_native_fork, one run in six). */
static sampler *volatile forgotten;
/* The sampler thread is taking a round: its state may be half-updated. */
static _Atomic bool in_round;
/* A forked child's copy of the parent's symbol resolver, for its next
 * sampler, and what its fork fell into (said when that sampler starts). */
static ss_symbols *inherited_symbols;
static enum { FORK_QUIET, FORK_IN_ROUND, FORK_IN_LOOKUP } fork_fell;
/* The parent's libdw tables did not come with the fork (a parent that
 * forks often): the resolver kept from it forgets them at the child's
 * start. Stays set until then, so that a child of this child (forked
 * before that start) forgets them too. */
static bool libdw_lost;

static const ss_funcinfo *copy_cut_fn; /* the frame that marks a stack cut at the copy */
static const ss_funcinfo *page_cut_fn; /* ... cut at SP's page end, the stack's end unknown */
/* The loader's registry of threads that can take the signal (NULL: none,
 * every thread is signalled). */
static int (*signal_room)(pid_t tid);
static bool force_signal; /* benchmarks: every thread that ran is signalled */

/* ---- known threads ------------------------------------------------ */

static void known_free(known *k) {
    free(k->frames);
    k->frames = NULL;
    ss_task_files_close(&k->files);
    ss_perf_thread_close(&k->perf);
}

/* Make s->threads hold exactly the tids listed (both sorted), keeping
 * what is known about the survivors. */
static int merge_known(sampler *s, const pid_t *tids, uint32_t n) {
    if (n > s->cap_next) {
        known *p = realloc(s->next, (size_t)n * sizeof *p);
        if (!p)
            return -ENOMEM;
        s->next = p;
        s->cap_next = n;
    }
    pid_t self = getpid();
    uint32_t i = 0;
    for (uint32_t j = 0; j < n; j++) {
        while (i < s->n_threads && s->threads[i].tid < tids[j])
            known_free(&s->threads[i++]); /* exited */
        known *k = &s->next[j];
        if (i < s->n_threads && s->threads[i].tid == tids[j]) {
            *k = s->threads[i++];
            continue;
        }
        memset(k, 0, sizeof *k); /* files: none kept */
        k->tid = tids[j];
        k->number = tids[j] == self ? 1 : 0; /* numbered when first sampled */
        k->last_cpu = SS_UNKNOWN_U64;
        k->syscall_nr = -1;
        k->io_read = k->io_write = SS_UNKNOWN_U64;
        k->mask_round = UINT64_MAX;
    }
    while (i < s->n_threads)
        known_free(&s->threads[i++]);
    known *old = s->threads;
    uint32_t old_cap = s->cap_threads;
    s->threads = s->next;
    s->cap_threads = s->cap_next;
    s->n_threads = n;
    s->next = old;
    s->cap_next = old_cap;
    return 0;
}

/* Every field of every frame the same (what the exporters print or
 * aggregate of a frame is a function of these). */
static bool exact_frames(const known *k, const ss_frame *f, uint32_t n) {
    if (k->n_frames != n)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        const ss_frame *a = &k->frames[i], *b = &f[i];
        if (a->fn != b->fn || a->map != b->map || a->addr != b->addr || a->line != b->line ||
            a->inlined != b->inlined)
            return false;
    }
    return true;
}

/* Keep a thread's new stack. It keeps its identity when it is exactly the
 * previous one (frames and truncation); otherwise it gets a new one, so
 * an exporter never reuses what it made of different frames. */
static int keep_stack(known *k, const ss_frame *f, uint32_t n, bool truncated) {
    bool same = k->have_stack && k->stack_id && k->truncated == truncated &&
                exact_frames(k, f, n);
    k->truncated = truncated;
    if (!same)
        k->stack_id = ss_stack_id_next();
    if (n > k->cap_frames) {
        ss_frame *p = realloc(k->frames, (size_t)n * sizeof *p);
        if (!p) {
            k->have_stack = false;
            return -ENOMEM;
        }
        k->frames = p;
        k->cap_frames = n;
    }
    memcpy(k->frames, f, (size_t)n * sizeof *f);
    k->n_frames = n;
    k->have_stack = true;
    return 0;
}

/* ---- thread facts ------------------------------------------------- */

/* Agent threads register their tids; the name prefix catches the others
 * (started before registration, or by code that cannot register). The
 * main thread is never ours, whatever the program is called. */
static bool is_ours(pid_t tid, const char *name, pid_t me) {
    return tid == me || ss_internal_thread_is(tid) ||
           (strncmp(name, "stackshot-", 10) == 0 && tid != getpid()); /* getpid: a system call */
}

/* A thread started by the agent's libraries (gRPC starts its threads
 * lazily, from an agent thread whose mask, blocking every signal, they
 * inherit) is registered as internal by its module a moment later, after
 * a check (grpc_client.c). Until then it looks like a host thread that
 * blocks the signal, which copy mode reads while it sleeps: where such a
 * library is loaded, a young thread with exactly the agent's mask is left
 * out of the round (counted as skipped) for its first YOUNG_NS. A host
 * thread with that mask (one inside pthread_create, which masks
 * everything for a moment, or jemalloc's background threads, started
 * fully masked) then misses only its first rounds. */
#define YOUNG_NS 1000000000ull

static bool maybe_agents(sampler *s, known *k, uint64_t now_boot) {
    if (!s->agent_mask || !ss_internal_threads_are_lazy() ||
        ss_proc_elapsed_ns(k->st.start_ticks, now_boot) >= YOUNG_NS)
        return false;
    uint64_t mask;
    return ss_proc_sigblk(k->tid, &mask) == 0 && mask == s->agent_mask;
}

/* An idle thread: it has not run since its stack was taken (its CPU
 * clock has not moved) and it was sleeping then. Its stack, system call
 * and state cannot have changed, so nothing about it is read again. */
static bool idle_since_last(const known *k, uint64_t cpu) {
    return k->have_stack && k->settled && cpu != SS_UNKNOWN_U64 && cpu == k->last_cpu &&
           (k->st.state == 'S' || k->st.state == 'D');
}

/* In-handler modes: the CPU clock an idle thread is compared with next
 * round is read at the end of the round, so that returning from our
 * handler does not make it look busy. But a thread may have been caught
 * in a short wait (a page fault, a lock) and been woken during the round
 * to sleep somewhere else, all within that CPU: its stack would then be
 * stale forever. So such a thread is "settled" (its stack may be reused)
 * only when two stacks in a row were the same and it used almost no CPU
 * after our handler. (A stack read asleep is settled at once: the thread
 * was not disturbed, and its clock was read after the walk.) */
#define SS_AFTER_HANDLER_SLACK_NS 50000ull

static bool same_frames(const known *k, const ss_frame *f, uint32_t n) {
    if (!k->have_stack || k->n_frames != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (k->frames[i].addr != f[i].addr || k->frames[i].fn != f[i].fn)
            return false;
    return true;
}

static void note_cpu_after_handler(const pending *p) {
    known *k = p->k;
    k->last_cpu = ss_thread_cpu_ns(k->tid);
    k->settled = p->same_stack && k->last_cpu != SS_UNKNOWN_U64 && p->handler_cpu != 0 &&
                 k->last_cpu >= p->handler_cpu &&
                 k->last_cpu - p->handler_cpu <= SS_AFTER_HANDLER_SLACK_NS;
}

/* Read stat into k. A different start time means the kernel gave this
 * tid to a new thread since we last looked: forget the old one. `keep`:
 * keep the file open for the next read (a thread seen for the first time
 * or idle is read once, through a descriptor it keeps if it has one: most
 * never run again soon, and a kept descriptor costs an fstat and two
 * system calls to move high, and two to close). */
static int read_stat_kept(known *k, bool keep) {
    uint64_t start = k->st.start_ticks;
    int rc = keep ? ss_task_read_stat(k->tid, &k->files, &k->st)
                  : ss_task_look_stat(k->tid, &k->files, &k->st);
    if (rc != 0)
        return rc;
    if (k->seen && k->st.start_ticks != start) {
        k->number = k->tid == getpid() ? 1 : 0;
        k->have_stack = false;
        k->blocks = false;
        k->mask_trusted = k->blocked_once = k->swap_waiter = k->open_look = false;
        k->unsure = k->opens = 0;
        k->mask_round = UINT64_MAX;
        k->last_cpu = SS_UNKNOWN_U64;
        k->pthread = 0;
        k->pthread_looked = false;
        k->stack_lo = k->stack_hi = 0;
    }
    return 0;
}

static int read_stat(known *k) { return read_stat_kept(k, true); }

/* Read what changes while a thread runs: where it is (the syscall file:
 * "running", or the system call it sleeps in, with SP and PC) and its
 * I/O. The /proc state letter is read only when the thread is not
 * running (S, D, T... matter then) or was just read by a full refresh.
 * I/O is not read the first time a thread is seen (a first round stays
 * cheap; I/O counts are used as deltas): from its next round on. */
static int read_running_facts(sampler *s, known *k, bool stat_fresh, bool first,
                              ss_proc_syscall *sc) {
    /* a new thread's syscall file is not kept (most new threads sleep and
     * are not read again soon); held for the read after its walk where
     * that read is made (!clock_exact) */
    int rc = first ? ss_task_look_syscall(k->tid, &k->files, !s->clock_exact, sc)
                   : ss_task_read_syscall(k->tid, &k->files, sc);
    if (rc == -ESRCH || rc == -ENOENT)
        return rc; /* gone */
    if (rc != 0) {
        /* unreadable (a process that is not dumpable: its task files
         * belong to root): where it is stays unknown, and it is signalled
         * as any thread that ran */
        memset(sc, 0, sizeof *sc);
        sc->running = true;
        sc->unknown = true;
        if (!stat_fresh && (rc = read_stat(k)) != 0)
            return rc;
        k->syscall_nr = -1;
    } else if (sc->running) {
        k->st.state = 'R';
        k->syscall_nr = -1;
    } else {
        if (!stat_fresh && (rc = read_stat(k)) != 0)
            return rc;
        k->syscall_nr = sc->nr;
    }
    if (first || ss_task_read_io(k->tid, &k->files, &k->io_read, &k->io_write) != 0)
        k->io_read = k->io_write = SS_UNKNOWN_U64;
    return 0;
}

/* A thread idle this long gives its kept descriptors back (to the budget
 * other, busier threads may need). */
#define IDLE_ROUNDS_KEEP_FILES 16u
#define PERF_QUIET_ROUNDS 16u /* rounds a thread's perf event may give no sample */

/* ---- frames ------------------------------------------------------- */

static int grow_scratch(sampler *s, uint32_t need) {
    if (need <= s->cap_scratch)
        return 0;
    ss_frame *f = realloc(s->scratch, (size_t)need * sizeof *f);
    if (!f)
        return -ENOMEM;
    s->scratch = f;
    s->cap_scratch = need;
    return 0;
}

/* Resolve ips (leaf first; SS_IP_EXACT marks an interrupted instruction)
 * into s->scratch, at most max_depth frames (the root side is cut).
 * `cut_copy`: the stack went on past the copy: a marker frame ends it,
 * "stackshot.truncated(STACKSHOT_STACK_COPY:<bytes>)" when the copy took
 * its whole size, "stackshot.truncated(stack end unknown:<bytes>)" when
 * the handler knew no end of the stack and copied to the end of SP's page
 * (cut_short: the bytes it copied).
 * Returns the frame count. */
static uint32_t resolve(sampler *s, const uint64_t *ips, uint32_t depth, bool cut_copy,
                        uint32_t cut_short, bool *truncated) {
    uint32_t max = s->cfg.max_depth;
    uint32_t n_ips = depth;
    *truncated = n_ips > max;
    if (n_ips > max)
        n_ips = max;
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_ips && n < max; i++) {
        if (grow_scratch(s, n + RESOLVE_MAX + 1) != 0)
            break;
        uint64_t ip = ips[i] & ~SS_IP_EXACT;
        bool ret_addr = !(ips[i] & SS_IP_EXACT);
        uint32_t room = max - n < RESOLVE_MAX ? max - n : RESOLVE_MAX;
        int got = ss_symbols_resolve(s->symbols, ip, ret_addr, s->scratch + n, (int)room);
        if (got <= 0)
            continue;
        n += (uint32_t)got;
        /* an inline chain that filled the depth hides the rest */
        if (n == max && i + 1 < depth)
            *truncated = true;
    }
    if (cut_copy && !*truncated && copy_cut_fn && grow_scratch(s, n + 1) == 0) {
        /* "at stackshot.truncated(STACKSHOT_STACK_COPY:<bytes>)" */
        memset(&s->scratch[n], 0, sizeof s->scratch[n]);
        s->scratch[n].fn = cut_short && page_cut_fn ? page_cut_fn : copy_cut_fn;
        s->scratch[n].line = (int32_t)(cut_short ? cut_short : s->copy_bytes);
        n++;
    }
    return n;
}

/* ---- stacks without a signal -------------------------------------- */

/* The stack mapping of a thread whose SP is sp (kept while sp is in it). */
static uint64_t stack_top(sampler *s, known *k, uint64_t sp) {
    if (sp >= k->stack_lo && sp < k->stack_hi)
        return k->stack_hi;
    if (!ss_walker_bounds(s->walker, sp, &k->stack_lo, &k->stack_hi)) {
        k->stack_lo = k->stack_hi = 0;
        return 0;
    }
    return k->stack_hi;
}

static void find_pthread(sampler *s, known *k) {
    if (k->pthread || k->pthread_looked || !k->stack_hi)
        return;
    k->pthread = ss_walker_pthread(s->walker, k->tid, k->stack_hi);
    k->pthread_looked = k->tid != s->pid; /* the main one may be noted later */
}

/* Stopped (SIGSTOP) or stopped by a debugger (gdb attaching stops every
 * thread, out of its system call). When its stack cannot be walked it is
 * left out, not signalled: the signal would wait until the thread resumes,
 * and a debugger would report it as the program's. */
static bool stopped(const known *k) { return k->st.state == 'T' || k->st.state == 't'; }

/* A wchan of "0" or nothing: the thread is not blocked any more. */
static bool wchan_woken(const char *wchan) { return !wchan[0] || strcmp(wchan, "0") == 0; }

/* Does a signal handler's return end the wait the kernel function
 * `wchan` belongs to with EINTR, whatever SA_RESTART says (signal(7))?
 * The sleep family (nanosleep, clock_nanosleep, and their restart),
 * poll, ppoll, select, pselect, epoll_wait, sigtimedwait, pause,
 * sigsuspend, io_getevents, io_uring's wait, msgrcv and semop. Waits the
 * kernel restarts (futex, pipes, sockets, wait4, flock...) are not here.
 * "0", or nothing: not blocked any more (just woken: a signal now would
 * be pending when it runs, and poll, select and epoll_wait that timed out
 * would return EINTR), counted as such. */
static bool wait_ends_with_eintr(const char *wchan) {
    static const char *const waits[] = {
        "nanosleep", "nsleep",      "poll_schedule_timeout", "do_select", "do_sys_poll",
        "core_sys_select", "ep_poll", "do_epoll_wait", "sigtimedwait", "sigsuspend",
        "sys_pause", "read_events", "io_cqring_wait", "do_msgrcv", "semtimedop"};
    if (wchan_woken(wchan))
        return true;
    for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++)
        if (strstr(wchan, waits[i]))
            return true;
    return false;
}

/* A thread asleep whose syscall file cannot be read (a process that is not
 * dumpable, run by an unprivileged user: its task files belong to root).
 * Where it sleeps in its code is unknown, and the stack could only be
 * taken by a signal, which ends some waits with EINTR: a 1.5 s nanosleep
 * of such a host returned after 0.2 s. So a thread asleep in one of those
 * (its wchan, still readable, says which) is not signalled: its stack this
 * round is one frame, stackshot.asleep(<wchan>), kept as its stack while
 * its CPU clock stands (idle_since_last). True if so; false: signalled as
 * before (a wait the kernel restarts, or wchan unreadable: gone). */
static bool unread_asleep(sampler *s, pending *p) {
    known *k = p->k;
    char wchan[64] = "";
    if (ss_proc_read_wchan(k->tid, wchan, sizeof wchan) != 0 || !wait_ends_with_eintr(wchan))
        return false;
    bool woken = wchan_woken(wchan);
    ss_frame f;
    memset(&f, 0, sizeof f);
    f.fn = ss_funcinfo_intern("stackshot", "asleep", woken ? "waking" : wchan, NULL,
                              SS_FRAME_NATIVE);
    if (!f.fn || keep_stack(k, &f, 1, false) != 0)
        return false;
    k->settled = !woken;
    k->last_cpu = p->cpu;
    k->syscall_nr = -1;
    k->read_asleep = true;
    p->asleep = true;
    s->unread++;
    return true;
}

/* Index of a walk's ending in fell_by (the last one: the thread ran). */
#define FELL_RAN (SS_UW_BAD_FRAME + 1)

/* Does the wait the thread sleeps in (sc) have a mask of its own in place,
 * one that may differ from the thread's in the sampling signal's bit?
 * sigtimedwait unblocks the set it waits for (its first argument);
 * sigsuspend puts its mask in place; ppoll, pselect, epoll_pwait and
 * io_pgetevents too when they are given one (glibc's poll, select and
 * epoll_wait give none). The set or mask is read from the thread's memory
 * (this process's): where it cannot be, yes. */
static bool wait_masks_signal(const ss_proc_syscall *sc, int sig) {
    uint64_t set = 0, ptr[2] = {0, 0};
    switch (sc->nr) {
    case SYS_rt_sigtimedwait:
        if (ss_uw_read_memory(&set, sc->args[0], sizeof set) != (long)sizeof set)
            return true;
        return (set >> (sig - 1)) & 1u;
    case SYS_rt_sigsuspend:
        return true;
    case SYS_ppoll:
        return sc->args[3] != 0;
    case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
#endif
        return sc->args[4] != 0;
    case SYS_pselect6: /* {const sigset_t *, size_t} */
#ifdef SYS_io_pgetevents
    case SYS_io_pgetevents:
#endif
        if (sc->args[5] == 0)
            return false;
        if (ss_uw_read_memory(ptr, sc->args[5], sizeof ptr) != (long)sizeof ptr)
            return true;
        return ptr[0] != 0;
    default:
        return false;
    }
}

/* What a look at a thread's signal mask found. */
typedef enum mask_look {
    MASK_OPEN,   /* it takes the signal */
    MASK_BLOCKS, /* it blocks it */
    MASK_UNSURE, /* SigBlk may have been a wait's mask: not signalled now */
} mask_look;

/* Unsure looks in a row after which a plain read is believed (see
 * look_at_mask: proof is rare on one CPU). */
#define MASK_UNSURE_MAX 16u

/* SigBlk is the mask in force, and during one of those waits that is the
 * wait's, not the thread's: a daemon that blocks every signal and waits in
 * sigtimedwait on all of them shows none blocked while it waits, and also
 * once woken while it waits for a CPU (its syscall file then says
 * "running"). Signalled on the strength of that, it gets the signal when
 * it computes again, blocked, and its next wait takes it: sigtimedwait
 * returns it to the host, ppoll and sigsuspend return EINTR. So:
 *   - open, and asleep in such a wait right after: unsure;
 *   - a thread looked at before with a result believed, and never seen
 *     blocking nor asleep in such a wait (here or when read asleep), is
 *     believed on that one read;
 *   - for the others (the first look too), open is believed only when
 *     proved. Either the thread ran since the last look, which found it
 *     open, and never went to sleep meanwhile (its CPU clock and its
 *     voluntary context switches: it entered no wait since). Or two reads
 *     of its status found it open with no context switch between them
 *     (its switches out, in the status; its switches in, in schedstat
 *     read before and after), and in between either its CPU clock moved
 *     (on a CPU all along, computing or in a system call that had not
 *     gone to sleep) or its syscall file showed it asleep in another call
 *     (asleep there all along). Its own mask either way. A first look
 *     that cannot tell is taken again at the end of the round, once the
 *     thread ran (plan: the deferred looks). A signal handler that
 *     interrupted such a wait runs with the wait's mask too, on a CPU, for
 *     microseconds: a thread seen blocking needs two open looks in a row.
 *   - where no proof comes (a thread that sleeps between any two looks
 *     and is never caught on a CPU nor asleep elsewhere), after
 *     MASK_UNSURE_MAX unsure looks in a row a plain read is believed. A
 *     thread that waits with every signal blocked reads blocked whenever
 *     it computes, which starts that count again.
 * Unreadable counts as open, as before. */
static mask_look look_at_mask(sampler *s, known *k) {
    k->mask_retry = false;
    bool doubt = !k->mask_trusted || k->blocked_once || k->swap_waiter;
    uint64_t in0 = 0, in1 = 1, slept0 = 0, slept1, out0 = 0, out1 = 1;
    bool counted = doubt && ss_proc_schedstat(k->tid, &in0) == 0;
    int rc = ss_proc_blocks_signal_out(k->tid, s->cfg.signal, &slept0, &out0);
    if (rc != 0)
        return rc == 1 ? MASK_BLOCKS : MASK_OPEN;
    ss_proc_syscall sc;
    bool read = ss_task_read_syscall(k->tid, &k->files, &sc) == 0 && !sc.unknown;
    bool asleep = read && !sc.running;
    if (asleep && wait_masks_signal(&sc, s->cfg.signal)) {
        k->swap_waiter = true;
        k->open_look = false;
        return MASK_UNSURE;
    }
    if (!doubt)
        return MASK_OPEN;
    uint64_t cpu0 = ss_thread_cpu_ns(k->tid), cpu1 = ss_thread_cpu_ns(k->tid);
    /* ran since the last look, which found it open, without a sleep */
    bool ran_awake = k->open_look && slept0 == k->open_slept && cpu0 != SS_UNKNOWN_U64 &&
                     cpu0 > k->open_cpu;
    rc = counted ? ss_proc_blocks_signal_out(k->tid, s->cfg.signal, &slept1, &out1) : -1;
    if (rc == 1)
        return MASK_BLOCKS;
    bool still = rc == 0 && out1 == out0 && ss_proc_schedstat(k->tid, &in1) == 0 && in1 == in0;
    bool on_cpu = cpu0 != SS_UNKNOWN_U64 && cpu1 != SS_UNKNOWN_U64 && cpu1 > cpu0;
    /* without a syscall file (a process not dumpable) a thread off a CPU
     * all along is believed unless it was seen blocking */
    bool off_cpu_ok = asleep || (!read && !k->blocked_once);
    k->open_look = true;
    k->open_slept = slept0;
    k->open_cpu = cpu0 == SS_UNKNOWN_U64 ? UINT64_MAX : cpu0;
    if ((still && (on_cpu || off_cpu_ok)) || ran_awake || k->unsure >= MASK_UNSURE_MAX)
        return MASK_OPEN;
    k->mask_retry = true;
    return MASK_UNSURE;
}

/* Unsure: not signalled this round, looked at again the next. */
static void note_mask(known *k, mask_look look) {
    switch (look) {
    case MASK_BLOCKS:
        k->blocks = k->blocked_once = k->mask_trusted = true;
        k->open_look = false;
        k->unsure = k->opens = 0;
        return;
    case MASK_OPEN:
        k->mask_trusted = true;
        k->unsure = 0;
        if (k->blocked_once && k->opens < 1) {
            k->opens++;
            k->blocks = true; /* once more */
            return;
        }
        k->blocks = false;
        k->opens = 0;
        return;
    case MASK_UNSURE:
        k->blocks = true;
        k->opens = 0;
        if (k->unsure < UINT8_MAX)
            k->unsure++;
        return;
    }
}

/* Does the thread block the sampling signal? Asked only before it would
 * be signalled (a thread read asleep needs no signal), from SigBlk of its
 * status (13 us on the project's VM), read when not read yet, every
 * BLOCK_RECHECK rounds, every time while it blocks (a thread caught in a
 * short masked section, pthread_create masks everything, comes back
 * next round), and when it was read asleep last (it may have started
 * blocking meanwhile and nothing told). */
static bool deaf(sampler *s, known *k) {
    if (k->mask_round == UINT64_MAX || k->blocks || k->read_asleep ||
        s->rounds - k->mask_round >= BLOCK_RECHECK) {
        note_mask(k, look_at_mask(s, k));
        k->mask_round = s->rounds;
    }
    return k->blocks;
}

/* Would the signal land on the thread's own stack? With the loader's
 * registry, a thread is signalled only when it has an alternate signal
 * stack (ours, or a host's large enough); without a registry, always. */
static bool no_altstack(sampler *s, const known *k) {
    if (!signal_room || signal_room(k->tid) != 0)
        return false;
    s->no_altstack++;
    s->no_altstack_round++;
    return true;
}

void ss_native_set_signal_room(int (*fn)(pid_t tid)) { signal_room = fn; }

/* A tracer (gdb, strace, a crash reporter) is attached: a signal to a
 * thread stops it in the tracer first, and a debugger stops the program
 * and says "received signal SIG61" at every round. So while one is, no
 * thread is signalled: a thread that would be is sampled by the kernel
 * (take_perf) or left out of the round (counted as skipped); threads
 * asleep are read as before. */
static bool traced(sampler *s, known *k) {
    if (s->tracer <= 0)
        return false;
    s->traced_left++;
    k->have_stack = false;
    return true;
}

static void look_for_tracer(sampler *s) {
    static ss_log_limit said;
    int was = s->tracer;
    s->tracer = ss_proc_tracer();
    if (s->tracer > 0 && was <= 0)
        ss_log_limited(&said, SS_LOG_INFO,
                       "a tracer (pid %d: a debugger, strace) is attached to this process: no "
                       "thread is signalled while it is (running threads are sampled by the "
                       "kernel where it allows, else left out of the rounds; sleeping ones are "
                       "read as before)",
                       s->tracer);
}

/* What reading a thread asleep gave. */
typedef enum asleep_rc {
    ASLEEP_READ = 0, /* its stack is in k */
    ASLEEP_RAN,      /* it ran meanwhile: look again */
    ASLEEP_CANNOT,   /* the walk failed: only a signal can tell */
} asleep_rc;

/* The span context read from a thread's memory (has: one was there). */
static void keep_span(known *k, bool has, const ss_otel_rec *rec) {
    k->has_span = has;
    if (!has)
        return;
    memcpy(k->trace_id, rec->trace_id, 16);
    memcpy(k->span_id, rec->span_id, 8);
    k->trace_flags = rec->trace_flags;
    k->n_attrs = rec->attrs_size;
    memcpy(k->attrs, rec->attrs, rec->attrs_size);
}

/* A thread asleep (in a system call, or stopped: the syscall file gives SP
 * and PC), read without a signal. */
static asleep_rc read_asleep(sampler *s, pending *p, const ss_proc_syscall *sc) {
    known *k = p->k;
    if (!k->swap_waiter && wait_masks_signal(sc, s->cfg.signal))
        k->swap_waiter = true; /* see look_at_mask */
    uint64_t hi = stack_top(s, k, sc->sp);
    const uint64_t *ips;
    ss_uw_result res;
    ss_uw_end end = ss_walker_asleep(s->walker, sc->sp, sc->pc, sc->nr >= 0, hi, &ips, &res);
    bool whole = end == SS_UW_COMPLETE || end == SS_UW_CUT_COPY || end == SS_UW_CUT_DEPTH;
    /* its span context, read before the check below, which then covers it */
    find_pthread(s, k);
    ss_otel_rec rec;
    bool has_span = whole && ss_walker_span(s->walker, k->pthread, &k->otel, &rec);
    /* it did not run meanwhile: same CPU clock (read before its syscall
     * line), and where that clock moves only by whole ticks, the same
     * syscall line */
    ss_proc_syscall after;
    uint64_t cpu = ss_thread_cpu_ns(k->tid);
    bool still = cpu == p->cpu &&
                 (s->clock_exact ||
                  (ss_task_read_syscall(k->tid, &k->files, &after) == 0 &&
                   after.len == sc->len && memcmp(after.line, sc->line, sc->len) == 0));
    if (!still) {
        s->fell_by[FELL_RAN]++;
        return ASLEEP_RAN;
    }
    if (!whole) {
        s->fell_by[end]++;
        return ASLEEP_CANNOT;
    }
    bool truncated;
    uint32_t n = resolve(s, ips, res.n, end == SS_UW_CUT_COPY, 0, &truncated);
    p->same_stack = same_frames(k, s->scratch, n);
    keep_stack(k, s->scratch, n, truncated);
    k->settled = true;
    k->last_cpu = cpu;
    s->cut_copy += end == SS_UW_CUT_COPY;
    s->fp_guessed += res.fp_guessed;
    keep_span(k, has_span, &rec);
    p->asleep = true;
    k->read_asleep = true;
    return ASLEEP_READ;
}

/* The sampler-side half of copy mode: unwind what a handler copied. */
static uint32_t unwind_copy(void *arg, const ss_sig_copy *c, bool *cut) {
    sampler *s = arg;
    known *k = c->user;
    uint64_t hi = k ? stack_top(s, k, c->sp) : 0;
    /* the thread has left our handler: its clock now stands for "after
     * the handler" (see note_cpu_after_handler), without a system call
     * in the handler */
    if (k)
        k->answer_cpu = ss_thread_cpu_ns(k->tid);
    ss_uw_result res;
    ss_uw_end end = ss_walker_copy(s->walker, c, hi, c->ips, c->cap, &res);
    *cut = end == SS_UW_CUT_COPY;
    s->cut_copy += *cut;
    if (k) /* a copy shorter than its size: it stopped at SP's page end */
        k->cut_short = *cut && c->len < s->copy_bytes && (!hi || c->map_hi < hi) ? c->len : 0;
    /* a stack that ended early for another reason is what it is: the
     * frames found so far are kept, as an in-handler unwinder does */
    return res.n;
}

/* Deferring threads caught between two waits (see plan, take_deferred). */
#define DEFER_TRIES 4
#define DEFER_CPU_NS 1000000ull /* a thread that used more since the last round works */
#define DEFER_WAIT_NS 500000ull
#define DEFER_NEAR_NS 2000000ull /* two looks further apart tell nothing */

/* A slot for a thread to be signalled. Its handler bounds the stack it
 * copies by its own glibc descriptor; the main thread's records no stack,
 * so the main thread's slot carries its stack mapping (its top never
 * moves, unlike a table's idea of other mappings). */
/* Where glibc's ld.so noted the top of the process's initial stack, the
 * main thread's (an address in it, at the start, near its top). */
extern void *__libc_stack_end;

static ss_sig_slot *assign_slot(sampler *s, known *k) {
    bool main_thread = k->tid == s->pid;
    /* Not known yet (the first round of a process, or of a forked child,
     * whose main thread was never read asleep): without them the handler
     * would copy only to the end of SP's page. */
    if (main_thread && !k->stack_hi && __libc_stack_end)
        stack_top(s, k, (uint64_t)(uintptr_t)__libc_stack_end);
    return ss_sig_assign(k->tid, main_thread ? k->stack_lo : 0, main_thread ? k->stack_hi : 0, k);
}

/* ---- one round ---------------------------------------------------- */

/* A thread the runtime's own sampler takes (ss_native_sample_into). */
static bool skipped_by_runtime(const sampler *s, pid_t tid) {
    uint32_t lo = 0, hi = s->n_skip;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->skip[mid] == tid)
            return true;
        if (s->skip[mid] < tid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* ---- running threads that may not be signalled ------------------------ */

static void perf_refused(sampler *s, int rc) {
    /* past the budget (tried again later), or about this thread only (it
     * ended: ESRCH) */
    if (s->perf_said || (rc != -EACCES && rc != -EPERM && rc != -ECANCELED && rc != -EOPNOTSUPP &&
                         rc != -ENOSYS))
        return;
    s->perf_said = true;
    if (rc == -EOPNOTSUPP) {
        ss_info("threads that block the sampling signal while they run are counted, not "
                "sampled: under valgrind a perf event would sample valgrind's registers");
        return;
    }
    if (rc == -ECANCELED) {
        ss_info("threads that block the sampling signal while they run are counted, not "
                "sampled: the process runs under a seccomp filter, where the agent opens no "
                "perf event (perf_event_open is in systemd's @debug set)");
        return;
    }
    char paranoid[16] = "?";
    int fd = open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, paranoid, sizeof paranoid - 1);
        paranoid[n > 0 ? n : 0] = '\0';
        paranoid[strcspn(paranoid, "\n")] = '\0';
        close(fd);
    }
    ss_info("threads that block the sampling signal while they run are counted, not sampled: "
            "the kernel refused a perf event for them (%s; kernel.perf_event_paranoid is %s: "
            "2 or less, or CAP_PERFMON, lets a process sample its own threads)",
            strerror(-rc), paranoid);
}

/* A running thread that blocks the signal, has no alternate stack known,
 * or is traced is sampled by the kernel (perf_thread.h): its event is
 * opened the first round it is seen so (sampled from the next), and the
 * round takes its newest sample since the round before, unwound as a
 * signal handler's copy. false: nothing to show (counted as blocking or
 * skipped). */
static bool take_perf(sampler *s, pending *p) {
    known *k = p->k;
    if (k->perf_refused || k->st.state == 'Z' || k->st.state == 'X')
        return false; /* (a main thread that called pthread_exit is a zombie) */
    if (!s->perf_stack) {
        s->perf_stack = malloc(ss_perf_stack_bytes(s->copy_bytes) + 8);
        s->perf_ips = malloc((size_t)(s->cfg.max_depth + 1) * sizeof *s->perf_ips);
        if (!s->perf_stack || !s->perf_ips) {
            free(s->perf_stack);
            free(s->perf_ips);
            s->perf_stack = NULL;
            s->perf_ips = NULL;
            return false;
        }
    }
    if (!k->perf.ring) {
        uint64_t period = (uint64_t)(s->cfg.interval_ms ? s->cfg.interval_ms : 1) * 500000ull;
        int rc = ss_perf_thread_open(&k->perf, k->tid, period, s->copy_bytes);
        k->perf_quiet = 0;
        if (rc != 0) {
            k->perf_refused = rc != -EMFILE; /* past the budget: tried again later */
            perf_refused(s, rc);
        }
        return false;
    }
    ss_perf_sample smp;
    smp.stack = s->perf_stack;
    if (!ss_perf_thread_take(&k->perf, s->prev_round_ns, &smp,
                             ss_perf_stack_bytes(s->copy_bytes)))
        return false;
    ss_sig_copy c = {.gregs = smp.gregs,
                     .stack = smp.stack,
                     .len = smp.len,
                     .sp = smp.sp,
                     .map_hi = smp.at_end ? smp.sp + smp.len : 0,
                     .ips = s->perf_ips,
                     .cap = s->cfg.max_depth + 1,
                     .user = k};
    bool cut, truncated;
    uint32_t depth = unwind_copy(s, &c, &cut);
    uint32_t n = resolve(s, s->perf_ips, depth, cut, cut ? k->cut_short : 0, &truncated);
    find_pthread(s, k);
    ss_otel_rec rec;
    bool has_span = ss_walker_span(s->walker, k->pthread, &k->otel, &rec);
    keep_span(k, has_span, &rec);
    p->same_stack = same_frames(k, s->scratch, n);
    keep_stack(k, s->scratch, n, truncated);
    k->st.state = 'R';
    k->syscall_nr = -1;
    k->read_asleep = false;
    k->settled = false;
    k->perf_quiet = 0;
    p->perf = true;
    return true;
}

/* Decide, for every listed thread, whether to signal it. Returns how many
 * threads go into the round; *skipped and *blocked count the others.
 *
 * /proc reads are the bulk of a round's cost, so a thread's stat is read
 * when first seen and every refresh_rounds() rounds; where it is (syscall)
 * and its I/O when it has run; SigBlk only before it would be signalled;
 * an idle thread costs one clock_gettime. */
/* Rounds between two reads of an idle thread's stat (its name or nice
 * value may change while it sleeps: another thread can set both): every
 * BLOCK_RECHECK rounds, at most once a second. */
static uint64_t refresh_rounds(const sampler *s) {
    uint64_t per_second = s->cfg.interval_ms ? (1000 + s->cfg.interval_ms - 1) / s->cfg.interval_ms : 1;
    return per_second > BLOCK_RECHECK ? per_second : BLOCK_RECHECK;
}

/* plan_walks will read the clock of every thread the runtime samples. */
static bool walks_planned(const sampler *s) {
    return s->walk && s->mode == SS_UNWIND_COPY && s->n_skip;
}

static uint32_t plan(sampler *s, uint32_t *skipped, uint32_t *blocked) {
    pid_t me = ss_gettid();
    uint64_t refresh = refresh_rounds(s);
    bool copy = s->mode == SS_UNWIND_COPY;
    uint64_t now_boot = ss_boottime_ns();
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_threads; i++) {
        known *k = &s->threads[i];
        ss_proc_release_held(); /* the previous thread's look is over */
        bool runtimes = skipped_by_runtime(s, k->tid);
        if (k->tid == me || runtimes || ss_internal_thread_is(k->tid)) {
            /* still there? (the list is kept while no thread is gone); a
             * runtime's thread is told by plan_walks' clock read */
            if (k->tid != me && !(runtimes && walks_planned(s)) &&
                ss_thread_cpu_ns(k->tid) == SS_UNKNOWN_U64)
                s->relist = true;
            continue;
        }
        pending *p = &s->work[n];
        memset(p, 0, sizeof *p);
        p->k = k;
        p->prev_cpu = k->seen ? k->last_cpu : SS_UNKNOWN_U64;
        p->cpu = ss_thread_cpu_ns(k->tid);
        if (p->cpu == SS_UNKNOWN_U64) {
            (*skipped)++; /* exited since listed */
            s->relist = true;
            continue;
        }
        /* name, nice and start time: when first seen, then every
         * refresh rounds, each thread in its own round (by tid) so that a
         * round reads a share of them, not all at once */
        bool first = !k->seen;
        bool fresh = first || s->rounds - k->refreshed >= refresh;
        if (fresh) {
            if (read_stat_kept(k, !first && !idle_since_last(k, p->cpu)) != 0) {
                (*skipped)++;
                continue;
            }
            uint64_t early = first ? (uint64_t)k->tid % refresh : 0;
            k->refreshed = s->rounds > early ? s->rounds - early : 0;
            k->seen = true;
        }
        if (is_ours(k->tid, k->st.name, me))
            continue;
        if (!k->have_stack && maybe_agents(s, k, now_boot)) {
            (*skipped)++;
            continue;
        }
        /* an event that gave no sample for a while (the thread sleeps, or
         * waits, or runs no more while blocking) leaves its place to
         * another thread's: 8 at most are open */
        if (k->perf.ring && ++k->perf_quiet > PERF_QUIET_ROUNDS)
            ss_perf_thread_close(&k->perf);
        if (idle_since_last(k, p->cpu)) {
            if (++k->idle_rounds == IDLE_ROUNDS_KEEP_FILES)
                ss_task_files_close(&k->files);
            goto planned;
        }
        k->idle_rounds = 0;
        ss_proc_syscall sc;
        if (read_running_facts(s, k, fresh, first, &sc) != 0) {
            (*skipped)++;
            continue;
        }
        if (copy && !force_signal && sc.unknown && k->st.state == 'S' && unread_asleep(s, p))
            goto planned;
        bool fell = false; /* asleep, but the walk failed: signalled after all */
        if (copy && !force_signal) {
            uint64_t used = p->prev_cpu == SS_UNKNOWN_U64 || p->cpu < p->prev_cpu
                                ? p->cpu : p->cpu - p->prev_cpu;
            if (!sc.running && k->st.state != 'Z' && k->st.state != 'X') {
                asleep_rc rc = read_asleep(s, p, &sc);
                if (rc == ASLEEP_READ)
                    goto planned;
                if (rc == ASLEEP_RAN) {
                    p->deferred = true; /* woke during the walk: as below */
                    goto planned;
                }
                if (stopped(k)) {
                    (*skipped)++;
                    k->have_stack = false;
                    continue;
                }
                fell = true;
            } else if (sc.running && !sc.unknown && (k->read_asleep || !k->have_stack) &&
                       used < DEFER_CPU_NS) {
                /* a thread that sleeps most of the time (asleep at its
                 * last stack, or not seen before, and little CPU since),
                 * caught in the moment it runs between two waits (timers
                 * of related periods stay in phase with the rounds):
                 * signalled now, it would often get the signal back in its
                 * wait, which ends it with EINTR. Looked at again at the
                 * end of the round, just before it would be signalled. */
                p->deferred = true;
                goto planned;
            }
        }
        if (deaf(s, k)) {
            if (k->mask_retry && copy && !force_signal) {
                /* found open, not yet proved its own: looked at again at
                 * the end of the round, once it ran (see look_at_mask) */
                p->deferred = true;
                goto planned;
            }
            if (copy && !force_signal && !fell && take_perf(s, p))
                goto planned;
            (*blocked)++; /* running (or unreadable), and deaf to the signal */
            k->have_stack = false;
            continue;
        }
        /* running, but a signal would land on its own stack, or a tracer
         * would see it: the kernel's sample stands for it too */
        bool unsignalled = no_altstack(s, k) || traced(s, k);
        if (unsignalled && copy && !force_signal && !fell && take_perf(s, p))
            goto planned;
        if (unsignalled) {
            (*skipped)++;
            k->have_stack = false;
            continue;
        }
        if (k->perf.ring)
            ss_perf_thread_close(&k->perf); /* it takes the signal again */
        if (fell) {
            s->fallbacks++;
            s->fallbacks_round++;
        }
        k->read_asleep = false;
        p->slot = assign_slot(s, k);
        if (!p->slot) {
            (*skipped)++; /* out of slots (memory) */
            continue;
        }
    planned:
        if (k->number == 0)
            k->number = s->next_number++;
        n++;
    }
    ss_proc_release_held();
    return n;
}

/* The deferred threads, after the others' signals. Back in a wait: read
 * asleep. Running (its CPU clock moves): signalled now, in a second small
 * batch. Neither: it is runnable but waiting for a CPU, very likely still
 * inside the system call it woke up in (its timer fired, its fd became
 * ready): a signal now would be pending when it runs, and poll and select
 * then return EINTR even though they had timed out (fs/select.c checks
 * signal_pending before returning 0). So a thread is signalled only when
 * it ran between two looks 0.5 ms apart (at most 2 ms); one that never
 * gets a CPU over DEFER_TRIES looks is left out of the round (skipped). */
static void take_deferred(sampler *s, uint32_t planned) {
    bool any = false;
    for (int attempt = 0; attempt < DEFER_TRIES; attempt++) {
        uint32_t waiting = 0;
        for (uint32_t i = 0; i < planned; i++) {
            pending *p = &s->work[i];
            if (!p->deferred || p->slot || p->asleep || p->gone)
                continue;
            known *k = p->k;
            ss_proc_syscall sc;
            bool fell = false;
            uint64_t now = ss_mono_ns();
            uint64_t cpu = ss_thread_cpu_ns(k->tid); /* before the syscall line: see read_asleep */
            if (cpu == SS_UNKNOWN_U64 || ss_task_read_syscall(k->tid, &k->files, &sc) != 0) {
                p->gone = true;
                continue;
            }
            if (!sc.running && read_stat(k) == 0 && k->st.state != 'Z' && k->st.state != 'X') {
                k->syscall_nr = sc.nr;
                p->cpu = cpu;
                asleep_rc rc = read_asleep(s, p, &sc);
                if (rc == ASLEEP_READ)
                    continue;
                if (rc == ASLEEP_RAN && attempt + 1 < DEFER_TRIES) {
                    p->look_ns = now;
                    p->cpu = SS_UNKNOWN_U64; /* the next look starts a watch */
                    waiting++;
                    continue;
                }
                if (rc == ASLEEP_RAN || stopped(k)) {
                    p->gone = true; /* never still, or stopped: left out, counted as skipped */
                    continue;
                }
                fell = true;
            } else if (p->cpu != SS_UNKNOWN_U64 && cpu >= p->cpu + DEFER_CPU_NS) {
                k->st.state = 'R'; /* busy since the last look: a worker */
                k->syscall_nr = -1;
            } else if (cpu == p->cpu || attempt == 0 || p->cpu == SS_UNKNOWN_U64 ||
                       now - p->look_ns > DEFER_NEAR_NS) {
                /* not on a CPU since the last look. The first look only
                 * starts the watch (it may have woken twice since the
                 * plan), and so does a look long after the one before (a
                 * sampler kept off the CPU sees the thread's next wait
                 * end as well) */
                p->cpu = cpu;
                p->look_ns = now;
                if (attempt + 1 < DEFER_TRIES)
                    waiting++;
                else
                    p->gone = true; /* never seen running: left out, counted as skipped */
                continue;
            } else {
                k->st.state = 'R'; /* ran between two looks: a worker */
                k->syscall_nr = -1;
            }
            p->cpu = cpu;
            if (deaf(s, k)) {
                p->gone = true; /* counted as skipped; as blocking from the next round */
                continue;
            }
            if (no_altstack(s, k) || traced(s, k)) {
                p->gone = true; /* counted as skipped */
                k->have_stack = false;
                continue;
            }
            if (fell) {
                s->fallbacks++;
                s->fallbacks_round++;
            }
            k->read_asleep = false;
            p->slot = assign_slot(s, k);
            p->gone = !p->slot;
            any |= p->slot != NULL;
        }
        if (!waiting)
            break;
        ss_sleep_ns(DEFER_WAIT_NS);
    }
    if (any)
        ss_sig_collect(ss_mono_ns() + (uint64_t)s->cfg.answer_ms * 1000000ull, unwind_copy, s);
}

static void fill_facts(const pending *p, ss_thread_sample *t, uint64_t now_boot,
                       uint64_t now_wall) {
    known *k = p->k;
    t->number = k->number;
    t->nid = k->tid;
    if (active && active->in_runtime)
        t->number = -(int64_t)k->tid; /* not the runtime's: no id of its own,
                                         negative, apart from the runtime's ids */
    t->tid = k->pthread;
    t->prio = 0;
    t->os_prio = k->st.nice;
    t->cpu_ns = p->cpu;
    bool first = p->prev_cpu == SS_UNKNOWN_U64 || p->cpu < p->prev_cpu;
    t->cpu_delta_ns = first ? 0 : p->cpu - p->prev_cpu;
    t->on_cpu = first ? k->st.state == 'R' : t->cpu_delta_ns > 0;
    t->elapsed_ns = ss_proc_elapsed_ns(k->st.start_ticks, now_boot);
    if (t->elapsed_ns != SS_UNKNOWN_U64 && t->elapsed_ns / 1000000 < now_wall / 1000000)
        t->start_wall_ms = now_wall / 1000000 - t->elapsed_ns / 1000000;
    t->io_read_bytes = k->io_read;
    t->io_write_bytes = k->io_write;
    t->has_span = k->has_span;
    memcpy(t->trace_id, k->trace_id, 16);
    memcpy(t->span_id, k->span_id, 8);
    t->trace_flags = k->trace_flags;
}

/* A signalled thread's answer into k. false: it did not answer. */
static bool take_answer(sampler *s, pending *p) {
    known *k = p->k;
    ss_sig_answer a;
    if (!ss_sig_result(p->slot, &a)) {
        k->have_stack = false; /* the old one is stale now */
        /* No answer: it may have started blocking the signal since its
         * SigBlk was last read (up to BLOCK_RECHECK rounds ago). Look
         * now: from the next round it is counted as blocked instead of
         * being signalled again (RT signals queue up while blocked) and
         * waited for until the answer timeout, round after round. */
        if (ss_proc_blocks_signal(k->tid, s->cfg.signal) == 1) {
            note_mask(k, MASK_BLOCKS);
            k->mask_round = s->rounds;
        }
        return false;
    }
    bool truncated;
    uint32_t n = resolve(s, a.ips, a.depth, a.cut_copy, a.cut_copy ? k->cut_short : 0,
                         &truncated);
    if (a.pthread)
        k->pthread = a.pthread;
    if (k->tid == s->pid && a.pthread)
        ss_walker_note_main(a.pthread);
    p->handler_cpu = s->mode == SS_UNWIND_COPY ? k->answer_cpu : a.cpu_ns;
    if (p->handler_cpu == SS_UNKNOWN_U64)
        p->handler_cpu = 0;
    k->has_span = a.has_span;
    memcpy(k->trace_id, a.trace_id, 16);
    memcpy(k->span_id, a.span_id, 8);
    k->trace_flags = a.trace_flags;
    k->n_attrs = a.has_span ? a.n_attrs : 0;
    if (k->n_attrs)
        memcpy(k->attrs, a.attrs, k->n_attrs);
    p->same_stack = same_frames(k, s->scratch, n);
    keep_stack(k, s->scratch, n, truncated);
    s->signalled++;
    return true;
}

#define KEYMAP_ROUNDS 16u

/* The thread's span attributes as text on the sample being built. An
 * index the key map lacks makes the map be read again, as OTEP 4947 asks
 * of readers (at most every 16 rounds). */
static void span_attrs(sampler *s, ss_round_builder *b, const known *k) {
    char text[SS_OTEL_ATTRS_MAX * 2 + 256];
    bool unknown;
    size_t n = ss_otel_attrs_text(k->attrs, k->n_attrs, text, sizeof text, &unknown);
    /* at most every KEYMAP_ROUNDS rounds: a writer whose process context
     * has no map at all must not cost a /proc/self/maps scan per round */
    if (unknown && (!s->keymap_round || s->rounds + 1 >= s->keymap_round + KEYMAP_ROUNDS)) {
        s->keymap_round = s->rounds + 1;
        ss_otel_keymap_refresh(ss_uw_read_memory);
        n = ss_otel_attrs_text(k->attrs, k->n_attrs, text, sizeof text, &unknown);
    }
    ss_round_builder_set_span_attrs(b, text, n);
}

/* Put one planned thread into the round. false: it gets no entry. */
static bool emit(sampler *s, ss_round_builder *b, pending *p, uint64_t now_boot,
                 uint64_t now_wall) {
    known *k = p->k;
    if (p->slot) {
        if (!take_answer(s, p))
            return false;
    } else if (p->deferred && !p->asleep) {
        return false; /* gone, never on a CPU, or no slot: counted as skipped */
    } else if (p->perf) {
        s->perf_taken++;
    } else if (p->asleep) {
        s->asleep++;
    } else {
        s->reused++;
    }
    const char *name = s->rename ? s->rename(k->st.name) : k->st.name;
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    if (!t)
        return false;
    fill_facts(p, t, now_boot, now_wall);
    if (k->has_span && k->n_attrs)
        span_attrs(s, b, k);
    uint32_t n = k->have_stack ? k->n_frames : 0;
    t->truncated = k->truncated;
    /* its identity: exporters reuse what they made of it last time */
    uint64_t id = k->have_stack && ss_stack_reuse() ? k->stack_id : 0;
    t->stack_id = id;
    t->same_stack = id && id == k->emitted_id;
    k->emitted_id = id;
    /* the state is a function of the /proc state, the system call and the
     * frames: decided again only when one of them changed */
    if (!id || k->state_of != id || k->state_letter != k->st.state ||
        k->state_nr != k->syscall_nr) {
        ss_native_state(k->st.state, k->syscall_nr, k->frames, n, &k->state, &k->status,
                        &k->state_detail);
        k->state_of = id;
        k->state_letter = k->st.state;
        k->state_nr = k->syscall_nr;
    }
    t->state = k->state;
    t->status = k->status;
    t->state_detail = k->state_detail;
    ss_round_builder_add_frames(b, k->frames, n); /* a failure fails the round */
    return true;
}

/* ---- a runtime's running threads ---------------------------------- */

/* The runtime's threads running now (their syscall file says "running")
 * get a signal whose handler runs the runtime's walker too (copy mode
 * only). The others are the runtime's to sample (blocked, waiting,
 * parked: no signal). */
static void plan_walks(sampler *s) {
    s->n_walking = 0;
    if (!walks_planned(s))
        return;
    if (s->cap_walking < s->n_skip) {
        known **w = realloc(s->walking, s->n_skip * sizeof *w);
        if (w)
            s->walking = w;
        ss_sig_slot **sl = realloc(s->walk_slots, s->n_skip * sizeof *sl);
        if (sl)
            s->walk_slots = sl;
        if (!w || !sl)
            return;
        s->cap_walking = s->n_skip;
    }
    bool full = false; /* no slot left: the clocks are still read */
    for (uint32_t i = 0; i < s->n_threads; i++) {
        known *k = &s->threads[i];
        if (!skipped_by_runtime(s, k->tid))
            continue;
        /* a thread whose CPU clock stood since the last look did not run:
         * one clock read instead of a /proc read (most of a JVM's threads
         * are parked). The only read of it this round: plan's "still
         * there?" and the runtime's CPU figure (ss_native_gathered_cpu)
         * stand on it too. */
        uint64_t cpu = ss_thread_cpu_ns(k->tid), last = k->walk_cpu;
        k->walk_cpu = cpu;
        k->walk_cpu_gen = s->gathers;
        if (cpu == SS_UNKNOWN_U64)
            s->relist = true; /* gone: the next round lists the threads again */
        if (full || cpu == SS_UNKNOWN_U64 || cpu == last)
            continue;
        ss_proc_syscall sc;
        if (ss_task_read_syscall(k->tid, &k->files, &sc) != 0 || !sc.running || sc.unknown)
            continue;
        if (deaf(s, k) || no_altstack(s, k))
            continue;
        ss_sig_slot *slot = assign_slot(s, k);
        if (!slot) {
            full = true;
            continue;
        }
        ss_sig_want_runtime(slot);
        k->read_asleep = false;
        s->walking[s->n_walking] = k;
        s->walk_slots[s->n_walking++] = slot;
    }
}

/* Native frames of a walked thread, leaf first, up to the runtime's own
 * code: the first address in no module (a JIT's code: the runtime's
 * walker has those frames) ends them; a leaf there named by a perf map
 * (an intrinsic, a stub) is kept. */
static uint32_t resolve_native_part(sampler *s, const uint64_t *ips, uint32_t depth) {
    uint32_t max = s->cfg.max_depth, n = 0;
    for (uint32_t i = 0; i < depth && n < max; i++) {
        if (grow_scratch(s, n + RESOLVE_MAX + 1) != 0)
            break;
        uint64_t ip = ips[i] & ~SS_IP_EXACT;
        uint32_t room = max - n < RESOLVE_MAX ? max - n : RESOLVE_MAX;
        int got = ss_symbols_resolve(s->symbols, ip, !(ips[i] & SS_IP_EXACT), s->scratch + n,
                                     (int)room);
        if (got <= 0)
            break;
        if (!s->scratch[n].map) {
            const ss_funcinfo *fn = s->scratch[n].fn;
            if (i == 0 && fn && fn->ns && strcmp(fn->ns, "unknown") != 0)
                n += (uint32_t)got;
            break;
        }
        n += (uint32_t)got;
    }
    return n;
}

static void take_walks(sampler *s) {
    for (uint32_t i = 0; i < s->n_walking; i++) {
        known *k = s->walking[i];
        ss_sig_answer a;
        k->walk_gen = s->gathers;
        k->walk_answered = ss_sig_result(s->walk_slots[i], &a);
        if (!k->walk_answered) {
            k->have_stack = false;
            continue;
        }
        keep_stack(k, s->scratch, resolve_native_part(s, a.ips, a.depth), false);
        k->walk_n = a.rt_n;
        k->walk_frames = a.rt;
        s->signalled++;
    }
}

/* The thread tid of the last gather (s->threads is sorted by tid), or NULL. */
static known *find_known(sampler *s, pid_t tid) {
    uint32_t lo = 0, hi = s->n_threads;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->threads[mid].tid < tid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_threads && s->threads[lo].tid == tid ? &s->threads[lo] : NULL;
}

void ss_native_set_runtime_walk(ss_sig_runtime_fn fn) { ss_sig_set_runtime_walk(fn); }

bool ss_native_walked(pid_t tid, const void **frames, int32_t *n, const ss_frame **native,
                      uint32_t *n_native) {
    sampler *s = active;
    if (!s)
        return false;
    known *k = find_known(s, tid);
    if (!k)
        return false;
    if (k->walk_gen != s->gathers || !k->walk_answered)
        return false;
    *frames = k->walk_frames;
    *n = k->walk_n;
    *native = k->have_stack ? k->frames : NULL;
    *n_native = k->have_stack ? k->n_frames : 0;
    return true;
}

/* Listing /proc/self/task costs about 0.35 us per thread (the kernel
 * makes a dentry for each), a third of a round over idle threads. It is
 * not needed when the process has as many threads as were listed last
 * time and every one of those is still there: then they are all its
 * threads. The count is one read of /proc/self/stat; "still there" is
 * each thread's CPU clock, which the round reads anyway: a clock that
 * does not answer (the thread is gone; a clock id names only threads of
 * this process) makes the next round list again. Listed anyway every
 * RELIST_ROUNDS rounds. */
#define RELIST_ROUNDS 64u

static bool must_list(sampler *s) {
    if (s->relist || s->n_threads == 0 || s->rounds == 0 ||
        s->rounds - s->listed_round >= RELIST_ROUNDS || !ss_stack_reuse())
        return true;
    int n = ss_proc_thread_count();
    return n <= 0 || (uint32_t)n != s->n_threads;
}

/* The stacks of every thread of the round: listed, planned, signalled,
 * deferred ones looked at again. Returns how many were planned, -1 when the
 * round is lost. */
static int gather(sampler *s, uint32_t *skipped, uint32_t *blocked) {
    s->pid = getpid();
    s->prev_round_ns = s->round_ns;
    s->round_ns = ss_mono_ns();
    ss_proc_limits_round(); /* a host may lower RLIMIT_NOFILE at any time */
    if (must_list(s)) {
        int n = ss_proc_list_tids(&s->tids, &s->cap_tids);
        if (n < 0 || merge_known(s, s->tids, (uint32_t)n) != 0)
            return -1;
        s->relist = false;
        s->listed_round = s->rounds;
    } else {
        s->lists_saved++;
    }
    if (s->n_threads > s->cap_work) {
        pending *w = realloc(s->work, (size_t)s->n_threads * sizeof *w);
        if (!w)
            return -1;
        s->work = w;
        s->cap_work = s->n_threads;
    }
    if (ss_sig_begin(s->n_threads) != 0)
        return -1;
    ss_otel_refresh(); /* modules publishing thread context (OTEP 4947) */
    ss_walker_round(s->walker);
    s->fallbacks_round = 0;
    s->no_altstack_round = 0;
    uint32_t planned = s->walk_only ? 0 : plan(s, skipped, blocked);
    s->gathers++;
    plan_walks(s);
    ss_sig_collect(ss_mono_ns() + (uint64_t)s->cfg.answer_ms * 1000000ull, unwind_copy, s);
    take_walks(s);
    take_deferred(s, planned);
    if (ss_sig_lost())
        return -1; /* the host took the signal over: said once, no round */
    return (int)planned;
}

/* The planned threads into b, then the round's bookkeeping. */
static void emit_all(sampler *s, ss_round_builder *b, uint32_t planned, uint64_t now_wall,
                     uint32_t *skipped) {
    uint64_t now_boot = ss_boottime_ns();
    for (uint32_t i = 0; i < planned; i++) {
        pending *p = &s->work[i];
        if (skipped_by_runtime(s, p->k->tid))
            continue; /* the runtime's own thread (new since the gather) */
        if (!emit(s, b, p, now_boot, now_wall))
            (*skipped)++;
    }
    /* Our own signal costs a thread some CPU: compare the next round with
     * the clock as it is after the handler (read last, once the threads
     * had time to go back to sleep), or an idle thread would look busy
     * forever. A stack read asleep keeps the clock read after its walk. */
    for (uint32_t i = 0; i < planned; i++) {
        pending *p = &s->work[i];
        if (p->slot)
            note_cpu_after_handler(p);
        else if (!p->asleep)
            p->k->last_cpu = p->cpu;
    }
    /* repeated every round while it lasts: the first, then a count */
    static ss_log_limit asleep_signalled, no_altstack;
    if (s->fallbacks_round)
        ss_log_limited(&asleep_signalled, SS_LOG_DEBUG,
                       "native round %llu: %u threads asleep were signalled (their stack could "
                       "not be read without)",
                       (unsigned long long)s->rounds + 1, s->fallbacks_round);
    if (s->no_altstack_round)
        ss_log_limited(&no_altstack, SS_LOG_DEBUG,
                       "native round %llu: %u running threads not signalled: no alternate "
                       "signal stack known (the signal would land on their own stack)",
                       (unsigned long long)s->rounds + 1, s->no_altstack_round);
    s->rounds++;
    ss_symbols_idle(s->symbols); /* libdw's tables go once no address missed for a while */
    s->skipped_total += *skipped;
}

static ss_round *take_round(sampler *s) {
    uint64_t t0 = ss_mono_ns();
    uint64_t now_wall = ss_wall_ns();
    uint32_t skipped = 0, blocked = 0;
    look_for_tracer(s);
    int planned = gather(s, &skipped, &blocked);
    if (planned < 0)
        return NULL;
    ss_round_builder_begin(s->builder, now_wall, s->cfg.interval_ms, SS_RUNTIME_NATIVE);
    emit_all(s, s->builder, (uint32_t)planned, now_wall, &skipped);
    ss_round *r = ss_round_builder_finish(s->builder, skipped, blocked);
    if (r)
        r->took_ns = ss_mono_ns() - t0;
    return r;
}

/* ---- setup -------------------------------------------------------- */

static void sampler_free(sampler *s) {
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n_threads; i++)
        known_free(&s->threads[i]);
    free(s->threads);
    free(s->next);
    free(s->work);
    free(s->tids);
    free(s->scratch);
    free(s->walking);
    free(s->walk_slots);
    free(s->perf_stack);
    free(s->perf_ips);
    ss_round_builder_destroy(s->builder);
    ss_symbols_destroy(s->symbols);
    ss_walker_destroy(s->walker);
    free(s);
}

/* Does a thread's CPU clock tell alone that the thread did not run? It
 * counts nanoseconds on x86-64 (sched_clock: the TSC or a paravirtual
 * clock); where sched_clock falls back to jiffies (no usable TSC) it moves
 * by whole ticks (1 ms or more) and a thread can run without moving it:
 * then a stack read asleep is also checked by its syscall line, read
 * again after the walk (2 us a thread on the project's VM). Seen once, on
 * this thread's clock: read until it moves (each read costs CPU); a step
 * under 50 us is no tick. A clock that did not move in 4,000 reads (about
 * 1 ms of CPU) counts as coarse. */
static bool cpu_clock_exact(void) {
    static int exact = -1;
    if (exact >= 0)
        return exact;
    struct timespec ts;
    uint64_t first = 0, now = 0;
    exact = 0;
    for (int i = 0; i < 4000; i++) {
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
            return false;
        now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        if (i == 0)
            first = now;
        else if (now != first) {
            exact = now - first < 50000;
            break;
        }
    }
    return exact;
}

static sampler *sampler_new(const ss_config *cfg, int mode, uint32_t copy_bytes) {
    sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->clock_exact = cpu_clock_exact();
    s->cfg = *cfg;
    s->mode = mode;
    s->copy_bytes = copy_bytes;
    s->next_number = 2; /* #1 is the main thread */
    s->symbols = inherited_symbols ? inherited_symbols : ss_symbols_create();
    inherited_symbols = NULL;
    s->builder = ss_round_builder_create();
    s->walker = ss_walker_create(copy_bytes, cfg->max_depth + 1);
    if (!page_cut_fn)
        page_cut_fn = ss_funcinfo_intern("stackshot", "truncated", "stack end unknown", NULL,
                                         SS_FRAME_NATIVE);
    if (!copy_cut_fn)
        copy_cut_fn = ss_funcinfo_intern("stackshot", "truncated", "STACKSHOT_STACK_COPY", NULL,
                                         SS_FRAME_NATIVE);
    if (!s->symbols || !s->builder || !s->walker) {
        sampler_free(s);
        return NULL;
    }
    return s;
}

/* STACKSHOT_DURATION (ms, 0: no end): no round after this monotonic time;
 * what the exporters hold is still delivered (at the latest at exit). */
static uint64_t sample_until;

/* Lost rounds repeat every interval while the cause lasts (a late chroot
 * without /proc, descriptors or memory exhausted): one line, then counts. */
static ss_log_limit round_lost_said;
static ss_log_limit made_real_time_said;

/* ---- a host whose threads have all ended ----------------------------- */

/* A host whose main thread called pthread_exit goes on while its other
 * threads run; glibc ends the process (exit(0)) when the last thread ends.
 * The agent's threads count among them: without this, such a process
 * never ended once its own threads had, and, every live thread of it
 * blocking every signal, not even SIGTERM ended it. So after each round:
 * no thread listed but the agent's, and the main thread a zombie (it
 * called pthread_exit; one that returned from main ended the process).
 * Any thread the agent cannot tell as its own counts as the host's. */
static const known *known_tid(const sampler *s, pid_t tid) {
    for (uint32_t i = 0; i < s->n_threads; i++)
        if (s->threads[i].tid == tid)
            return &s->threads[i];
    return NULL;
}

static bool host_ended(sampler *s) {
    pid_t me = ss_gettid();
    for (uint32_t i = 0; i < s->n_threads; i++) {
        known *k = &s->threads[i];
        if (k->tid != s->pid && !is_ours(k->tid, k->st.name, me))
            return false;
    }
    /* the main thread's state as this round read it, through the file it
     * keeps: a /proc file opened every round would take the lowest free
     * descriptor for a moment, and a host that closes its descriptors and
     * opens new ones expecting their numbers (close(2), then its log) got
     * the next one (stderr_closeall) */
    const known *m = known_tid(s, s->pid);
    if (!m || (m->st.state != 'Z' && m->st.state != 'X'))
        return false;
    /* the round's list may be one from rounds ago (must_list): list again,
     * and a thread not known by name is the host's */
    int n = ss_proc_list_tids(&s->tids, &s->cap_tids);
    s->relist = true;
    if (n < 0)
        return false;
    for (int i = 0; i < n; i++) {
        const known *k = known_tid(s, s->tids[i]);
        if (s->tids[i] != s->pid && (!k || !is_ours(k->tid, k->st.name, me)))
            return false;
    }
    return true;
}

/* exit(0), as glibc would in the host's last thread, from a thread of
 * its own: the agent then stops as at any exit (its threads joined, what
 * it collected flushed within the shutdown deadline). */
static void *end_as_host(void *arg) {
    (void)arg;
    exit(0);
}

static void end_host(void) {
    static atomic_bool done_once;
    if (atomic_exchange(&done_once, true))
        return;
    ss_debug("the host's threads have all ended (its main thread called pthread_exit): the "
             "process exits with status 0, as it would without the agent");
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &a, end_as_host, NULL) == 0)
        pthread_setname_np(t, "stackshot-exit");
    else
        ss_warn("the host's threads have all ended, and no thread could be made to end the "
                "process: it ends when the agent stops");
    pthread_attr_destroy(&a);
}

static void *sampler_main(void *arg) {
    sampler *s = arg;
    /* this thread's mask is every agent thread's (ss_thread_start) */
    if (ss_proc_sigblk(ss_gettid(), &s->agent_mask) != 0)
        s->agent_mask = 0;
    uint64_t interval = (uint64_t)s->cfg.interval_ms * 1000000ull;
    /* a deferred start waited one interval already (the loader; a forked
     * child's restart, min(interval, 100 ms)) */
    uint64_t next = ss_mono_ns() + (s->cfg.start_deferred ? 0 : interval);
    pthread_mutex_lock(&lock);
    while (!stopping) {
        struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
                              .tv_nsec = (long)(next % 1000000000ull)};
        int rc = pthread_cond_timedwait(&wake, &lock, &ts);
        if (stopping)
            break;
        if (rc != ETIMEDOUT && ss_mono_ns() < next)
            continue; /* spurious wake-up */
        if (sample_until && ss_mono_ns() >= sample_until) {
            ss_info("sampling ended: STACKSHOT_DURATION has passed");
            next = UINT64_MAX / 2; /* wait for the stop */
            sample_until = 0;
            continue;
        }
        pthread_mutex_unlock(&lock);
        if (ss_internal_threads_keep_normal())
            ss_log_limited(&made_real_time_said, SS_LOG_INFO,
                           "the process made the agent's threads real-time: they run as "
                           "SCHED_OTHER (an agent thread never takes a real-time priority)");
        atomic_store(&in_round, true);
        ss_round *r = take_round(s);
        atomic_store(&in_round, false);
        if (r) {
            ss_exporters_publish(r);
            if (host_ended(s))
                end_host();
        } else if (ss_sig_lost())
            return NULL; /* native sampling is over for this process (lock not held) */
        else
            ss_log_limited(&round_lost_said, SS_LOG_WARN,
                           "native sampler: a round was lost (out of memory or /proc "
                           "unreadable)");
        /* absolute deadlines; after a late round, skip the missed ticks */
        uint64_t now = ss_mono_ns();
        next += interval;
        if (next <= now)
            next += ((now - next) / interval + 1) * interval;
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void init_cond(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &a);
    pthread_condattr_destroy(&a);
}

static atomic_bool core_dlopened;

void ss_native_note_dlopened(void) {
    atomic_store(&core_dlopened, true);
    if (ss_gettid() == getpid()) /* the loader runs on the main thread */
        ss_walker_note_main((uint64_t)pthread_self());
}

/* STACKSHOT_UNWIND: "copy" (default), "step", "fast" or "gcc"; see
 * docs/native.md. "fast" keeps unw_backtrace's frame cache in libunwind's
 * thread-local storage; in a core opened by dlopen (the library as
 * shipped) glibc allocates that storage with malloc on the thread's first
 * access, which would be inside our handler, possibly interrupting the
 * thread's own malloc: "gcc", as fast and touching no thread-local
 * storage, is used. */
static int unwind_wanted(void) {
    const char *v = ss_config_str("STACKSHOT_UNWIND", "copy");
    static bool reported; /* once, not at every ss_native_sample_once */
    if (strcmp(v, "fast") == 0 && atomic_load(&core_dlopened)) {
        if (!reported) {
            reported = true;
            ss_config_bad("STACKSHOT_UNWIND", v,
                          "libunwind's frame cache would be allocated inside the "
                          "signal handler (thread-local storage of a dlopened library)",
                          "using gcc");
        }
        return SS_UNWIND_GCC;
    }
    if (strcmp(v, "copy") == 0)
        return SS_UNWIND_COPY;
    if (strcmp(v, "fast") == 0)
        return SS_UNWIND_FAST;
    if (strcmp(v, "gcc") == 0)
        return SS_UNWIND_GCC;
    if (strcmp(v, "step") == 0)
        return SS_UNWIND_STEP;
    if (!reported) {
        reported = true;
        ss_config_bad("STACKSHOT_UNWIND", v, "not \"copy\", \"step\", \"fast\" or \"gcc\"",
                      "using copy");
    }
    return SS_UNWIND_COPY;
}

/* Is the program a Go executable? The Go linker writes a note owned by
 * "Go" (type 4, the Go build id) into every ELF it links, cgo or not; the
 * program's notes are in memory (its first entry of dl_iterate_phdr). */
static int find_go_note(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    bool *is_go = arg;
    for (int i = 0; i < info->dlpi_phnum && !*is_go; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(uintptr_t)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + 12 <= end) {
            uint32_t namesz, descsz, type;
            memcpy(&namesz, p, 4);
            memcpy(&descsz, p + 4, 4);
            memcpy(&type, p + 8, 4);
            const uint8_t *name = p + 12;
            /* the Go linker writes the name "Go\0\0" (namesz 4) */
            if ((namesz == 3 || namesz == 4) && type == 4 && name + 3 <= end &&
                memcmp(name, "Go", 3) == 0)
                *is_go = true;
            p = name + ((namesz + 3u) & ~3u) + ((descsz + 3u) & ~3u);
        }
    }
    return 1; /* the program is the first entry */
}

static bool go_program(void) {
    static int known = -1;
    if (known < 0) {
        bool is_go = false;
        dl_iterate_phdr(find_go_note, &is_go);
        known = is_go;
    }
    return known;
}

/* STACKSHOT_SIGNAL, unless set: SIGRTMAX-3 (config), but SIGRTMIN in a Go
 * program: the Go runtime installs its handler on every signal but 32 and
 * 33 (glibc's) and 34 (musl's), and keeps the signals it does not use to
 * itself (Go 1.19's sigfwdgo forwards to an earlier handler only signals
 * it does not handle, or synchronous ones). 34 is SIGRTMIN under glibc. */
static int signal_wanted(const ss_config *cfg) {
    bool is_go = go_program();
    ss_sig_note_go(is_go);
    if (!is_go || ss_config_raw("STACKSHOT_SIGNAL"))
        return cfg->signal;
    static bool said;
    if (!said) {
        said = true;
        ss_debug("a Go program: the sampling signal is SIGRTMIN (%d), the one real-time signal "
                 "the Go runtime leaves to others (STACKSHOT_SIGNAL sets another)",
                 SIGRTMIN);
    }
    return SIGRTMIN;
}

/* STACKSHOT_STACK_COPY: bytes of stack a handler copies (copy mode). */
static uint32_t copy_wanted(void) {
    return (uint32_t)ss_config_size("STACKSHOT_STACK_COPY", 64u * 1024u, 4u * 1024u,
                                    1024u * 1024u);
}

static int prepare(const ss_config *given) {
    if (ss_gettid() == getpid())
        ss_walker_note_main((uint64_t)pthread_self());
    ss_config c = *given;
    const ss_config *cfg = &c;
    c.signal = signal_wanted(given);
    int mode = unwind_wanted();
    uint32_t copy_bytes = copy_wanted();
    ss_sig_require_altstack(signal_room != NULL);
    int rc = ss_sig_start(cfg->signal, cfg->max_depth, mode, copy_bytes);
    if (rc != 0)
        return rc;
    mode = ss_sig_mode(); /* gcc may have fallen back to step */
    if (active && (active->mode != mode || active->copy_bytes != copy_bytes)) {
        sampler_free(active);
        active = NULL;
    }
    if (!active) {
        active = sampler_new(cfg, mode, copy_bytes);
        if (!active) {
            ss_sig_stop();
            return -ENOMEM;
        }
        int tid_off, stack_off, stack_size_off;
        ss_walker_descriptor_layout(active->walker, &tid_off, &stack_off, &stack_size_off);
        ss_sig_descriptor_layout(tid_off, stack_off, stack_size_off);
        if (fork_fell != FORK_QUIET)
            ss_debug("native sampler: pid %d: forked during a round; symbol resolver %s",
                     (int)getpid(), fork_fell == FORK_IN_ROUND ? "kept" : "rebuilt");
        fork_fell = FORK_QUIET;
    }
    active->cfg = *cfg;
    return 0;
}

static int native_start(const ss_config *cfg) {
    if (thread_running)
        return 0;
    int rc = prepare(cfg);
    if (rc != 0)
        return rc;
    init_cond();
    stopping = false;
    uint64_t ms = (uint64_t)ss_config_int("STACKSHOT_DURATION", 0, 0, INT64_C(31536000000));
    sample_until = ms ? ss_mono_ns() + ms * 1000000ull : 0;
    rc = ss_thread_start(&thread, "sampler", sampler_main, active);
    if (rc != 0) {
        ss_sig_stop();
        return rc;
    }
    thread_running = true;
    return 0;
}

static void log_counters(const sampler *s) {
    uint64_t compiled, cached, perf_refused_n;
    uint32_t perf_open;
    ss_walker_stats(s->walker, &compiled, &cached);
    ss_perf_thread_stats(&perf_open, &perf_refused_n);
    ss_debug("native sampler: %llu rounds, %llu stacks taken by signal, %llu read asleep "
             "without one, %llu reused (idle), %llu threads skipped (%llu for lack of "
             "alternate-stack room, %llu running with no alternate signal stack known: "
             "no_altstack), %llu answers refused off an alternate stack (off_stack); %llu "
             "asleep not signalled (syscall file unreadable, a wait a signal ends); %llu "
             "not signalled while a tracer was attached; %llu running, not signalled, "
             "sampled by the kernel (perf events: %u open, %llu refused); %llu "
             "asleep fell back to a signal (walk ended: no CFI %llu, register unknown %llu, "
             "memory %llu, bad frame %llu; ran meanwhile %llu); "
             "%llu stacks cut at STACKSHOT_STACK_COPY, %llu frame pointers found on the "
             "stack; unwind rules %llu compiled, %llu cached",
             (unsigned long long)s->rounds, (unsigned long long)s->signalled,
             (unsigned long long)s->asleep, (unsigned long long)s->reused,
             (unsigned long long)s->skipped_total,
             (unsigned long long)ss_sig_no_room_total(), (unsigned long long)s->no_altstack,
             (unsigned long long)ss_sig_off_stack_total(), (unsigned long long)s->unread,
             (unsigned long long)s->traced_left, (unsigned long long)s->perf_taken, perf_open,
             (unsigned long long)perf_refused_n, (unsigned long long)s->fallbacks,
             (unsigned long long)s->fell_by[SS_UW_NO_CFI],
             (unsigned long long)s->fell_by[SS_UW_NO_REGISTER],
             (unsigned long long)s->fell_by[SS_UW_BAD_MEMORY],
             (unsigned long long)s->fell_by[SS_UW_BAD_FRAME],
             (unsigned long long)s->fell_by[FELL_RAN], (unsigned long long)s->cut_copy,
             (unsigned long long)s->fp_guessed, (unsigned long long)compiled,
             (unsigned long long)cached);
}

static void native_stop(uint64_t deadline_ns) {
    if (!thread_running)
        return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    int rc = ss_thread_join(thread, deadline_ns);
    thread_running = false;
    ss_sig_stop();
    if (rc != 0) {
        /* still running (detached): its state stays, leaked on purpose */
        ss_warn("native sampler did not stop in time; left running detached");
        forgotten = active;
        active = NULL;
        return;
    }
    log_counters(active);
    sampler_free(active);
    active = NULL;
}

/* Forked inside a round: the round's state may be half-updated, the
 * symbol resolver only if the fork fell inside a lookup. Otherwise the
 * child's next sampler takes it over: rebuilt, it would read every
 * module's DWARF again before the child's first round (hundreds of
 * milliseconds, seconds on a loaded machine). */
static void inherit_symbols(sampler *s) {
    fork_fell = ss_symbols_busy(s->symbols) ? FORK_IN_LOOKUP : FORK_IN_ROUND;
    if (fork_fell == FORK_IN_LOOKUP)
        return;
    ss_symbols_destroy(inherited_symbols); /* a parent's, never used: consistent */
    inherited_symbols = s->symbols;
    s->symbols = NULL;
}

/* At the child's start, not in its at-fork handler: a child that exits
 * or execs before its restart (most children of a forking server) never
 * writes the pages this touches (each write there, a copy of a page the
 * fork shares). Nothing here is read by a host thread meanwhile: the
 * parent's threads do not exist here, and no sampler runs. */
static void native_fork_forget(uint64_t main_pthread) {
    /* The sampler thread does not exist here; the state it was using may
     * be half-updated: keep it reachable, never touch it, start afresh. */
    pthread_mutex_init(&lock, NULL);
    thread_running = false;
    stopping = false;
    /* The kept /proc descriptors name the parent's threads: closed now,
     * not at fork (most children exit or exec first: close-on-exec; each
     * is an identity check and a close, three per thread of the host, in
     * every fork). The parent's copies: one the host took over meanwhile
     * is left alone and not counted. */
    ss_proc_close_inherited();
    /* first: whatever is kept or destroyed below must not reach the
     * parent's libdw tables when they are not here */
    if (libdw_lost) {
        ss_debug("pid %d: the parent's libdw tables did not come with the fork (it forks "
                 "often); its names stay, a new address reads DWARF again",
                 (int)getpid());
        if (inherited_symbols)
            (void)ss_symbols_adopt(inherited_symbols);
        if (active)
            (void)ss_symbols_adopt(active->symbols);
        libdw_lost = false;
    }
    /* A sampler caught between rounds left its state consistent: keep
     * it, the warm symbol cache above all (a cold start costs the child
     * hundreds of milliseconds of DWARF reading). The parent's threads
     * drop out of it at the child's first round. in_round is the value
     * at the fork: no thread of this child has changed it since. */
    if (active && atomic_load(&in_round)) {
        inherit_symbols(active);
        forgotten = active;
        active = NULL;
    }
    atomic_store(&in_round, false);
    /* the child's main thread is the one that forked: the parent's main
     * descriptor is not the child's when another forked */
    ss_walker_note_main(main_pthread);
    ss_sig_after_fork();
}

static void native_fork_lost_libdw(void) { libdw_lost = true; }

const ss_source_ops ss_native_source = {
    .name = "native",
    .start = native_start,
    .stop = native_stop,
    .fork_forget = native_fork_forget,
    .fork_lost_libdw = native_fork_lost_libdw,
};

/* ---- synchronous use (benchmarks, tests) -------------------------- */

int ss_native_sample_once(const ss_config *cfg, ss_round **out) {
    *out = NULL;
    if (thread_running)
        return -EBUSY;
    int rc = prepare(cfg);
    if (rc != 0)
        return rc;
    *out = take_round(active);
    return *out ? 0 : ss_sig_lost() ? -EBUSY : -ENOMEM;
}

/* The signal mask every agent thread has (ss_thread_start blocks all), as
 * /proc shows it: what maybe_agents compares young threads with (a gRPC
 * thread before it registers). The native sampler thread reads its own;
 * a runtime's sampler thread has the runtime's mask, so the caller's mask
 * is read for a moment with everything blocked. 0: unknown. */
static uint64_t agents_mask(void) {
    sigset_t all, old;
    sigfillset(&all);
    uint64_t mask = 0;
    if (pthread_sigmask(SIG_SETMASK, &all, &old) != 0)
        return 0;
    if (ss_proc_sigblk(ss_gettid(), &mask) != 0)
        mask = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return mask;
}

/* ss_native_gather's planned threads, for ss_native_emit. */
static int gathered = -1;

int ss_native_gather(const ss_config *cfg, const pid_t *skip, uint32_t n_skip, bool walk,
                     bool others, uint32_t *skipped, uint32_t *blocked) {
    gathered = -1;
    if (thread_running)
        return -EBUSY;
    /* set up once (the handler, the sampler's state); later rounds reuse it */
    if (!active || !active->in_runtime) {
        int rc = prepare(cfg);
        if (rc != 0)
            return rc;
        active->in_runtime = true;
        active->agent_mask = agents_mask();
    }
    sampler *s = active;
    s->skip = skip;
    s->n_skip = n_skip;
    s->walk = walk;
    s->walk_only = !others;
    gathered = gather(s, skipped, blocked);
    s->skip = NULL;
    s->n_skip = 0;
    return gathered < 0 ? (ss_sig_lost() ? -EBUSY : -ENOMEM) : 0;
}

uint64_t ss_native_gathered_cpu(pid_t tid) {
    sampler *s = active;
    if (gathered < 0 || !s)
        return SS_UNKNOWN_U64;
    const known *k = find_known(s, tid);
    return k && k->walk_cpu_gen == s->gathers ? k->walk_cpu : SS_UNKNOWN_U64;
}

void ss_native_emit(ss_round_builder *b, const pid_t *skip, uint32_t n_skip,
                    const char *(*rename)(const char *comm), uint32_t *skipped) {
    if (gathered < 0 || !active)
        return;
    sampler *s = active;
    s->skip = skip;
    s->n_skip = n_skip;
    s->rename = rename;
    emit_all(s, b, (uint32_t)gathered, ss_wall_ns(), skipped);
    s->skip = NULL;
    s->n_skip = 0;
    gathered = -1;
}

void ss_native_sample_stats(uint64_t *rounds, uint64_t *signalled, uint64_t *reused) {
    *rounds = active ? active->rounds : 0;
    *signalled = active ? active->signalled : 0;
    *reused = active ? active->reused : 0;
}

void ss_native_sample_counts(ss_native_counts *c) {
    memset(c, 0, sizeof *c);
    if (!active)
        return;
    c->rounds = active->rounds;
    c->signalled = active->signalled;
    c->asleep = active->asleep;
    c->reused = active->reused;
    c->fallbacks = active->fallbacks;
    c->cut_copy = active->cut_copy;
    c->fp_guessed = active->fp_guessed;
    c->sent = ss_sig_sent();
    c->no_altstack = active->no_altstack;
    c->off_stack = ss_sig_off_stack_total();
    c->lists_saved = active->lists_saved;
}

void ss_native_bench_force_signal(bool on) { force_signal = on; }

void ss_native_test_coarse_clock(bool on) {
    if (active)
        active->clock_exact = !on && cpu_clock_exact();
}

uint32_t ss_native_handler_ns(double *out, uint32_t max) {
    uint32_t cyc[4096];
    double per_ns = ss_sig_cycles_per_ns();
    if (per_ns <= 0)
        return 0;
    uint32_t n = ss_sig_handler_cycles(cyc, max < 4096 ? max : 4096);
    for (uint32_t i = 0; i < n; i++)
        out[i] = cyc[i] / per_ns;
    return n;
}

void ss_native_release(void) {
    if (thread_running)
        return;
    ss_sig_stop();
    sampler_free(active);
    active = NULL;
}
