package io.opentelemetry.context;

public interface Scope extends AutoCloseable {
    @Override
    void close();
}
