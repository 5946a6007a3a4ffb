/* native_sampler.c: the native source of rounds.
 *
 * A "stackshot-sampler" thread wakes every interval (absolute deadlines on
 * the monotonic clock, so rounds do not drift), lists /proc/self/task in
 * tid order, and for each thread of the host:
 *
 *   - reads its facts (name, /proc state, nice, start time, CPU clock, I/O);
 *   - leaves it out when it is one of ours, or counts it as `blocked` when
 *     it blocks the sampling signal (SigBlk, read when first seen and then
 *     every BLOCK_RECHECK rounds);
 *   - reuses its previous stack when it has used no CPU since the previous
 *     round and sleeps in the same system call (an idle thread's stack has
 *     not changed, and signalling it would wake it for nothing);
 *   - otherwise assigns it a slot to be signalled (signal_sampler.c).
 *
 * Then all the chosen threads are signalled in parallel, the answers are
 * resolved to frames (symbols are cached by address), each thread's state
 * is decided from /proc and its leaf frames, and the round goes to the
 * exporters.
 *
 * Everything here runs on the sampler thread (or on the caller of
 * ss_native_sample_once), never in a host thread. */
#include "proc_threads.h"
#include "signal_sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK_RECHECK 16u /* rounds between SigBlk re-reads */
#define RESOLVE_MAX 16    /* frames one address may expand to (inlining) */

/* What the sampler remembers about a thread from round to round. */
typedef struct known {
    pid_t tid;
    int64_t number;          /* order first seen: main thread #1 */
    uint64_t last_cpu;       /* CPU clock after the previous round */
    bool settled;            /* it went straight back to its wait after our handler */
    uint64_t refreshed;      /* round of the last full /proc read */
    bool seen;               /* facts below were read at least once */
    bool blocks;             /* blocks the sampling signal */
    bool have_stack;         /* frames below hold the previous stack */
    bool truncated;
    bool has_span;
    ss_proc_stat st;         /* name, state, nice, start: last read */
    ss_task_files files;     /* its /proc files kept open */
    uint32_t idle_rounds;    /* rounds in a row its stack was reused */
    long syscall_nr;         /* at the previous stack */
    uint64_t io_read, io_write; /* SS_UNKNOWN_U64: unreadable */
    uint64_t pthread;
    uint8_t trace_id[16];
    uint8_t span_id[8];
    ss_frame *frames;
    uint32_t n_frames, cap_frames;
} known;

/* One thread's work in the current round. */
typedef struct pending {
    known *k;
    ss_sig_slot *slot;       /* NULL: reuse the previous stack */
    uint64_t cpu;            /* CPU clock before signalling */
    uint64_t prev_cpu;       /* SS_UNKNOWN_U64 the first time */
    uint64_t handler_cpu;    /* its CPU clock as our handler ended (0: unknown) */
    bool same_stack;         /* the stack taken equals the one before */
} pending;

typedef struct sampler {
    ss_config cfg;
    ss_symbols *symbols;
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
    uint64_t reused, signalled, skipped_total;
} sampler;

/* Stop handshake with the sampler thread. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;
static bool stopping;
static bool thread_running;
static pthread_t thread;
static sampler *active;
/* Kept reachable after a fork (the parent's copy may be mid-update). */
static sampler *forgotten;
/* The sampler thread is taking a round: its state may be half-updated. */
static _Atomic bool in_round;

/* ---- known threads ------------------------------------------------ */

static void known_free(known *k) {
    free(k->frames);
    k->frames = NULL;
    ss_task_files_close(&k->files);
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

static int keep_stack(known *k, const ss_frame *f, uint32_t n) {
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

/* ---- one round ---------------------------------------------------- */

/* Agent threads register their tids; the name prefix catches the others
 * (started before registration, or by code that cannot register). The
 * main thread is never ours, whatever the program is called. */
static bool is_ours(pid_t tid, const char *name, pid_t me) {
    return tid == me || ss_internal_thread_is(tid) ||
           (tid != getpid() && strncmp(name, "stackshot-", 10) == 0);
}

/* An idle thread: it has not run since its stack was taken (its CPU
 * clock has not moved) and it was sleeping then. Its stack, system call
 * and state cannot have changed, so nothing about it is read again. */
static bool idle_since_last(const known *k, uint64_t cpu) {
    return k->have_stack && k->settled && cpu != SS_UNKNOWN_U64 && cpu == k->last_cpu &&
           (k->st.state == 'S' || k->st.state == 'D');
}

/* The CPU clock an idle thread is compared with next round is read at the
 * end of the round, so that returning from our handler does not make it
 * look busy. But a thread may have been caught in a short wait (a page
 * fault, a lock) and been woken during the round to sleep somewhere else,
 * all within that CPU: its stack would then be stale forever. So a thread
 * is "settled" (its stack may be reused) only when two stacks in a row
 * were the same and it used almost no CPU after our handler. */
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
 * tid to a new thread since we last looked: forget the old one. */
static int read_stat(known *k) {
    uint64_t start = k->st.start_ticks;
    int rc = ss_task_read_stat(k->tid, &k->files, &k->st);
    if (rc != 0)
        return rc;
    if (k->seen && k->st.start_ticks != start) {
        k->number = k->tid == getpid() ? 1 : 0;
        k->have_stack = false;
        k->blocks = false;
        k->last_cpu = SS_UNKNOWN_U64;
    }
    return 0;
}

/* Read what changes while a thread runs: where it is (the syscall file:
 * "running", or the system call it sleeps in) and its I/O. The /proc state
 * letter is read only when the thread is not running (S, D, T... matter
 * then) or was just read by a full refresh. */
static int read_running_facts(known *k, bool stat_fresh) {
    ss_proc_syscall sc;
    int rc = ss_task_read_syscall(k->tid, &k->files, &sc);
    if (rc != 0)
        return rc;
    if (sc.running) {
        k->st.state = 'R';
        k->syscall_nr = -1;
    } else {
        if (!stat_fresh && (rc = read_stat(k)) != 0)
            return rc;
        k->syscall_nr = sc.nr;
    }
    if (ss_task_read_io(k->tid, &k->files, &k->io_read, &k->io_write) != 0)
        k->io_read = k->io_write = SS_UNKNOWN_U64;
    return 0;
}

/* A thread idle this long gives its kept descriptors back (to the budget
 * other, busier threads may need). */
#define IDLE_ROUNDS_KEEP_FILES 16u

/* Decide, for every listed thread, whether to signal it. Returns how many
 * threads go into the round; *skipped and *blocked count the others.
 *
 * /proc reads are the bulk of a round's cost (tens of microseconds each
 * on some kernels), so a thread is read in full when first seen, every
 * BLOCK_RECHECK rounds (name, SigBlk), and when it has run; an idle thread
 * costs one clock_gettime. */
static uint32_t plan(sampler *s, uint32_t *skipped, uint32_t *blocked) {
    pid_t me = ss_gettid();
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_threads; i++) {
        known *k = &s->threads[i];
        if (k->tid == me || ss_internal_thread_is(k->tid))
            continue;
        pending *p = &s->work[n];
        p->k = k;
        p->slot = NULL;
        p->handler_cpu = 0;
        p->same_stack = false;
        p->prev_cpu = k->seen ? k->last_cpu : SS_UNKNOWN_U64;
        p->cpu = ss_thread_cpu_ns(k->tid);
        if (p->cpu == SS_UNKNOWN_U64) {
            (*skipped)++; /* exited since listed */
            continue;
        }
        /* a thread seen blocking the signal may have been caught inside
         * a short masked section (pthread_create masks everything): look
         * again every round until it does not */
        bool full = !k->seen || k->blocks || s->rounds - k->refreshed >= BLOCK_RECHECK;
        if (full) {
            if (read_stat(k) != 0) {
                (*skipped)++;
                continue;
            }
            k->blocks = ss_proc_blocks_signal(k->tid, s->cfg.signal) == 1;
            k->refreshed = s->rounds;
            k->seen = true;
        }
        if (is_ours(k->tid, k->st.name, me))
            continue;
        if (k->blocks) {
            (*blocked)++;
            continue;
        }
        if (idle_since_last(k, p->cpu)) {
            if (++k->idle_rounds == IDLE_ROUNDS_KEEP_FILES)
                ss_task_files_close(&k->files);
        } else {
            k->idle_rounds = 0;
            if (read_running_facts(k, full) != 0) {
                (*skipped)++;
                continue;
            }
            p->slot = ss_sig_assign(k->tid);
            if (!p->slot) {
                (*skipped)++; /* out of slots (memory) */
                continue;
            }
        }
        if (k->number == 0)
            k->number = s->next_number++;
        n++;
    }
    return n;
}

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

/* Resolve an answer's ips into s->scratch, leaf first, at most max_depth
 * frames (the root side is cut). Returns the frame count. */
static uint32_t resolve(sampler *s, const ss_sig_answer *a, bool *truncated) {
    uint32_t max = s->cfg.max_depth;
    uint32_t n_ips = a->depth;
    *truncated = n_ips > max;
    if (n_ips > max)
        n_ips = max;
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_ips && n < max; i++) {
        if (grow_scratch(s, n + RESOLVE_MAX) != 0)
            break;
        uint64_t ip = a->ips[i] & ~SS_IP_EXACT;
        bool ret_addr = !(a->ips[i] & SS_IP_EXACT);
        uint32_t room = max - n < RESOLVE_MAX ? max - n : RESOLVE_MAX;
        int got = ss_symbols_resolve(s->symbols, ip, ret_addr, s->scratch + n, (int)room);
        if (got <= 0)
            continue;
        n += (uint32_t)got;
        /* an inline chain that filled the depth hides the rest */
        if (n == max && i + 1 < a->depth)
            *truncated = true;
    }
    return n;
}

static void fill_facts(const pending *p, ss_thread_sample *t, uint64_t now_boot,
                       uint64_t now_wall) {
    known *k = p->k;
    t->number = k->number;
    t->nid = k->tid;
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
}

/* Put one planned thread into the round. false: it gets no entry. */
static bool emit(sampler *s, pending *p, uint64_t now_boot, uint64_t now_wall) {
    known *k = p->k;
    if (p->slot) {
        ss_sig_answer a;
        if (!ss_sig_result(p->slot, &a)) {
            k->have_stack = false; /* the old one is stale now */
            /* No answer: it may have started blocking the signal since its
             * SigBlk was last read (up to BLOCK_RECHECK rounds ago). Look
             * now: from the next round it is counted as blocked instead of
             * being signalled again (RT signals queue up while blocked) and
             * waited for until the answer timeout, round after round. */
            if (ss_proc_blocks_signal(k->tid, s->cfg.signal) == 1) {
                k->blocks = true;
                k->refreshed = s->rounds;
            }
            return false;
        }
        bool truncated;
        uint32_t n = resolve(s, &a, &truncated);
        k->pthread = a.pthread;
        p->handler_cpu = a.cpu_ns;
        k->has_span = a.has_span;
        memcpy(k->trace_id, a.trace_id, 16);
        memcpy(k->span_id, a.span_id, 8);
        k->truncated = truncated;
        p->same_stack = same_frames(k, s->scratch, n);
        keep_stack(k, s->scratch, n);
        s->signalled++;
    } else {
        s->reused++;
    }
    ss_thread_sample *t = ss_round_builder_add_thread(s->builder, k->st.name);
    if (!t)
        return false;
    fill_facts(p, t, now_boot, now_wall);
    uint32_t n = k->have_stack ? k->n_frames : 0;
    t->truncated = k->truncated;
    ss_native_state(k->st.state, k->syscall_nr, k->frames, n, &t->state, &t->status,
                    &t->state_detail);
    for (uint32_t i = 0; i < n; i++)
        if (ss_round_builder_add_frame(s->builder, &k->frames[i]) != 0)
            break;
    return true;
}

static ss_round *take_round(sampler *s) {
    uint64_t t0 = ss_mono_ns();
    uint64_t now_wall = ss_wall_ns();
    uint32_t skipped = 0, blocked = 0;
    int n = ss_proc_list_tids(&s->tids, &s->cap_tids);
    if (n < 0 || merge_known(s, s->tids, (uint32_t)n) != 0)
        return NULL;
    if (s->n_threads > s->cap_work) {
        pending *w = realloc(s->work, (size_t)s->n_threads * sizeof *w);
        if (!w)
            return NULL;
        s->work = w;
        s->cap_work = s->n_threads;
    }
    if (ss_sig_begin(s->n_threads) != 0)
        return NULL;
    uint32_t planned = plan(s, &skipped, &blocked);
    ss_sig_collect(ss_mono_ns() + (uint64_t)s->cfg.answer_ms * 1000000ull);
    if (ss_sig_lost())
        return NULL; /* the host took the signal over: said once, no round */

    ss_round_builder_begin(s->builder, now_wall, s->cfg.interval_ms, SS_RUNTIME_NATIVE);
    uint64_t now_boot = ss_boottime_ns();
    for (uint32_t i = 0; i < planned; i++) {
        pending *p = &s->work[i];
        if (!emit(s, p, now_boot, now_wall))
            skipped++;
    }
    /* Our own signal costs a thread some CPU: compare the next round with
     * the clock as it is after the handler (read last, once the threads
     * had time to go back to sleep), or an idle thread would look busy
     * forever. */
    for (uint32_t i = 0; i < planned; i++) {
        pending *p = &s->work[i];
        if (p->slot)
            note_cpu_after_handler(p);
        else
            p->k->last_cpu = p->cpu;
    }
    s->rounds++;
    s->skipped_total += skipped;
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
    ss_round_builder_destroy(s->builder);
    ss_symbols_destroy(s->symbols);
    free(s);
}

static sampler *sampler_new(const ss_config *cfg) {
    sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    s->next_number = 2; /* #1 is the main thread */
    s->symbols = ss_symbols_create();
    s->builder = ss_round_builder_create();
    if (!s->symbols || !s->builder) {
        sampler_free(s);
        return NULL;
    }
    return s;
}

static void *sampler_main(void *arg) {
    sampler *s = arg;
    uint64_t interval = (uint64_t)s->cfg.interval_ms * 1000000ull;
    uint64_t next = ss_mono_ns() + interval;
    pthread_mutex_lock(&lock);
    while (!stopping) {
        struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
                              .tv_nsec = (long)(next % 1000000000ull)};
        int rc = pthread_cond_timedwait(&wake, &lock, &ts);
        if (stopping)
            break;
        if (rc != ETIMEDOUT && ss_mono_ns() < next)
            continue; /* spurious wake-up */
        pthread_mutex_unlock(&lock);
        atomic_store(&in_round, true);
        ss_round *r = take_round(s);
        atomic_store(&in_round, false);
        if (r)
            ss_exporters_publish(r);
        else if (ss_sig_lost())
            return NULL; /* native sampling is over for this process (lock not held) */
        else
            ss_warn("native sampler: a round was lost (out of memory or /proc unreadable)");
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

void ss_native_note_dlopened(void) { atomic_store(&core_dlopened, true); }

/* STACKSHOT_UNWIND: "step" (default), "fast" or "gcc"; see docs/native.md.
 * "fast" keeps unw_backtrace's frame cache in libunwind's thread-local
 * storage; in a core opened by dlopen (the library as shipped) glibc
 * allocates that storage with malloc on the thread's first access, which
 * would be inside our handler, possibly interrupting the thread's own
 * malloc: "gcc", as fast and touching no thread-local storage, is used. */
static int unwind_wanted(void) {
    const char *v = ss_config_str("STACKSHOT_UNWIND", "step");
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
    if (strcmp(v, "fast") == 0)
        return SS_UNWIND_FAST;
    if (strcmp(v, "gcc") == 0)
        return SS_UNWIND_GCC;
    if (strcmp(v, "step") != 0 && !reported) {
        reported = true;
        ss_config_bad("STACKSHOT_UNWIND", v, "not \"step\", \"fast\" or \"gcc\"", "using step");
    }
    return SS_UNWIND_STEP;
}

static int prepare(const ss_config *cfg) {
    int rc = ss_sig_start(cfg->signal, cfg->max_depth, unwind_wanted());
    if (rc != 0)
        return rc;
    if (!active) {
        active = sampler_new(cfg);
        if (!active) {
            ss_sig_stop();
            return -ENOMEM;
        }
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
    rc = ss_thread_start(&thread, "sampler", sampler_main, active);
    if (rc != 0) {
        ss_sig_stop();
        return rc;
    }
    thread_running = true;
    return 0;
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
    ss_debug("native sampler: %llu rounds, %llu stacks taken, %llu reused (idle), "
             "%llu threads skipped (%llu for lack of alternate-stack room)",
             (unsigned long long)active->rounds, (unsigned long long)active->signalled,
             (unsigned long long)active->reused,
             (unsigned long long)active->skipped_total,
             (unsigned long long)ss_sig_no_room_total());
    sampler_free(active);
    active = NULL;
}

static void native_after_fork_child(void) {
    /* The sampler thread does not exist here; the state it was using may
     * be half-updated: keep it reachable, never touch it, start afresh. */
    pthread_mutex_init(&lock, NULL);
    thread_running = false;
    stopping = false;
    /* A sampler caught between rounds left its state consistent: keep
     * it, the warm symbol cache above all (a cold start costs the child
     * hundreds of milliseconds of DWARF reading). The parent's threads
     * drop out of it at the child's first round. */
    if (active && atomic_load(&in_round)) {
        forgotten = active;
        active = NULL;
    }
    atomic_store(&in_round, false);
    ss_sig_after_fork();
    /* the kept /proc descriptors name the parent's threads: closed here,
     * before the host's code runs again in the child */
    ss_proc_close_all();
}

const ss_source_ops ss_native_source = {
    .name = "native",
    .start = native_start,
    .stop = native_stop,
    .after_fork_child = native_after_fork_child,
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

void ss_native_sample_stats(uint64_t *rounds, uint64_t *signalled, uint64_t *reused) {
    *rounds = active ? active->rounds : 0;
    *signalled = active ? active->signalled : 0;
    *reused = active ? active->reused : 0;
}

void ss_native_release(void) {
    if (thread_running)
        return;
    ss_sig_stop();
    sampler_free(active);
    active = NULL;
}
