package io.opentelemetry.api.trace;

final class ImmutableTraceFlags implements TraceFlags {
    private final String hexRep;
    private final byte byteRep;

    static ImmutableTraceFlags fromByte(byte b) {
        return new ImmutableTraceFlags(b);
    }

    private ImmutableTraceFlags(byte byteRep) {
        this.hexRep = String.format("%02x", byteRep & 0xff);
        this.byteRep = byteRep;
    }

    @Override
    public byte asByte() {
        return byteRep;
    }
}
