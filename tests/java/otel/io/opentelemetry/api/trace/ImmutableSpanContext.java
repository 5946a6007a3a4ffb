// As published: an AutoValue class; the generated subclass holds String
// traceId, spanId, TraceFlags traceFlags (+ traceState, remote).
package io.opentelemetry.api.trace;

abstract class ImmutableSpanContext implements SpanContext {
    static final SpanContext INVALID = create("00000000000000000000000000000000",
            "0000000000000000", TraceFlags.getDefault(), false);

    static SpanContext create(String traceIdHex, String spanIdHex, TraceFlags flags,
                              boolean remote) {
        return new AutoValue_ImmutableSpanContext(traceIdHex, spanIdHex, flags, null, remote);
    }
}
