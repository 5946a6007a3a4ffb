// IsoHost.java: a JVM host with a JNI library of its own (libiso_jni.so:
// fakes.c, iso_jni.c) that defines the names of the agent's dependencies.
//
//   java -agentpath:libstackshot.so IsoHost <libiso_jni.so> <ms>
//
// Loads the library (System.load), checks that each of its functions
// answers as its own before and after the agent sampled it for <ms>
// (two "iso-busy" threads in isoBusyOuter -> isoBusyInner), and prints
//   self before 14/14 mask 3fff
//   self after 14/14 mask 3fff
//   foreign calls 0
// (mask: bit f set when fake f of fakes.h answered as the host's own).
// The checker (iso_jvm.py) reads these lines and the agent's text output.
public class IsoHost {
    static native int selfCheck();
    static native int fakeCount();
    static native int foreignCalls();

    static volatile long sink;

    static long isoBusyInner(long x) {
        for (int i = 0; i < 100000; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static void isoBusyOuter(long end) {
        long x = 1;
        while (System.nanoTime() < end) x = isoBusyInner(x);
        sink = x;
    }

    static String self(int n) {
        int mask = selfCheck();
        return Integer.bitCount(mask) + "/" + n + " mask " + Integer.toHexString(mask);
    }

    public static void main(String[] args) throws Exception {
        System.load(args[0]);
        long ms = Long.parseLong(args[1]);
        int n = fakeCount();
        System.out.println("self before " + self(n));
        long end = System.nanoTime() + ms * 1_000_000L;
        Thread[] ts = new Thread[2];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = new Thread(() -> isoBusyOuter(end), "iso-busy");
            ts[i].start();
        }
        for (Thread t : ts) t.join();
        System.out.println("self after " + self(n));
        System.out.println("foreign calls " + foreignCalls());
    }
}
