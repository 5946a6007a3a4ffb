// SeccompJvm.java: the JVM host of check_seccomp_jvm.py, started under a
// seccomp filter (seccomp_host --exec). Two sleepers (Thread.sleep,
// LockSupport.parkNanos, 20 ms each) and one busy thread for SECONDS
// (argument, default 3), then one line and exit 0:
//   SeccompJvm: seccomp=M sleeps=N parks=N spins=N
// (M: the Seccomp: field of /proc/self/status, 2 under a filter), and
//   SeccompJvm: gcwakes=N
// the context switches of the idle "GC Thread#0" in the second half of
// the run: near 0 when the agent reads it asleep, one a round when it
// signals it instead (its reads of the thread's stack refused)
import java.io.File;
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

    static void spinner() {
        long x = 0;
        while (!done)
            x++;
        spins = x;
    }

    // voluntary + involuntary context switches of the thread named so, -1 if none
    static long switches(String comm) throws Exception {
        File[] tasks = new File("/proc/self/task").listFiles();
        for (File t : tasks == null ? new File[0] : tasks) {
            try {
                if (!Files.readString(t.toPath().resolve("comm")).trim().equals(comm))
                    continue;
                long n = 0;
                for (String l : Files.readAllLines(t.toPath().resolve("status")))
                    if (l.contains("ctxt_switches:"))
                        n += Long.parseLong(l.substring(l.indexOf(':') + 1).trim());
                return n;
            } catch (java.io.IOException e) {
                // the task ended meanwhile
            }
        }
        return -1;
    }

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        Thread[] t = {new Thread(SeccompJvm::sleeper, "sj-sleep"),
                      new Thread(SeccompJvm::parker, "sj-park"),
                      new Thread(SeccompJvm::spinner, "sj-busy")};
        for (Thread x : t)
            x.start();
        Thread.sleep((long) (seconds * 500));
        long gc0 = switches("GC Thread#0");
        Thread.sleep((long) (seconds * 500));
        long gc1 = switches("GC Thread#0");
        done = true;
        for (Thread x : t)
            x.join();
        String mode = "-1";
        for (String l : Files.readAllLines(Paths.get("/proc/self/status")))
            if (l.startsWith("Seccomp:"))
                mode = l.substring(8).trim();
        System.out.println("SeccompJvm: seccomp=" + mode + " sleeps=" + sleeps.get() + " parks=" + parks.get()
                           + " spins=" + spins);
        System.out.println("SeccompJvm: gcwakes=" + (gc0 < 0 || gc1 < 0 ? -1 : gc1 - gc0));
    }
}
