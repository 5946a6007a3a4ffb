/* agct.c: the Java frames of a running thread where it is, without a
 * safepoint: HotSpot's AsyncGetCallTrace (AGCT), called from the sampling
 * signal's handler on the thread itself (samplers/signal_sampler.c runs
 * the walker installed here after copying the thread's registers and
 * stack).
 *
 * AGCT is exported by libjvm.so (JDK 8 to 25, found with dlsym; not a
 * JVMTI function). What it needs:
 *   - the calling thread's JNIEnv (GetEnv: a read of HotSpot's current
 *     thread, no allocation);
 *   - ClassLoad events enabled by some agent (otherwise it answers -1,
 *     ticks_no_class_load): enabled here with a callback doing nothing;
 *   - jmethodIDs made for the methods it will meet (it never makes one in
 *     a handler: a frame of a method without one comes back with a NULL
 *     id). ClassPrepare calls GetClassMethods for every class (which
 *     makes them), and the classes loaded before the agent (at VMInit, or
 *     at attach) get the same once.
 * It is written to be called from a signal handler in any thread state
 * (in Java, in the VM, in native code, in transition), checks the state
 * itself and answers with a negative code where it cannot walk: -2 GC
 * active, -3 unknown state, -4 not walkable (not Java), -5 unknown Java,
 * -6 not walkable Java, -7 unknown thread state, -8 thread exiting, -9
 * deoptimizing, -10 safepoint. The sampler then uses the round's
 * safepoint stack for that thread, and counts it by code.
 *
 * Its frames: {jint lineno, jmethodID method_id}, lineno being the bci
 * (negative for native methods), resolved off the handler by
 * resolve.c's per-method cache (lines from the bci, as for GetStackTrace).
 */
#include "jvmti/jvmti_internal.h"
#include "samplers/ss_samplers.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/ucontext.h>
#include <string.h>

typedef struct agct_frame {
    jint lineno;
    jmethodID method_id;
} agct_frame;

typedef struct agct_trace {
    JNIEnv *env_id;
    jint num_frames;
    agct_frame *frames;
} agct_trace;

typedef void (*agct_fn)(agct_trace *, jint, void *);

static agct_fn agct;
static _Atomic uint64_t preloaded_classes;

_Static_assert(sizeof(agct_frame) == 16, "AGCT frame: the 16 bytes ss_sig_runtime_fn writes");

/* AGCT's codes for a pc in Java code it cannot place. */
#define TICKS_UNKNOWN_JAVA (-5)
#define TICKS_NOT_WALKABLE_JAVA (-6)

/* A word of the thread's stack, from the handler's copy of it. */
static bool stack_word(const uint8_t *stack, uint64_t sp, uint32_t len, uint64_t at,
                       uint64_t *out) {
    if (at < sp || at + 8 > sp + len || (at & 7))
        return false;
    memcpy(out, stack + (at - sp), 8);
    return true;
}

/* In the signal handler of a running Java thread. A thread inside one of
 * HotSpot's stubs (the CRC32 intrinsic, array copies...) is in code AGCT
 * cannot place (-5/-6); those stubs set up a frame pointer (enter), so
 * the frame of their caller is one frame-pointer step up: AGCT is asked
 * again from there (the return address, RBP + 16), with the words read
 * from the handler's copy of the stack (no fault possible), and the stack
 * is marked as having a stub on top (first frame: SS_AGCT_STUB_MARK). */
static int32_t walk(void *ucontext, const uint8_t *stack, uint64_t sp, uint32_t len,
                    void *frames, uint32_t cap) {
    JNIEnv *env = NULL;
    if (!ss_jvm || (*ss_jvm)->GetEnv(ss_jvm, (void **)&env, JNI_VERSION_1_6) != JNI_OK || !env)
        return SS_AGCT_NO_ENV;
    agct_trace t = {env, 0, frames};
    agct(&t, (jint)cap, ucontext);
    if ((t.num_frames != TICKS_UNKNOWN_JAVA && t.num_frames != TICKS_NOT_WALKABLE_JAVA) ||
        cap < 2)
        return t.num_frames;
    const ucontext_t *uc = ucontext;
    uint64_t fp = (uint64_t)uc->uc_mcontext.gregs[REG_RBP];
    uint64_t saved_fp, ret;
    if (fp <= sp || !stack_word(stack, sp, len, fp, &saved_fp) ||
        !stack_word(stack, sp, len, fp + 8, &ret) || saved_fp <= fp)
        return t.num_frames;
    ucontext_t up = *uc; /* fpregs still points at the kernel's frame: AGCT reads no FP state */
    up.uc_mcontext.gregs[REG_RIP] = (greg_t)ret;
    up.uc_mcontext.gregs[REG_RSP] = (greg_t)(fp + 16);
    up.uc_mcontext.gregs[REG_RBP] = (greg_t)saved_fp;
    agct_frame *f = frames;
    agct_trace t2 = {env, 0, f + 1};
    agct(&t2, (jint)cap - 1, &up);
    if (t2.num_frames <= 0)
        return t.num_frames;
    f[0].lineno = SS_AGCT_STUB_MARK;
    f[0].method_id = NULL;
    return t2.num_frames + 1;
}

bool ss_agct_find(void) {
    if (agct)
        return true;
    agct = (agct_fn)dlsym(RTLD_DEFAULT, "AsyncGetCallTrace");
    return agct != NULL;
}

void ss_agct_enable(void) {
    if (agct)
        ss_native_set_runtime_walk(walk);
}

bool ss_agct_stub_on_top(const void *frames) {
    return ((const agct_frame *)frames)->lineno == SS_AGCT_STUB_MARK;
}

bool ss_agct_frame(const void *frames, int32_t i, jmethodID *m, jlocation *bci) {
    const agct_frame *f = (const agct_frame *)frames + i;
    *m = f->method_id;
    *bci = f->lineno >= 0 ? (jlocation)f->lineno : -1;
    return f->method_id != NULL;
}

/* jmethodIDs for every method of a class (GetClassMethods makes them). */
static void methods_of(jvmtiEnv *jvmti, jclass cls) {
    jint n = 0;
    jmethodID *ms = NULL;
    if ((*jvmti)->GetClassMethods(jvmti, cls, &n, &ms) == JVMTI_ERROR_NONE) {
        (*jvmti)->Deallocate(jvmti, (unsigned char *)ms);
        atomic_fetch_add_explicit(&preloaded_classes, 1, memory_order_relaxed);
    }
}

void JNICALL ss_agct_class_load_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread, jclass cls) {
    (void)jvmti;
    (void)env;
    (void)thread;
    (void)cls; /* AGCT only needs the event enabled; its methods come at prepare */
}

void JNICALL ss_agct_compiled_cb(jvmtiEnv *jvmti, jmethodID m, jint size, const void *code,
                                 jint map_length, const jvmtiAddrLocationMap *map,
                                 const void *compile_info) {
    (void)jvmti; (void)m; (void)size; (void)code; (void)map_length; (void)map;
    (void)compile_info; /* enabled only so that HotSpot keeps non-safepoint debug info */
}

void JNICALL ss_agct_class_prepare_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread,
                                      jclass cls) {
    if (agct)
        methods_of(jvmti, cls);
    ss_jspan_class_prepare_cb(jvmti, env, thread, cls);
}

void ss_agct_preload(JNIEnv *env) {
    if (!agct)
        return;
    jint n = 0;
    jclass *cs = NULL;
    if ((*ss_jvmti)->GetLoadedClasses(ss_jvmti, &n, &cs) != JVMTI_ERROR_NONE)
        return;
    for (jint i = 0; i < n; i++) {
        jint status = 0;
        if ((*ss_jvmti)->GetClassStatus(ss_jvmti, cs[i], &status) == JVMTI_ERROR_NONE &&
            (status & JVMTI_CLASS_STATUS_PREPARED) && !(status & JVMTI_CLASS_STATUS_ARRAY) &&
            !(status & JVMTI_CLASS_STATUS_PRIMITIVE))
            methods_of(ss_jvmti, cs[i]);
        (*env)->DeleteLocalRef(env, cs[i]);
    }
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)cs);
}

uint64_t ss_agct_preloaded(void) {
    return atomic_load_explicit(&preloaded_classes, memory_order_relaxed);
}
