/*
 * ClassChurn.java: loads and unloads classes in a loop under the agent.
 *
 * Four threads each define ChurnPayload in a fresh class loader, run it
 * (recursion, then a little work and a short sleep, so the sampler sees its
 * frames), and drop the loader; System.gc() runs often, so the JVM unloads
 * the classes while their methods are in the agent's cache and while stacks
 * holding them may be in flight. Runs for argv[0] seconds (default 20).
 */
import java.io.InputStream;

public class ClassChurn {
    static class Loader extends ClassLoader {
        Loader() {
            super(null); /* bootstrap parent: ChurnPayload must come from us */
        }

        Class<?> define(byte[] b) {
            return defineClass("ChurnPayload", b, 0, b.length);
        }
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 20;
        byte[] bytes;
        try (InputStream in = ClassChurn.class.getResourceAsStream("/ChurnPayload.class")) {
            bytes = in.readAllBytes();
        }
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread[] workers = new Thread[4];
        long[] loaded = new long[workers.length];
        for (int i = 0; i < workers.length; i++) {
            final int k = i;
            workers[i] = new Thread(() -> {
                try {
                    while (System.nanoTime() < end) {
                        Class<?> c = new Loader().define(bytes);
                        var ctor = c.getDeclaredConstructor();
                        ctor.setAccessible(true); /* another runtime package */
                        Runnable r = (Runnable) ctor.newInstance();
                        r.run();
                        loaded[k]++;
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, "churn-" + i);
            workers[i].start();
        }
        int gcs = 0;
        while (System.nanoTime() < end) {
            Thread.sleep(100);
            System.gc();
            gcs++;
        }
        long total = 0;
        for (int i = 0; i < workers.length; i++) {
            workers[i].join();
            total += loaded[i];
        }
        System.out.println("loaded " + total + " classes, " + gcs + " GCs");
    }
}

/* Defined again and again by ClassChurn's loaders. */
class ChurnPayload implements Runnable {
    static volatile long sink;

    public void run() {
        descend(20);
    }

    void descend(int n) {
        if (n > 0) {
            descend(n - 1);
            return;
        }
        for (int i = 0; i < 20000; i++)
            sink += i * 31L;
        try {
            Thread.sleep(1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
