package io.opentelemetry.api.trace;

public interface SpanContext {
    static SpanContext getInvalid() {
        return ImmutableSpanContext.INVALID;
    }

    static SpanContext create(String traceIdHex, String spanIdHex, TraceFlags flags) {
        return ImmutableSpanContext.create(traceIdHex, spanIdHex, flags, false);
    }

    String getTraceId();

    String getSpanId();

    TraceFlags getTraceFlags();

    boolean isRemote();
}
