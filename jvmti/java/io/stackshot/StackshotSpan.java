/*
 * Tell the stackshot agent which span the calling thread is working for,
 * when no OpenTelemetry context carries it (the agent reads that one by
 * itself). Same meaning as stackshot_set_span_context() of the C API: per
 * thread (a virtual thread has its own), read when the agent samples.
 *
 *   StackshotSpan.set("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
 *   try { work(); } finally { StackshotSpan.clear(); }
 *
 * The natives are bound by the agent when this class is loaded; without
 * the agent (not loaded, or SPLUNK_PROFILER_ENABLED not true) both methods
 * do nothing. An explicit context wins over the OpenTelemetry one.
 */
package io.stackshot;

public final class StackshotSpan {
    /* The agent reads this thread local of every sampled thread: long[3]
     * {trace id high, trace id low, span id}, big-endian halves. */
    private static final ThreadLocal<long[]> CURRENT = new ThreadLocal<>();
    private static final boolean BOUND = probe();

    private StackshotSpan() {}

    /**
     * Attach the calling thread's samples to a span: 32 and 16 hex digits
     * (W3C traceparent form). All-zero ids or null detach it.
     *
     * @throws IllegalArgumentException when an id is not of that form
     */
    public static void set(String traceIdHex, String spanIdHex) {
        if (BOUND)
            set0(traceIdHex, spanIdHex);
    }

    /** Detach the calling thread from any span. */
    public static void clear() {
        if (BOUND)
            clear0();
    }

    /** Whether the agent bound this class (its spans are read). */
    public static boolean active() {
        return BOUND;
    }

    private static boolean probe() {
        try {
            return bound0();
        } catch (UnsatisfiedLinkError e) {
            return false;
        }
    }

    private static native void set0(String traceIdHex, String spanIdHex);

    private static native void clear0();

    private static native boolean bound0();
}
