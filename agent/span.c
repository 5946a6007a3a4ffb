/* span.c: the per-thread span context of include/stackshot.h.
 *
 * The context is written by the thread itself and read by the signal
 * handler that interrupts that same thread, so the reader can never wait
 * for the writer. Two slots and an index: the writer fills the slot not in
 * use, then publishes it by flipping the index with one atomic store. A
 * handler that interrupts the writer anywhere reads a complete slot, old
 * or new. The TLS uses the initial-exec model: no allocation on first
 * access, which keeps the read async-signal-safe. */
#include "ss_agent.h"
#include "stackshot.h"

#include <string.h>

typedef struct span_slot {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    bool valid;
} span_slot;

static __thread struct {
    _Atomic unsigned char index;
    span_slot slot[2];
} span_tls __attribute__((tls_model("initial-exec")));

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static void publish(const uint8_t *trace_id, const uint8_t *span_id, bool valid) {
    unsigned char next = (unsigned char)(atomic_load_explicit(&span_tls.index,
                                                              memory_order_relaxed) ^ 1u);
    span_slot *s = &span_tls.slot[next];
    if (valid) {
        memcpy(s->trace_id, trace_id, 16);
        memcpy(s->span_id, span_id, 8);
    }
    s->valid = valid;
    atomic_signal_fence(memory_order_release);
    atomic_store_explicit(&span_tls.index, next, memory_order_release);
}

void stackshot_set_span_context(const uint8_t trace_id[16], const uint8_t span_id[8]) {
    bool valid = trace_id && span_id && !all_zero(trace_id, 16) && !all_zero(span_id, 8);
    publish(trace_id, span_id, valid);
}

void stackshot_clear_span_context(void) { publish(NULL, NULL, false); }

bool ss_span_current(uint8_t trace_id[16], uint8_t span_id[8]) {
    unsigned char i = atomic_load_explicit(&span_tls.index, memory_order_acquire);
    atomic_signal_fence(memory_order_acquire);
    const span_slot *s = &span_tls.slot[i];
    if (!s->valid)
        return false;
    memcpy(trace_id, s->trace_id, 16);
    memcpy(span_id, s->span_id, 8);
    return true;
}
