package io.opentelemetry.api.trace;

public interface TraceFlags {
    static TraceFlags getDefault() {
        return ImmutableTraceFlags.fromByte((byte) 0);
    }

    static TraceFlags getSampled() {
        return ImmutableTraceFlags.fromByte((byte) 1);
    }

    byte asByte();
}
