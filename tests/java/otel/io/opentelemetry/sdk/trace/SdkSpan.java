// The SDK's span: a SpanContext context and a SpanContext parentSpanContext
// (declared after it in the SDK; first here, so a reader taking the first
// field of the type would be caught).
package io.opentelemetry.sdk.trace;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;

public final class SdkSpan implements Span {
    private final SpanContext parentSpanContext;
    private final Object spanLimits = null;
    private final SpanContext context;

    public SdkSpan(SpanContext context, SpanContext parent) {
        this.context = context;
        this.parentSpanContext = parent;
    }

    @Override
    public SpanContext getSpanContext() {
        return context;
    }
}
