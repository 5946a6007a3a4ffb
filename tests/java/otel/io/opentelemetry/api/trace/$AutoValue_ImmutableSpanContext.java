// What AutoValue generates for ImmutableSpanContext (with @Memoized the
// fields live in this $AutoValue_ class, the memo in AutoValue_).
package io.opentelemetry.api.trace;

abstract class $AutoValue_ImmutableSpanContext extends ImmutableSpanContext {
    private final String traceId;
    private final String spanId;
    private final TraceFlags traceFlags;
    private final Object traceState;
    private final boolean remote;

    $AutoValue_ImmutableSpanContext(String traceId, String spanId, TraceFlags traceFlags,
                                    Object traceState, boolean remote) {
        this.traceId = traceId;
        this.spanId = spanId;
        this.traceFlags = traceFlags;
        this.traceState = traceState;
        this.remote = remote;
    }

    @Override
    public String getTraceId() {
        return traceId;
    }

    @Override
    public String getSpanId() {
        return spanId;
    }

    @Override
    public TraceFlags getTraceFlags() {
        return traceFlags;
    }

    @Override
    public boolean isRemote() {
        return remote;
    }
}
