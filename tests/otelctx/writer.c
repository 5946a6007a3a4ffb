/* writer.c: an OTEP 4947 thread-context writer as an OpenTelemetry SDK
 * would be, written for the tests from the OTEP's text: the exported TLS
 * variable otel_thread_ctx_v1 points at the thread's current record; a
 * switch fills the record not in use and swaps the pointer (NULL while it
 * is being filled, as the OTEP allows), so a reader never sees a record
 * mid-write. Each record carries one attribute (key index 0).
 *
 * Built three ways by CMakeLists.txt: a shared library with TLS
 * descriptors (-mtls-dialect=gnu2), a shared library with the traditional
 * global-dynamic sequence (-mtls-dialect=gnu), and into an executable
 * with the initial-exec model (WRITER_IE). */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef struct rec {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_size;
    uint8_t attrs[34];
} __attribute__((aligned(8))) rec;

#ifdef WRITER_IE
#define MODEL __attribute__((tls_model("initial-exec")))
#else
#define MODEL
#endif

__attribute__((visibility("default"))) MODEL __thread rec *volatile otel_thread_ctx_v1;
static MODEL __thread rec recs[2];
static MODEL __thread int cur;

__attribute__((visibility("default"))) void otel_test_set(const uint8_t trace[16],
                                                          const uint8_t span[8],
                                                          uint8_t flags, const char *route) {
    rec *r = &recs[cur ^ 1];
    otel_thread_ctx_v1 = NULL;
    atomic_signal_fence(memory_order_seq_cst);
    memcpy(r->trace_id, trace, 16);
    memcpy(r->span_id, span, 8);
    r->trace_flags = flags;
    size_t n = strlen(route);
    if (n > 32)
        n = 32;
    r->attrs[0] = 0; /* key index 0 */
    r->attrs[1] = (uint8_t)n;
    memcpy(r->attrs + 2, route, n);
    r->attrs_size = (uint16_t)(n + 2);
    r->valid = 1;
    atomic_signal_fence(memory_order_seq_cst);
    otel_thread_ctx_v1 = r;
    atomic_signal_fence(memory_order_seq_cst);
    cur ^= 1;
}

__attribute__((visibility("default"))) void otel_test_clear(void) {
    otel_thread_ctx_v1 = NULL;
    atomic_signal_fence(memory_order_seq_cst);
}

/* A record left in place but marked invalid: must read as no span. */
__attribute__((visibility("default"))) void otel_test_invalid(const uint8_t trace[16],
                                                              const uint8_t span[8]) {
    otel_test_set(trace, span, 1, "x");
    otel_thread_ctx_v1->valid = 2; /* reserved value: invalid */
    atomic_signal_fence(memory_order_seq_cst);
}
