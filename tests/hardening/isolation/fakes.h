/* fakes.h: the host's fake dependency functions (fakes.c). */
#ifndef ISO_FAKES_H
#define ISO_FAKES_H

#include <stddef.h>
#include <stdint.h>

#define ISO_API __attribute__((visibility("default"), noinline))

enum {
    ISO_GRPC_INIT,
    ISO_GRPC_SHUTDOWN,
    ISO_GRPC_CHANNEL_CREATE,
    ISO_UNW_BACKTRACE,
    ISO_UNW_STEP,
    ISO_UNW_INIT_LOCAL2,
    ISO_UNW_GETCONTEXT,
    ISO_PB_PACK,
    ISO_PB_SIZE,
    ISO_DWFL_BEGIN,
    ISO_DEFLATE,
    ISO_DEFLATE_INIT2,
    ISO_ABSL_LOCK,
    ISO_ABSL_UNLOCK,
    ISO_FAKE_COUNT
};

void iso_self_begin(void);
void iso_self_end(void);
int iso_fake_self_calls(int f);
int iso_fake_foreign_calls(int f);
const char *iso_fake_name(int f);

void grpc_init(void);
void grpc_shutdown(void);
void *grpc_channel_create(const char *target, void *creds, const void *args);
int unw_backtrace(void **buf, int size);
int _ULx86_64_step(void *cursor);
int _ULx86_64_init_local2(void *cursor, void *uc, int flag);
int _Ux86_64_getcontext(void *uc);
size_t protobuf_c_message_pack(const void *msg, uint8_t *out);
size_t protobuf_c_message_get_packed_size(const void *msg);
void *dwfl_begin(const void *callbacks);
int deflate(void *strm, int flush);
int deflateInit2_(void *strm, int level, int method, int bits, int mem, int strategy,
                  const char *version, int size);
void _ZN4absl7debian35Mutex4LockEv(void *self);
void _ZN4absl7debian35Mutex6UnlockEv(void *self);

#endif
