package io.opentelemetry.api.trace;

import io.opentelemetry.context.Context;
import io.opentelemetry.context.ImplicitContextKeyed;

public interface Span extends ImplicitContextKeyed {
    static Span current() {
        Span s = Context.current().get(SpanContextKey.KEY);
        return s != null ? s : wrap(SpanContext.getInvalid());
    }

    static Span wrap(SpanContext spanContext) {
        return PropagatedSpan.create(spanContext);
    }

    SpanContext getSpanContext();

    @Override
    default Context storeInContext(Context context) {
        return context.with(SpanContextKey.KEY, this);
    }
}
