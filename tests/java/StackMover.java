/*
 * StackMover.java: the host of tests/java/jvm_reuse.py.
 *
 *   java StackMover <ms> <phase ms>
 *
 * 50 threads parked for good ("still-N", 6 frames deep), and one thread
 * ("mover") that parks alternately in siteA and siteB, <phase ms> each, in
 * the same JVMTI state (TIMED_WAITING, parking): only its having run tells
 * that its stack changed. One more thread parked for good ("named") is
 * renamed by main halfway ("renamed"), without running itself. Prints
 * "ready", then at the end one line per phase: "phase <A|B> <start epoch
 * ms> <end epoch ms>", and "renamed <epoch ms>".
 */
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

public class StackMover {
    static volatile boolean done;
    static final List<String> phases = new ArrayList<>();

    static void still(int depth) {
        if (depth > 0) {
            still(depth - 1);
            return;
        }
        while (!done)
            LockSupport.park();
    }

    static void parkUntil(long end) {
        long now;
        while ((now = System.currentTimeMillis()) < end)
            LockSupport.parkNanos((end - now) * 1_000_000L);
    }

    static void siteA(long end) { parkUntil(end); }

    static void siteB(long end) { parkUntil(end); }

    public static void main(String[] args) throws Exception {
        long ms = Long.parseLong(args[0]);
        long phase = Long.parseLong(args[1]);
        for (int i = 0; i < 50; i++) {
            Thread t = new Thread(() -> still(5), "still-" + i);
            t.setDaemon(true);
            t.start();
        }
        Thread named = new Thread(() -> still(5), "named");
        named.setDaemon(true);
        named.start();
        long stop = System.currentTimeMillis() + ms;
        Thread mover = new Thread(() -> {
            boolean a = true;
            long start;
            while ((start = System.currentTimeMillis()) < stop) {
                long end = Math.min(start + phase, stop);
                if (a)
                    siteA(end);
                else
                    siteB(end);
                synchronized (phases) {
                    phases.add("phase " + (a ? "A" : "B") + " " + start + " "
                               + System.currentTimeMillis());
                }
                a = !a;
            }
        }, "mover");
        System.out.println("ready");
        mover.start();
        Thread.sleep(ms / 2);
        long renamed = System.currentTimeMillis();
        named.setName("renamed");
        mover.join();
        done = true;
        synchronized (phases) {
            for (String p : phases)
                System.out.println(p);
        }
        System.out.println("renamed " + renamed);
    }
}
