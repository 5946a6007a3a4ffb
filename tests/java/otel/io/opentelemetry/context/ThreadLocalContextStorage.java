// As published: an enum whose static THREAD_LOCAL_STORAGE (a ThreadLocal
// made by withInitial) holds the thread's current Context.
package io.opentelemetry.context;

enum ThreadLocalContextStorage {
    INSTANCE;

    private static final ThreadLocal<Context> THREAD_LOCAL_STORAGE =
            ThreadLocal.withInitial(Context::root);

    Scope attach(Context toAttach) {
        Context before = current();
        if (toAttach == before)
            return () -> {};
        THREAD_LOCAL_STORAGE.set(toAttach);
        return () -> THREAD_LOCAL_STORAGE.set(before);
    }

    Context current() {
        return THREAD_LOCAL_STORAGE.get();
    }
}
