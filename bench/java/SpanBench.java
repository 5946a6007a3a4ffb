// 100 threads parked inside a span (made current through the OpenTelemetry
// API: the stand-ins of tests/java/otel) beside 100 threads parked without
// one, for bench/java/spans.py: the agent's own measure of reading each
// thread's span ("jvmti: span reads ..."), both kinds in the same run.
//   java SpanBench <threads> <seconds>
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

public class SpanBench {
    static volatile boolean stop;

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        int seconds = Integer.parseInt(args[1]);
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < 2 * n; i++) {
            boolean traced = i < n;
            String trace = String.format("%016x%016x", 0x1000 + i, 0x2000 + i);
            String span = String.format("%016x", 0x3000 + i);
            Thread t = new Thread(() -> {
                io.opentelemetry.context.Scope scope = null;
                if (traced) {
                    io.opentelemetry.api.trace.SpanContext sc =
                            io.opentelemetry.api.trace.SpanContext.create(trace, span,
                                    io.opentelemetry.api.trace.TraceFlags.getSampled());
                    scope = new io.opentelemetry.sdk.trace.SdkSpan(sc,
                            io.opentelemetry.api.trace.SpanContext.getInvalid()).makeCurrent();
                } else {
                    io.opentelemetry.context.Context.current(); /* a map, no span */
                }
                while (!stop)
                    LockSupport.parkNanos(100_000_000L);
                if (scope != null)
                    scope.close();
            }, (traced ? "traced-" : "untraced-") + i);
            t.start();
            ts.add(t);
        }
        Thread.sleep(seconds * 1000L);
        stop = true;
        for (Thread t : ts)
            t.join();
    }
}
