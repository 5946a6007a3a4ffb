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

typedef struct span_tls_t {
    _Atomic unsigned char index;
    span_slot slot[2];
} span_tls_t;

static __thread span_tls_t span_tls __attribute__((tls_model("initial-exec")));

/* Set once any thread set a context: until then no thread has one and the
 * sampler need not read any. */
static atomic_bool ever_set;

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
    if (valid && !atomic_load_explicit(&ever_set, memory_order_relaxed))
        atomic_store(&ever_set, true);
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

/* Initial-exec TLS sits at the same offset from every thread's thread
 * pointer (pthread_self() on x86-64 glibc), so the sampler can read the
 * context of a thread asleep in a system call from its memory. */
bool ss_span_tls_where(ptrdiff_t *offset, size_t *size) {
    if (!atomic_load_explicit(&ever_set, memory_order_relaxed))
        return false;
    *offset = (const char *)&span_tls - (const char *)(uintptr_t)pthread_self();
    *size = sizeof span_tls;
    return true;
}

bool ss_span_decode(const void *bytes, uint8_t trace_id[16], uint8_t span_id[8]) {
    span_tls_t t;
    memcpy(&t, bytes, sizeof t);
    unsigned char i = atomic_load_explicit(&t.index, memory_order_relaxed);
    if (i > 1 || !t.slot[i].valid)
        return false;
    memcpy(trace_id, t.slot[i].trace_id, 16);
    memcpy(span_id, t.slot[i].span_id, 8);
    return true;
}
