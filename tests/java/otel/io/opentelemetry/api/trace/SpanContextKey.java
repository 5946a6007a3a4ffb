package io.opentelemetry.api.trace;

import io.opentelemetry.context.ContextKey;

final class SpanContextKey {
    static final ContextKey<Span> KEY = ContextKey.named("opentelemetry-trace-span-key");

    private SpanContextKey() {}
}
