// Layout as published: private final Object[] entries, alternating key and
// value, a new array on every change.
package io.opentelemetry.context;

import java.util.Arrays;

final class ArrayBasedContext implements Context {
    private static final Context ROOT = new ArrayBasedContext(new Object[0]);

    static Context root() {
        return ROOT;
    }

    private final Object[] entries;

    private ArrayBasedContext(Object[] entries) {
        this.entries = entries;
    }

    @Override
    @SuppressWarnings("unchecked")
    public <V> V get(ContextKey<V> key) {
        for (int i = 0; i < entries.length; i += 2)
            if (entries[i] == key)
                return (V) entries[i + 1];
        return null;
    }

    @Override
    public <V> Context with(ContextKey<V> key, V value) {
        for (int i = 0; i < entries.length; i += 2) {
            if (entries[i] == key) {
                Object[] copy = entries.clone();
                copy[i + 1] = value;
                return new ArrayBasedContext(copy);
            }
        }
        Object[] copy = Arrays.copyOf(entries, entries.length + 2);
        copy[copy.length - 2] = key;
        copy[copy.length - 1] = value;
        return new ArrayBasedContext(copy);
    }
}
