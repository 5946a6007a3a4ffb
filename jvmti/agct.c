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
 *
 * The guard. AGCT reads a thread's frames while the thread may be in any
 * state; where HotSpot's checks miss a case it faults, and its crash
 * handler then ends the host. The agent must not: while a thread is inside
 * AGCT (a thread-local pointer to a jump buffer, set only around the
 * call), a SIGSEGV or SIGBUS raised by the kernel on that thread jumps
 * back out of the call, and the walk answers SS_AGCT_FAULT (counted; the
 * sampler takes that thread's stack with JVMTI). Every other SIGSEGV and
 * SIGBUS (HotSpot takes implicit null checks, safepoint polls and stack
 * banging as faults: they are routine) goes on to the handler that was
 * installed before, called as the kernel would have called it: same
 * arguments, same mask and flags (ours are copied from it), SIG_DFL and
 * SIG_IGN honoured. It is installed once, when walking starts (the JVM's
 * handlers are in place by then), never again; not at all when libjsig is
 * loaded (its sigaction keeps the JVM's handler first and calls ours only
 * for faults HotSpot does not handle, which would then have to be passed
 * back: a loop), then faults inside AGCT stay HotSpot's. -Xrs changes
 * nothing here (it is about SIGQUIT, SIGHUP, SIGINT, SIGTERM).
 * What a jump out of AGCT skips: the destructors of its scope objects.
 * On JDK 17 that is nothing that outlives the call (no HandleMark); JDK 21
 * and later leave the thread's "in AsyncGetCallTrace" flag set, which on
 * Linux x86-64 only relaxes assertions. */
#include "jvmti/jvmti_internal.h"
#include "samplers/ss_samplers.h"

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
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

/* Handler side: fixed buffers only, never agent/grow.h or agent/hmap.h (they allocate). */
static agct_fn agct;
static _Atomic uint64_t preloaded_classes;

/* ---- the guard ------------------------------------------------------- */

static struct sigaction prev_segv, prev_bus; /* the JVM's, called for every other fault */
static bool guarded;
static _Atomic uint64_t faults, passed; /* caught inside AGCT; passed on to the JVM */
/* this thread is inside AGCT: where to jump on a fault (NULL: not) */
static __thread sigjmp_buf *in_agct __attribute__((tls_model("initial-exec")));
/* STACKSHOT_TEST_AGCT_FAULT=1 (tests): AGCT is given frames on a page it
 * may not write, so that it really faults inside its own code */
static agct_frame *fault_page;

/* The previous handler, as the kernel would have run it. */
static void chain(int sig, siginfo_t *si, void *uc) {
    const struct sigaction *p = sig == SIGBUS ? &prev_bus : &prev_segv;
    if (p->sa_flags & SA_RESETHAND) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
    }
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction)
            p->sa_sigaction(sig, si, uc);
        return;
    }
    if (p->sa_handler == SIG_IGN)
        return;
    if (p->sa_handler == SIG_DFL) {
        /* the default action: with it back in place, a fault happens
         * again when the instruction is retried; a sent one is raised
         * again (delivered when this handler returns) */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        if (si->si_code <= 0)
            raise(sig);
        return;
    }
    p->sa_handler(sig);
}

static void guard_handler(int sig, siginfo_t *si, void *uc) {
    sigjmp_buf *jb = in_agct;
    if (jb && si->si_code > 0) { /* raised by the kernel, on this thread, inside AGCT */
        in_agct = NULL;
        /* back to the mask of the moment of the fault: this handler's
         * own blocks SIGSEGV (the caller then restores the sampling
         * handler's) */
        pthread_sigmask(SIG_SETMASK, &((ucontext_t *)uc)->uc_sigmask, NULL);
        siglongjmp(*jb, 1);
    }
    atomic_fetch_add_explicit(&passed, 1, memory_order_relaxed);
    chain(sig, si, uc);
}

/* Ours ahead of the current one: its mask and flags, so that it runs as it
 * would have. */
static bool install_one(int sig, struct sigaction *prev) {
    if (sigaction(sig, NULL, prev) != 0)
        return false;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_handler;
    sa.sa_mask = prev->sa_mask;
    sa.sa_flags = (prev->sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
    return sigaction(sig, &sa, NULL) == 0;
}

static void guard_install(void) {
    if (guarded)
        return;
    if (dlsym(RTLD_DEFAULT, "JVM_begin_signal_setting")) { /* libjsig */
        ss_info("jvmti: libjsig is loaded: faults inside AsyncGetCallTrace are left to "
                "the JVM's handler (no guard)");
        return;
    }
    guarded = install_one(SIGSEGV, &prev_segv) && install_one(SIGBUS, &prev_bus);
    if (!guarded)
        ss_warn("jvmti: the guard around AsyncGetCallTrace could not be installed");
    const char *t = getenv("STACKSHOT_TEST_AGCT_FAULT");
    if (guarded && t && strcmp(t, "1") == 0) {
        void *pg = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pg != MAP_FAILED) {
            fault_page = pg;
            ss_info("jvmti: STACKSHOT_TEST_AGCT_FAULT=1: AsyncGetCallTrace will fault (test)");
        }
    }
}

/* AGCT, with a fault inside it turned into SS_AGCT_FAULT. The sampling
 * handler runs with every signal blocked, and a fault while SIGSEGV is
 * blocked ends the process at once (the kernel's default action, no
 * handler at all): SIGSEGV and SIGBUS are unblocked for the call. */
static jint call_agct(agct_trace *t, jint depth, void *uc) {
    if (!guarded) {
        agct(t, depth, uc);
        return t->num_frames;
    }
    sigset_t sync, old;
    sigemptyset(&sync);
    sigaddset(&sync, SIGSEGV);
    sigaddset(&sync, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &sync, &old);
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0) != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        atomic_fetch_add_explicit(&faults, 1, memory_order_relaxed);
        return SS_AGCT_FAULT;
    }
    if (fault_page)
        t->frames = fault_page;
    in_agct = &jb;
    atomic_signal_fence(memory_order_seq_cst);
    agct(t, depth, uc);
    atomic_signal_fence(memory_order_seq_cst);
    in_agct = NULL;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return t->num_frames;
}

uint64_t ss_agct_faults(void) { return atomic_load_explicit(&faults, memory_order_relaxed); }

uint64_t ss_agct_passed(void) { return atomic_load_explicit(&passed, memory_order_relaxed); }

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
    if (call_agct(&t, (jint)cap, ucontext) == SS_AGCT_FAULT)
        return SS_AGCT_FAULT;
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
    if (call_agct(&t2, (jint)cap - 1, &up) == SS_AGCT_FAULT)
        return SS_AGCT_FAULT;
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
    if (!agct)
        return;
    guard_install();
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
