/* agent.c: the JVMTI entry points.
 *
 *   java -agentpath:/path/libstackshot.so[=KEY=value,KEY=value] ...
 *   jcmd <pid> JVMTI.agent_load /path/libstackshot.so "KEY=value,..."
 *   stackshot stop <pid>   (Agent_OnAttach with the option string "stop")
 *
 * The option string sets the same keys as the environment and wins over
 * it. A bad option gets one line and is ignored; the JVM always starts
 * (every path returns JNI_OK). When SPLUNK_PROFILER_ENABLED is not true
 * the agent does nothing else: no JVMTI environment, no capability, no
 * event, no thread.
 *
 * Capabilities, only these:
 *   can_get_thread_cpu_time    cpu= of every thread (GetThreadCpuTime)
 *   can_get_source_file_name   the file of each frame, as jstack prints it
 *   can_get_line_numbers       the line of each frame (GetLineNumberTable)
 *   can_support_virtual_threads  JDK 21+, when offered: virtual threads'
 *                              events and stacks (vthreads.c)
 *   can_generate_compiled_method_load_events  unless STACKSHOT_JAVA_STACKS=
 *                              safepoint: debug information at every pc of
 *                              compiled code, for AsyncGetCallTrace (agct.c)
 * None of them slows the JVM down: they are all "always available"
 * capabilities that change no compiled code's behaviour (unlike, say,
 * breakpoints or can_access_local_variables).
 *
 * Events: VMInit (start sampling once the VM is live, from -agentpath),
 * VMDeath (flush and stop within STACKSHOT_SHUTDOWN_TIMEOUT), ThreadStart
 * (record the new thread's kernel tid: the callback runs on that thread),
 * ClassPrepare (note the OpenTelemetry context classes and bind
 * io.stackshot.StackshotSpan, jspan.c: one signature compare per class
 * loaded; with AsyncGetCallTrace, also GetClassMethods: agct.c), ClassLoad
 * and CompiledMethodLoad (empty: AsyncGetCallTrace's conditions), and on
 * JDK 21+ VirtualThreadStart/End. */
#include "agent/config.h"
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "proc/process.h"
#include "proc/threads.h"
#include "agent/round.h"
#include "jvmti/jvmti_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

jvmtiEnv *ss_jvmti;
JavaVM *ss_jvm;

static ss_config config;
/* Running threads walked by AsyncGetCallTrace (agct.c): STACKSHOT_JAVA_STACKS
 * other than safepoint, and the JVM exports it. Decided at load: its
 * ClassLoad and ClassPrepare work must start with the first class. */
static bool use_agct;

static bool want_vthreads;
static uint32_t max_vthreads; /* STACKSHOT_MAX_VIRTUAL_THREADS */
/* go_live ran: the agent is set up in this JVM, started or not since */
static _Atomic bool live_once;

/* jvmtiEventCallbacks of the JDK 17 headers, plus the two JDK 21 slots
 * that follow SampledObjectAlloc (events 87 and 88). A JDK 17 VM copies
 * only the part it knows. */
typedef struct callbacks21 {
    jvmtiEventCallbacks base;
    void(JNICALL *virtual_thread_start)(jvmtiEnv *, JNIEnv *, jthread);
    void(JNICALL *virtual_thread_end)(jvmtiEnv *, JNIEnv *, jthread);
} callbacks21;

/* A system property. java.runtime.* are set by the class library, not the
 * VM, so JVMTI's GetSystemProperty does not know them: ask
 * System.getProperty (the VM is live here), then JVMTI. */
static void property(JNIEnv *env, const char *key, char *out, size_t n) {
    out[0] = '\0';
    jclass sys = (*env)->FindClass(env, "java/lang/System");
    jmethodID get = sys ? (*env)->GetStaticMethodID(env, sys, "getProperty",
                                                    "(Ljava/lang/String;)Ljava/lang/String;")
                        : NULL;
    jstring k = get ? (*env)->NewStringUTF(env, key) : NULL;
    jstring v = k ? (*env)->CallStaticObjectMethod(env, sys, get, k) : NULL;
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionClear(env);
        v = NULL;
    }
    const char *c = v ? (*env)->GetStringUTFChars(env, v, NULL) : NULL;
    if (c) {
        ss_mutf8_to_utf8(c, out, n);
        (*env)->ReleaseStringUTFChars(env, v, c);
    }
    if (v)
        (*env)->DeleteLocalRef(env, v);
    if (k)
        (*env)->DeleteLocalRef(env, k);
    if (sys)
        (*env)->DeleteLocalRef(env, sys);
    char *jv = NULL;
    if (!out[0] && (*ss_jvmti)->GetSystemProperty(ss_jvmti, key, &jv) == JVMTI_ERROR_NONE && jv) {
        ss_mutf8_to_utf8(jv, out, n);
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)jv);
    }
}

static void fill_runtime_facts(JNIEnv *env) {
    ss_process_info *p = ss_process_mut();
    char vendor[96], name[96], version[64];
    property(env, "java.runtime.name", p->runtime_name, sizeof p->runtime_name);
    property(env, "java.runtime.version", p->runtime_version, sizeof p->runtime_version);
    property(env, "java.vm.vendor", vendor, sizeof vendor);
    property(env, "java.vm.name", name, sizeof name);
    property(env, "java.vm.version", version, sizeof version);
    snprintf(p->runtime_description, sizeof p->runtime_description, "%s %s %s", vendor,
             name, version);
    p->runtime = SS_RUNTIME_JVM;
}

static void (*_Atomic live_hook)(void);

void ss_jvmti_set_live_hook(void (*hook)(void)) { atomic_store(&live_hook, hook); }

/* The VM is live: facts, JNI ids, virtual threads, then the agent. */
static void go_live(JNIEnv *env) {
    fill_runtime_facts(env);
    ss_jheap_live(env, &config);
    ss_jthreads_init(env);
    ss_jspan_init(env);
    if (want_vthreads) {
        if (ss_vthreads_enable(ss_jvmti, max_vthreads) != 0)
            ss_warn("jvmti: virtual threads could not be tracked; only platform "
                    "threads are sampled");
    }
    const ss_process_info *p = ss_process();
    ss_info("jvmti: %s %s (%s); virtual threads %s", p->runtime_name, p->runtime_version,
            p->runtime_description, ss_vthreads_active() ? "sampled" : "not sampled");
    ss_agent_start(&ss_jvmti_source, &config);
    live_once = true;
    void (*hook)(void) = atomic_load(&live_hook);
    if (hook && ss_agent_running())
        hook();
}

static void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *env, jthread thread) {
    (void)jvmti;
    ss_jthreads_note_current(thread); /* VMInit runs on the main thread */
    if (use_agct)
        ss_agct_preload(env); /* loaded before ClassPrepare was sent (primordial phase) */
    go_live(env);
}

static void JNICALL on_vm_death(jvmtiEnv *jvmti, JNIEnv *env) {
    (void)jvmti;
    (void)env;
    ss_agent_stop();
}

static void JNICALL on_thread_start(jvmtiEnv *jvmti, JNIEnv *env, jthread thread) {
    (void)jvmti;
    (void)env;
    ss_jthreads_note_current(thread);
}

static bool request_capabilities(void) {
    jvmtiCapabilities pot, want;
    memset(&pot, 0, sizeof pot);
    memset(&want, 0, sizeof want);
    (*ss_jvmti)->GetPotentialCapabilities(ss_jvmti, &pot);
    want.can_get_thread_cpu_time = pot.can_get_thread_cpu_time;
    want.can_get_source_file_name = pot.can_get_source_file_name;
    want.can_get_line_numbers = pot.can_get_line_numbers;
    /* AsyncGetCallTrace places a pc between two calls from the debug
     * information next to it; HotSpot records it at every pc (what
     * -XX:+DebugNonSafepoints does) once an agent can receive
     * CompiledMethodLoad events. Without it a thread in a stub called from
     * inlined code shows the wrong inlined method on top (measured on
     * JDK 25: 176 of 217 CRC32 samples in Preconditions.checkFromIndexSize,
     * none with it). HotSpot does so while the event is enabled: its
     * callback does nothing. Costs compiled code's debug information
     * (memory) and one event per method compiled, not the code's speed. */
    if (use_agct)
        want.can_generate_compiled_method_load_events =
            pot.can_generate_compiled_method_load_events;
    /* with a cap of 0 the capability is not even asked for: a JVM that
     * has it reports every virtual thread mount and unmount to JVMTI */
    want_vthreads = max_vthreads > 0 && ss_vthreads_capable(ss_jvmti, &want);
    if ((*ss_jvmti)->AddCapabilities(ss_jvmti, &want) != JVMTI_ERROR_NONE) {
        ss_error("jvmti: the JVM refused the capabilities the agent needs; the agent "
                 "stays off");
        return false;
    }
    if (!pot.can_get_thread_cpu_time)
        ss_warn("jvmti: no thread CPU time in this JVM; cpu=0ms is printed");
    return true;
}

static bool install_events(bool live) {
    callbacks21 cb;
    memset(&cb, 0, sizeof cb);
    cb.base.VMInit = on_vm_init;
    cb.base.VMDeath = on_vm_death;
    cb.base.ThreadStart = on_thread_start;
    cb.base.ClassPrepare = ss_agct_class_prepare_cb; /* then jspan.c's */
    cb.base.ClassLoad = ss_agct_class_load_cb;
    cb.base.CompiledMethodLoad = ss_agct_compiled_cb;
    cb.base.ResourceExhausted = ss_jheap_exhausted_cb; /* enabled by heapdump.c if wanted */
    cb.virtual_thread_start = ss_vthread_start_cb;
    cb.virtual_thread_end = ss_vthread_end_cb;
    jint size = want_vthreads ? (jint)sizeof cb : (jint)sizeof cb.base;
    if ((*ss_jvmti)->SetEventCallbacks(ss_jvmti, &cb.base, size) != JVMTI_ERROR_NONE)
        return false;
    jvmtiEvent events[] = {JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_THREAD_START,
                           JVMTI_EVENT_CLASS_PREPARE, JVMTI_EVENT_VM_INIT,
                           JVMTI_EVENT_CLASS_LOAD, JVMTI_EVENT_COMPILED_METHOD_LOAD};
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++) {
        if (live && events[i] == JVMTI_EVENT_VM_INIT)
            continue;
        if ((events[i] == JVMTI_EVENT_CLASS_LOAD ||
             events[i] == JVMTI_EVENT_COMPILED_METHOD_LOAD) && !use_agct)
            continue;
        if ((*ss_jvmti)->SetEventNotificationMode(ss_jvmti, JVMTI_ENABLE, events[i],
                                                  NULL) != JVMTI_ERROR_NONE)
            return false;
    }
    return true;
}

/* Is a thread of this process still named stackshot-sampler (comm
 * keeps 15 bytes)? A sampler that missed the shutdown deadline at a stop
 * is left to finish by itself: no second one may start beside it. */
static bool sampler_thread_alive(void) {
    /* cannot tell: do not start a second one */
    return ss_proc_has_thread_named(0, "stackshot-sampl") != 0;
}

/* `stackshot stop PID`: the option string "stop" given to Agent_OnAttach
 * of the library the JVM already has (same path: the same copy, the same
 * agent). Sampling stops and the exporters deliver what they hold, as at
 * the JVM's exit; the JVM runs on. JVMTI environment, capabilities and
 * events stay (an agent cannot give its library back: HotSpot never
 * unloads one), so a later attach starts sampling again. */
static void stop_from_attach(void) {
    if (!live_once || !ss_agent_running()) {
        ss_info("jvmti: stop asked, but the agent is not sampling in this JVM");
        return;
    }
    ss_agent_stop();
    ss_info("jvmti: sampling stopped (stackshot stop); the JVM runs on, a new attach "
            "starts it again");
}

/* A load in a JVM where the agent went live before and is not running
 * (stopped, or its start failed): sampling again, with the settings of
 * this load. */
static void load_again(const char *options) {
    if (sampler_thread_alive()) {
        ss_warn("jvmti: the previous sampler has not ended yet; not started again");
        return;
    }
    ss_config_set_options(options);
    ss_config_load(&config);
    if (config.enabled)
        ss_agent_start(&ss_jvmti_source, &config);
}

/* Shared by both entry points. `live`: attached to a running VM. */
static void load(JavaVM *vm, const char *options, bool live) {
    /* a running agent reads its option string: it is not replaced under it */
    if (live_once && ss_agent_running()) {
        ss_info("jvmti: already loaded in this JVM; ignoring the second load");
        return;
    }
    if (live_once) {
        load_again(options);
        return;
    }
    ss_config_set_options(options);
    ss_config_load(&config);
    if (!config.enabled)
        return;
    max_vthreads = (uint32_t)ss_config_int("STACKSHOT_MAX_VIRTUAL_THREADS", 1000, 0, 1000000);
    if (ss_jvmti) {
        ss_info("jvmti: already loaded in this JVM; ignoring the second load");
        return;
    }
    ss_jvm = vm;
    jvmtiEnv *j = NULL;
    if ((*vm)->GetEnv(vm, (void **)&j, JVMTI_VERSION_1_2) != JNI_OK || !j) {
        ss_error("jvmti: this JVM offers no JVMTI 1.2 environment; the agent stays off");
        return;
    }
    ss_jvmti = j;
    use_agct = strcmp(ss_config_str("STACKSHOT_JAVA_STACKS", "mixed"), "safepoint") != 0 &&
               ss_agct_find();
    if (!request_capabilities())
        return;
    if (!install_events(live)) {
        ss_error("jvmti: could not enable the agent's events; the agent stays off");
        return;
    }
    if (live) {
        JNIEnv *env = NULL;
        if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK || !env) {
            ss_error("jvmti: attach without a JNI environment; the agent stays off");
            return;
        }
        ss_jspan_scan_loaded(env); /* after ClassPrepare is on: none missed */
        if (use_agct)
            ss_agct_preload(env); /* the classes loaded before the attach */
        go_live(env);
    }
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    load(vm, options, false);
    return JNI_OK;
}

JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    if (options && !strcmp(options, "stop"))
        stop_from_attach();
    else
        load(vm, options, true);
    return JNI_OK;
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm) {
    (void)vm;
    ss_agent_stop();
}
