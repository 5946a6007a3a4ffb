// SeccompJvm.java: the JVM host of check_seccomp_jvm.py, started under a
// seccomp filter (seccomp_host --exec). Two sleepers (Thread.sleep,
// LockSupport.parkNanos, 20 ms each) and one busy thread for SECONDS
// (argument, default 3), then one line and exit 0:
//   SeccompJvm: seccomp=M sleeps=N parks=N spins=N
// (M: the Seccomp: field of /proc/self/status, 2 under a filter).
// A fourth thread, sj-gc, calls System.gc() every 100 ms: the VM Thread and
// GC Thread#0 run between rounds, so the agent must read their stacks again
// (an idle thread's last stack is used again without a read)
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

public class SeccompJvm {
    static volatile boolean done;
    static final AtomicLong sleeps = new AtomicLong(), parks = new AtomicLong();
    static volatile long spins;

    static void sleeper() {
        while (!done) {
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                return;
            }
            sleeps.incrementAndGet();
        }
    }

    static void parker() {
        while (!done) {
            LockSupport.parkNanos(20_000_000L);
            parks.incrementAndGet();
        }
    }

    static long gcs;

    static void collector() {
        while (!done) {
            System.gc();
            gcs++;
            try {
                Thread.sleep(100);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    static void spinner() {
        long x = 0;
        while (!done)
            x++;
        spins = x;
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        Thread[] t = {new Thread(SeccompJvm::sleeper, "sj-sleep"),
                      new Thread(SeccompJvm::parker, "sj-park"),
                      new Thread(SeccompJvm::spinner, "sj-busy"),
                      new Thread(SeccompJvm::collector, "sj-gc")};
        for (Thread x : t)
            x.start();
        Thread.sleep((long) (seconds * 1000));
        done = true;
        for (Thread x : t)
            x.join();
        String mode = "-1";
        for (String l : Files.readAllLines(Paths.get("/proc/self/status")))
            if (l.startsWith("Seccomp:"))
                mode = l.substring(8).trim();
        System.out.println("SeccompJvm: seccomp=" + mode + " sleeps=" + sleeps.get() + " parks=" + parks.get()
                           + " spins=" + spins + " gcs=" + gcs);
    }
}
