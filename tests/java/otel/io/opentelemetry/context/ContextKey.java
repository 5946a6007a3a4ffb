package io.opentelemetry.context;

public interface ContextKey<T> {
    static <T> ContextKey<T> named(String name) {
        return new DefaultContextKey<>(name);
    }
}
