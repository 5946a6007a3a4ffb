/* jvmti_internal.h: what the files of jvmti/ share among themselves only.
 *
 *   agent.c     Agent_OnLoad / Agent_OnAttach, capabilities, events, facts
 *   sampler.c   the ss_source_ops: the "stackshot-sampler" JVM agent thread
 *   resolve.c   jmethodID + bci -> class, method, file, module, line (cached)
 *   classname.c class signatures as jstack prints them, modified UTF-8
 *   threads.c   thread metadata as jstack prints it, the internal-thread rule
 *   nid.c       kernel tids of threads the agent did not see start
 *   vthreads.c  virtual threads (JDK 21+)
 *   jspan.c     the OpenTelemetry span current on each thread, and
 *               io.stackshot.StackshotSpan's natives
 *   jmemo.c     per Java thread, round to round: CPU clock, last stack and
 *               its identity (stack reuse)
 *   heapdump.c  what the dumps exporter needs of the VM: jstack's banner,
 *               heap dumps on OutOfMemoryError and on demand
 */
#ifndef SS_JVMTI_INTERNAL_H
#define SS_JVMTI_INTERNAL_H

#include <sys/types.h>
#include <jni.h>
#include <jvmti.h>

#include "agent/config.h"
#include "agent/source.h"
#include "agent/round.h"

/* JDK 21+ additions, by their published numbers: the agent compiles
 * against the JDK 17 headers. */
#define SS_JVMTI_EVENT_VIRTUAL_THREAD_START 87
#define SS_JVMTI_EVENT_VIRTUAL_THREAD_END 88

/* The one JVMTI environment and VM of this process (set in agent.c). */
extern jvmtiEnv *ss_jvmti;
extern JavaVM *ss_jvm;

/* ---- sampler.c ---------------------------------------------------- */

extern const ss_source_ops ss_jvmti_source;

/* ---- classname.c -------------------------------------------------- */

/* "Ljava/util/HashMap;" -> "java.util.HashMap"; hidden classes
 * ("LDemo$$Lambda$14.0x0000000800c03000;") -> "Demo$$Lambda$14/0x0000000800c03000",
 * as jstack prints them. Writes at most n bytes, always terminated. */
void ss_jclass_name(const char *signature, char *out, size_t n);

/* Modified UTF-8 (JNI, JVMTI strings) -> standard UTF-8: "\xC0\x80" becomes
 * NUL-free '?' and surrogate pairs become 4-byte sequences. */
void ss_mutf8_to_utf8(const char *in, char *out, size_t n);

/* ---- resolve.c ---------------------------------------------------- */

typedef struct ss_jresolver ss_jresolver;

ss_jresolver *ss_jresolver_create(void);
void ss_jresolver_destroy(ss_jresolver *r);
/* One Java frame. Always fills *out (an unresolvable method becomes
 * "unknown.unknown(unknown)"); returns 0, or -1 when the method ID was
 * invalid (its class was unloaded). Sampler thread only. */
int ss_jresolve(ss_jresolver *r, JNIEnv *env, jmethodID m, jlocation bci,
                ss_frame *out);
void ss_jresolver_stats(const ss_jresolver *r, uint64_t *methods,
                        uint64_t *invalid, uint64_t *clears, uint64_t *refreshes);
/* Start of a round: the resolver's clock for line-table refreshes. */
void ss_jresolver_round(ss_jresolver *r);

/* ---- jmemo.c ------------------------------------------------------ */

/* One Java thread's memo (by Java id), valid for the round it was got in. */
typedef struct ss_jthread_memo {
    int64_t id;        /* Java thread id; 0 free */
    /* facts that do not change while the thread lives, once all known
     * (threads.c): its kernel tid, kept or left out, JavaThread*, start */
    bool facts, keep;
    pid_t nid;
    uint64_t eetop, start_wall_ms;
    uint64_t cpu_prev; /* CPU clock at its previous round, SS_UNKNOWN_U64 none */
    ss_frame *frames;  /* its last stack, resolved */
    uint32_t n_frames, cap_frames;
    bool truncated, have_stack;
    uint64_t stack_id, emitted_id;
    /* the stack came from GetStackTrace: the CPU clock read before it was
     * taken, the state then, and when (monotonic ns) */
    bool reusable;
    uint64_t taken_cpu;
    jint taken_state;
    uint64_t taken_ns;
    /* GetThreadInfo's answer (threads.c): name (UTF-8, malloc'd), priority,
     * daemon flag, with the CPU clock and the time (monotonic ns) when read;
     * used again while the clock has not moved, for at most 1 s */
    char *name;
    jint prio;
    bool daemon;
    uint64_t info_cpu, info_ns;
    /* GetThreadState's answer (sampler.c), the same way */
    bool have_state;
    jint state;
    uint64_t state_cpu, state_ns;
} ss_jthread_memo;

/* The memo's one rule for facts kept per thread (its stack, its state,
 * its name): a fact read when the thread's CPU clock said then_cpu, at
 * then_ns (monotonic), still holds while that clock says the same (the
 * clock counts every nanosecond the thread ran: an equal reading means it
 * did not run at all), for at most SS_JMEMO_KEEP_NS (a clock that would
 * not move, a change made by another thread). */
#define SS_JMEMO_KEEP_NS 1000000000ull

static inline bool ss_jmemo_still(uint64_t then_cpu, uint64_t then_ns, uint64_t cpu_now,
                                  uint64_t now_ns) {
    return cpu_now != SS_UNKNOWN_U64 && cpu_now == then_cpu && now_ns - then_ns < SS_JMEMO_KEEP_NS;
}

typedef struct ss_jmemo ss_jmemo;
ss_jmemo *ss_jmemo_create(void);
void ss_jmemo_destroy(ss_jmemo *m);
/* This round's entry of a thread (kept from the previous round, or new);
 * NULL: no memo for it this round. */
ss_jthread_memo *ss_jmemo_get(ss_jmemo *m, int64_t id);
/* Room for n more threads this round: until the round ends, getting at
 * most n entries moves none (pointers to them stay good). -1: no memory. */
int ss_jmemo_reserve(ss_jmemo *m, uint32_t n);
/* End of the round: threads not got this round are forgotten. */
void ss_jmemo_end(ss_jmemo *m);
/* The thread's stack this round (n frames, leaf first): kept, with its
 * identity (the previous one when equal; f may be e->frames, the stack
 * used again); sets t->stack_id, same_stack. */
void ss_jmemo_keep(ss_jmemo *m, ss_jthread_memo *e, const ss_frame *f, uint32_t n,
                   bool truncated, ss_thread_sample *t);
void ss_jmemo_stats(const ss_jmemo *m, uint64_t *same, uint64_t *changed);

/* ---- threads.c ---------------------------------------------------- */

/* JNI ids of java.lang.Thread fields, looked up once the VM is live. */
int ss_jthreads_init(JNIEnv *env);

/* Record the calling thread's kernel tid in its JVMTI thread-local storage
 * (ThreadStart and VMInit run on the thread itself). */
void ss_jthreads_note_current(jthread thread);

/* Fill a sample for one platform thread. Returns 1 to keep it, 0 to leave it
 * out (an agent thread, or an internal one when !include_internal). The
 * name is added to the builder here, so the caller adds frames after.
 * *nid: the thread's kernel tid when known (kept or not), else 0. */
typedef struct ss_nid_matcher ss_nid_matcher;
int ss_jthreads_sample(ss_round_builder *b, JNIEnv *env, jthread thread,
                       jint state, bool include_internal, ss_nid_matcher *nids,
                       ss_jthread_memo *memo, ss_thread_sample **out, pid_t *nid);
/* Up to max kernel tids of Java threads started (ThreadStart, VMInit)
 * since the last call; how many. Sampler thread only. */
uint32_t ss_jthreads_started(pid_t *out, uint32_t max);
/* How many Java threads have started (ThreadStart, VMInit) so far, modulo
 * 2^32: moved since a listing of the threads, the listing may lack one.
 * Counted before the tid is written, after the thread is in the VM's list. */
uint32_t ss_jthreads_start_count(void);
/* The round's times (monotonic ns, wall ms), taken once as its threads
 * are listed: what the facts kept per thread are dated with, and what
 * their elapsed time is counted to. Before ss_jthreads_sample. */
void ss_jthreads_round(uint64_t mono_ns, uint64_t wall_ms);
/* GetThreadInfo calls for threads already known, and answers used again
 * instead (the thread had not run since). */
void ss_jthreads_info_stats(uint64_t *read, uint64_t *reused);
/* The kernel tid recorded for a thread, 0 when not known yet. */
pid_t ss_jthreads_known_nid(jthread thread);

/* The thread's Java id (jstack's #n), -1 when unknown. */
int64_t ss_jthreads_id(JNIEnv *env, jthread thread);

/* Status word and state detail from JVMTI thread state bits. */
void ss_jthreads_state(jint st, ss_thread_sample *t);


/* ---- nid.c -------------------------------------------------------- */

/* Find the kernel tid of a Java thread the agent did not see start: match
 * its name against /proc/self/task/<tid>/comm (first 15 bytes, as HotSpot
 * names native threads) and, when several tids match, pick the one whose
 * CPU clock equals the thread's JVMTI CPU time. Returns 0 when unknown.
 * `taken` lists tids already assigned (not candidates). */
ss_nid_matcher *ss_nid_matcher_create(void);
void ss_nid_matcher_destroy(ss_nid_matcher *m);
void ss_nid_matcher_begin(ss_nid_matcher *m); /* once per round, lazily scans */
void ss_nid_matcher_take(ss_nid_matcher *m, pid_t tid);
pid_t ss_nid_match(ss_nid_matcher *m, const char *name, uint64_t cpu_ns);

/* Start time of a kernel thread (from /proc/self/task/<tid>/stat), epoch
 * ms; 0 when unknown. */
uint64_t ss_task_start_wall_ms(pid_t tid);
/* The same, cached under (tid, Java thread id). Sampler thread only. */
uint64_t ss_thread_start_wall_ms(pid_t tid, int64_t java_id);

/* ---- heapdump.c --------------------------------------------------- */

/* jvmti_entry.c: called once the agent samples the JVM (the loader's
 * ss_core_host.jvm_live); NULL: none */
void ss_jvmti_set_live_hook(void (*hook)(void));

/* The VM is live (on its thread env): the jstack banner and the JVM
 * services of the process (ss_process()->jvm) for the dumps exporter;
 * the heap-dump flags when that exporter is configured. */
void ss_jheap_live(JNIEnv *env, const ss_config *cfg);
/* ResourceExhausted (enabled only when heap dumps are wanted). */
void JNICALL ss_jheap_exhausted_cb(jvmtiEnv *jvmti, JNIEnv *env, jint flags,
                                   const void *reserved, const char *description);

/* ---- vthreads.c --------------------------------------------------- */

/* Ask for virtual-thread support (JDK 21+). Adds the capability to *caps
 * when the VM offers it; returns true when it did. */
bool ss_vthreads_capable(jvmtiEnv *jvmti, jvmtiCapabilities *caps);
/* After capabilities are in force: set up the live list (cap `max`). */
int ss_vthreads_enable(jvmtiEnv *jvmti, uint32_t max);
/* The callbacks, installed by agent.c. */
void JNICALL ss_vthread_start_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread vt);
void JNICALL ss_vthread_end_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread vt);
/* Local refs to up to `max` live virtual threads (caller's local frame).
 * Returns how many; *dropped counts the ones not tracked (over the cap). */
uint32_t ss_vthreads_snapshot(JNIEnv *env, jthread *out, uint32_t max,
                              uint64_t *dropped);
bool ss_vthreads_active(void);
uint32_t ss_vthreads_cap(void);

/* ---- agct.c ------------------------------------------------------- */

/* HotSpot's AsyncGetCallTrace: found (dlsym), the walker installed in the
 * sampling handler, the events that give it jmethodIDs. */
#define SS_AGCT_NO_ENV (-100) /* the walker's own code: no JNIEnv on the thread */
#define SS_AGCT_STUB_MARK (-1000) /* first frame's lineno: a stub was on top */
#define SS_AGCT_FAULT (-101) /* AGCT faulted; the guard jumped back out (agct.c) */
bool ss_agct_find(void);
/* The walker in the sampling handler, and the guard around AGCT. */
void ss_agct_enable(void);
/* Faults inside AGCT caught by the guard; the others its handler passed
 * on to the JVM's. */
uint64_t ss_agct_faults(void);
uint64_t ss_agct_passed(void);
/* The walk's first frame is the mark of a HotSpot stub on top (the Java
 * frames follow it). */
bool ss_agct_stub_on_top(const void *frames);
/* Frame i of a walk: false when its method has no jmethodID. */
bool ss_agct_frame(const void *frames, int32_t i, jmethodID *m, jlocation *bci);
void JNICALL ss_agct_class_load_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread, jclass cls);
void JNICALL ss_agct_compiled_cb(jvmtiEnv *jvmti, jmethodID m, jint size, const void *code,
                                 jint map_length, const jvmtiAddrLocationMap *map,
                                 const void *compile_info);
/* ClassPrepare: jmethodIDs of the class, then jspan.c's callback. */
void JNICALL ss_agct_class_prepare_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread,
                                      jclass cls);
/* The classes already loaded (VMInit, attach). */
void ss_agct_preload(JNIEnv *env);
uint64_t ss_agct_preloaded(void);

/* ---- jspan.c ------------------------------------------------------ */

/* JNI ids of java.lang's ThreadLocal internals (the VM is live). */
int ss_jspan_init(JNIEnv *env);
/* ClassPrepare (enabled from load on, any phase): notes the classes the
 * span reader needs and binds io.stackshot.StackshotSpan's natives. */
void JNICALL ss_jspan_class_prepare_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread,
                                       jclass cls);
/* Attached to a running VM: the same for the classes already loaded. */
void ss_jspan_scan_loaded(JNIEnv *env);
/* Start of a round (sampler thread): take the classes noted since, drop
 * unloaded ones. True when some thread may have a span to read. */
bool ss_jspan_round(JNIEnv *env);
/* Sets t->has_span, trace_id, span_id, trace_flags from the thread's
 * current span, if any (sampler thread). */
void ss_jspan_read(JNIEnv *env, jthread thread, ss_thread_sample *t);
void ss_jspan_stats(uint64_t *reads, uint64_t *with_span, uint64_t *ns_span,
                    uint64_t *ns_none);

#endif /* SS_JVMTI_INTERNAL_H */
