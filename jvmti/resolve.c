/* resolve.c: Java frames, resolved once per method and cached.
 *
 * A frame from GetAllStackTraces is a jmethodID and a bci. Everything jstack
 * prints about it (class, method, source file, module@version, line) is a
 * function of the method and the bci, so the cache is keyed by jmethodID and
 * holds the method's line-number table; the line is looked up per frame.
 *
 * Why per jmethodID is correct:
 *  - HotSpot never reuses a jmethodID for another method. When a class
 *    loader is unloaded its jmethodIDs are cleared, not freed, and every
 *    JVMTI call on them returns JVMTI_ERROR_INVALID_METHODID: that is how
 *    an unloaded method is detected, and such a frame becomes "unknown"
 *    without anything being dereferenced. A method already cached keeps
 *    its (copied, interned) strings, which stay valid.
 *  - A stack is taken at a safepoint, the resolution happens after it; a
 *    class unloaded in between gives INVALID_METHODID here, same path.
 *  - Redefinition (RedefineClasses / RetransformClasses) keeps jmethodIDs
 *    of surviving methods but may change their line tables, and JVMTI
 *    tells an agent about it only through ClassFileLoadHook, which would
 *    cost every class load (and CDS sharing). So a cached method is
 *    resolved again when it is older than STACKSHOT_JVMTI_REFRESH seconds
 *    (default 60): lines and file of a redefined method are right again
 *    within that time, at the cost of one resolution per method seen per
 *    period.
 *
 * The hash table is open addressing, grown at half full; the sampler thread
 * is its only user. It is bounded: a program that keeps loading classes
 * (generated proxies, scripts, a class-unloading loop) would grow it
 * forever, so at MAX_METHODS entries it is emptied and refilled from the
 * next stacks (the strings stay interned; only line tables are re-read). */
#include "agent/config.h"
#include "agent/grow.h"
#include "agent/hmap.h"
#include "agent/round.h"
#include "agent/time.h"
#include "jvmti/jvmti_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_METHODS 32768

typedef struct line_entry {
    int32_t start; /* bci */
    int32_t line;
} line_entry;

typedef struct method_entry {
    jmethodID key;
    const ss_funcinfo *fn;
    line_entry *lines;
    uint32_t n_lines;
    bool native;
    uint64_t lines_mono_ns; /* when the line table was read */
} method_entry;

struct ss_jresolver {
    method_entry *methods; /* in the order they were resolved */
    uint32_t cap, used;
    ss_hmap ix;            /* jmethodID -> index in methods (agent/hmap.h) */
    uint64_t invalid, clears, refreshes;
    uint64_t refresh_ns;
    uint64_t now; /* monotonic ns, set once per round */
    jclass module_cls, descriptor_cls, optional_cls;
    jmethodID get_name, get_descriptor, raw_version, or_else;
    bool module_ids_tried;
};

ss_jresolver *ss_jresolver_create(void) {
    ss_jresolver *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->now = ss_mono_ns();
    r->refresh_ns = (uint64_t)ss_config_int("STACKSHOT_JVMTI_REFRESH", 60, 1, 86400) *
                    1000000000ull;
    /* 1,024 slots at first, at most half full: 512 methods (not in the
     * memory account, as before) */
    ss_hmap_init(&r->ix, 1024, 50, NULL);
    r->ix.uncharged = true;
    if (ss_grow32((void **)&r->methods, &r->cap, 1, sizeof *r->methods, 512) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

void ss_jresolver_destroy(ss_jresolver *r) {
    if (!r)
        return;
    for (uint32_t i = 0; i < r->used; i++)
        free(r->methods[i].lines);
    free(r->methods);
    ss_hmap_free(&r->ix);
    /* the global refs of the module classes live as long as the VM */
    free(r);
}

void ss_jresolver_stats(const ss_jresolver *r, uint64_t *methods, uint64_t *invalid,
                        uint64_t *clears, uint64_t *refreshes) {
    *methods = r->used;
    *invalid = r->invalid;
    *clears = r->clears;
    *refreshes = r->refreshes;
}

static void clear(ss_jresolver *r) {
    for (uint32_t i = 0; i < r->used; i++)
        free(r->methods[i].lines);
    ss_hmap_clear(&r->ix);
    r->used = 0;
    r->clears++;
}

static bool method_eq(const void *ctx, uint32_t idx, const void *key) {
    const ss_jresolver *r = ctx;
    return r->methods[idx].key == key;
}

/* ---- modules ------------------------------------------------------ */

static jclass global_class(JNIEnv *env, const char *name) {
    jclass c = (*env)->FindClass(env, name);
    if (!c) {
        (*env)->ExceptionClear(env);
        return NULL;
    }
    jclass g = (*env)->NewGlobalRef(env, c);
    (*env)->DeleteLocalRef(env, c);
    return g;
}

static void module_ids(ss_jresolver *r, JNIEnv *env) {
    if (r->module_ids_tried)
        return;
    r->module_ids_tried = true;
    r->module_cls = global_class(env, "java/lang/Module");
    r->descriptor_cls = global_class(env, "java/lang/module/ModuleDescriptor");
    r->optional_cls = global_class(env, "java/util/Optional");
    if (!r->module_cls || !r->descriptor_cls || !r->optional_cls)
        return;
    r->get_name = (*env)->GetMethodID(env, r->module_cls, "getName", "()Ljava/lang/String;");
    r->get_descriptor = (*env)->GetMethodID(env, r->module_cls, "getDescriptor",
                                            "()Ljava/lang/module/ModuleDescriptor;");
    r->raw_version = (*env)->GetMethodID(env, r->descriptor_cls, "rawVersion",
                                         "()Ljava/util/Optional;");
    r->or_else = (*env)->GetMethodID(env, r->optional_cls, "orElse",
                                     "(Ljava/lang/Object;)Ljava/lang/Object;");
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionClear(env);
        r->get_name = NULL;
    }
}

static bool copy_jstring(JNIEnv *env, jstring s, char *out, size_t n) {
    if (!s)
        return false;
    const char *c = (*env)->GetStringUTFChars(env, s, NULL);
    if (!c) {
        (*env)->ExceptionClear(env);
        return false;
    }
    ss_mutf8_to_utf8(c, out, n);
    (*env)->ReleaseStringUTFChars(env, s, c);
    return true;
}

/* jstack prints a named module as "name@version/" (or "name/" when it has
 * no version) and nothing for the unnamed module. HotSpot records the
 * version given to Module.defineModule0, the descriptor's raw version. */
static bool module_of(ss_jresolver *r, JNIEnv *env, jclass cls, char *out, size_t n) {
    module_ids(r, env);
    if (!r->get_name || !r->get_descriptor || !r->raw_version || !r->or_else)
        return false;
    bool named = false;
    if ((*env)->PushLocalFrame(env, 8) != 0) {
        (*env)->ExceptionClear(env);
        return false;
    }
    jobject mod = (*env)->GetModule(env, cls);
    jstring name = mod ? (*env)->CallObjectMethod(env, mod, r->get_name) : NULL;
    if (!(*env)->ExceptionCheck(env) && copy_jstring(env, name, out, n)) {
        named = true;
        jobject desc = (*env)->CallObjectMethod(env, mod, r->get_descriptor);
        jobject opt = desc && !(*env)->ExceptionCheck(env)
                          ? (*env)->CallObjectMethod(env, desc, r->raw_version)
                          : NULL;
        jobject ver = opt && !(*env)->ExceptionCheck(env)
                          ? (*env)->CallObjectMethod(env, opt, r->or_else, NULL)
                          : NULL;
        char v[128];
        if (ver && !(*env)->ExceptionCheck(env) && copy_jstring(env, ver, v, sizeof v)) {
            size_t len = strlen(out);
            snprintf(out + len, n - len, "@%s", v);
        }
    }
    if ((*env)->ExceptionCheck(env))
        (*env)->ExceptionClear(env);
    (*env)->PopLocalFrame(env, NULL);
    return named;
}

/* ---- one method ------------------------------------------------------ */

static const ss_funcinfo *unknown_fn(void) {
    return ss_funcinfo_intern("unknown", "unknown", "unknown", NULL, SS_FRAME_JAVA);
}

void ss_jresolver_round(ss_jresolver *r) { r->now = ss_mono_ns(); }

static void load_lines(ss_jresolver *r, method_entry *e, jmethodID m) {
    free(e->lines);
    e->lines = NULL;
    e->n_lines = 0;
    e->lines_mono_ns = r->now;
    jint n = 0;
    jvmtiLineNumberEntry *t = NULL;
    if ((*ss_jvmti)->GetLineNumberTable(ss_jvmti, m, &n, &t) != JVMTI_ERROR_NONE || n <= 0)
        return;
    e->lines = malloc((size_t)n * sizeof *e->lines);
    if (e->lines) {
        for (jint i = 0; i < n; i++) {
            e->lines[i].start = (int32_t)t[i].start_location;
            e->lines[i].line = (int32_t)t[i].line_number;
        }
        e->n_lines = (uint32_t)n;
    }
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)t);
}

/* Fill e for method m. Returns -1 when the method ID is no longer valid. */
static int resolve_method(ss_jresolver *r, JNIEnv *env, jmethodID m, method_entry *e) {
    jvmtiEnv *j = ss_jvmti;
    jclass cls = NULL;
    char *mname = NULL, *msig = NULL, *sig = NULL, *src = NULL;
    jvmtiError err = (*j)->GetMethodDeclaringClass(j, m, &cls);
    if (err != JVMTI_ERROR_NONE) {
        e->fn = unknown_fn();
        return -1;
    }
    if ((*j)->GetMethodName(j, m, &mname, &msig, NULL) != JVMTI_ERROR_NONE)
        mname = msig = NULL;
    if ((*j)->GetClassSignature(j, cls, &sig, NULL) != JVMTI_ERROR_NONE)
        sig = NULL;
    jboolean native = JNI_FALSE;
    (*j)->IsMethodNative(j, m, &native);
    e->native = native;
    if ((*j)->GetSourceFileName(j, cls, &src) != JVMTI_ERROR_NONE)
        src = NULL;
    if (!native)
        load_lines(r, e, m);

    char cname[1024], name[512], file[512], module[256], desc[1024];
    ss_jclass_name(sig, cname, sizeof cname);
    ss_mutf8_to_utf8(mname ? mname : "unknown", name, sizeof name);
    /* jstack: "Native Method", the source file, or "Unknown Source" */
    if (native)
        snprintf(file, sizeof file, "Native Method");
    else
        ss_mutf8_to_utf8(src ? src : "Unknown Source", file, sizeof file);
    bool named = module_of(r, env, cls, module, sizeof module);
    /* the descriptor ("(J)V") tells overloads apart (the Zorka exporter sends it) */
    if (msig)
        ss_mutf8_to_utf8(msig, desc, sizeof desc);
    e->fn = ss_funcinfo_intern_sig(cname, name, file, named ? module : NULL, SS_FRAME_JAVA,
                                   msig ? desc : NULL);
    if (!e->fn)
        e->fn = unknown_fn();
    (*j)->Deallocate(j, (unsigned char *)mname);
    (*j)->Deallocate(j, (unsigned char *)msig);
    (*j)->Deallocate(j, (unsigned char *)sig);
    (*j)->Deallocate(j, (unsigned char *)src);
    (*env)->DeleteLocalRef(env, cls);
    return 0;
}

/* HotSpot's Method::line_number_from_bci: an entry starting exactly at the
 * bci wins; otherwise the last entry with the greatest start below it. */
static int32_t line_at(const method_entry *e, jlocation bci) {
    int32_t best_bci = 0, best_line = 0;
    for (uint32_t i = 0; i < e->n_lines; i++) {
        const line_entry *l = &e->lines[i];
        if (l->start == bci)
            return l->line;
        if (l->start < bci && l->start >= best_bci) {
            best_bci = l->start;
            best_line = l->line;
        }
    }
    return best_line;
}

int ss_jresolve(ss_jresolver *r, JNIEnv *env, jmethodID m, jlocation bci, ss_frame *out) {
    memset(out, 0, sizeof *out);
    out->addr = (uint64_t)bci;
    if (!m) {
        out->fn = unknown_fn();
        return -1;
    }
    uint32_t h = ss_hash_ptr(m);
    ss_hslot *slot;
    uint32_t at = ss_hmap_find(&r->ix, h, method_eq, r, m, &slot);
    method_entry *e = at != SS_HMAP_NONE ? &r->methods[at] : NULL;
    if (!e) {
        if (r->used >= MAX_METHODS) {
            clear(r);
            ss_hmap_find(&r->ix, h, method_eq, r, m, &slot);
        }
        if (!slot ||
            ss_grow32((void **)&r->methods, &r->cap, r->used + 1, sizeof *r->methods, 512) != 0) {
            /* no room to cache: resolve without keeping it */
            method_entry tmp = {.key = m};
            int rc = resolve_method(r, env, m, &tmp);
            out->fn = tmp.fn;
            out->line = tmp.native ? 0 : line_at(&tmp, bci);
            free(tmp.lines);
            return rc;
        }
        method_entry fresh = {.key = m};
        if (resolve_method(r, env, m, &fresh) != 0) {
            /* unloaded: not cached, the ID stays invalid forever anyway */
            r->invalid++;
            out->fn = fresh.fn;
            return -1;
        }
        e = &r->methods[r->used];
        *e = fresh;
        ss_hmap_put(&r->ix, slot, h, r->used++);
    }
    out->fn = e->fn;
    if (!e->native && r->now - e->lines_mono_ns > r->refresh_ns) {
        /* the method may have been redefined: its lines, even its source
         * file may differ now. Resolve it again; keep the old entry if
         * its class is gone meanwhile. */
        method_entry again = {.key = m};
        if (resolve_method(r, env, m, &again) == 0) {
            free(e->lines);
            *e = again;
            r->refreshes++;
        } else {
            free(again.lines);
            e->lines_mono_ns = r->now;
        }
    }
    out->line = e->native ? 0 : line_at(e, bci);
    return 0;
}
