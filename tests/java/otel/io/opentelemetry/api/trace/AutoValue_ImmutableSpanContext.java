package io.opentelemetry.api.trace;

final class AutoValue_ImmutableSpanContext extends $AutoValue_ImmutableSpanContext {
    private volatile transient boolean isValid;
    private volatile transient boolean isValid$Memoized;

    AutoValue_ImmutableSpanContext(String traceId, String spanId, TraceFlags traceFlags,
                                   Object traceState, boolean remote) {
        super(traceId, spanId, traceFlags, traceState, remote);
    }
}
