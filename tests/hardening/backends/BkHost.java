// BkHost.java: bk_host.c's workload as a JVM, the Java host of the
// dead-and-hostile-backend matrix (matrix.js with BK_JAVA: the agent comes
// by -agentpath).
//
//   java BkHost <run ms> [workers] [sleepers] [depth] [pause us]
//
// The same contract as bk_host.c: `workers` threads "bk-worker-N" run a
// hash loop and count it, `sleepers` threads "bk-sleeper-N" wait `depth`
// calls deep; with <run ms> 0 the run lasts until standard input ends, and
// any input before that takes the early resident set again. At the end one
// line
//   ops <n> run_ms <ms> rss_early_kb <kb> rss_end_kb <kb> hwm_kb <kb> cpu_ms <ms>
// then main returns: the JVM's exit (VMDeath, the agent's flush within
// STACKSHOT_SHUTDOWN_TIMEOUT) comes after that line.
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.locks.LockSupport;

public class BkHost {
    static volatile boolean stop;
    static final Object idle = new Object();

    static long statusKb(String field) {
        try {
            for (String l : Files.readAllLines(Paths.get("/proc/self/status")))
                if (l.startsWith(field + ":"))
                    return Long.parseLong(l.substring(field.length() + 1).trim().split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            // as bk_host: -1 when it cannot be read
        }
        return -1;
    }

    static long cpuMs() throws IOException {
        String s = new String(Files.readAllBytes(Paths.get("/proc/self/stat")));
        String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
        long ticks = Long.parseLong(f[11]) + Long.parseLong(f[12]); // utime, stime
        return ticks * 10; // USER_HZ 100
    }

    static int descend(int left) throws InterruptedException {
        if (left > 0)
            return descend(left - 1) + left;
        synchronized (idle) {
            while (!stop)
                idle.wait();
        }
        return left;
    }

    public static void main(String[] a) throws Exception {
        long runMs = a.length > 0 ? Long.parseLong(a[0]) : 3000;
        int workers = a.length > 1 ? Integer.parseInt(a[1]) : 2;
        int sleepers = a.length > 2 ? Integer.parseInt(a[2]) : 0;
        int depth = a.length > 3 ? Integer.parseInt(a[3]) : 8;
        long pauseUs = a.length > 4 ? Long.parseLong(a[4]) : 0;
        long start = System.nanoTime();
        long[] counts = new long[workers];
        Thread[] w = new Thread[workers], z = new Thread[sleepers];
        for (int i = 0; i < workers; i++) {
            final int k = i;
            w[i] = new Thread(() -> {
                long h = 1469598103934665603L ^ k, n = 0;
                while (!stop) {
                    for (int j = 0; j < 256; j++) {
                        h ^= j;
                        h *= 1099511628211L;
                    }
                    n++;
                    if (pauseUs > 0 && (n & 1023) == 0)
                        LockSupport.parkNanos(pauseUs * 1000);
                }
                counts[k] = n + (h == 42 ? 1 : 0);
            }, "bk-worker-" + i);
            w[i].start();
        }
        for (int i = 0; i < sleepers; i++) {
            z[i] = new Thread(() -> {
                try {
                    descend(depth);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "bk-sleeper-" + i);
            z[i].start();
        }
        Thread.sleep(300);
        long rssEarly = statusKb("VmRSS");
        if (runMs > 0) {
            Thread.sleep(Math.max(0, runMs - (System.nanoTime() - start) / 1000000));
        } else {
            InputStream in = System.in;
            byte[] buf = new byte[64];
            while (in.read(buf) > 0)
                rssEarly = statusKb("VmRSS");
        }
        stop = true;
        long ops = 0;
        for (int i = 0; i < workers; i++) {
            w[i].join();
            ops += counts[i];
        }
        synchronized (idle) {
            idle.notifyAll();
        }
        for (Thread t : z)
            t.join();
        long took = (System.nanoTime() - start) / 1000000;
        System.out.println("ops " + ops + " run_ms " + took + " rss_early_kb " + rssEarly +
                           " rss_end_kb " + statusKb("VmRSS") + " hwm_kb " + statusKb("VmHWM") +
                           " cpu_ms " + cpuMs());
        System.out.flush();
    }
}
