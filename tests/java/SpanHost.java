// Threads that make spans current the way an application (the
// OpenTelemetry API), the OpenTelemetry Java agent (the same API relocated
// under io.opentelemetry.javaagent.shaded, on the boot class path) and
// io.stackshot.StackshotSpan do, each recording the intervals it had a span
// current (wall clock, ns), printed at the end for span_check.py:
//   span <thread> <trace id> <span id> <start ns> <end ns>
//   thread <thread> <kind>
// Kinds: busy (spans switched every ~50 ms), parked (one span, parked
// inside it), untraced, explicit_over_otel (an OTel span current the whole
// time, explicit spans switched over it: only the explicit ones may show).
//   java SpanHost <seconds>
import io.stackshot.StackshotSpan;
import java.lang.reflect.Method;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.LockSupport;

public class SpanHost {
    interface Closer {
        void close();
    }

    interface Api {
        Closer enter(String traceId, String spanId);
    }

    static final Api APP = (t, s) -> {
        io.opentelemetry.api.trace.SpanContext sc = io.opentelemetry.api.trace.SpanContext.create(
                t, s, io.opentelemetry.api.trace.TraceFlags.getSampled());
        io.opentelemetry.api.trace.Span span = new io.opentelemetry.sdk.trace.SdkSpan(sc,
                io.opentelemetry.api.trace.SpanContext.create(hex(32), hex(16),
                        io.opentelemetry.api.trace.TraceFlags.getSampled()));
        io.opentelemetry.context.Scope scope =
                io.opentelemetry.context.Context.current().with(span).makeCurrent();
        return scope::close;
    };
    static final Api APP_OTHER = (t, s) -> {
        io.opentelemetry.api.trace.SpanContext sc = io.opentelemetry.api.trace.SpanContext.create(
                t, s, io.opentelemetry.api.trace.TraceFlags.getDefault());
        io.opentelemetry.api.trace.Span span = new io.opentelemetry.sdk.trace.OtherSpan(sc,
                io.opentelemetry.api.trace.SpanContext.create(hex(32), hex(16),
                        io.opentelemetry.api.trace.TraceFlags.getSampled()));
        io.opentelemetry.context.Scope scope = span.makeCurrent();
        return scope::close;
    };
    static final Api AGENT = (t, s) -> {
        io.opentelemetry.javaagent.shaded.io.opentelemetry.api.trace.Span span =
                io.opentelemetry.javaagent.shaded.io.opentelemetry.api.trace.Span.wrap(
                        io.opentelemetry.javaagent.shaded.io.opentelemetry.api.trace.SpanContext
                                .create(t, s, io.opentelemetry.javaagent.shaded.io.opentelemetry
                                        .api.trace.TraceFlags.getSampled()));
        io.opentelemetry.javaagent.shaded.io.opentelemetry.context.Scope scope =
                io.opentelemetry.javaagent.shaded.io.opentelemetry.context.Context.current()
                        .with(span).makeCurrent();
        return scope::close;
    };
    static final Api EXPLICIT = (t, s) -> {
        StackshotSpan.set(t, s);
        return StackshotSpan::clear;
    };

    static final long WALL0 = wall0();
    static final long NANO0 = System.nanoTime();
    static volatile boolean stop;
    static volatile long sink;
    static final List<String> out = Collections.synchronizedList(new ArrayList<>());

    static long wall0() {
        Instant i = Instant.now();
        return i.getEpochSecond() * 1_000_000_000L + i.getNano();
    }

    static long wallNs() {
        return WALL0 + (System.nanoTime() - NANO0);
    }

    static String hex(int digits) {
        StringBuilder b = new StringBuilder();
        while (b.length() < digits)
            b.append(String.format("%016x", ThreadLocalRandom.current().nextLong() | 1));
        return b.substring(0, digits);
    }

    static void spin(long ns) {
        long until = System.nanoTime() + ns;
        long x = 0;
        while (System.nanoTime() < until)
            for (int i = 0; i < 1000; i++)
                x += i * 31 + (x >>> 3);
        sink += x;
    }

    static void busy(String name, Api api, long sleepMs) {
        out.add("thread " + name + " busy");
        loop(name, api, sleepMs);
    }

    /* Spans back to back: the next one is entered right after the current
     * one is closed, so the thread is without a span only for a moment. */
    static void loop(String name, Api api, long sleepMs) {
        String t = hex(32), s = hex(16);
        Closer c = api.enter(t, s);
        long start = wallNs();
        while (!stop) {
            spin(50_000_000L - sleepMs * 1_000_000L);
            if (sleepMs > 0) {
                try {
                    Thread.sleep(sleepMs); /* a virtual thread unmounts here */
                } catch (InterruptedException e) {
                    break;
                }
            }
            String t2 = hex(32), s2 = hex(16);
            c.close();
            long end = wallNs();
            c = api.enter(t2, s2);
            long start2 = wallNs();
            out.add("span " + name + " " + t + " " + s + " " + start + " " + end);
            t = t2;
            s = s2;
            start = start2;
        }
        c.close();
        out.add("span " + name + " " + t + " " + s + " " + start + " " + wallNs());
    }

    static void parked(String name) {
        out.add("thread " + name + " parked");
        String t = hex(32), s = hex(16);
        Closer c = APP.enter(t, s);
        long start = wallNs();
        while (!stop)
            LockSupport.parkNanos(100_000_000L);
        c.close();
        out.add("span " + name + " " + t + " " + s + " " + start + " " + wallNs());
    }

    static void untraced(String name) {
        out.add("thread " + name + " untraced");
        while (!stop)
            spin(10_000_000L);
    }

    /* Explicit spans replace one another with no gap (set over set), an
     * OTel span current under them from just after the first: from the
     * first set on, only explicit spans may show. A span's interval runs
     * from before its set to after the next one. */
    static void explicitOverOtel(String name) {
        out.add("thread " + name + " explicit_over_otel");
        String t = hex(32), s = hex(16);
        StackshotSpan.set(t, s);
        long start = wallNs();
        Closer otel = APP.enter(hex(32), hex(16)); /* never to be seen */
        while (!stop) {
            spin(50_000_000L);
            String t2 = hex(32), s2 = hex(16);
            StackshotSpan.set(t2, s2); /* replaces t, s at once */
            long end = wallNs(), start2 = end;
            out.add("span " + name + " " + t + " " + s + " " + start + " " + end);
            t = t2;
            s = s2;
            start = start2;
        }
        otel.close();
        StackshotSpan.clear();
        out.add("span " + name + " " + t + " " + s + " " + start + " " + wallNs());
    }

    static Thread start(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.start();
        return t;
    }

    /* Thread.ofVirtual().name(n).start(r), by reflection: this file also
     * compiles and runs on JDK 17, without virtual threads. */
    static Thread startVirtual(String name, Runnable r) throws Exception {
        Method of;
        try {
            of = Thread.class.getMethod("ofVirtual");
        } catch (NoSuchMethodException e) {
            return null;
        }
        Object b = of.invoke(null);
        Class<?> bc = Class.forName("java.lang.Thread$Builder");
        b = bc.getMethod("name", String.class).invoke(b, name);
        return (Thread) bc.getMethod("start", Runnable.class).invoke(b, r);
    }

    /* "api": StackshotSpan's contract without sampling: bound or not as
     * expected (args[1]), set/clear never throw on good input, a malformed
     * id throws IllegalArgumentException only when bound (unbound: no-op).
     * Exit code 0 when all held. */
    static int api(boolean expectBound) {
        int bad = 0;
        if (StackshotSpan.active() != expectBound) {
            System.out.println("FAIL: active() " + StackshotSpan.active());
            bad++;
        }
        StackshotSpan.set(hex(32), hex(16));
        StackshotSpan.set("00000000000000000000000000000000", "0000000000000000");
        StackshotSpan.set(null, null);
        StackshotSpan.clear();
        boolean threw = false;
        try {
            StackshotSpan.set("xyz", "0000000000000001");
        } catch (IllegalArgumentException e) {
            threw = true;
        }
        if (threw != expectBound) {
            System.out.println("FAIL: malformed id threw " + threw);
            bad++;
        }
        System.out.println(bad == 0 ? "api ok" : "api failed");
        return bad == 0 ? 0 : 1;
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("api"))
            System.exit(api(Boolean.parseBoolean(args[1])));
        int seconds = Integer.parseInt(args[0]);
        System.out.println("explicit bound " + StackshotSpan.active());
        List<Thread> ts = new ArrayList<>();
        ts.add(start("app-busy-0", () -> busy("app-busy-0", APP, 0)));
        ts.add(start("app-busy-1", () -> busy("app-busy-1", APP_OTHER, 0)));
        ts.add(start("agent-busy-0", () -> busy("agent-busy-0", AGENT, 0)));
        ts.add(start("explicit-busy-0", () -> busy("explicit-busy-0", EXPLICIT, 0)));
        ts.add(start("explicit-over-otel", () -> explicitOverOtel("explicit-over-otel")));
        ts.add(start("parked-app", () -> parked("parked-app")));
        ts.add(start("untraced-0", () -> untraced("untraced-0")));
        for (int i = 0; i < 2; i++) {
            String n = "vt-app-" + i;
            Api api = i == 0 ? APP : AGENT;
            Thread v = startVirtual(n, () -> busy(n, api, 20));
            if (v != null)
                ts.add(v);
        }
        Thread.sleep(seconds * 1000L);
        out.add("stop " + wallNs());
        stop = true;
        for (Thread t : ts) {
            LockSupport.unpark(t);
            t.join();
        }
        synchronized (out) {
            for (String l : out)
                System.out.println(l);
        }
        System.out.println("done");
    }
}
