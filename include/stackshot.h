/*
 * stackshot.h: the public C API of the stackshot profiling agent.
 *
 * Most users never call any of this: the agent starts by itself when it is
 * preloaded (LD_PRELOAD) or loaded by a JVM (-agentpath) with
 * SPLUNK_PROFILER_ENABLED=true. These entry points serve two other cases:
 *
 *   - embedding: a program linked against libstackshot starts and stops the
 *     agent itself (stackshot_start / stackshot_stop);
 *   - trace correlation: a tracer tells the agent which span the calling
 *     thread is working for, so the stacks sampled meanwhile carry its ids.
 *
 * Every function here is safe to call whether or not the agent is running.
 */
#ifndef STACKSHOT_H
#define STACKSHOT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STACKSHOT_API __attribute__((visibility("default")))
#else
#define STACKSHOT_API
#endif

/* Start the agent in this process, configured from the environment, even
 * when SPLUNK_PROFILER_ENABLED is not set (calling it is the opt-in).
 * Returns 0 on success or when already running, a negative errno value
 * otherwise (the reason is printed on stderr). */
STACKSHOT_API int stackshot_start(void);

/* Stop the agent: flush what is queued within the shutdown deadline, stop
 * the agent's threads. Safe to call when not running. */
STACKSHOT_API void stackshot_stop(void);

/* Attach the calling thread's samples to a span: trace_id is 16 bytes,
 * span_id 8 bytes, both in network (big-endian) order as W3C traceparent
 * spells them. An all-zero id clears the context. Lock-free and
 * async-signal-safe; costs a few stores. The span is published as an
 * OpenTelemetry thread context (OTEP 4947: the library exports the TLS
 * variable otel_thread_ctx_v1), so other profilers on the host (the
 * OpenTelemetry eBPF profiler) see it too; docs/otel-context.md. */
STACKSHOT_API void stackshot_set_span_context(const uint8_t trace_id[16],
                                              const uint8_t span_id[8]);

/* The same with the span's W3C trace flags (bit 0: sampled), which
 * exporters carry with the ids (stackshot_set_span_context: 0). */
STACKSHOT_API void stackshot_set_span_context_flags(const uint8_t trace_id[16],
                                                    const uint8_t span_id[8],
                                                    uint8_t trace_flags);

/* Detach the calling thread from any span. */
STACKSHOT_API void stackshot_clear_span_context(void);

/* The library's version as "MAJOR.MINOR.PATCH". */
STACKSHOT_API const char *stackshot_version(void);

#ifdef __cplusplus
}
#endif

#endif /* STACKSHOT_H */
