/*
 * StackMover.java: the host of tests/java/jvm_reuse.py.
 *
 *   java StackMover <ms> <phase ms>
 *
 * 50 threads parked for good ("still-N", 6 frames deep), and one thread
 * ("mover") that parks alternately in siteA and siteB, <phase ms> each, in
 * the same JVMTI state (TIMED_WAITING, parking): only its having run tells
 * that its stack changed. One more thread parked for good ("named") is
 * renamed by main halfway ("renamed"), without running itself. And a
 * thread that comes and goes: "comer-N" lives 600 ms, parked, then ends;
 * the next starts 100 ms after it ended (the agent lists the threads again
 * only when one started or ended). Prints "ready", then at the end one
 * line per phase: "phase <A|B> <start epoch ms> <end epoch ms>",
 * "renamed <epoch ms>", and per comer "comer <N> <epoch ms its run began>
 * <epoch ms after it was joined>".
 */
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

public class StackMover {
    static volatile boolean done;
    static final List<String> phases = new ArrayList<>();
    static final List<String> comers = new ArrayList<>();

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
        Thread spawner = new Thread(() -> {
            try {
                for (int n = 0; System.currentTimeMillis() + 700 < stop; n++) {
                    long[] began = new long[1];
                    Thread c = new Thread(() -> {
                        began[0] = System.currentTimeMillis(); /* after ThreadStart */
                        parkUntil(began[0] + 600);
                    }, "comer-" + n);
                    c.start();
                    c.join();
                    long ended = System.currentTimeMillis();
                    synchronized (comers) {
                        comers.add("comer " + n + " " + began[0] + " " + ended);
                    }
                    Thread.sleep(100);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "spawner");
        spawner.setDaemon(true);
        System.out.println("ready");
        spawner.start();
        mover.start();
        Thread.sleep(ms / 2);
        long renamed = System.currentTimeMillis();
        named.setName("renamed");
        mover.join();
        spawner.join();
        done = true;
        synchronized (phases) {
            for (String p : phases)
                System.out.println(p);
        }
        System.out.println("renamed " + renamed);
        synchronized (comers) {
            for (String c : comers)
                System.out.println(c);
        }
    }
}
