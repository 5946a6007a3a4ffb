/*
 * Demo.java: threads in every state jstack knows, for the stackshot agent's
 * tests and for trying the agent by hand.
 *
 *   javac -d out Demo.java
 *   SPLUNK_PROFILER_ENABLED=true java -agentpath:libstackshot.so -cp out Demo 30
 *
 * Runs for argv[0] seconds (default 30), then exits. Every thread except
 * busy-worker stops in one known place, so its stack is the same in jstack
 * and in the agent's output. Prints "ready" on stdout once they are there.
 * On JDK 21+ it also starts a virtual thread, "virtual-sleeper", sleeping in
 * Demo.virtualSleeper (through reflection, so the file compiles with JDK 17).
 */
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.LockSupport;

public class Demo {
    static final Object waitLock = new Object();
    static final Object heldLock = new Object();
    static final CountDownLatch ready = new CountDownLatch(8);
    static volatile boolean done;
    static volatile long sink;

    /* busy-worker: always on CPU, somewhere in here. */
    static long computePrimes(long limit) {
        long count = 0;
        for (long n = 2; n < limit; n++) {
            boolean prime = true;
            for (long d = 2; d * d <= n; d++)
                if (n % d == 0) {
                    prime = false;
                    break;
                }
            if (prime)
                count++;
        }
        return count;
    }

    static void busy() {
        ready.countDown();
        while (!done)
            sink += computePrimes(20000);
    }

    static void sleeper() {
        ready.countDown();
        while (!done)
            sleepQuietly(60_000);
    }

    static void parked() {
        ready.countDown();
        while (!done)
            LockSupport.park(waitLock);
    }

    static void monitorWaiter() {
        synchronized (waitLock) {
            ready.countDown();
            while (!done) {
                try {
                    waitLock.wait();
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    static void holder() {
        synchronized (heldLock) {
            ready.countDown();
            while (!done)
                sleepQuietly(60_000);
        }
    }

    static void blocked() {
        synchronized (heldLock) {
            sink++;
        }
    }

    static void recurse(int depth) {
        if (depth == 0) {
            ready.countDown();
            while (!done)
                sleepQuietly(60_000);
            return;
        }
        recurse(depth - 1);
    }

    static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            done = true;
        }
    }

    /* A named nested class: jstack prints it as Demo$Inner. */
    static class Inner implements Runnable {
        public void run() {
            ready.countDown();
            while (!done)
                LockSupport.parkNanos(this, 60_000_000_000L);
        }
    }

    static void virtualSleeper() {
        while (!done)
            sleepQuietly(60_000);
    }

    /* Thread.ofVirtual().name("virtual-sleeper").start(Demo::virtualSleeper),
     * when this JDK has virtual threads. */
    static boolean startVirtual() {
        try {
            Object builder = Thread.class.getMethod("ofVirtual").invoke(null);
            Class<?> api = Class.forName("java.lang.Thread$Builder");
            builder = api.getMethod("name", String.class).invoke(builder, "virtual-sleeper");
            Runnable r = Demo::virtualSleeper;
            api.getMethod("start", Runnable.class).invoke(builder, r);
            return true;
        } catch (ReflectiveOperationException e) {
            return false;
        }
    }

    static Thread start(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 30;
        start("busy-worker", Demo::busy);
        start("sleeper", Demo::sleeper);
        start("parked", Demo::parked);
        start("monitor-waiter", Demo::monitorWaiter);
        start("monitor-holder", Demo::holder);
        start("recursive", () -> recurse(40));
        start("inner", new Inner());
        Thread lambda = new Thread(() -> {
            ready.countDown();
            while (!done)
                sleepQuietly(60_000);
        }, "w\u00f6rker-\u7ebf\u7a0b");
        lambda.start(); /* not a daemon: prints daemon-less in jstack */
        ready.await();
        if (startVirtual())
            System.out.println("virtual");
        /* monitor-blocked needs the holder to own heldLock first */
        Thread blocked = start("monitor-blocked", Demo::blocked);
        while (blocked.getState() != Thread.State.BLOCKED)
            Thread.sleep(10);
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(seconds * 1000);
        done = true;
        System.exit(0);
    }
}
