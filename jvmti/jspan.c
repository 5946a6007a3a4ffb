/* jspan.c: the span current on each sampled Java thread, read without
 * running code on that thread.
 *
 * Three places hold a thread's span, each a static ThreadLocal whose
 * per-thread value the sampler reads from its own thread through JNI
 * field reads (JNI ignores module access checks, so java.base internals
 * need no --add-opens):
 *
 *   io.stackshot.StackshotSpan.CURRENT     long[3] {trace hi, trace lo, span}
 *                                          set by StackshotSpan.set (explicit)
 *   io.opentelemetry.javaagent.shaded.io.opentelemetry.context
 *       .ThreadLocalContextStorage.THREAD_LOCAL_STORAGE   (the Java agent's)
 *   io.opentelemetry.context.ThreadLocalContextStorage.THREAD_LOCAL_STORAGE
 *                                          (the API's, without the agent)
 *
 * The first that gives a valid span wins, in that order: an explicit
 * context is what the application said on purpose; under the Java agent
 * the application's API calls are bridged into the agent's storage.
 *
 * The walk, for one thread (platform or virtual: a virtual thread has
 * threadLocals of its own, mounted or not):
 *   Thread.threadLocals (ThreadLocal$ThreadLocalMap) .table (Entry[])
 *   -> probe from the ThreadLocal's threadLocalHashCode, linear, stop at
 *      null (ThreadLocalMap.getEntry's own order); an Entry is a
 *      WeakReference whose Reference.referent is the ThreadLocal
 *   -> Entry.value: the Context (ArrayBasedContext.entries, an Object[] of
 *      key, value, key, value ...)
 *   -> the value after the key SpanContextKey.KEY: the Span
 *   -> its SpanContext field (SdkSpan.context, PropagatedSpan.spanContext,
 *      else the first field of the SpanContext type not named parent...)
 *   -> ImmutableSpanContext (AutoValue_...): String traceId, spanId
 *      (lowercase hex), TraceFlags traceFlags -> ImmutableTraceFlags.byteRep
 * All-zero ids (the invalid span) mean no span.
 *
 * The owning thread changes its map while the sampler reads it; every read
 * is of one reference or one array element, so the worst a race gives is a
 * miss (no span this round) or the context that was current a moment
 * before, never a context of another thread.
 *
 * Classes: the ClassPrepare event (any thread, any phase) notes the classes
 * above in a fixed array of weak references (lock-free: the loading thread
 * never waits); the sampler takes them at the start of a round and reads
 * their statics once the class is initialized (reading a static of an
 * uninitialized class would run its initializer on the sampler). Weak
 * references let class loaders go away: a cleared one drops the source and
 * with it the field IDs of that class. StackshotSpan's natives are bound
 * (RegisterNatives) in the ClassPrepare callback, before any of its code
 * runs. */
#include "agent/log.h"
#include "agent/round.h"
#include "agent/time.h"
#include "jvmti/jvmti_internal.h"

#include <stdatomic.h>
#include <string.h>

enum { K_STORAGE, K_KEYHOLDER, K_EXPLICIT };
enum { FLAV_AGENT, FLAV_APP, FLAV_N };

#define SHADED "io/opentelemetry/javaagent/shaded/"
static const char *const flav_prefix[FLAV_N] = {SHADED, ""};

static const struct wanted {
    const char *sig;
    int kind, flav;
} wanted[] = {
    {"Lio/stackshot/StackshotSpan;", K_EXPLICIT, FLAV_APP},
    {"L" SHADED "io/opentelemetry/context/ThreadLocalContextStorage;", K_STORAGE, FLAV_AGENT},
    {"L" SHADED "io/opentelemetry/api/trace/SpanContextKey;", K_KEYHOLDER, FLAV_AGENT},
    {"Lio/opentelemetry/context/ThreadLocalContextStorage;", K_STORAGE, FLAV_APP},
    {"Lio/opentelemetry/api/trace/SpanContextKey;", K_KEYHOLDER, FLAV_APP},
};
#define N_WANTED (sizeof wanted / sizeof wanted[0])

/* ---- classes noted by ClassPrepare (any thread) ---------------------- */

#define MAX_PENDING 256 /* over the process's life; more are counted */

static struct pending {
    _Atomic(jweak) cls;
    int want; /* index into wanted[] */
} pending[MAX_PENDING];
static _Atomic uint32_t n_pending;
static _Atomic uint64_t pending_lost;

static int wanted_index(const char *sig) {
    if (strncmp(sig, "Lio/", 4) != 0) /* the cheap test every class takes */
        return -1;
    for (size_t i = 0; i < N_WANTED; i++)
        if (strcmp(sig, wanted[i].sig) == 0)
            return (int)i;
    return -1;
}

static void bind_explicit(JNIEnv *env, jclass cls);

static void note_class(JNIEnv *env, jclass cls) {
    char *sig = NULL;
    if ((*ss_jvmti)->GetClassSignature(ss_jvmti, cls, &sig, NULL) != JVMTI_ERROR_NONE || !sig)
        return;
    int w = wanted_index(sig);
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)sig);
    if (w < 0)
        return;
    if (wanted[w].kind == K_EXPLICIT)
        bind_explicit(env, cls);
    jweak wk = (*env)->NewWeakGlobalRef(env, cls);
    uint32_t i = wk ? atomic_fetch_add(&n_pending, 1) : MAX_PENDING;
    if (i >= MAX_PENDING) {
        atomic_fetch_add(&pending_lost, 1);
        if (wk)
            (*env)->DeleteWeakGlobalRef(env, wk);
        return;
    }
    pending[i].want = w;
    /* published last: the sampler takes a slot once cls is set */
    atomic_store_explicit(&pending[i].cls, wk, memory_order_release);
}

void JNICALL ss_jspan_class_prepare_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread thread,
                                       jclass cls) {
    (void)jvmti;
    (void)thread;
    note_class(env, cls);
}

void ss_jspan_scan_loaded(JNIEnv *env) {
    jint n = 0;
    jclass *cs = NULL;
    if ((*ss_jvmti)->GetLoadedClasses(ss_jvmti, &n, &cs) != JVMTI_ERROR_NONE)
        return;
    for (jint i = 0; i < n; i++) {
        note_class(env, cs[i]);
        (*env)->DeleteLocalRef(env, cs[i]);
    }
    (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)cs);
}

/* ---- StackshotSpan's natives (the application's threads) ------------ */

/* Hex -> bytes; false unless exactly n*2 hex digits. */
static bool parse_hex(JNIEnv *env, jstring s, uint8_t *out, int n) {
    if (!s || (*env)->GetStringLength(env, s) != n * 2)
        return false;
    jchar c[32];
    (*env)->GetStringRegion(env, s, 0, n * 2, c);
    for (int i = 0; i < n * 2; i++) {
        int v = c[i] >= '0' && c[i] <= '9'   ? c[i] - '0'
                : c[i] >= 'a' && c[i] <= 'f' ? c[i] - 'a' + 10
                : c[i] >= 'A' && c[i] <= 'F' ? c[i] - 'A' + 10
                                             : -1;
        if (v < 0)
            return false;
        out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] << 4) | v : v);
    }
    return true;
}

static jlong be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (jlong)v;
}

static void put_be64(uint8_t *p, jlong x) {
    uint64_t v = (uint64_t)x;
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* The class's CURRENT ThreadLocal and a method of ThreadLocal. */
static void call_current(JNIEnv *env, jclass cls, const char *method, const char *sig,
                         jobject arg) {
    jfieldID f = (*env)->GetStaticFieldID(env, cls, "CURRENT", "Ljava/lang/ThreadLocal;");
    jobject tl = f ? (*env)->GetStaticObjectField(env, cls, f) : NULL;
    jclass tlc = tl ? (*env)->FindClass(env, "java/lang/ThreadLocal") : NULL;
    jmethodID m = tlc ? (*env)->GetMethodID(env, tlc, method, sig) : NULL;
    if (m) {
        if (arg)
            (*env)->CallVoidMethod(env, tl, m, arg);
        else
            (*env)->CallVoidMethod(env, tl, m);
    }
}

static void JNICALL explicit_clear(JNIEnv *env, jclass cls) {
    call_current(env, cls, "remove", "()V", NULL);
}

static void JNICALL explicit_set(JNIEnv *env, jclass cls, jstring trace, jstring span) {
    uint8_t t[16], s[8];
    if (!trace || !span) { /* the C API's NULL: detach */
        explicit_clear(env, cls);
        return;
    }
    if (!parse_hex(env, trace, t, 16) || !parse_hex(env, span, s, 8)) {
        jclass iae = (*env)->FindClass(env, "java/lang/IllegalArgumentException");
        if (iae)
            (*env)->ThrowNew(env, iae, "StackshotSpan.set: expected 32 and 16 hex digits");
        return;
    }
    jlong v[3] = {be64(t), be64(t + 8), be64(s)};
    if ((v[0] == 0 && v[1] == 0) || v[2] == 0) { /* the invalid span: none */
        explicit_clear(env, cls);
        return;
    }
    jlongArray a = (*env)->NewLongArray(env, 3);
    if (!a)
        return; /* OutOfMemoryError pending: the caller's to see */
    (*env)->SetLongArrayRegion(env, a, 0, 3, v);
    call_current(env, cls, "set", "(Ljava/lang/Object;)V", a);
}

static jboolean JNICALL explicit_bound(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    return JNI_TRUE;
}

static void bind_explicit(JNIEnv *env, jclass cls) {
    JNINativeMethod m[] = {
        {"set0", "(Ljava/lang/String;Ljava/lang/String;)V", (void *)explicit_set},
        {"clear0", "()V", (void *)explicit_clear},
        {"bound0", "()Z", (void *)explicit_bound},
    };
    if ((*env)->RegisterNatives(env, cls, m, 3) != 0) {
        (*env)->ExceptionClear(env);
        ss_warn("jvmti: io.stackshot.StackshotSpan has not the expected natives (an "
                "older or newer jar?); its spans are not seen");
    }
}

/* ---- sources, resolved by the sampler --------------------------------- */

#define MAX_SOURCES 16

typedef struct source {
    jweak cls;
    jweak obj; /* the ThreadLocal, or the span ContextKey; NULL until ready */
    jint hash; /* the ThreadLocal's threadLocalHashCode */
    int kind, flav;
} source;

static struct {
    bool ids_ok;
    jfieldID thread_locals, map_table, referent, entry_value, tl_hash;
    jclass long_array; /* global ref: long[] */
    source tl[MAX_SOURCES]; /* ThreadLocals, kept in reading order */
    uint32_t n_tl;
    source key[MAX_SOURCES];
    uint32_t n_key;
    uint32_t taken; /* pending slots consumed */
    uint64_t lost_said;
    /* cost, for the debug summary and the benchmark */
    uint64_t reads, with_span, ns_span, ns_none;
} R;

static jfieldID field(JNIEnv *env, const char *cls, const char *name, const char *sig) {
    jclass c = (*env)->FindClass(env, cls);
    jfieldID f = c ? (*env)->GetFieldID(env, c, name, sig) : NULL;
    if ((*env)->ExceptionCheck(env))
        (*env)->ExceptionClear(env);
    if (c)
        (*env)->DeleteLocalRef(env, c);
    return f;
}

int ss_jspan_init(JNIEnv *env) {
    R.thread_locals = field(env, "java/lang/Thread", "threadLocals",
                            "Ljava/lang/ThreadLocal$ThreadLocalMap;");
    R.map_table = field(env, "java/lang/ThreadLocal$ThreadLocalMap", "table",
                        "[Ljava/lang/ThreadLocal$ThreadLocalMap$Entry;");
    R.referent = field(env, "java/lang/ref/Reference", "referent", "Ljava/lang/Object;");
    R.entry_value = field(env, "java/lang/ThreadLocal$ThreadLocalMap$Entry", "value",
                          "Ljava/lang/Object;");
    R.tl_hash = field(env, "java/lang/ThreadLocal", "threadLocalHashCode", "I");
    jclass la = (*env)->FindClass(env, "[J");
    if (la) {
        R.long_array = (*env)->NewGlobalRef(env, la);
        (*env)->DeleteLocalRef(env, la);
    }
    R.ids_ok = R.long_array && R.thread_locals && R.map_table && R.referent && R.entry_value && R.tl_hash;
    if (!R.ids_ok)
        ss_warn("jvmti: this JVM's ThreadLocal has not the expected fields; spans of "
                "Java threads are not read");
    return R.ids_ok ? 0 : -1;
}

static bool gone(JNIEnv *env, jweak w) { return !w || (*env)->IsSameObject(env, w, NULL); }

/* Reading order of ThreadLocals: explicit, the agent's, the application's. */
static int rank(const source *s) { return s->kind == K_EXPLICIT ? 0 : 1 + s->flav; }

static void add_source(JNIEnv *env, jweak cls, int w) {
    const struct wanted *wt = &wanted[w];
    source *arr = wt->kind == K_KEYHOLDER ? R.key : R.tl;
    uint32_t *n = wt->kind == K_KEYHOLDER ? &R.n_key : &R.n_tl;
    for (uint32_t i = 0; i < *n; i++)
        if ((*env)->IsSameObject(env, arr[i].cls, cls)) { /* seen twice (attach) */
            (*env)->DeleteWeakGlobalRef(env, cls);
            return;
        }
    if (*n == MAX_SOURCES) {
        ss_warn("jvmti: more than %d copies of %s; the newest is not read", MAX_SOURCES,
                wt->sig);
        (*env)->DeleteWeakGlobalRef(env, cls);
        return;
    }
    uint32_t at = *n;
    while (at > 0 && rank(&arr[at - 1]) > (wt->kind == K_EXPLICIT ? 0 : 1 + wt->flav)) {
        arr[at] = arr[at - 1];
        at--;
    }
    arr[at] = (source){.cls = cls, .kind = wt->kind, .flav = wt->flav};
    (*n)++;
}

static void drop_source(JNIEnv *env, source *arr, uint32_t *n, uint32_t i) {
    if (arr[i].cls)
        (*env)->DeleteWeakGlobalRef(env, arr[i].cls);
    if (arr[i].obj)
        (*env)->DeleteWeakGlobalRef(env, arr[i].obj);
    memmove(&arr[i], &arr[i + 1], (*n - i - 1) * sizeof *arr);
    (*n)--;
}

/* A source's static, once its class is initialized. */
static void make_ready(JNIEnv *env, source *s) {
    jclass c = (*env)->NewLocalRef(env, s->cls);
    jint st = 0;
    if (!c || (*ss_jvmti)->GetClassStatus(ss_jvmti, c, &st) != JVMTI_ERROR_NONE ||
        !(st & JVMTI_CLASS_STATUS_INITIALIZED)) {
        if (c)
            (*env)->DeleteLocalRef(env, c);
        return;
    }
    char sig[160];
    const char *name;
    if (s->kind == K_KEYHOLDER) {
        snprintf(sig, sizeof sig, "L%sio/opentelemetry/context/ContextKey;",
                 flav_prefix[s->flav]);
        name = "KEY";
    } else {
        snprintf(sig, sizeof sig, "Ljava/lang/ThreadLocal;");
        name = s->kind == K_EXPLICIT ? "CURRENT" : "THREAD_LOCAL_STORAGE";
    }
    jfieldID f = (*env)->GetStaticFieldID(env, c, name, sig);
    jobject o = f ? (*env)->GetStaticObjectField(env, c, f) : NULL;
    if ((*env)->ExceptionCheck(env))
        (*env)->ExceptionClear(env);
    if (o) {
        if (s->kind != K_KEYHOLDER)
            s->hash = (*env)->GetIntField(env, o, R.tl_hash);
        s->obj = (*env)->NewWeakGlobalRef(env, o);
        (*env)->DeleteLocalRef(env, o);
    } else if (!f) {
        s->kind = -1; /* not the published layout: never read (dropped below) */
    }
    (*env)->DeleteLocalRef(env, c);
}

static void tidy(JNIEnv *env, source *arr, uint32_t *n) {
    for (uint32_t i = 0; i < *n;) {
        source *s = &arr[i];
        if (gone(env, s->cls) || s->kind < 0 || (s->obj && gone(env, s->obj))) {
            drop_source(env, arr, n, i); /* unloaded: its field IDs die with it */
            continue;
        }
        if (!s->obj)
            make_ready(env, s);
        i++;
    }
}

static void drop_type_caches(JNIEnv *env);

bool ss_jspan_round(JNIEnv *env) {
    if (!R.ids_ok)
        return false;
    uint32_t n = atomic_load(&n_pending);
    if (n > MAX_PENDING)
        n = MAX_PENDING;
    while (R.taken < n) {
        jweak w = atomic_load_explicit(&pending[R.taken].cls, memory_order_acquire);
        if (!w)
            break; /* being published: next round */
        add_source(env, w, pending[R.taken].want);
        R.taken++;
    }
    uint64_t lost = atomic_load(&pending_lost);
    if (lost != R.lost_said) {
        ss_warn("jvmti: %llu OpenTelemetry classes loaded beyond the %d the agent notes; "
                "their spans are not read",
                (unsigned long long)lost, MAX_PENDING);
        R.lost_said = lost;
    }
    uint32_t before = R.n_tl + R.n_key;
    tidy(env, R.tl, &R.n_tl);
    tidy(env, R.key, &R.n_key);
    if (R.n_tl + R.n_key < before)
        drop_type_caches(env); /* a class loader went: forget its types too */
    for (uint32_t i = 0; i < R.n_tl; i++)
        if (R.tl[i].obj)
            return true;
    return false;
}

/* ---- type caches: class -> field IDs ------------------------------------ */

#define CACHE_N 16

typedef struct type_entry {
    jweak cls;
    int flav;
    bool ok;
    jfieldID f[3];
} type_entry;

typedef struct type_cache {
    type_entry e[CACHE_N];
    uint32_t next;
} type_cache;

static type_cache ctx_types, span_types, sc_types, flag_types;

static void cache_clear(JNIEnv *env, type_cache *c) {
    for (uint32_t i = 0; i < CACHE_N; i++)
        if (c->e[i].cls)
            (*env)->DeleteWeakGlobalRef(env, c->e[i].cls);
    memset(c, 0, sizeof *c);
}

static void drop_type_caches(JNIEnv *env) {
    cache_clear(env, &ctx_types);
    cache_clear(env, &span_types);
    cache_clear(env, &sc_types);
    cache_clear(env, &flag_types);
}

typedef void (*type_fill)(JNIEnv *env, jclass c, int flav, type_entry *e);

/* The entry of obj's class (filled on a miss), NULL when obj's class has
 * not the expected fields. */
static const type_entry *type_of(JNIEnv *env, type_cache *tc, jobject obj, int flav,
                                 type_fill fill) {
    jclass c = (*env)->GetObjectClass(env, obj);
    if (!c)
        return NULL;
    for (uint32_t i = 0; i < CACHE_N; i++) {
        type_entry *e = &tc->e[i];
        if (e->cls && e->flav == flav && (*env)->IsSameObject(env, e->cls, c)) {
            (*env)->DeleteLocalRef(env, c);
            return e->ok ? e : NULL;
        }
    }
    type_entry *e = &tc->e[tc->next++ % CACHE_N];
    if (e->cls)
        (*env)->DeleteWeakGlobalRef(env, e->cls);
    memset(e, 0, sizeof *e);
    fill(env, c, flav, e);
    if ((*env)->ExceptionCheck(env))
        (*env)->ExceptionClear(env);
    e->flav = flav;
    e->cls = (*env)->NewWeakGlobalRef(env, c);
    (*env)->DeleteLocalRef(env, c);
    return e->ok ? e : NULL;
}

static jfieldID try_field(JNIEnv *env, jclass c, const char *name, const char *sig) {
    jfieldID f = (*env)->GetFieldID(env, c, name, sig);
    if (!f)
        (*env)->ExceptionClear(env);
    return f;
}

static void fill_ctx(JNIEnv *env, jclass c, int flav, type_entry *e) {
    (void)flav;
    e->f[0] = try_field(env, c, "entries", "[Ljava/lang/Object;");
    e->ok = e->f[0] != NULL;
}

/* A field of the SpanContext type on the span's class or a superclass. */
static jfieldID scan_span_context(JNIEnv *env, jclass c, const char *sig) {
    jclass k = (*env)->NewLocalRef(env, c);
    for (int depth = 0; k && depth < 8; depth++) {
        jint n = 0;
        jfieldID *fs = NULL;
        jfieldID found = NULL;
        if ((*ss_jvmti)->GetClassFields(ss_jvmti, k, &n, &fs) == JVMTI_ERROR_NONE) {
            for (jint i = 0; i < n && !found; i++) {
                char *name = NULL, *fsig = NULL;
                jint mod = 0;
                if ((*ss_jvmti)->GetFieldName(ss_jvmti, k, fs[i], &name, &fsig, NULL) !=
                    JVMTI_ERROR_NONE)
                    continue;
                (*ss_jvmti)->GetFieldModifiers(ss_jvmti, k, fs[i], &mod);
                if (!(mod & 0x0008 /* static */) && strcmp(fsig, sig) == 0 &&
                    !strstr(name, "parent") && !strstr(name, "Parent"))
                    found = fs[i];
                (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)name);
                (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)fsig);
            }
            (*ss_jvmti)->Deallocate(ss_jvmti, (unsigned char *)fs);
        }
        if (found) {
            (*env)->DeleteLocalRef(env, k);
            return found;
        }
        jclass up = (*env)->GetSuperclass(env, k);
        (*env)->DeleteLocalRef(env, k);
        k = up;
    }
    if (k)
        (*env)->DeleteLocalRef(env, k);
    return NULL;
}

static void fill_span(JNIEnv *env, jclass c, int flav, type_entry *e) {
    char sig[160];
    snprintf(sig, sizeof sig, "L%sio/opentelemetry/api/trace/SpanContext;", flav_prefix[flav]);
    e->f[0] = try_field(env, c, "context", sig); /* SdkSpan */
    if (!e->f[0])
        e->f[0] = try_field(env, c, "spanContext", sig); /* PropagatedSpan */
    if (!e->f[0])
        e->f[0] = scan_span_context(env, c, sig);
    e->ok = e->f[0] != NULL;
}

static void fill_sc(JNIEnv *env, jclass c, int flav, type_entry *e) {
    char sig[160];
    snprintf(sig, sizeof sig, "L%sio/opentelemetry/api/trace/TraceFlags;", flav_prefix[flav]);
    e->f[0] = try_field(env, c, "traceId", "Ljava/lang/String;");
    e->f[1] = try_field(env, c, "spanId", "Ljava/lang/String;");
    e->f[2] = try_field(env, c, "traceFlags", sig); /* optional */
    e->ok = e->f[0] && e->f[1];
}

static void fill_flags(JNIEnv *env, jclass c, int flav, type_entry *e) {
    (void)flav;
    e->f[0] = try_field(env, c, "byteRep", "B");
    e->ok = e->f[0] != NULL;
}

/* ---- one thread ---------------------------------------------------------- */

typedef struct ids {
    uint8_t trace[16], span[8], flags;
} ids;

static bool valid(const ids *d) {
    uint8_t t = 0, s = 0;
    for (int i = 0; i < 16; i++)
        t |= d->trace[i];
    for (int i = 0; i < 8; i++)
        s |= d->span[i];
    return t && s;
}

/* The thread's value of one ThreadLocal, or NULL. */
static jobject local_value(JNIEnv *env, jobjectArray table, jint len, const source *s) {
    jint mask = len - 1;
    jint i = s->hash & mask;
    for (jint probes = 0; probes < len; probes++, i = (i + 1) & mask) {
        jobject e = (*env)->GetObjectArrayElement(env, table, i);
        if (!e)
            return NULL;
        jobject k = (*env)->GetObjectField(env, e, R.referent);
        bool same = k && (*env)->IsSameObject(env, k, s->obj);
        if (k)
            (*env)->DeleteLocalRef(env, k);
        if (same) {
            jobject v = (*env)->GetObjectField(env, e, R.entry_value);
            (*env)->DeleteLocalRef(env, e);
            return v;
        }
        (*env)->DeleteLocalRef(env, e);
    }
    return NULL;
}

static bool hex_field(JNIEnv *env, jobject o, jfieldID f, uint8_t *out, int n) {
    jstring s = (*env)->GetObjectField(env, o, f);
    bool ok = s && parse_hex(env, s, out, n);
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionClear(env);
        ok = false;
    }
    return ok;
}

static bool from_explicit(JNIEnv *env, jobject v, ids *d) {
    if (!(*env)->IsInstanceOf(env, v, R.long_array) || (*env)->GetArrayLength(env, v) < 3)
        return false;
    jlong x[3];
    (*env)->GetLongArrayRegion(env, v, 0, 3, x);
    put_be64(d->trace, x[0]);
    put_be64(d->trace + 8, x[1]);
    put_be64(d->span, x[2]);
    d->flags = 0;
    return true;
}

static jobject span_of_context(JNIEnv *env, jobject ctx, int flav) {
    const type_entry *ct = type_of(env, &ctx_types, ctx, flav, fill_ctx);
    jobjectArray es = ct ? (*env)->GetObjectField(env, ctx, ct->f[0]) : NULL;
    jint n = es ? (*env)->GetArrayLength(env, es) : 0;
    for (jint i = 0; i + 1 < n; i += 2) {
        jobject k = (*env)->GetObjectArrayElement(env, es, i);
        bool hit = false;
        for (uint32_t j = 0; k && j < R.n_key && !hit; j++)
            hit = R.key[j].flav == flav && R.key[j].obj &&
                  (*env)->IsSameObject(env, k, R.key[j].obj);
        if (k)
            (*env)->DeleteLocalRef(env, k);
        if (hit)
            return (*env)->GetObjectArrayElement(env, es, i + 1);
    }
    return NULL;
}

static bool from_context(JNIEnv *env, jobject ctx, int flav, ids *d) {
    jobject span = span_of_context(env, ctx, flav);
    const type_entry *st = span ? type_of(env, &span_types, span, flav, fill_span) : NULL;
    jobject sc = st ? (*env)->GetObjectField(env, span, st->f[0]) : NULL;
    const type_entry *ct = sc ? type_of(env, &sc_types, sc, flav, fill_sc) : NULL;
    if (!ct || !hex_field(env, sc, ct->f[0], d->trace, 16) ||
        !hex_field(env, sc, ct->f[1], d->span, 8))
        return false;
    d->flags = 0;
    jobject tf = ct->f[2] ? (*env)->GetObjectField(env, sc, ct->f[2]) : NULL;
    const type_entry *ft = tf ? type_of(env, &flag_types, tf, flav, fill_flags) : NULL;
    if (ft)
        d->flags = (uint8_t)(*env)->GetByteField(env, tf, ft->f[0]);
    return true;
}

static bool read_ids(JNIEnv *env, jthread thread, ids *d) {
    jobject map = (*env)->GetObjectField(env, thread, R.thread_locals);
    jobjectArray table = map ? (*env)->GetObjectField(env, map, R.map_table) : NULL;
    jint len = table ? (*env)->GetArrayLength(env, table) : 0;
    if (len <= 0 || (len & (len - 1)))
        return false; /* no map, or not ThreadLocalMap's power-of-two table */
    for (uint32_t i = 0; i < R.n_tl; i++) {
        const source *s = &R.tl[i];
        if (!s->obj)
            continue;
        jobject v = local_value(env, table, len, s);
        if (!v)
            continue;
        bool ok = s->kind == K_EXPLICIT ? from_explicit(env, v, d)
                                        : from_context(env, v, s->flav, d);
        if (ok && valid(d))
            return true;
    }
    return false;
}

void ss_jspan_read(JNIEnv *env, jthread thread, ss_thread_sample *t) {
    uint64_t t0 = ss_mono_ns();
    if ((*env)->PushLocalFrame(env, 32) != 0) {
        (*env)->ExceptionClear(env);
        return;
    }
    ids d;
    bool got = read_ids(env, thread, &d);
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionClear(env);
        got = false;
    }
    (*env)->PopLocalFrame(env, NULL);
    if (got) {
        t->has_span = true;
        memcpy(t->trace_id, d.trace, 16);
        memcpy(t->span_id, d.span, 8);
        t->trace_flags = d.flags;
    }
    uint64_t dt = ss_mono_ns() - t0;
    R.reads++;
    if (got) {
        R.with_span++;
        R.ns_span += dt;
    } else {
        R.ns_none += dt;
    }
}

void ss_jspan_stats(uint64_t *reads, uint64_t *with_span, uint64_t *ns_span,
                    uint64_t *ns_none) {
    *reads = R.reads;
    *with_span = R.with_span;
    *ns_span = R.ns_span;
    *ns_none = R.ns_none;
}
