/*
 * Workload.java: fixed CPU-bound work for the Java overhead benchmark.
 *
 *   java Workload <workers> <idle threads> <work units per worker>
 *
 * Starts <idle> threads parked in LockSupport.park (each a few frames deep,
 * like a server's pool), then <workers> threads that each count primes in
 * <units> fixed blocks, and prints the wall time of the work alone
 * ("work_ms=<n>"), so JVM start and exit are not part of the figure.
 */
import java.util.concurrent.locks.LockSupport;

public class Workload {
    static volatile long sink;
    static volatile boolean done;

    static long primes(long from, long to) {
        long count = 0;
        for (long n = from; n < to; n++) {
            boolean prime = n > 1;
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

    static void idle(int depth) {
        if (depth > 0) {
            idle(depth - 1);
            return;
        }
        while (!done)
            LockSupport.park();
    }

    public static void main(String[] args) throws Exception {
        int workers = Integer.parseInt(args[0]);
        int idle = Integer.parseInt(args[1]);
        int units = Integer.parseInt(args[2]);
        for (int i = 0; i < idle; i++) {
            Thread t = new Thread(() -> idle(8), "idle-" + i);
            t.setDaemon(true);
            t.start();
        }
        Thread.sleep(300); /* let them park, and the agent see them */
        Thread[] ws = new Thread[workers];
        long start = System.nanoTime();
        for (int i = 0; i < workers; i++) {
            ws[i] = new Thread(() -> {
                long s = 0;
                for (int u = 0; u < units; u++)
                    s += primes(1_000_000L + u * 20_000L, 1_000_000L + (u + 1) * 20_000L);
                sink += s;
            }, "worker-" + i);
            ws[i].start();
        }
        for (Thread w : ws)
            w.join();
        long ms = (System.nanoTime() - start) / 1_000_000;
        done = true;
        System.out.println("work_ms=" + ms);
    }
}
