/*
 * agent/span.h: span context (include/stackshot.h) and the OpenTelemetry thread
 * and process contexts, read by samplers.
 */
#ifndef SS_AGENT_SPAN_H
#define SS_AGENT_SPAN_H

#include "agent/buf.h"
#include "agent/otel_ctx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Read the calling thread's span context. Async-signal-safe: a handler
 * interrupting a half-done update still reads a consistent pair. */
bool ss_span_current(uint8_t trace_id[16], uint8_t span_id[8]);
/* Where the core's own writer's otel_thread_ctx_v1 lies (agent/span.c):
 * *offset bytes from a thread's thread pointer, *size bytes; false while
 * no thread ever set a span through it. */
bool ss_span_tls_where(ptrdiff_t *offset, size_t *size);

/* OpenTelemetry thread context (OTEP 4947, agent/otel_thread.c): the
 * record of the thread, from every module exporting otel_thread_ctx_v1
 * (libstackshot.so's own writer among them). ss_otel_refresh on the
 * sampler thread before a round (finds the modules; cheap when none was
 * loaded since). ss_otel_read_self in a signal handler, on its own
 * thread (async-signal-safe: loads only; attrs-data up to cap bytes);
 * ss_otel_read_thread for a thread that is not running (the caller checks
 * it did not run meanwhile), through a reader that cannot fault (it
 * returns the bytes read, or < 0). true: a valid
 * record (out->valid is 1, attrs_size what was copied, at most
 * SS_OTEL_ATTRS_MAX). */
void ss_otel_refresh(void);
/* OpenTelemetry process context (OTEP 4719, agent/otel_proc.c): publish
 * (or update) the OTEL_CTX mapping with ss_otel_proc_payload's bytes.
 * Called at every start (a forked child's too); 0 or -errno. */
int ss_otel_proc_publish(void);
/* The ProcessContext message: defined by exporters/otlp/process_ctx.c
 * (the resource every OTLP export carries). */
int ss_otel_proc_payload(ss_buf *b);
bool ss_otel_have_sources(void);
/* A record's attrs-data as "key=value" lines joined by '\n' into out (at
 * most cap bytes, no NUL): key names from threadlocal.attribute_key_map of
 * a process context another publisher made (ss_otel_keymap_refresh);
 * the last occurrence of a key wins; entries whose index the map does not
 * have are left out, and *unknown set (the caller refreshes the map).
 * Returns the length written. Sampler thread only. */
size_t ss_otel_attrs_text(const uint8_t *attrs, size_t n, char *out, size_t cap, bool *unknown);
/* Read the key map again from the process's OTEL_CTX mappings other than
 * the agent's own, through rd (a reader that cannot fault); the number of
 * keys now known. Sampler thread only. */
uint32_t ss_otel_keymap_refresh(long (*rd)(void *, uint64_t, size_t));
bool ss_otel_read_self(uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags,
                       uint8_t *attrs, size_t cap, uint16_t *n_attrs);
/* What ss_otel_read_thread keeps per thread (zero it to start). */
#define SS_OTEL_CACHE 4
typedef struct ss_otel_cache {
    const void *table;
    uint64_t pthread;
    uint64_t slot[SS_OTEL_CACHE];
} ss_otel_cache;
bool ss_otel_read_thread(uint64_t pthread, long (*read)(void *, uint64_t, size_t),
                         ss_otel_cache *cache, ss_otel_rec *out);

#endif /* SS_AGENT_SPAN_H */
