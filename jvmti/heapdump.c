/* heapdump.c: what the Qubership dumps exporter needs of the JVM beyond
 * rounds (ss_jvm_services in proc/process.h):
 *
 *   - the VM's name as jstack's "Full thread dump" line spells it;
 *   - heap dumps on OutOfMemoryError: HeapDumpOnOutOfMemoryError and
 *     HeapDumpPath are manageable flags, set through the platform's
 *     HotSpotDiagnosticMXBean (what diagtools' scripts pass as -XX options
 *     at launch), each only when the user left it at its default;
 *   - a heap dump now (the collector's "heap" command): dumpHeap of the
 *     same MXBean, live objects only, as `jattach dumpheap` does;
 *   - ResourceExhausted events, counted: HotSpot posts the event after it
 *     has written the OutOfMemoryError's heap dump, so the exporter can
 *     upload it at once instead of at its next scan.
 *
 * The flags are set at VMInit on the VM's own thread (20-40 ms of class
 * loading for the management classes, before the application's main: an
 * OutOfMemoryError in its first milliseconds has its dump too), when the
 * dumps exporter is configured. The other JNI calls run on the calling
 * agent thread, attached to the VM as a daemon thread ("stackshot-qbd",
 * which the sampler leaves out) for the call only; they are made by the
 * dumps exporter, never once the VM is dying. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/log.h"
#include "proc/process.h"
#include "jvmti/jvmti_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static _Atomic uint64_t exhausted_events;
static _Atomic bool event_enabled;

/* HotSpot writes a heap dump at the first OutOfMemoryError only, and
 * logs a line at level error for every ResourceExhausted it posts (JDK 17
 * and 25): the event is turned off after the first. */
void JNICALL ss_jheap_exhausted_cb(jvmtiEnv *jvmti, JNIEnv *env, jint flags,
                                   const void *reserved, const char *description) {
    (void)env, (void)flags, (void)reserved, (void)description;
    atomic_fetch_add(&exhausted_events, 1);
    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_DISABLE, JVMTI_EVENT_RESOURCE_EXHAUSTED, NULL);
}

static uint64_t exhausted(void) { return atomic_load(&exhausted_events); }

/* ---- JNI helpers ---------------------------------------------------- */

typedef struct jcall {
    JNIEnv *env;
    bool attached; /* by us: detach when done */
    char *why;
    size_t why_n;
} jcall;

/* On a thread the VM knows (env), or attach the calling one (env NULL). */
static int jcall_begin(jcall *c, JNIEnv *env, char *why, size_t n) {
    memset(c, 0, sizeof *c);
    c->why = why;
    c->why_n = n;
    c->env = env;
    if (!ss_jvm) {
        snprintf(why, n, "no JVM");
        return -ENOTSUP;
    }
    jint rc = env ? JNI_OK : (*ss_jvm)->GetEnv(ss_jvm, (void **)&c->env, JNI_VERSION_1_6);
    if (rc == JNI_EDETACHED) {
        JavaVMAttachArgs a = {JNI_VERSION_1_6, "stackshot-qbd", NULL};
        rc = (*ss_jvm)->AttachCurrentThreadAsDaemon(ss_jvm, (void **)&c->env, &a);
        c->attached = rc == JNI_OK;
    }
    if (rc != JNI_OK || !c->env) {
        snprintf(why, n, "cannot attach to the JVM (JNI error %d)", (int)rc);
        return -ENOTSUP;
    }
    if ((*c->env)->PushLocalFrame(c->env, 32) != 0) {
        (*c->env)->ExceptionClear(c->env);
        if (c->attached)
            (*ss_jvm)->DetachCurrentThread(ss_jvm);
        snprintf(why, n, "out of memory in the JVM");
        return -ENOMEM;
    }
    return 0;
}

static void jcall_end(jcall *c) {
    (*c->env)->PopLocalFrame(c->env, NULL);
    if (c->attached)
        (*ss_jvm)->DetachCurrentThread(ss_jvm);
}

/* A pending Java exception becomes `why` ("java.io.IOException: ..."). */
static bool failed(jcall *c, const char *what) {
    JNIEnv *env = c->env;
    if (!(*env)->ExceptionCheck(env))
        return false;
    jthrowable t = (*env)->ExceptionOccurred(env);
    (*env)->ExceptionClear(env);
    char text[200] = "exception";
    jclass tc = t ? (*env)->GetObjectClass(env, t) : NULL;
    jmethodID ts = tc ? (*env)->GetMethodID(env, tc, "toString", "()Ljava/lang/String;") : NULL;
    jstring s = ts ? (*env)->CallObjectMethod(env, t, ts) : NULL;
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionClear(env);
        s = NULL;
    }
    const char *u = s ? (*env)->GetStringUTFChars(env, s, NULL) : NULL;
    if (u) {
        ss_mutf8_to_utf8(u, text, sizeof text);
        (*env)->ReleaseStringUTFChars(env, s, u);
    }
    snprintf(c->why, c->why_n, "%s: %s", what, text);
    return true;
}

/* The platform's HotSpotDiagnosticMXBean, or NULL (why filled). */
static jobject diagnostic_bean(jcall *c) {
    JNIEnv *env = c->env;
    jclass mf = (*env)->FindClass(env, "java/lang/management/ManagementFactory");
    jclass hs = mf ? (*env)->FindClass(env, "com/sun/management/HotSpotDiagnosticMXBean") : NULL;
    jmethodID get = hs ? (*env)->GetStaticMethodID(env, mf, "getPlatformMXBean",
                                                   "(Ljava/lang/Class;)"
                                                   "Ljava/lang/management/PlatformManagedObject;")
                       : NULL;
    jobject bean = get ? (*env)->CallStaticObjectMethod(env, mf, get, hs) : NULL;
    if (failed(c, "HotSpotDiagnosticMXBean"))
        return NULL;
    if (!bean)
        snprintf(c->why, c->why_n, "this JVM has no HotSpotDiagnosticMXBean");
    return bean;
}

/* The origin of a VM option ("DEFAULT", "VM_CREATION", ...) and its value. */
static bool option(jcall *c, jobject bean, const char *name, char *origin, size_t on,
                   char *value, size_t vn) {
    JNIEnv *env = c->env;
    jclass hs = (*env)->GetObjectClass(env, bean);
    jmethodID get = (*env)->GetMethodID(env, hs, "getVMOption",
                                        "(Ljava/lang/String;)Lcom/sun/management/VMOption;");
    jstring jname = get ? (*env)->NewStringUTF(env, name) : NULL;
    jobject opt = jname ? (*env)->CallObjectMethod(env, bean, get, jname) : NULL;
    if (failed(c, name))
        return false;
    if (!opt) {
        snprintf(c->why, c->why_n, "%s: no such VM option", name);
        return false;
    }
    jclass oc = (*env)->GetObjectClass(env, opt);
    jmethodID og = (*env)->GetMethodID(env, oc, "getOrigin", "()Lcom/sun/management/VMOption$Origin;");
    jmethodID vg = (*env)->GetMethodID(env, oc, "getValue", "()Ljava/lang/String;");
    jobject o = og ? (*env)->CallObjectMethod(env, opt, og) : NULL;
    jclass ec = o ? (*env)->GetObjectClass(env, o) : NULL;
    jmethodID en = ec ? (*env)->GetMethodID(env, ec, "name", "()Ljava/lang/String;") : NULL;
    jstring os = en ? (*env)->CallObjectMethod(env, o, en) : NULL;
    jstring vs = vg ? (*env)->CallObjectMethod(env, opt, vg) : NULL;
    if (failed(c, name))
        return false;
    if (!os || !vs) {
        snprintf(c->why, c->why_n, "%s: origin or value unknown", name);
        return false;
    }
    const char *u = (*env)->GetStringUTFChars(env, os, NULL);
    snprintf(origin, on, "%s", u ? u : "");
    if (u)
        (*env)->ReleaseStringUTFChars(env, os, u);
    u = (*env)->GetStringUTFChars(env, vs, NULL);
    snprintf(value, vn, "%s", u ? u : "");
    if (u)
        (*env)->ReleaseStringUTFChars(env, vs, u);
    return true;
}

static bool set_option(jcall *c, jobject bean, const char *name, const char *value) {
    JNIEnv *env = c->env;
    jclass hs = (*env)->GetObjectClass(env, bean);
    jmethodID set = (*env)->GetMethodID(env, hs, "setVMOption",
                                        "(Ljava/lang/String;Ljava/lang/String;)V");
    jstring n = set ? (*env)->NewStringUTF(env, name) : NULL;
    jstring v = n ? (*env)->NewStringUTF(env, value) : NULL;
    if (v)
        (*env)->CallVoidMethod(env, bean, set, n, v);
    return !failed(c, name) && v;
}

/* ---- the services --------------------------------------------------- */

static void enable_event(void) {
    if (atomic_exchange(&event_enabled, true))
        return;
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_resource_exhaustion_heap_events = 1;
    /* an "always" capability of HotSpot: it may be added in the live phase */
    if ((*ss_jvmti)->AddCapabilities(ss_jvmti, &caps) != JVMTI_ERROR_NONE ||
        (*ss_jvmti)->SetEventNotificationMode(ss_jvmti, JVMTI_ENABLE,
                                              JVMTI_EVENT_RESOURCE_EXHAUSTED, NULL) !=
            JVMTI_ERROR_NONE)
        ss_debug("jvmti: no ResourceExhausted events; heap dumps are found by scanning");
}

static int set_heap_flags(JNIEnv *env, const char *dir, char *why, size_t n) {
    enable_event();
    jcall c;
    int rc = jcall_begin(&c, env, why, n);
    if (rc != 0)
        return rc;
    jobject bean = diagnostic_bean(&c);
    char on_origin[32], on_value[16], path_origin[32], path_value[1024];
    if (!bean || !option(&c, bean, "HeapDumpOnOutOfMemoryError", on_origin, sizeof on_origin,
                         on_value, sizeof on_value) ||
        !option(&c, bean, "HeapDumpPath", path_origin, sizeof path_origin, path_value,
                sizeof path_value)) {
        jcall_end(&c);
        return -EIO;
    }
    bool set_on = strcmp(on_origin, "DEFAULT") == 0, set_path = strcmp(path_origin, "DEFAULT") == 0;
    /* HotSpot writes java_pid<pid>.hprof into HeapDumpPath when it is a
     * directory, and to that very name otherwise: the folder must exist */
    if (set_path && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(why, n, "cannot create %s (%s); HeapDumpPath left as it is", dir, strerror(errno));
        set_path = false;
        rc = -errno;
    }
    if (set_path && !set_option(&c, bean, "HeapDumpPath", dir))
        rc = -EIO;
    if (rc == 0 && set_on && !set_option(&c, bean, "HeapDumpOnOutOfMemoryError", "true"))
        rc = -EIO;
    if (rc == 0) {
        if (set_on && set_path)
            snprintf(why, n, "an OutOfMemoryError writes a heap dump into %s", dir);
        else if (!set_path && strcmp(path_value, dir) != 0 && path_value[0]) {
            snprintf(why, n,
                     "HeapDumpOnOutOfMemoryError=%s, HeapDumpPath=%s kept as set; dumps written "
                     "outside %s are not uploaded",
                     set_on ? "true" : on_value, path_value, dir);
            rc = 1;
        }
        else
            snprintf(why, n, "HeapDumpOnOutOfMemoryError=%s kept as set; dumps go to %s",
                     set_on ? "true" : on_value, path_value[0] ? path_value : dir);
    }
    jcall_end(&c);
    return rc;
}

/* Set at VMInit (ss_jheap_live), so that an OutOfMemoryError in the
 * first milliseconds of the application has its dump too; the exporter
 * asks later and gets what was done. */
static struct {
    bool done;
    int rc;
    char dir[1024];
    char why[1500];
} oom_setup;

static int heap_dump_on_oom(const char *dir, char *why, size_t n) {
    if (!oom_setup.done || strcmp(dir, oom_setup.dir) != 0) {
        oom_setup.rc = set_heap_flags(NULL, dir, oom_setup.why, sizeof oom_setup.why);
        snprintf(oom_setup.dir, sizeof oom_setup.dir, "%s", dir);
        oom_setup.done = true;
    }
    snprintf(why, n, "%s", oom_setup.why);
    return oom_setup.rc;
}

static int dump_heap(const char *path, char *why, size_t n) {
    jcall c;
    int rc = jcall_begin(&c, NULL, why, n);
    if (rc != 0)
        return rc;
    jobject bean = diagnostic_bean(&c);
    JNIEnv *env = c.env;
    jclass hs = bean ? (*env)->GetObjectClass(env, bean) : NULL;
    jmethodID dump = hs ? (*env)->GetMethodID(env, hs, "dumpHeap", "(Ljava/lang/String;Z)V") : NULL;
    jstring p = dump ? (*env)->NewStringUTF(env, path) : NULL;
    if (p)
        (*env)->CallVoidMethod(env, bean, dump, p, JNI_TRUE);
    if (!p || failed(&c, "dumpHeap"))
        rc = -EIO;
    jcall_end(&c);
    return rc;
}

static const ss_jvm_services services = {
    .heap_dump_on_oom = heap_dump_on_oom,
    .dump_heap = dump_heap,
    .exhausted = exhausted,
};

/* A VM property as JVMTI reads it (java.vm.* are the VM's own). */
static void vm_property(const char *key, char *out, size_t n) {
    char *v = NULL;
    out[0] = '\0';
    if ((*ss_jvmti)->GetSystemProperty(ss_jvmti, key, &v) == JVMTI_ERROR_NONE && v) {
        ss_mutf8_to_utf8(v, out, n);
        (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)v);
    }
}

/* A Go-style false ("0", "f", "false", ...), read without a line: the
 * exporter reads and reports these keys itself. */
static bool key_false(const char *key) {
    const char *v = ss_config_raw(key);
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; v && i < 6; i++)
        if (strcmp(v, no[i]) == 0)
            return true;
    return false;
}

/* The feature release of the running JDK ("17.0.15+6-...": 17, "1.8.0_392": 8). */
static int jdk_major(const char *version) {
    int v = atoi(version);
    if (v == 1 && strncmp(version, "1.", 2) == 0)
        v = atoi(version + 2);
    return v;
}

void ss_jheap_live(JNIEnv *env, const ss_config *cfg) {
    ss_process_info *p = ss_process_mut();
    char name[80], version[80], info[80];
    vm_property("java.vm.name", name, sizeof name);
    vm_property("java.vm.version", version, sizeof version);
    vm_property("java.vm.info", info, sizeof info);
    /* VM_Version::vm_name(), vm_release() and vm_info_string(), as the
     * "Full thread dump" line prints them */
    snprintf(p->runtime_banner, sizeof p->runtime_banner, "%s (%s %s)", name, version, info);
    /* runtime_version is read (core/jvmti_entry.c) before this is called */
    p->dump_os_tid = jdk_major(p->runtime_version) >= 21;
    p->jvm = &services;
    /* the dumps exporter wants heap dumps (as diagtools' scripts decide:
     * DIAGNOSTIC_CENTER_DUMPS_ENABLED and NC_DIAGNOSTIC_DUMPS_ENABLED not
     * false) into NC_DIAGNOSTIC_LOGS_FOLDER (its default as in
     * exporters/qubership/diag.c) */
    if (!(cfg->exporters & ss_exporter_bit("qubership_dumps")) ||
        key_false("DIAGNOSTIC_CENTER_DUMPS_ENABLED") || key_false("NC_DIAGNOSTIC_DUMPS_ENABLED"))
        return;
    const char *dir = ss_config_str("NC_DIAGNOSTIC_LOGS_FOLDER", "/tmp/diagnostic");
    oom_setup.rc = set_heap_flags(env, dir, oom_setup.why, sizeof oom_setup.why);
    snprintf(oom_setup.dir, sizeof oom_setup.dir, "%s", dir);
    oom_setup.done = true;
}
