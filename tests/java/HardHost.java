// HardHost.java: a JVM host for the hardening checks of jvm_hardening.py
// (the agent loaded with -agentpath or preloaded). It checks its own
// behaviour and prints what it saw; two threads "hard-busy-N" keep CPUs
// busy so that running threads are signalled by the agent in every round.
//
//   java HardHost files <dir> <ms>   its own 32 files in <dir>, written,
//                                     read back and checked in a loop
//   java HardHost signals             sun.misc.Signal handlers for HUP and
//                                     INT, each delivery printed; ends at
//                                     the end of standard input
//   java HardHost hook                a shutdown hook that prints; runs
//                                     until the JVM is stopped
//   java HardHost threads <ms> <max>  after <ms>, starts sleeping threads
//                                     until one fails to start or it has
//                                     <max>; prints "threads N"
//
// Prints "ready" once the threads run.
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.atomic.AtomicInteger;

public class HardHost {
    static volatile boolean stop;
    static volatile long sink;

    static void busy(int n) {
        for (int i = 0; i < n; i++) {
            Thread t = new Thread(() -> {
                long h = 17;
                while (!stop)
                    for (int k = 0; k < 100000; k++)
                        h = h * 31 + k;
                sink = h;
            }, "hard-busy-" + i);
            t.setDaemon(true);
            t.start();
        }
    }

    static byte[] content(int file, int round) {
        byte[] b = new byte[4096 + file * 17];
        for (int i = 0; i < b.length; i++)
            b[i] = (byte) ('a' + (file + round + i) % 26);
        return b;
    }

    // Its own files, written and read back through fresh descriptors each
    // round: what the JVM reads is exactly what it wrote, and nothing else
    // has written to them (a descriptor of the agent's reused by the host,
    // or the other way round, would show here).
    static int files(Path dir, long ms) throws IOException {
        long end = System.nanoTime() + ms * 1000000L;
        int rounds = 0;
        RandomAccessFile[] f = new RandomAccessFile[32];
        while (System.nanoTime() < end) {
            for (int i = 0; i < f.length; i++) {
                f[i] = new RandomAccessFile(dir.resolve("own-" + i).toFile(), "rw");
                f[i].setLength(0);
                f[i].write(content(i, rounds));
            }
            Thread.yield();
            for (int i = 0; i < f.length; i++) {
                byte[] want = content(i, rounds), got = new byte[want.length + 1];
                f[i].seek(0);
                int n = f[i].read(got);
                f[i].close();
                byte[] disk = Files.readAllBytes(dir.resolve("own-" + i));
                if (n != want.length || !java.util.Arrays.equals(java.util.Arrays.copyOf(got, n), want)
                    || !java.util.Arrays.equals(disk, want)) {
                    System.out.println("files BAD file " + i + " round " + rounds + ": read " + n +
                                       " bytes, " + disk.length + " on disk, want " + want.length);
                    return 3;
                }
            }
            rounds++;
        }
        System.out.println("files ok " + rounds + " rounds");
        return 0;
    }

    @SuppressWarnings("sunapi")
    static int signals() throws IOException {
        AtomicInteger hup = new AtomicInteger(), intr = new AtomicInteger();
        sun.misc.Signal.handle(new sun.misc.Signal("HUP"), s -> {
            System.out.println("sig HUP " + hup.incrementAndGet());
            System.out.flush();
        });
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), s -> {
            System.out.println("sig INT " + intr.incrementAndGet());
            System.out.flush();
        });
        System.out.println("ready");
        System.out.flush();
        byte[] buf = new byte[64];
        while (System.in.read(buf) > 0) {
        }
        System.out.println("counts HUP " + hup.get() + " INT " + intr.get());
        return 0;
    }

    static int hook() throws InterruptedException {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.println("hook ran");
            System.out.flush();
        }));
        System.out.println("ready");
        System.out.flush();
        for (;;)
            Thread.sleep(1000);
    }

    // As many threads as the process's limits let it start (a thread that
    // cannot start throws OutOfMemoryError: "unable to create native
    // thread"), each asleep until the JVM exits.
    static int threads(long ms, int max) throws InterruptedException {
        Thread.sleep(ms);
        int n = 0;
        long slowest = 0;
        try {
            while (n < max) {
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(600000);
                    } catch (InterruptedException e) {
                    }
                }, "hard-sleeper-" + n);
                t.setDaemon(true);
                long t0 = System.nanoTime();
                t.start();
                slowest = Math.max(slowest, System.nanoTime() - t0);
                n++;
            }
        } catch (OutOfMemoryError e) {
            System.out.println("stopped: " + e.getMessage());
        }
        System.out.println("threads " + n);
        System.out.println("slowest start " + slowest / 1000000 + " ms");
        return 0;
    }

    public static void main(String[] a) throws Exception {
        busy(2);
        int rc;
        switch (a[0]) {
        case "files":
            System.out.println("ready");
            System.out.flush();
            rc = files(Paths.get(a[1]), Long.parseLong(a[2]));
            break;
        case "signals":
            rc = signals();
            break;
        case "hook":
            rc = hook();
            break;
        case "threads":
            rc = threads(Long.parseLong(a[1]), Integer.parseInt(a[2]));
            break;
        default:
            rc = 2;
        }
        stop = true;
        System.out.flush();
        System.exit(rc);
    }
}
