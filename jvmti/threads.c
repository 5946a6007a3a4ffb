/* threads.c: Java thread metadata, as jstack prints it.
 *
 *   "sleeper" #13 daemon prio=5 os_prio=0 cpu=0.41ms elapsed=2.80s tid=0x00007fd14012b150 nid=0x4873 waiting on condition
 *      java.lang.Thread.State: TIMED_WAITING (sleeping)
 *
 * name, daemon, prio   GetThreadInfo
 * #n                   java.lang.Thread.tid (what Thread.getId()/threadId() return)
 * tid                  java.lang.Thread.eetop: HotSpot keeps the JavaThread* there,
 *                      which is what jstack prints as tid
 * nid                  the kernel tid: recorded by ThreadStart on the thread itself
 *                      (and VMInit for main), else matched from /proc (nid.c);
 *                      kept in the thread's JVMTI thread-local storage
 * os_prio              0: HotSpot prints its Java-to-OS priority table entry,
 *                      which is 0 for every priority under the default
 *                      ThreadPriorityPolicy=0 on Linux
 * cpu                  GetThreadCpuTime (the thread's CLOCK_THREAD_CPUTIME clock)
 * elapsed              now - the kernel thread's start time (/proc/.../stat),
 *                      the same instant HotSpot records when it creates the
 *                      thread, to within a clock tick
 * status, state line   from the JVMTI state bits (ss_jthreads_state)
 *
 * The internal-thread rule (left out unless
 * SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS=true): a Java thread is internal
 * when its thread group is not `main` nor a descendant of `main`. That is
 * the `system` group (Reference Handler, Finalizer, Signal Dispatcher,
 * Attach Listener, Notification Thread, JVMTI agent threads of other agents)
 * and its other children (InnocuousThreadGroup: Common-Cleaner; on JDK 21+
 * CarrierThreads: virtual-thread carriers). Application threads are in main
 * or groups below it: Thread's constructor puts a new thread in its
 * creator's group, JNI-attached threads default to main. The VM's own
 * threads that are not Java threads (compiler, GC, VM Thread, Service
 * Thread, ...) are never visible to JVMTI and so never sampled. The agent's
 * own threads (name "stackshot-...") are always left out. */
#include "agent/log.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "jvmti/jvmti_internal.h"
#include "proc/threads.h"
#include "samplers/ss_samplers.h"

#include <stdlib.h>
#include <string.h>

static jfieldID tid_field, eetop_field;
static jmethodID get_id_method;
static jthreadGroup main_group; /* global ref */

/* ---- thread-local storage: one packed word per platform thread ----- */

#define TLS_MARK (1ull << 63)
#define TLS_INTERNAL_KNOWN (1ull << 62)
#define TLS_INTERNAL (1ull << 61)
#define TLS_TRIES_SHIFT 48 /* failed nid lookups so far, 4 bits */
#define TLS_NID_MASK 0xffffffffull
#define NID_MAX_TRIES 3

static uint64_t tls_get(jthread t) {
    void *p = NULL;
    if ((*ss_jvmti)->GetThreadLocalStorage(ss_jvmti, t, &p) != JVMTI_ERROR_NONE)
        return 0;
    uint64_t v = (uint64_t)(uintptr_t)p;
    return (v & TLS_MARK) ? v : 0;
}

static void tls_set(jthread t, uint64_t v) {
    (*ss_jvmti)->SetThreadLocalStorage(ss_jvmti, t, (void *)(uintptr_t)(v | TLS_MARK));
}

/* Kernel tids of the threads started since the sampler last looked, so
 * that the native pass leaves them to JVMTI from their first round on
 * (otherwise a new Java thread is not known as one until a round has
 * listed it, and the native pass reads its stack from /proc once: 40 ms
 * for 100 threads started together). A ring written by ThreadStart on
 * each new thread, drained by the sampler; a slot still being written is
 * missed (that thread gets the one native read), a lap overwrites the
 * oldest (the same). */
#define STARTED_RING 1024
static _Atomic pid_t started[STARTED_RING];
static _Atomic uint32_t started_head;
static uint32_t started_tail; /* sampler thread only */

void ss_jthreads_note_current(jthread thread) {
    pid_t me = ss_gettid();
    uint64_t v = tls_get(thread);
    tls_set(thread, (v & ~TLS_NID_MASK) | (uint32_t)me);
    uint32_t i = atomic_fetch_add_explicit(&started_head, 1, memory_order_relaxed);
    atomic_store_explicit(&started[i % STARTED_RING], me, memory_order_release);
}

uint32_t ss_jthreads_started(pid_t *out, uint32_t max) {
    uint32_t head = atomic_load_explicit(&started_head, memory_order_acquire), n = 0;
    if (head - started_tail > STARTED_RING)
        started_tail = head - STARTED_RING;
    for (; started_tail != head && n < max; started_tail++) {
        pid_t t = atomic_exchange_explicit(&started[started_tail % STARTED_RING], 0,
                                           memory_order_acquire);
        if (t)
            out[n++] = t;
    }
    return n;
}

uint32_t ss_jthreads_start_count(void) {
    return atomic_load_explicit(&started_head, memory_order_acquire);
}

/* ---- JNI ids -------------------------------------------------------- */

static void find_main_group(JNIEnv *env) {
    jint n = 0;
    jthreadGroup *tops = NULL;
    if ((*ss_jvmti)->GetTopThreadGroups(ss_jvmti, &n, &tops) != JVMTI_ERROR_NONE)
        return;
    for (jint i = 0; i < n && !main_group; i++) {
        jint nt = 0, ng = 0;
        jthread *ts = NULL;
        jthreadGroup *gs = NULL;
        if ((*ss_jvmti)->GetThreadGroupChildren(ss_jvmti, tops[i], &nt, &ts, &ng, &gs) !=
            JVMTI_ERROR_NONE)
            continue;
        for (jint k = 0; k < ng; k++) {
            jvmtiThreadGroupInfo gi;
            if (!main_group &&
                (*ss_jvmti)->GetThreadGroupInfo(ss_jvmti, gs[k], &gi) == JVMTI_ERROR_NONE) {
                if (gi.name && strcmp(gi.name, "main") == 0)
                    main_group = (*env)->NewGlobalRef(env, gs[k]);
                (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)gi.name);
                if (gi.parent)
                    (*env)->DeleteLocalRef(env, gi.parent);
            }
            (*env)->DeleteLocalRef(env, gs[k]);
        }
        for (jint k = 0; k < nt; k++)
            (*env)->DeleteLocalRef(env, ts[k]);
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)ts);
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)gs);
    }
    for (jint i = 0; i < n; i++)
        (*env)->DeleteLocalRef(env, tops[i]);
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)tops);
}

int ss_jthreads_init(JNIEnv *env) {
    jclass c = (*env)->FindClass(env, "java/lang/Thread");
    if (!c) {
        (*env)->ExceptionClear(env);
        return -1;
    }
    tid_field = (*env)->GetFieldID(env, c, "tid", "J");
    if (!tid_field) {
        (*env)->ExceptionClear(env);
        get_id_method = (*env)->GetMethodID(env, c, "getId", "()J");
        if (!get_id_method)
            (*env)->ExceptionClear(env);
    }
    eetop_field = (*env)->GetFieldID(env, c, "eetop", "J");
    if (!eetop_field)
        (*env)->ExceptionClear(env);
    (*env)->DeleteLocalRef(env, c);
    find_main_group(env);
    if (!main_group)
        ss_warn("jvmti: no 'main' thread group found; every thread counts as an "
                "application thread");
    return 0;
}

int64_t ss_jthreads_id(JNIEnv *env, jthread thread) {
    if (tid_field)
        return (int64_t)(*env)->GetLongField(env, thread, tid_field);
    if (get_id_method) {
        jlong id = (*env)->CallLongMethod(env, thread, get_id_method);
        if (!(*env)->ExceptionCheck(env))
            return (int64_t)id;
        (*env)->ExceptionClear(env);
    }
    return -1;
}

/* ---- the internal rule --------------------------------------------- */

static bool group_under_main(JNIEnv *env, jthreadGroup g) {
    /* main's depth is 1 (system -> main); user groups rarely nest deeply,
     * the bound only guards against a cycle that cannot happen */
    for (int depth = 0; g && depth < 64; depth++) {
        if ((*env)->IsSameObject(env, g, main_group))
            return true;
        jvmtiThreadGroupInfo gi;
        if ((*ss_jvmti)->GetThreadGroupInfo(ss_jvmti, g, &gi) != JVMTI_ERROR_NONE)
            return false;
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)gi.name);
        g = gi.parent;
    }
    return false;
}

static bool is_internal(JNIEnv *env, jthreadGroup g) {
    if (!main_group || !g)
        return false;
    if ((*env)->PushLocalFrame(env, 80) != 0) {
        (*env)->ExceptionClear(env);
        return false;
    }
    bool under = group_under_main(env, g);
    (*env)->PopLocalFrame(env, NULL);
    return !under;
}

/* ---- state ------------------------------------------------------------ */

/* jstack's status word and java.lang.Thread.State line come from the same
 * facts JVMTI reports: Thread.sleep is "waiting on condition" +
 * TIMED_WAITING (sleeping); LockSupport.park is "waiting on condition" +
 * (TIMED_)WAITING (parking); Object.wait is "in Object.wait()" +
 * (TIMED_)WAITING (on object monitor); a monitor entry is "waiting for
 * monitor entry" + BLOCKED (on object monitor); anything running (also in
 * native code) is "runnable" + RUNNABLE. */
void ss_jthreads_state(jint st, ss_thread_sample *t) {
    t->state_detail = NULL;
    if (!(st & JVMTI_THREAD_STATE_ALIVE)) {
        bool ended = st & JVMTI_THREAD_STATE_TERMINATED;
        t->state = ended ? SS_STATE_TERMINATED : SS_STATE_NEW;
        t->status = ended ? "terminated" : "allocated";
        return;
    }
    if (st & JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER) {
        t->state = SS_STATE_BLOCKED;
        t->state_detail = "on object monitor";
        t->status = "waiting for monitor entry";
        return;
    }
    if (st & JVMTI_THREAD_STATE_WAITING) {
        bool timed = st & JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT;
        t->state = timed ? SS_STATE_TIMED_WAITING : SS_STATE_WAITING;
        if (st & JVMTI_THREAD_STATE_IN_OBJECT_WAIT) {
            t->state_detail = "on object monitor";
            t->status = "in Object.wait()";
        } else if (st & JVMTI_THREAD_STATE_SLEEPING) {
            t->state_detail = "sleeping";
            t->status = "waiting on condition";
        } else {
            t->state_detail = (st & JVMTI_THREAD_STATE_PARKED) ? "parking" : NULL;
            t->status = "waiting on condition";
        }
        return;
    }
    t->state = SS_STATE_RUNNABLE;
    t->status = "runnable";
}

/* ---- one thread --------------------------------------------------------- */

pid_t ss_jthreads_known_nid(jthread thread) {
    return (pid_t)(tls_get(thread) & TLS_NID_MASK);
}

/* The thread's kernel tid: recorded, or matched in /proc (a few tries). */
static pid_t find_nid(ss_nid_matcher *nids, const char *name, uint64_t cpu_ns, uint64_t *tls) {
    pid_t nid = (pid_t)(*tls & TLS_NID_MASK);
    unsigned tries = (unsigned)((*tls >> TLS_TRIES_SHIFT) & 0xf);
    if (nid == 0 && tries < NID_MAX_TRIES) {
        nid = ss_nid_match(nids, name, cpu_ns);
        if (nid)
            *tls = (*tls & ~TLS_NID_MASK) | (uint32_t)nid;
        else
            *tls = (*tls & ~(0xfull << TLS_TRIES_SHIFT)) |
                   ((uint64_t)(tries + 1) << TLS_TRIES_SHIFT);
    }
    return nid;
}

/* thread's JVMTI facts, its name in UTF-8 into name; the caller deletes
 * ti->thread_group's local reference (the name and the class loader are
 * released here). false: the thread is gone. */
static bool thread_info(JNIEnv *env, jthread thread, jvmtiThreadInfo *ti, char *name,
                        size_t cap) {
    memset(ti, 0, sizeof *ti);
    if ((*ss_jvmti)->GetThreadInfo(ss_jvmti, thread, ti) != JVMTI_ERROR_NONE)
        return false;
    ss_mutf8_to_utf8(ti->name ? ti->name : "", name, cap);
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)ti->name);
    ti->name = NULL;
    if (ti->context_class_loader)
        (*env)->DeleteLocalRef(env, ti->context_class_loader);
    ti->context_class_loader = NULL;
    return true;
}

/* GetThreadInfo's answer kept in the memo is used again while the thread's
 * CPU clock has not moved since it was read (the thread did not run, so
 * it did not rename itself or change its priority), for at most a second
 * (ss_jmemo_still): another thread may rename it, which shows within that. */

static uint64_t infos_read, infos_reused; /* sampler thread only */
static uint64_t round_ns, round_wall_ms;   /* ss_jthreads_round */

void ss_jthreads_round(uint64_t mono_ns, uint64_t wall_ms) {
    round_ns = mono_ns;
    round_wall_ms = wall_ms;
}

void ss_jthreads_info_stats(uint64_t *read, uint64_t *reused) {
    *read = infos_read;
    *reused = infos_reused;
}

/* The memo's name, priority and daemon flag, read again when stale; the
 * name to use (the memo's, or buf when it could not be kept). NULL: the
 * thread is gone. */
static const char *known_info(JNIEnv *env, jthread thread, ss_jthread_memo *e, uint64_t cpu_ns,
                              char *buf, size_t cap) {
    uint64_t now = round_ns;
    if (e->name && ss_jmemo_still(e->info_cpu, e->info_ns, cpu_ns, now)) {
        infos_reused++;
        return e->name;
    }
    infos_read++;
    jvmtiThreadInfo ti;
    if (!thread_info(env, thread, &ti, buf, cap))
        return NULL;
    if (ti.thread_group)
        (*env)->DeleteLocalRef(env, ti.thread_group);
    e->prio = ti.priority;
    e->daemon = ti.is_daemon;
    if (!e->name || strcmp(e->name, buf) != 0) {
        char *copy = strdup(buf);
        if (!copy) { /* no memory: this answer is used, not kept */
            free(e->name);
            e->name = NULL;
            return buf;
        }
        free(e->name);
        e->name = copy;
    }
    e->info_cpu = cpu_ns;
    e->info_ns = now;
    return e->name;
}

/* A thread whose facts are in its memo: its kernel tid, whether it is
 * kept, its JavaThread* and start time do not change while it lives (a
 * live thread's group is fixed; the agent's threads are named before they
 * start). Its name, priority and daemon flag are read again when it ran
 * since they were, and at least every second (known_info); its CPU clock
 * is the kernel's clock of its tid, what GetThreadCpuTime reads, as the
 * round's native pass read it (else read now). No thread-local storage
 * read. */
static int sample_known(ss_round_builder *b, JNIEnv *env, jthread thread, jint state,
                        ss_jthread_memo *e, ss_thread_sample **out, pid_t *nid_out) {
    *nid_out = e->nid;
    if (!e->keep)
        return 0;
    /* the native pass read it a moment ago (before any stack: the reuse
     * rule in sampler.c may stand on it) */
    uint64_t cpu_ns = ss_native_gathered_cpu(e->nid);
    if (cpu_ns == SS_UNKNOWN_U64)
        cpu_ns = ss_thread_cpu_ns(e->nid);
    char buf[512];
    const char *name = known_info(env, thread, e, cpu_ns, buf, sizeof buf);
    if (!name)
        return 0;
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    if (!t)
        return -1;
    t->number = e->id;
    t->tid = e->eetop;
    t->prio = e->prio;
    t->os_prio = 0;
    t->daemon = e->daemon;
    ss_jthreads_state(state, t);
    t->cpu_ns = cpu_ns;
    t->nid = e->nid;
    t->start_wall_ms = e->start_wall_ms;
    uint64_t now_ms = round_wall_ms;
    if (t->start_wall_ms && t->start_wall_ms <= now_ms)
        t->elapsed_ns = (now_ms - t->start_wall_ms) * 1000000ull;
    *out = t;
    return 1;
}

int ss_jthreads_sample(ss_round_builder *b, JNIEnv *env, jthread thread, jint state,
                       bool include_internal, ss_nid_matcher *nids, ss_jthread_memo *e,
                       ss_thread_sample **out, pid_t *nid_out) {
    if (e && e->facts)
        return sample_known(b, env, thread, state, e, out, nid_out);
    *nid_out = 0;
    jvmtiThreadInfo ti;
    char name[512];
    if (!thread_info(env, thread, &ti, name, sizeof name))
        return 0;
    int keep = strncmp(name, "stackshot-", 10) != 0;

    uint64_t tls = tls_get(thread);
    uint64_t tls0 = tls;
    if (keep && !include_internal) {
        if (!(tls & TLS_INTERNAL_KNOWN)) {
            /* a live thread's group never changes: decide once */
            tls |= TLS_INTERNAL_KNOWN | (is_internal(env, ti.thread_group) ? TLS_INTERNAL : 0);
        }
        if (tls & TLS_INTERNAL)
            keep = 0;
    }
    if (ti.thread_group)
        (*env)->DeleteLocalRef(env, ti.thread_group);
    if (!keep) {
        /* left out, but its kernel tid still tells the native pass that
         * this thread is a Java one (an internal thread started before
         * VMInit is matched in /proc like a kept one) */
        jlong cpu = -1;
        if (!(tls & TLS_NID_MASK) && strncmp(name, "stackshot-", 10) != 0)
            (*ss_jvmti)->GetThreadCpuTime(ss_jvmti, thread, &cpu);
        *nid_out = cpu >= 0 ? find_nid(nids, name, (uint64_t)cpu, &tls)
                            : (pid_t)(tls & TLS_NID_MASK);
        if (tls != tls0)
            tls_set(thread, tls);
        if (e && *nid_out) {
            e->nid = *nid_out; /* left out for good: only its tid is needed */
            e->keep = false;
            e->facts = include_internal || (tls & TLS_INTERNAL_KNOWN) ||
                       strncmp(name, "stackshot-", 10) == 0;
        }
        return 0;
    }

    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    if (!t)
        return -1;
    t->number = e ? e->id : ss_jthreads_id(env, thread);
    t->tid = eetop_field ? (uint64_t)(*env)->GetLongField(env, thread, eetop_field) : 0;
    t->prio = ti.priority;
    t->os_prio = 0;
    t->daemon = ti.is_daemon;
    ss_jthreads_state(state, t);
    jlong cpu;
    if ((*ss_jvmti)->GetThreadCpuTime(ss_jvmti, thread, &cpu) == JVMTI_ERROR_NONE)
        t->cpu_ns = (uint64_t)cpu;

    pid_t nid = find_nid(nids, name, t->cpu_ns, &tls);
    if (tls != tls0)
        tls_set(thread, tls);
    t->nid = nid;
    *nid_out = nid;
    if (nid) {
        t->start_wall_ms = ss_thread_start_wall_ms(nid, t->number);
        uint64_t now_ms = ss_wall_ns() / 1000000ull;
        if (t->start_wall_ms && t->start_wall_ms <= now_ms)
            t->elapsed_ns = (now_ms - t->start_wall_ms) * 1000000ull;
    }
    if (e && nid && t->start_wall_ms) {
        e->nid = nid;
        e->keep = true;
        e->eetop = t->tid;
        e->start_wall_ms = t->start_wall_ms;
        e->facts = true;
    }
    *out = t;
    return 1;
}
