/*
 * VThreads.java: many virtual threads, for the agent's virtual-thread cap.
 * JDK 21+ (virtual threads reached by reflection, so this compiles on 17).
 *
 *   java VThreads <n>
 *
 * Phase 1 (1.5 s): n virtual threads sleep in VThreads.nap.
 * Phase 2: they all end (joined).
 * Phase 3 (1.5 s): 50 new ones sleep in VThreads.nap2. Then exit.
 * Prints "phase1" and "phase3" when each starts.
 */
import java.lang.reflect.Method;

public class VThreads {
    static volatile boolean stop1, stop3;

    static void nap() {
        while (!stop1)
            sleep(20);
    }

    static void nap2() {
        while (!stop3)
            sleep(20);
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static Thread[] start(int n, Runnable r) throws Exception {
        Method start = Thread.class.getMethod("startVirtualThread", Runnable.class);
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++)
            ts[i] = (Thread) start.invoke(null, r);
        return ts;
    }

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[0]);
        Thread[] first = start(n, VThreads::nap);
        System.out.println("phase1");
        System.out.flush();
        Thread.sleep(1500);
        stop1 = true;
        for (Thread t : first)
            t.join();
        Thread[] second = start(50, VThreads::nap2);
        Thread.sleep(300); /* a round or two with the old ones gone */
        System.out.println("phase3");
        System.out.flush();
        Thread.sleep(1500);
        stop3 = true;
        for (Thread t : second)
            t.join();
    }
}
