/* sampler.c: the JVMTI source of rounds.
 *
 * One JVM agent thread, "stackshot-sampler" (RunAgentThread: a daemon Java
 * thread that runs native code and so never holds up a safepoint while it
 * waits), takes every interval the stacks of all platform threads with one
 * GetAllStackTraces call, then resolves and describes them outside of any
 * VM operation, and publishes one round. Nothing is done in JVMTI event
 * callbacks beyond recording a tid or a virtual thread.
 *
 * GetAllStackTraces or GetThreadListStackTraces? Both take every stack in
 * one VM operation. Measured with bench/java/run.py (2 cores, 101 sampled
 * threads, 10 ms, medians; STACKSHOT_JVMTI_STACKS switches them), the stack
 * part of a round on an idle JVM: JDK 17 305 us (all) vs 298 us (list),
 * pause 269 vs 252 us; JDK 25 485 vs 507 us, pause 417 vs 443 us. With two
 * busy workers on the two cores both vary from 1.4 to 4.5 ms, dominated by
 * waiting for the CPU, with no consistent winner. So the cost is the same;
 * GetAllStackTraces is the default because it is one call instead of two,
 * and its thread list and stacks come from the same VM operation (the
 * list variant can name threads that exit before their stacks are taken).
 *
 * STACKSHOT_JVMTI_STACKS=each takes the stacks one GetStackTrace at a time:
 * handshakes with one thread each, no safepoint of all threads. Measured
 * the same way on JDK 17 with two busy workers: stacks 469 us per round
 * against 3421 us for GetAllStackTraces (0.45 ms stop-the-world each
 * round), 346 vs 442 us when idle; the workload's overall slowdown at
 * 10 ms stays about the same (the agent's CPU on a full 2-core machine).
 * It is the default while running threads are walked where they run
 * (STACKSHOT_JAVA_STACKS mixed or java): a thread walked this round needs
 * no JVMTI stack at all, so only the threads not running are handshaked
 * (each one's state is read just before its stack); with
 * STACKSHOT_JAVA_STACKS=safepoint the default stays GetAllStackTraces.
 *
 * With `each`, a thread that did not run since its stack was taken keeps
 * that stack (the reuse rule, at add_stack), and every Java stack keeps an
 * identity while it does not change (jmemo.c), so the exporters reuse what
 * they made of it.
 *
 * Before the JVMTI stacks, the native pass (ss_native_gather): the VM's
 * own threads, and the running Java threads signalled and walked by
 * AsyncGetCallTrace in the handler (agct.c); the VM's threads are added
 * to the round after the Java ones (ss_native_emit).
 */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/grow.h"
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "jvmti/jvmti_internal.h"
#include "samplers/ss_samplers.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    bool alive;
    uint32_t interval_ms;
    uint64_t until; /* STACKSHOT_DURATION: no round after this monotonic time; 0 none */
    uint32_t max_depth;
    uint32_t max_vthreads;
    bool include_internal;
    bool use_list;
    bool use_each; /* one GetStackTrace per thread */
    bool vm_threads; /* STACKSHOT_JAVA_VM_THREADS: the VM's own threads too */
    int java_stacks; /* STACKSHOT_JAVA_STACKS */
    ss_config cfg;   /* for the native pass */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* STACKSHOT_JAVA_STACKS: how a running Java thread's stack is taken. */
enum { JS_SAFEPOINT = 0, JS_JAVA, JS_MIXED };

typedef struct sampler {
    ss_round_builder *builder;
    ss_jresolver *resolver;
    ss_nid_matcher *nids;
    int32_t *order;
    int64_t *ids;
    ss_jthread_memo **memos; /* each listed thread's memo entry, by listing index */
    uint32_t cap_order;
    jthread *vthreads;
    jvmtiFrameInfo *frames;
    uint64_t rounds, last_invalid_report;
    ss_jmemo *memo;   /* per Java thread, round to round (jmemo.c) */
    ss_frame *scratch; /* one thread's resolved stack, max_depth + 1 */
    uint64_t reused, taken; /* stacks used again without a handshake; taken */
    uint64_t states_read, states_reused; /* GetThreadState; its answer used again */
    uint64_t stacks_ns;     /* this round: time in GetStackTrace */
    uint64_t now;           /* this round: monotonic ns as the threads were listed (the
                               times of the facts kept in the memo; one clock read a round) */
    pid_t *java_nids; /* kernel tids of this round's Java threads, sorted */
    uint32_t n_java_nids, cap_java_nids;
    bool native_failed; /* the native pass could not start: said once */
    bool walk;          /* this round: running Java threads walked by AGCT */
    uint64_t walked, walk_fell; /* stacks from AGCT; AGCT failed: safepoint stack */
    uint64_t stubs;             /* ... walked from a stub's caller */
    uint64_t fell_by[13];       /* ... by its code: -1 .. -10, [0] other, [11] no env,
                                   [12] AGCT faulted (the guard) */
    bool spans; /* this round: some thread may have a span (jspan.c) */
    /* each: the platform threads as last listed (GetAllThreads), global
     * references, used again while no thread started since (the start
     * count, read before that listing, is the same) and none listed was
     * found ended, for at most a second (listed_ns) */
    jthread *listed;
    jint n_listed;
    uint32_t listed_starts;
    uint64_t listed_ns;
    bool relist;          /* a listed thread has ended: list again */
    bool from_list;       /* this round's threads are the kept listing */
    uint64_t listings, listings_kept;
} sampler;

/* Fill cpu_delta_ns and on_cpu as the native sampler does: the first time
 * a thread is seen it has no delta and is on CPU when RUNNABLE. */
static void cpu_delta(ss_jthread_memo *e, ss_thread_sample *t) {
    t->cpu_delta_ns = 0;
    t->on_cpu = t->state == SS_STATE_RUNNABLE;
    if (!e || t->cpu_ns == SS_UNKNOWN_U64)
        return;
    if (e->cpu_prev != SS_UNKNOWN_U64) {
        t->cpu_delta_ns = t->cpu_ns > e->cpu_prev ? t->cpu_ns - e->cpu_prev : 0;
        t->on_cpu = t->cpu_delta_ns > 0;
    }
    e->cpu_prev = t->cpu_ns;
}

/* ---- one round -------------------------------------------------------- */

/* STACKSHOT_JVMTI_STACKS=each: GetAllThreads only; each thread's state and
 * stack are read when its turn comes (add_platform: GetThreadState, then
 * GetStackTrace). On JDK 15+ a stack of another thread is taken in a
 * handshake with that thread alone instead of a safepoint of all, so a
 * busy thread stops only for its own stack; and a thread that needs no
 * stack from JVMTI (walked where it ran, left out, or unchanged: the reuse
 * rule) is not handshaked at all. The array is ours (take_stacks_free).
 *
 * The listing itself is kept (global references) and used again while it
 * cannot have changed: no thread started since (ThreadStart counts every
 * start, after the thread is in the VM's list, so a count read before the
 * listing and still the same says no thread is missing) and none of the
 * listed found ended (its state says so: add_platform sets relist). At
 * least once a second it is taken anew all the same. GetAllThreads makes a
 * local reference per thread under the VM's thread-list lock: 11-13 % of
 * the sampler thread's CPU at 10 ms with 116 threads. */
static void drop_listing(sampler *s, JNIEnv *env) {
    for (jint i = 0; i < s->n_listed; i++)
        (*env)->DeleteGlobalRef(env, s->listed[i]);
    free(s->listed);
    s->listed = NULL;
    s->n_listed = 0;
}

static jvmtiError list_threads(sampler *s, JNIEnv *env) {
    uint32_t starts = ss_jthreads_start_count();
    jint nt = 0;
    jthread *ts = NULL;
    drop_listing(s, env);
    jvmtiError err = (*ss_jvmti)->GetAllThreads(ss_jvmti, &nt, &ts);
    if (err != JVMTI_ERROR_NONE)
        return err;
    s->listed = calloc(nt > 0 ? (size_t)nt : 1, sizeof *s->listed);
    for (jint i = 0; s->listed && i < nt; i++) {
        s->listed[i] = (*env)->NewGlobalRef(env, ts[i]);
        if (!s->listed[i]) { /* out of memory: nothing kept, this round fails
                              * (JVMTI_ERROR_OUT_OF_MEMORY), the next lists again */
            s->n_listed = i;
            drop_listing(s, env);
        } else {
            s->n_listed = i + 1;
        }
    }
    for (jint i = 0; i < nt; i++)
        (*env)->DeleteLocalRef(env, ts[i]);
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)ts);
    if (!s->listed)
        return JVMTI_ERROR_OUT_OF_MEMORY;
    s->listed_starts = starts;
    s->listed_ns = ss_mono_ns();
    s->relist = false;
    s->listings++;
    return JVMTI_ERROR_NONE;
}

static jvmtiError take_stacks_each(sampler *s, JNIEnv *env, jvmtiStackInfo **si, jint *n) {
    s->from_list = s->listed && !s->relist &&
                   ss_jthreads_start_count() == s->listed_starts &&
                   ss_mono_ns() - s->listed_ns < SS_JMEMO_KEEP_NS;
    if (s->from_list) {
        s->listings_kept++;
    } else {
        jvmtiError err = list_threads(s, env);
        if (err != JVMTI_ERROR_NONE)
            return err;
    }
    jint nt = s->n_listed;
    jvmtiStackInfo *out = calloc(nt > 0 ? (size_t)nt : 1, sizeof *out);
    if (!out)
        return JVMTI_ERROR_OUT_OF_MEMORY;
    for (jint i = 0; i < nt; i++)
        out[i].thread = s->listed[i];
    *si = out;
    *n = nt;
    return JVMTI_ERROR_NONE;
}

static void take_stacks_free(jvmtiStackInfo *si) {
    if (S.use_each)
        free(si);
    else
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)si);
}

static jvmtiError take_stacks(sampler *s, JNIEnv *env, jvmtiStackInfo **si, jint *n) {
    jint depth = (jint)S.max_depth + 1; /* one more: tells a cut stack */
    if (S.use_each)
        return take_stacks_each(s, env, si, n);
    if (!S.use_list)
        return (*ss_jvmti)->GetAllStackTraces(ss_jvmti, depth, si, n);
    jint nt = 0;
    jthread *ts = NULL;
    jvmtiError err = (*ss_jvmti)->GetAllThreads(ss_jvmti, &nt, &ts);
    if (err != JVMTI_ERROR_NONE)
        return err;
    err = (*ss_jvmti)->GetThreadListStackTraces(ss_jvmti, nt, ts, depth, si);
    *n = nt;
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)ts);
    return err;
}

/* JVMTI frames resolved into s->scratch; how many. */
static uint32_t resolve_frames(sampler *s, JNIEnv *env, const jvmtiFrameInfo *f, jint count,
                               bool *truncated) {
    uint32_t n = (uint32_t)(count > 0 ? count : 0);
    *truncated = n > S.max_depth;
    if (n > S.max_depth)
        n = S.max_depth;
    for (uint32_t i = 0; i < n; i++)
        ss_jresolve(s->resolver, env, f[i].method, f[i].location, &s->scratch[i]);
    return n;
}

/* The stack of t (frames in s->scratch, or e's own): kept in the memo with
 * its identity, and added to the round. */
static void put_stack(sampler *s, ss_thread_sample *t, ss_jthread_memo *e, const ss_frame *f,
                      uint32_t n, bool truncated) {
    if (e)
        ss_jmemo_keep(s->memo, e, f, n, truncated, t);
    t->truncated = truncated;
    ss_round_builder_add_frames(s->builder, f, n);
}

/* "at [stub].unknown(code cache)": a HotSpot stub on top of the Java
 * frames (an intrinsic, an array copy), when no perf map names it. */
static const ss_funcinfo *stub_fn;

/* The stack AGCT gave for a running thread, with its native frames above
 * the Java ones (STACKSHOT_JAVA_STACKS=mixed). false: not walked, or AGCT
 * could not (counted by its code): the safepoint stack is used. */
static bool add_walked(sampler *s, JNIEnv *env, ss_thread_sample *t, ss_jthread_memo *e) {
    const void *jf;
    int32_t n;
    const ss_frame *nf;
    uint32_t nn;
    /* a thread blocked, waiting or parked by JVMTI's state keeps the
     * safepoint stack, jstack's (it may have been running, e.g. spinning
     * for a monitor, when /proc was read just before) */
    if (!s->walk || !t->nid || t->state != SS_STATE_RUNNABLE ||
        !ss_native_walked(t->nid, &jf, &n, &nf, &nn))
        return false;
    if (n <= 0) {
        s->walk_fell++;
        int code = n == SS_AGCT_NO_ENV   ? 11
                   : n == SS_AGCT_FAULT  ? 12
                   : n < 0 && n >= -10 ? -n
                                         : 0;
        if (code == 12 && !s->fell_by[12])
            ss_warn("jvmti: AsyncGetCallTrace faulted on a thread; the guard took the walk "
                    "back and the thread's stack comes from JVMTI (faults are counted)");
        s->fell_by[code]++;
        return false;
    }
    s->walked++;
    uint32_t kept = 0;
    int32_t first = 0;
    if (ss_agct_stub_on_top(jf)) {
        first = 1;
        s->stubs++;
        if (S.java_stacks == JS_MIXED && stub_fn && !(nn && nf[0].map == NULL) &&
            kept < S.max_depth) {
            ss_frame *st = &s->scratch[kept++]; /* the stub itself, unnamed without a perf map */
            memset(st, 0, sizeof *st);
            st->fn = stub_fn;
        }
    }
    if (S.java_stacks == JS_MIXED)
        for (uint32_t i = 0; i < nn && kept < S.max_depth; i++, kept++)
            s->scratch[kept] = nf[i];
    for (int32_t i = first; i < n && kept < S.max_depth; i++, kept++) {
        jmethodID m;
        jlocation bci;
        ss_frame *fr = &s->scratch[kept];
        if (ss_agct_frame(jf, i, &m, &bci))
            ss_jresolve(s->resolver, env, m, bci, fr);
        else
            memset(fr, 0, sizeof *fr); /* no jmethodID yet: "unknown.unknown(unknown)" */
    }
    bool cut = kept < (S.java_stacks == JS_MIXED ? nn : 0) + (uint32_t)(n - first);
    if (e)
        e->reusable = false; /* not a stack the reuse rule may stand on */
    put_stack(s, t, e, s->scratch, kept, cut);
    return true;
}

static int grow_order(sampler *s, uint32_t n) {
    if (n <= s->cap_order)
        return 0;
    int32_t *o = realloc(s->order, n * sizeof *o);
    if (o)
        s->order = o;
    int64_t *ids = realloc(s->ids, n * sizeof *ids);
    if (ids)
        s->ids = ids;
    ss_jthread_memo **memos = realloc(s->memos, n * sizeof *memos);
    if (memos)
        s->memos = memos;
    if (!o || !ids || !memos)
        return -1;
    s->cap_order = n;
    return 0;
}

static int64_t *sort_ids; /* qsort has no context argument */
static int by_id(const void *a, const void *b) {
    int64_t x = sort_ids[*(const int32_t *)a], y = sort_ids[*(const int32_t *)b];
    return (x > y) - (x < y);
}

/* A Java thread's kernel tid: the native pass leaves it to us. */
static void note_java_nid(sampler *s, pid_t nid) {
    if (ss_grow32((void **)&s->java_nids, &s->cap_java_nids, s->n_java_nids + 1,
                  sizeof *s->java_nids, 256) != 0)
        return; /* the native pass then lists it too */
    s->java_nids[s->n_java_nids++] = nid;
}

static int by_tid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* The round's lists are most often in order already (Java ids and kernel
 * tids both grow as threads are created; the VM lists its threads in the
 * order they started; the tids of the last round come sorted): one pass
 * tells, and qsort runs only when it is not. */
static void sort_tids(pid_t *a, uint32_t n) {
    for (uint32_t i = 1; i < n; i++)
        if (a[i - 1] > a[i]) {
            qsort(a, n, sizeof *a, by_tid);
            return;
        }
}

/* HotSpot names a native thread after its thread, cut to the kernel's 15
 * bytes; jstack prints the full name. The cut names of the VM's threads
 * whose full name is fixed are given back (the number of "C2
 * CompilerThread0" is lost in the cut: it is printed without). */
static const char *vm_thread_name(const char *comm) {
    static const char *const full[][2] = {
        {"VM Periodic Tas", "VM Periodic Task Thread"},
        {"Monitor Deflati", "Monitor Deflation Thread"},
        {"C2 CompilerThre", "C2 CompilerThread"},
        {"C1 CompilerThre", "C1 CompilerThread"},
        {"G1 Young RemSet", "G1 Young RemSet Sampling"},
        {"Notification Th", "Notification Thread"},
        {"Reference Handl", "Reference Handler"},
        {"Signal Dispatch", "Signal Dispatcher"},
    };
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++)
        if (strcmp(comm, full[i][0]) == 0)
            return full[i][1];
    return comm;
}

/* The rest of the process (the VM's own threads: VM Thread, GC and
 * compiler threads, JNI libraries' threads), with native stacks, listed
 * after the Java threads as jstack lists them. They are sampled before the
 * round's safepoint: after it, a GC (which runs at a safepoint too, and
 * ours waits for it) would never be seen running. The Java threads left
 * out are the previous round's (sorted then); one new since is left out
 * when emitted. */
static void gather_native(sampler *s, uint32_t *skipped, uint32_t *blocked) {
    int rc = ss_native_gather(&S.cfg, s->java_nids, s->n_java_nids, s->walk, S.vm_threads,
                              skipped, blocked);
    if (rc != 0 && !s->native_failed) {
        s->native_failed = true;
        ss_warn("jvmti: the VM's own threads are not sampled (native sampler: %s)",
                strerror(-rc));
    }
}

static void emit_native(sampler *s, uint32_t *skipped) {
    sort_tids(s->java_nids, s->n_java_nids);
    ss_native_emit(s->builder, s->java_nids, s->n_java_nids, vm_thread_name, skipped);
}

/* A thread that did not run since its kept stack was taken (its CPU clock,
 * read before that stack, still the same; its state too) has that stack:
 * used again without a handshake (ss_jmemo_still: at most a second after
 * it was taken, for a redefined class's lines). */

static bool reusable(const ss_jthread_memo *e, const ss_thread_sample *t, jint state,
                     uint64_t now) {
    return e && e->reusable && e->have_stack && state == e->taken_state &&
           ss_jmemo_still(e->taken_cpu, e->taken_ns, t->cpu_ns, now);
}

/* The stack of a kept thread: walked where it ran; else (each) reused or
 * taken now with GetStackTrace; else the round's stack (all, list). false:
 * the thread ended before its stack was taken. */
static bool add_stack(sampler *s, JNIEnv *env, const jvmtiStackInfo *info, ss_thread_sample *t,
                      ss_jthread_memo *e) {
    if (add_walked(s, env, t, e))
        return true;
    bool cut;
    uint32_t n;
    if (!S.use_each) {
        n = resolve_frames(s, env, info->frame_buffer, info->frame_count, &cut);
        if (e)
            e->reusable = false;
        put_stack(s, t, e, s->scratch, n, cut);
        return true;
    }
    uint64_t now = s->now;
    if (reusable(e, t, info->state, now)) {
        s->reused++;
        put_stack(s, t, e, e->frames, e->n_frames, e->truncated);
        return true;
    }
    jint count = 0;
    uint64_t t0 = ss_mono_ns();
    jvmtiError err = (*ss_jvmti)->GetStackTrace(ss_jvmti, info->thread, 0,
                                                (jint)S.max_depth + 1, s->frames, &count);
    s->stacks_ns += ss_mono_ns() - t0;
    if (err != JVMTI_ERROR_NONE)
        return false;
    s->taken++;
    n = resolve_frames(s, env, s->frames, count, &cut);
    put_stack(s, t, e, s->scratch, n, cut);
    if (e) {
        e->reusable = e->have_stack;
        e->taken_cpu = t->cpu_ns;
        e->taken_state = info->state;
        e->taken_ns = now;
    }
    return true;
}

/* A thread's JVMTI state (each: read just before its stack). Used again
 * while its CPU clock, as the round's native pass read it, has not moved
 * since the state was read (ss_jmemo_still): a thread that did not run
 * did not park, wake, wait, block, enter or leave native code, which are
 * what the state says (only the suspended and interrupted bits,
 * which the round does not show, are set from other threads). */
static jint thread_state(sampler *s, const jvmtiStackInfo *info, ss_jthread_memo *e) {
    uint64_t cpu = e && e->nid ? ss_native_gathered_cpu(e->nid) : SS_UNKNOWN_U64;
    uint64_t now = s->now;
    if (e && e->have_state && ss_jmemo_still(e->state_cpu, e->state_ns, cpu, now)) {
        s->states_reused++;
        return e->state;
    }
    s->states_read++;
    jint st = 0;
    if ((*ss_jvmti)->GetThreadState(ss_jvmti, info->thread, &st) != JVMTI_ERROR_NONE)
        return 0;
    if (e) {
        e->have_state = cpu != SS_UNKNOWN_U64;
        e->state = st;
        e->state_cpu = cpu;
        e->state_ns = now;
    }
    return st;
}

/* Platform threads, in Java thread id order (jstack's order too). */
static uint32_t add_platform(sampler *s, JNIEnv *env, jvmtiStackInfo *si, jint n) {
    uint32_t skipped = 0;
    if (grow_order(s, (uint32_t)n) != 0)
        return (uint32_t)n;
    ss_nid_matcher_begin(s->nids);
    /* room for every listed thread first: no entry moves during the
     * round, so the entries got here are the ones used below */
    bool stay = ss_jmemo_reserve(s->memo, (uint32_t)n) == 0;
    for (jint i = 0; i < n; i++) {
        s->order[i] = i;
        s->ids[i] = ss_jthreads_id(env, si[i].thread);
        /* the memo knows most threads' tids: no thread-local storage read */
        ss_jthread_memo *e = ss_jmemo_get(s->memo, s->ids[i]);
        s->memos[i] = stay ? e : NULL;
        pid_t known = e && e->nid ? e->nid : ss_jthreads_known_nid(si[i].thread);
        if (known)
            ss_nid_matcher_take(s->nids, known);
    }
    sort_ids = s->ids;
    for (jint i = 1; i < n; i++)
        if (s->ids[i - 1] > s->ids[i]) { /* in order already, most often */
            qsort(s->order, (size_t)n, sizeof *s->order, by_id);
            break;
        }
    for (jint k = 0; k < n; k++) {
        jvmtiStackInfo *info = &si[s->order[k]];
        ss_jthread_memo *e = stay ? s->memos[s->order[k]]
                                  : ss_jmemo_get(s->memo, s->ids[s->order[k]]);
        /* each: the state just before the stack */
        if (S.use_each)
            info->state = thread_state(s, info, e);
        if (!(info->state & JVMTI_THREAD_STATE_ALIVE)) {
            /* ended: the kept listing is listed again next round (a thread
             * it still names, ended since an earlier round, is not one the
             * round skipped) */
            if (!s->from_list)
                skipped++; /* exited between the listing and the stack */
            s->relist = true;
            continue;
        }
        ss_thread_sample *t = NULL;
        pid_t nid = 0;
        int keep = ss_jthreads_sample(s->builder, env, info->thread, info->state,
                                      S.include_internal, s->nids, e, &t, &nid);
        if (nid)
            note_java_nid(s, nid);
        if (keep < 0)
            break;
        if (keep > 0) {
            if (s->spans)
                ss_jspan_read(env, info->thread, t);
            cpu_delta(e, t);
            if (!add_stack(s, env, info, t, e)) {
                ss_round_builder_drop_thread(s->builder);
                skipped++; /* exited before its stack was taken */
                s->relist = true;
            }
        }
    }
    return skipped;
}

/* Virtual threads: each its own stack, mounted or not. */
static uint32_t add_virtual(sampler *s, JNIEnv *env) {
    uint64_t untracked = 0;
    uint32_t n = ss_vthreads_snapshot(env, s->vthreads, S.max_vthreads, &untracked);
    uint32_t skipped = (uint32_t)(untracked > UINT32_MAX ? UINT32_MAX : untracked);
    for (uint32_t i = 0; i < n; i++) {
        jthread vt = s->vthreads[i];
        jint state = 0, count = 0;
        jvmtiThreadInfo ti;
        memset(&ti, 0, sizeof ti);
        if ((*ss_jvmti)->GetThreadState(ss_jvmti, vt, &state) != JVMTI_ERROR_NONE ||
            !(state & JVMTI_THREAD_STATE_ALIVE) ||
            (*ss_jvmti)->GetStackTrace(ss_jvmti, vt, 0, (jint)S.max_depth + 1, s->frames,
                                       &count) != JVMTI_ERROR_NONE ||
            (*ss_jvmti)->GetThreadInfo(ss_jvmti, vt, &ti) != JVMTI_ERROR_NONE) {
            skipped++;
            continue;
        }
        char name[512];
        ss_mutf8_to_utf8(ti.name ? ti.name : "", name, sizeof name);
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)ti.name);
        if (ti.thread_group)
            (*env)->DeleteLocalRef(env, ti.thread_group);
        if (ti.context_class_loader)
            (*env)->DeleteLocalRef(env, ti.context_class_loader);
        ss_thread_sample *t = ss_round_builder_add_thread(s->builder, name);
        if (!t)
            break;
        t->number = ss_jthreads_id(env, vt);
        t->is_virtual = true;
        t->daemon = ti.is_daemon;
        t->prio = ti.priority;
        ss_jthreads_state(state, t);
        t->on_cpu = t->state == SS_STATE_RUNNABLE; /* no CPU clock of its own */
        if (s->spans)
            ss_jspan_read(env, vt, t); /* its own threadLocals, mounted or not */
        bool cut;
        uint32_t nf = resolve_frames(s, env, s->frames, count, &cut);
        put_stack(s, t, ss_jmemo_get(s->memo, t->number), s->scratch, nf, cut);
    }
    return skipped;
}

static void take_round(sampler *s, JNIEnv *env) {
    if ((*env)->PushLocalFrame(env, 512) != 0) {
        (*env)->ExceptionClear(env);
        return;
    }
    uint64_t t0 = ss_mono_ns();
    ss_jresolver_round(s->resolver);
    s->spans = ss_jspan_round(env);
    ss_round_builder_begin(s->builder, ss_wall_ns(), S.interval_ms, SS_RUNTIME_JVM);
    uint32_t skipped = 0, blocked = 0;
    s->walk = S.java_stacks != JS_SAFEPOINT && !s->native_failed;
    if (S.vm_threads || s->walk) {
        /* the Java threads: the last round's, and those started since */
        pid_t fresh[256];
        uint32_t nf;
        while ((nf = ss_jthreads_started(fresh, 256)) > 0)
            for (uint32_t i = 0; i < nf; i++)
                note_java_nid(s, fresh[i]);
        sort_tids(s->java_nids, s->n_java_nids);
        gather_native(s, &skipped, &blocked);
    }
    uint64_t tn = ss_mono_ns();
    jvmtiStackInfo *si = NULL;
    jint n = 0;
    jvmtiError err = take_stacks(s, env, &si, &n);
    uint64_t t1 = ss_mono_ns();
    s->now = t1;
    ss_jthreads_round(t1, ss_wall_ns() / 1000000ull);
    if (err != JVMTI_ERROR_NONE) {
        (*env)->PopLocalFrame(env, NULL);
        if (err != JVMTI_ERROR_WRONG_PHASE)
            ss_warn("jvmti: taking stacks failed (JVMTI error %d); round skipped", (int)err);
        return;
    }
    s->n_java_nids = 0;
    s->stacks_ns = t1 - tn;
    skipped += add_platform(s, env, si, n);
    take_stacks_free(si);
    if (ss_vthreads_active())
        skipped += add_virtual(s, env);
    ss_jmemo_end(s->memo);
    (*env)->PopLocalFrame(env, NULL);
    if (S.vm_threads && !s->native_failed)
        emit_native(s, &skipped);
    ss_round *r = ss_round_builder_finish(s->builder, skipped, blocked);
    uint64_t t2 = ss_mono_ns();
    s->rounds++;
    if (!r) {
        ss_warn("jvmti: out of memory building round %llu; round lost",
                (unsigned long long)s->rounds);
        return;
    }
    r->took_ns = t2 - t0;
    uint32_t on_cpu = 0;
    for (uint32_t i = 0; i < r->n_threads; i++)
        on_cpu += r->threads[i].on_cpu;
    if (ss_log_enabled(SS_LOG_DEBUG))
        ss_debug("jvmti: round %llu: %d threads listed, %u kept (%u on CPU), %u frames; "
                 "native pass %.1f us, stacks %.1f us, total %.1f us, %.2f us/thread",
                 (unsigned long long)r->seq, (int)n, r->n_threads, on_cpu, r->n_frames,
                 (double)(tn - t0) / 1e3, (double)s->stacks_ns / 1e3, (double)(t2 - t0) / 1e3,
                 n > 0 ? (double)(t2 - t0) / 1e3 / n : 0.0);
    pthread_mutex_lock(&S.mu);
    bool stopping = S.stop;
    pthread_mutex_unlock(&S.mu);
    if (stopping || !ss_agent_running())
        ss_round_unref(r); /* the exporters may already be gone */
    else
        ss_exporters_publish(r);
}

/* ---- the agent thread ------------------------------------------------- */

static void abs_mono(struct timespec *ts, uint64_t ns) {
    ts->tv_sec = (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

static bool sampler_init(sampler *s) {
    memset(s, 0, sizeof *s);
    s->builder = ss_round_builder_create();
    s->resolver = ss_jresolver_create();
    s->nids = ss_nid_matcher_create();
    s->frames = malloc(((size_t)S.max_depth + 1) * sizeof *s->frames);
    s->scratch = malloc(((size_t)S.max_depth + 1) * sizeof *s->scratch);
    s->memo = ss_jmemo_create();
    s->vthreads = S.max_vthreads ? malloc(S.max_vthreads * sizeof *s->vthreads) : NULL;
    return s->builder && s->resolver && s->nids && s->frames && s->scratch && s->memo &&
           (s->vthreads || !S.max_vthreads);
}

static void sampler_free(sampler *s) {
    ss_round_builder_destroy(s->builder);
    ss_jresolver_destroy(s->resolver);
    ss_nid_matcher_destroy(s->nids);
    free(s->frames);
    free(s->vthreads);
    free(s->order);
    free(s->ids);
    free(s->memos);
    free(s->java_nids);
    free(s->scratch);
    ss_jmemo_destroy(s->memo);
}

static void JNICALL sampler_main(jvmtiEnv *jvmti, JNIEnv *env, void *arg) {
    (void)jvmti;
    (void)arg;
    pid_t me = ss_gettid();
    ss_internal_thread_mark(true);
    ss_internal_thread_add(me);
    sampler s;
    if (!sampler_init(&s)) {
        ss_error("jvmti: out of memory starting the sampler; no samples");
    } else {
        uint64_t next = ss_mono_ns();
        pthread_mutex_lock(&S.mu);
        while (!S.stop) {
            if (S.until && ss_mono_ns() >= S.until) {
                ss_info("sampling ended: STACKSHOT_DURATION has passed");
                while (!S.stop) /* the exporters deliver what they hold */
                    pthread_cond_wait(&S.cv, &S.mu);
                break;
            }
            pthread_mutex_unlock(&S.mu);
            take_round(&s, env);
            uint64_t now = ss_mono_ns();
            next += (uint64_t)S.interval_ms * 1000000ull;
            if (next < now) /* fell behind: skip, never burst */
                next = now + (uint64_t)S.interval_ms * 1000000ull;
            struct timespec ts;
            abs_mono(&ts, next);
            pthread_mutex_lock(&S.mu);
            while (!S.stop && pthread_cond_timedwait(&S.cv, &S.mu, &ts) != ETIMEDOUT) {
            }
        }
        pthread_mutex_unlock(&S.mu);
        uint64_t methods, invalid, clears, refreshes;
        ss_jresolver_stats(s.resolver, &methods, &invalid, &clears, &refreshes);
        ss_debug("jvmti: sampler done after %llu rounds (%llu methods cached, cache "
                 "emptied %llu times, %llu line tables re-read, %llu frames of "
                 "unloaded methods)",
                 (unsigned long long)s.rounds, (unsigned long long)methods,
                 (unsigned long long)clears, (unsigned long long)refreshes,
                 (unsigned long long)invalid);
        char by[256];
        int at = 0;
        for (int c = 0; c < 13 && at < (int)sizeof by; c++)
            if (s.fell_by[c] && c == 12)
                at += snprintf(by + at, sizeof by - (size_t)at, " fault:%llu",
                               (unsigned long long)s.fell_by[c]);
            else if (s.fell_by[c])
                at += snprintf(by + at, sizeof by - (size_t)at, " %s%d:%llu",
                               c == 11 ? "no JNIEnv" : c == 0 ? "other" : "", c ? -c : 0,
                               (unsigned long long)s.fell_by[c]);
        by[at < (int)sizeof by ? at : (int)sizeof by - 1] = '\0';
        ss_debug("jvmti: running threads: %llu stacks walked where they ran "
                 "(AsyncGetCallTrace; %llu from a stub's caller), %llu fell back to the "
                 "safepoint stack (by code:%s)",
                 (unsigned long long)s.walked, (unsigned long long)s.stubs,
                 (unsigned long long)s.walk_fell, by);
        ss_debug("jvmti: guard: %llu faults caught inside AsyncGetCallTrace, %llu passed on "
                 "to the JVM's handler", (unsigned long long)ss_agct_faults(),
                 (unsigned long long)ss_agct_passed());
        if (ss_agct_faults())
            ss_info("jvmti: %llu faults inside AsyncGetCallTrace were caught by the guard "
                    "(those threads' stacks came from JVMTI)",
                    (unsigned long long)ss_agct_faults());
        uint64_t same, changed;
        ss_jmemo_stats(s.memo, &same, &changed);
        ss_debug("jvmti: stacks: %llu taken with GetStackTrace, %llu used again (the thread "
                 "had not run since); %llu kept their identity, %llu were new",
                 (unsigned long long)s.taken, (unsigned long long)s.reused,
                 (unsigned long long)same, (unsigned long long)changed);
        ss_debug("jvmti: thread listings: %llu GetAllThreads, %llu rounds used the listing "
                 "kept (no thread started or ended since)",
                 (unsigned long long)s.listings, (unsigned long long)s.listings_kept);
        uint64_t infos, infos_again;
        ss_jthreads_info_stats(&infos, &infos_again);
        ss_debug("jvmti: thread facts: %llu GetThreadState, %llu used again; %llu "
                 "GetThreadInfo of known threads, %llu used again (the thread had not run "
                 "since)",
                 (unsigned long long)s.states_read, (unsigned long long)s.states_reused,
                 (unsigned long long)infos, (unsigned long long)infos_again);
        uint64_t reads, with_span, ns_span, ns_none;
        ss_jspan_stats(&reads, &with_span, &ns_span, &ns_none);
        ss_debug("jvmti: span reads: %llu, %llu with a span (%.2f us each), %llu "
                 "without (%.2f us each)",
                 (unsigned long long)reads, (unsigned long long)with_span,
                 with_span ? (double)ns_span / 1e3 / (double)with_span : 0.0,
                 (unsigned long long)(reads - with_span),
                 reads > with_span ? (double)ns_none / 1e3 / (double)(reads - with_span)
                                   : 0.0);
    }
    drop_listing(&s, env);
    sampler_free(&s);
    ss_internal_thread_remove(me);
    pthread_mutex_lock(&S.mu);
    S.alive = false;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

/* ---- ss_source_ops ------------------------------------------------------ */

/* The pid the JVM runs as. A child forked by the JVM (the FORK launch
 * mechanism; the default posix_spawn runs no fork handlers) is about to
 * exec: it must not call into a copy of the VM whose other threads are
 * gone, so the sampler refuses to start there. */
static pid_t vm_pid;

static int jvmti_start(const ss_config *cfg) {
    if (vm_pid && getpid() != vm_pid)
        return -ECHILD;
    vm_pid = getpid();
    JNIEnv *env = NULL;
    if (!ss_jvm || (*ss_jvm)->GetEnv(ss_jvm, (void **)&env, JNI_VERSION_1_6) != JNI_OK)
        return -EINVAL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&S.cv, &ca);
    pthread_condattr_destroy(&ca);
    S.interval_ms = cfg->interval_ms;
    int64_t ms = ss_config_int("STACKSHOT_DURATION", 0, 0, INT64_C(31536000000));
    S.until = ms ? ss_mono_ns() + (uint64_t)ms * 1000000ull : 0;
    S.max_depth = cfg->max_depth;
    S.include_internal = cfg->include_internal;
    const char *js = ss_config_str("STACKSHOT_JAVA_STACKS", "mixed");
    S.java_stacks = strcmp(js, "java") == 0 ? JS_JAVA
                    : strcmp(js, "safepoint") == 0 ? JS_SAFEPOINT
                                                   : JS_MIXED;
    if (strcmp(js, "mixed") != 0 && strcmp(js, "java") != 0 && strcmp(js, "safepoint") != 0)
        ss_config_bad("STACKSHOT_JAVA_STACKS", js, "not 'mixed', 'java' or 'safepoint'",
                      "using mixed");
    if (S.java_stacks != JS_SAFEPOINT && !ss_agct_find()) {
        ss_info("jvmti: this JVM exports no AsyncGetCallTrace; running threads are taken "
                "at the safepoint (STACKSHOT_JAVA_STACKS=safepoint)");
        S.java_stacks = JS_SAFEPOINT;
    }
    if (S.java_stacks != JS_SAFEPOINT)
        ss_agct_enable();
    /* Running threads walked where they run need no stack from JVMTI: the
     * others' stacks are then taken thread by thread (handshakes with
     * those threads only, no safepoint of all: measured on JDK 17 with two
     * busy workers at 10 ms, the stack part of a round 0.43 ms against
     * 6.6 ms, and no pause), unless STACKSHOT_JVMTI_STACKS says otherwise */
    const char *how = ss_config_str("STACKSHOT_JVMTI_STACKS",
                                    S.java_stacks != JS_SAFEPOINT ? "each" : "all");
    S.use_list = strcmp(how, "list") == 0;
    S.use_each = strcmp(how, "each") == 0;
    if (!S.use_list && !S.use_each && strcmp(how, "all") != 0)
        ss_config_bad("STACKSHOT_JVMTI_STACKS", how, "not 'all', 'list' or 'each'", "using all");
    S.max_vthreads = ss_vthreads_active() ? ss_vthreads_cap() : 0;
    S.vm_threads = ss_config_bool("STACKSHOT_JAVA_VM_THREADS", true);
    if (!stub_fn)
        stub_fn = ss_funcinfo_intern("[stub]", "unknown", "code cache", NULL, SS_FRAME_NATIVE);
    S.cfg = *cfg;
    S.stop = false;

    jclass tc = (*env)->FindClass(env, "java/lang/Thread");
    jmethodID ctor = tc ? (*env)->GetMethodID(env, tc, "<init>", "(Ljava/lang/String;)V") : NULL;
    jstring name = ctor ? (*env)->NewStringUTF(env, "stackshot-sampler") : NULL;
    jobject thread = name ? (*env)->NewObject(env, tc, ctor, name) : NULL;
    if (!thread) {
        (*env)->ExceptionClear(env);
        return -ENOMEM;
    }
    S.alive = true;
    /* libjvm creates it: its EAGAIN is the agent's, not the JVM's
     * (loader/loader_jvm_threads.c) */
    bool was = ss_internal_thread_mark(true);
    jvmtiError err = (*ss_jvmti)->RunAgentThread(ss_jvmti, thread, sampler_main, NULL,
                                                  JVMTI_THREAD_NORM_PRIORITY);
    ss_internal_thread_mark(was);
    (*env)->DeleteLocalRef(env, thread);
    (*env)->DeleteLocalRef(env, name);
    (*env)->DeleteLocalRef(env, tc);
    if (err != JVMTI_ERROR_NONE) {
        S.alive = false;
        return -EAGAIN;
    }
    return 0;
}

/* Ask the sampler to stop and wait for it until the deadline: at VMDeath
 * the JVM's exit must not wait longer. A sampler still inside a JVMTI call
 * at the deadline finishes that call and exits by itself. */
static void jvmti_stop(uint64_t deadline_ns) {
    pthread_mutex_lock(&S.mu);
    S.stop = true;
    pthread_cond_broadcast(&S.cv);
    struct timespec ts;
    abs_mono(&ts, deadline_ns);
    while (S.alive && pthread_cond_timedwait(&S.cv, &S.mu, &ts) != ETIMEDOUT) {
    }
    bool late = S.alive;
    pthread_mutex_unlock(&S.mu);
    if (late)
        ss_warn("jvmti: the sampler did not stop before the shutdown deadline; "
                "leaving it to the JVM");
}

const ss_source_ops ss_jvmti_source = {
    .name = "jvmti",
    .start = jvmti_start,
    .stop = jvmti_stop,
    .after_fork_child = NULL,
};
