/* span.c: the core's own writer of the span context of include/stackshot.h.
 *
 * What a host calls is libstackshot.so's stackshot_set_span_context
 * (loader/loader.c), which publishes through the exported TLS variable
 * otel_thread_ctx_v1 (OTEP 4947). These definitions serve programs that
 * link the core itself (the static core of tests and benchmarks): the same
 * record and the same writer (otel_ctx.h), in a TLS variable of the core,
 * which the reader (otel_thread.c) registers as one more source once a
 * thread has set a span. The TLS uses the initial-exec model: no
 * allocation on first access, a fixed offset from every thread pointer. */
#include "agent/otel_ctx.h"
#include "agent/span.h"
#include "include/stackshot.h"

#include <pthread.h>
#include <string.h>

static __thread ss_otel_rec *_Atomic own_ptr __attribute__((tls_model("initial-exec")));
static __thread ss_otel_rec own_rec __attribute__((tls_model("initial-exec")));

/* Set once any thread set a context: until then the reader need not look
 * at this variable. */
static atomic_bool ever_set;

static void set(const uint8_t *trace_id, const uint8_t *span_id, uint8_t flags) {
    if (trace_id && span_id && !atomic_load_explicit(&ever_set, memory_order_relaxed))
        atomic_store(&ever_set, true);
    ss_otel_write(&own_ptr, &own_rec, trace_id, span_id, flags);
}

void stackshot_set_span_context(const uint8_t trace_id[16], const uint8_t span_id[8]) {
    set(trace_id, span_id, SS_OTEL_FLAGS_UNKNOWN);
}

void stackshot_set_span_context_flags(const uint8_t trace_id[16], const uint8_t span_id[8],
                                      uint8_t trace_flags) {
    set(trace_id, span_id, trace_flags);
}

void stackshot_clear_span_context(void) { ss_otel_write(&own_ptr, &own_rec, NULL, NULL, 0); }

bool ss_span_current(uint8_t trace_id[16], uint8_t span_id[8]) {
    ss_otel_rec *r = atomic_load_explicit(&own_ptr, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    if (!r || *(volatile uint8_t *)&r->valid != 1)
        return false;
    memcpy(trace_id, r->trace_id, 16);
    memcpy(span_id, r->span_id, 8);
    return true;
}

/* Initial-exec TLS sits at the same offset from every thread's thread
 * pointer (pthread_self() on x86-64 glibc). */
bool ss_span_tls_where(ptrdiff_t *offset, size_t *size) {
    if (!atomic_load_explicit(&ever_set, memory_order_relaxed))
        return false;
    *offset = (const char *)&own_ptr - (const char *)(uintptr_t)pthread_self();
    *size = sizeof own_ptr;
    return true;
}
