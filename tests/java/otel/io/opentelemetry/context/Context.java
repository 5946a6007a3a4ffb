// Test stand-in for the published io.opentelemetry.context.Context: only
// what the test host calls. The agent depends on the layout of
// ThreadLocalContextStorage and ArrayBasedContext, kept as published.
package io.opentelemetry.context;

public interface Context {
    static Context current() {
        Context c = ThreadLocalContextStorage.INSTANCE.current();
        return c != null ? c : root();
    }

    static Context root() {
        return ArrayBasedContext.root();
    }

    <V> V get(ContextKey<V> key);

    <V> Context with(ContextKey<V> key, V value);

    default Context with(ImplicitContextKeyed value) {
        return value.storeInContext(this);
    }

    default Scope makeCurrent() {
        return ThreadLocalContextStorage.INSTANCE.attach(this);
    }
}
