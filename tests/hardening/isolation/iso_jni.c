/* iso_jni.c: the JNI side of IsoHost.java, built with fakes.c into
 * libiso_jni.so: a JVM host's own library that defines the names of the
 * agent's dependencies (deflate, unw_backtrace, grpc_init, absl's Mutex...).
 *
 * No jni.h needed: the two natives take (JNIEnv *, jclass) and return a
 * jint, which is an int32 on every JNI platform. */
#include "tests/hardening/isolation/fakes.h"

#include <stdint.h>

#define JNI_EXPORT __attribute__((visibility("default")))

/* What each fake returns (fakes.c); a call that reached anything else
 * (the real zlib, libunwind...) returns something else or nothing. */
static int call_one(int f) {
    char buf[64];
    void *frames[4];
    switch (f) {
    case ISO_GRPC_INIT: grpc_init(); return 1;
    case ISO_GRPC_SHUTDOWN: grpc_shutdown(); return 1;
    case ISO_GRPC_CHANNEL_CREATE: return grpc_channel_create("x", NULL, NULL) == NULL;
    case ISO_UNW_BACKTRACE: return unw_backtrace(frames, 4) == -1;
    case ISO_UNW_STEP: return _ULx86_64_step(buf) == -1;
    case ISO_UNW_INIT_LOCAL2: return _ULx86_64_init_local2(buf, buf, 0) == -1;
    case ISO_UNW_GETCONTEXT: return _Ux86_64_getcontext(buf) == -1;
    case ISO_PB_PACK: return protobuf_c_message_pack(buf, (uint8_t *)buf) == 0;
    case ISO_PB_SIZE: return protobuf_c_message_get_packed_size(buf) == 0;
    case ISO_DWFL_BEGIN: return dwfl_begin(buf) == NULL;
    case ISO_DEFLATE: return deflate(buf, 0) == -2;
    case ISO_DEFLATE_INIT2: return deflateInit2_(buf, 1, 8, 15, 8, 0, "1", 1) == -2;
    case ISO_ABSL_LOCK: _ZN4absl7debian35Mutex4LockEv(buf); return 1;
    case ISO_ABSL_UNLOCK: _ZN4absl7debian35Mutex6UnlockEv(buf); return 1;
    }
    return 0;
}

/* Calls every fake as the host; returns the set (bit f) of those that
 * answered as the host's own function (its return value, and its own
 * count of self calls went up by one): all ISO_FAKE_COUNT bits when all
 * did. */
JNI_EXPORT int32_t Java_IsoHost_selfCheck(void *env, void *cls) {
    (void)env, (void)cls;
    int32_t ok = 0;
    for (int f = 0; f < ISO_FAKE_COUNT; f++) {
        int before = iso_fake_self_calls(f);
        iso_self_begin();
        int r = call_one(f);
        iso_self_end();
        if (r && iso_fake_self_calls(f) == before + 1)
            ok |= 1 << f;
    }
    return ok;
}

JNI_EXPORT int32_t Java_IsoHost_fakeCount(void *env, void *cls) {
    (void)env, (void)cls;
    return ISO_FAKE_COUNT;
}

/* Calls of the fakes by anybody but the host (the agent's code bound to
 * the host's symbols instead of its own libraries'). */
JNI_EXPORT int32_t Java_IsoHost_foreignCalls(void *env, void *cls) {
    (void)env, (void)cls;
    int n = 0;
    for (int f = 0; f < ISO_FAKE_COUNT; f++)
        n += iso_fake_foreign_calls(f);
    return n;
}
