/* vthreads.c: virtual threads (JDK 21+).
 *
 * JVMTI lists only platform threads (GetAllThreads, GetAllStackTraces);
 * virtual threads are known only through the VirtualThreadStart and
 * VirtualThreadEnd events, which need the capability
 * can_support_virtual_threads. The live ones are kept here as global
 * references, at most STACKSHOT_MAX_VIRTUAL_THREADS of them (a virtual
 * thread's slot index is in its JVMTI thread-local storage, so ending one
 * costs O(1)); the ones beyond the cap are counted, not tracked. The
 * sampler takes each tracked virtual thread's own stack with GetStackTrace,
 * mounted or not.
 *
 * The agent is built against the JDK 17 headers, where these names do not
 * exist: the capability is bit 44 of jvmtiCapabilities (right after
 * can_generate_sampled_object_alloc_events) and the events are 87 and 88,
 * the numbers the JDK 21 jvmti.h publishes. */
#include "jvmti/jvmti_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VT_CAP_BIT 44

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static jthread *slots;     /* global refs, NULL when free */
static uint32_t *free_list;
static uint32_t n_free, cap;
static _Atomic uint64_t untracked;
static _Atomic bool active;

static bool cap_bit(const jvmtiCapabilities *c) {
    uint32_t words[4];
    memcpy(words, c, sizeof words < sizeof *c ? sizeof words : sizeof *c);
    return words[VT_CAP_BIT / 32] & (1u << (VT_CAP_BIT % 32));
}

static void set_cap_bit(jvmtiCapabilities *c) {
    uint32_t words[4];
    memcpy(words, c, sizeof words);
    words[VT_CAP_BIT / 32] |= 1u << (VT_CAP_BIT % 32);
    memcpy(c, words, sizeof words);
}

bool ss_vthreads_capable(jvmtiEnv *jvmti, jvmtiCapabilities *caps) {
    _Static_assert(sizeof(jvmtiCapabilities) == 16, "jvmtiCapabilities is 128 bits");
    jint version = 0;
    if ((*jvmti)->GetVersionNumber(jvmti, &version) != JVMTI_ERROR_NONE)
        return false;
    int major = (version & JVMTI_VERSION_MASK_MAJOR) >> JVMTI_VERSION_SHIFT_MAJOR;
    if (major < 21)
        return false;
    jvmtiCapabilities pot;
    memset(&pot, 0, sizeof pot);
    if ((*jvmti)->GetPotentialCapabilities(jvmti, &pot) != JVMTI_ERROR_NONE ||
        !cap_bit(&pot))
        return false;
    set_cap_bit(caps);
    return true;
}

int ss_vthreads_enable(jvmtiEnv *jvmti, uint32_t max) {
    jvmtiCapabilities have;
    memset(&have, 0, sizeof have);
    if ((*jvmti)->GetCapabilities(jvmti, &have) != JVMTI_ERROR_NONE || !cap_bit(&have))
        return -1;
    if (max == 0)
        return 0;
    slots = calloc(max, sizeof *slots);
    free_list = malloc(max * sizeof *free_list);
    if (!slots || !free_list) {
        free(slots);
        free(free_list);
        slots = NULL;
        free_list = NULL;
        return -1;
    }
    cap = max;
    for (uint32_t i = 0; i < max; i++)
        free_list[i] = max - 1 - i;
    n_free = max;
    jvmtiError e1 = (*jvmti)->SetEventNotificationMode(
        jvmti, JVMTI_ENABLE, (jvmtiEvent)SS_JVMTI_EVENT_VIRTUAL_THREAD_START, NULL);
    jvmtiError e2 = (*jvmti)->SetEventNotificationMode(
        jvmti, JVMTI_ENABLE, (jvmtiEvent)SS_JVMTI_EVENT_VIRTUAL_THREAD_END, NULL);
    if (e1 != JVMTI_ERROR_NONE || e2 != JVMTI_ERROR_NONE)
        return -1;
    atomic_store(&active, true);
    return 0;
}

bool ss_vthreads_active(void) { return atomic_load(&active); }
uint32_t ss_vthreads_cap(void) { return cap; }

void JNICALL ss_vthread_start_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread vt) {
    pthread_mutex_lock(&mu);
    if (n_free == 0) {
        pthread_mutex_unlock(&mu);
        atomic_fetch_add(&untracked, 1);
        return;
    }
    uint32_t i = free_list[--n_free];
    slots[i] = (*env)->NewGlobalRef(env, vt);
    pthread_mutex_unlock(&mu);
    (*jvmti)->SetThreadLocalStorage(jvmti, vt, (void *)(uintptr_t)(i + 1));
}

void JNICALL ss_vthread_end_cb(jvmtiEnv *jvmti, JNIEnv *env, jthread vt) {
    void *p = NULL;
    (*jvmti)->GetThreadLocalStorage(jvmti, vt, &p);
    uintptr_t i = (uintptr_t)p;
    if (i == 0 || i > cap) {
        uint64_t u = atomic_load(&untracked);
        while (u > 0 && !atomic_compare_exchange_weak(&untracked, &u, u - 1)) {
        }
        return;
    }
    (*jvmti)->SetThreadLocalStorage(jvmti, vt, NULL);
    pthread_mutex_lock(&mu);
    jthread g = slots[i - 1];
    slots[i - 1] = NULL;
    free_list[n_free++] = (uint32_t)(i - 1);
    pthread_mutex_unlock(&mu);
    if (g)
        (*env)->DeleteGlobalRef(env, g);
}

uint32_t ss_vthreads_snapshot(JNIEnv *env, jthread *out, uint32_t max, uint64_t *dropped) {
    uint32_t n = 0;
    *dropped = atomic_load(&untracked);
    if (!atomic_load(&active))
        return 0;
    pthread_mutex_lock(&mu);
    for (uint32_t i = 0; i < cap && n < max; i++)
        if (slots[i]) {
            jthread l = (*env)->NewLocalRef(env, slots[i]);
            if (l)
                out[n++] = l;
        }
    pthread_mutex_unlock(&mu);
    return n;
}
