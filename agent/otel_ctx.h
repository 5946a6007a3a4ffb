/* otel_ctx.h: the OpenTelemetry thread-context record (OTEP 4947) and
 * its writer, shared by the loader (which exports the host's
 * otel_thread_ctx_v1) and the core (its own writer, and the reader's
 * decoding). Header only and libc only: the loader includes it.
 *
 * The layout, from OTEP 4947 ("Thread-Local Context Record"): byte-packed,
 * multi-byte fields in host order, the record 2-byte aligned.
 *
 *   offset  size  field
 *        0    16  trace-id (W3C, all zero: none)
 *       16     8  span-id (W3C)
 *       24     1  valid: 1 the record is complete; any other value: ignore it
 *       25     1  trace-flags (W3C trace-flags byte)
 *       26     2  attrs-data-size (uint16, host order)
 *       28     n  attrs-data: entries of key index (uint8), length (uint8),
 *                 value (length bytes of UTF-8), packed; a key index names
 *                 an entry of the process context's
 *                 threadlocal.attribute_key_map; the last occurrence of a
 *                 key wins; a truncated entry ends the parse.
 *
 * The TLS variable otel_thread_ctx_v1 points at the thread's record (NULL:
 * none). docs/otel-context.md has the sources and what is implemented. */
#ifndef SS_OTEL_CTX_H
#define SS_OTEL_CTX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SS_OTEL_REC_HEAD 28u
/* the trace flags of a span set without them (stackshot_set_span_context) */
#define SS_OTEL_FLAGS_UNKNOWN 0u
/* what the agent's writers store and its reader copies of attrs-data: the
 * OTEP recommends records of at most 640 bytes in all */
#define SS_OTEL_ATTRS_MAX 224u

typedef struct ss_otel_rec {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_size;
    uint8_t attrs[SS_OTEL_ATTRS_MAX];
} __attribute__((aligned(8))) ss_otel_rec;

_Static_assert(offsetof(ss_otel_rec, valid) == 24, "OTEP 4947 layout");
_Static_assert(offsetof(ss_otel_rec, trace_flags) == 25, "OTEP 4947 layout");
_Static_assert(offsetof(ss_otel_rec, attrs_size) == 26, "OTEP 4947 layout");
_Static_assert(offsetof(ss_otel_rec, attrs) == SS_OTEL_REC_HEAD, "OTEP 4947 layout");

static inline bool ss_otel_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* The writer, on the calling thread's own fixed record, which *slot (the
 * thread's otel_thread_ctx_v1) points at from the first call on. The OTEP's
 * in-place protocol: valid = 0, the fields, valid = 1, with compiler
 * fences between (the only reader that may see the record mid-way is a
 * signal handler on this thread, or a reader that stopped it). The
 * pointer is set once and never changes afterwards: the OTEP asks a
 * writer to use either the pointer or the flag, not both. An all-zero or
 * missing id means no span: valid stays 0. */
static inline void ss_otel_write(ss_otel_rec *_Atomic *slot, ss_otel_rec *rec,
                                 const uint8_t *trace_id, const uint8_t *span_id,
                                 uint8_t flags) {
    bool has = trace_id && span_id && !ss_otel_zero(trace_id, 16) && !ss_otel_zero(span_id, 8);
    volatile uint8_t *valid = &rec->valid;
    *valid = 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (!has)
        return;
    memcpy(rec->trace_id, trace_id, 16);
    memcpy(rec->span_id, span_id, 8);
    rec->trace_flags = flags;
    rec->attrs_size = 0;
    atomic_signal_fence(memory_order_seq_cst);
    *valid = 1;
    atomic_signal_fence(memory_order_seq_cst);
    if (atomic_load_explicit(slot, memory_order_relaxed) != rec)
        atomic_store_explicit(slot, rec, memory_order_relaxed);
}

#endif /* SS_OTEL_CTX_H */
