package io.opentelemetry.api.trace;

final class PropagatedSpan implements Span {
    static Span create(SpanContext spanContext) {
        return new PropagatedSpan(spanContext);
    }

    private final SpanContext spanContext;

    private PropagatedSpan(SpanContext spanContext) {
        this.spanContext = spanContext;
    }

    @Override
    public SpanContext getSpanContext() {
        return spanContext;
    }
}
