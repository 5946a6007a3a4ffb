package io.opentelemetry.context;

public interface ImplicitContextKeyed {
    Context storeInContext(Context context);

    default Scope makeCurrent() {
        return Context.current().with(this).makeCurrent();
    }
}
