/* fakes.c: functions a host program may define with the names of the
 * agent's dependencies (its own gRPC, libunwind, protobuf-c, elfutils,
 * zlib, abseil, or just a function that happens to be called grpc_init).
 *
 * Each records who called it: the host itself (between iso_self_begin and
 * iso_self_end) or anybody else, which can only be the agent's code bound
 * to the host's symbol instead of its own library's. Such a call is
 * reported at once on stderr ("FAKE <name> called"), since what the fake
 * returns is nonsense to a real caller and may well crash it next.
 *
 * Built into the host executable (linked -rdynamic: global scope, ahead of
 * every library) and as libiso_fakes.so, a dependency of a host built
 * without -rdynamic (a host's own copy of such a library). */
#include "tests/hardening/isolation/fakes.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const names[ISO_FAKE_COUNT] = {
    "grpc_init",
    "grpc_shutdown",
    "grpc_channel_create",
    "unw_backtrace",
    "_ULx86_64_step",
    "_ULx86_64_init_local2",
    "_Ux86_64_getcontext",
    "protobuf_c_message_pack",
    "protobuf_c_message_get_packed_size",
    "dwfl_begin",
    "deflate",
    "deflateInit2_",
    "absl::Mutex::Lock",
    "absl::Mutex::Unlock",
};

static _Atomic int foreign_calls[ISO_FAKE_COUNT];
static _Atomic int self_calls[ISO_FAKE_COUNT];
static __thread int in_self;

ISO_API void iso_self_begin(void) { in_self = 1; }
ISO_API void iso_self_end(void) { in_self = 0; }

static void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void record(int f) {
    if (in_self) {
        atomic_fetch_add(&self_calls[f], 1);
        return;
    }
    /* async-signal-safe: the agent may call from its signal handler */
    if (atomic_fetch_add(&foreign_calls[f], 1) == 0) {
        say("iso_host: FAKE ");
        say(names[f]);
        say(" called by the agent\n");
    }
}

ISO_API int iso_fake_self_calls(int f) { return atomic_load(&self_calls[f]); }
ISO_API int iso_fake_foreign_calls(int f) { return atomic_load(&foreign_calls[f]); }
ISO_API const char *iso_fake_name(int f) { return names[f]; }

/* ---- the fakes: the real names and calling conventions (x86-64) ---- */

ISO_API void grpc_init(void) { record(ISO_GRPC_INIT); }
ISO_API void grpc_shutdown(void) { record(ISO_GRPC_SHUTDOWN); }
ISO_API void *grpc_channel_create(const char *target, void *creds, const void *args) {
    (void)target, (void)creds, (void)args;
    record(ISO_GRPC_CHANNEL_CREATE);
    return NULL;
}
ISO_API int unw_backtrace(void **buf, int size) {
    (void)buf, (void)size;
    record(ISO_UNW_BACKTRACE);
    return -1;
}
ISO_API int _ULx86_64_step(void *cursor) {
    (void)cursor;
    record(ISO_UNW_STEP);
    return -1;
}
ISO_API int _ULx86_64_init_local2(void *cursor, void *uc, int flag) {
    (void)cursor, (void)uc, (void)flag;
    record(ISO_UNW_INIT_LOCAL2);
    return -1;
}
ISO_API int _Ux86_64_getcontext(void *uc) {
    (void)uc;
    record(ISO_UNW_GETCONTEXT);
    return -1;
}
ISO_API size_t protobuf_c_message_pack(const void *msg, uint8_t *out) {
    (void)msg, (void)out;
    record(ISO_PB_PACK);
    return 0;
}
ISO_API size_t protobuf_c_message_get_packed_size(const void *msg) {
    (void)msg;
    record(ISO_PB_SIZE);
    return 0;
}
ISO_API void *dwfl_begin(const void *callbacks) {
    (void)callbacks;
    record(ISO_DWFL_BEGIN);
    return NULL;
}
ISO_API int deflate(void *strm, int flush) {
    (void)strm, (void)flush;
    record(ISO_DEFLATE);
    return -2; /* Z_STREAM_ERROR */
}
ISO_API int deflateInit2_(void *strm, int level, int method, int bits, int mem, int strategy,
                          const char *version, int size) {
    (void)strm, (void)level, (void)method, (void)bits, (void)mem, (void)strategy;
    (void)version, (void)size;
    record(ISO_DEFLATE_INIT2);
    return -2;
}
/* absl::Mutex::Lock() and Unlock() (Debian's inline namespace "debian3"),
 * called by libgrpc and libgpr. */
ISO_API void _ZN4absl7debian35Mutex4LockEv(void *self) {
    (void)self;
    record(ISO_ABSL_LOCK);
}
ISO_API void _ZN4absl7debian35Mutex6UnlockEv(void *self) {
    (void)self;
    record(ISO_ABSL_UNLOCK);
}
