import java.io.FileInputStream;
import java.io.IOException;
import java.util.zip.CRC32;

/* Threads whose leaf is known, for tests/java/jvm_whole.py:
 *   crc      CRC32.update over a 64 MiB buffer, back to back (an intrinsic)
 *   spin     a tight loop in one compiled method (MixedHost.spin)
 *   reader   FileInputStream.read of 8 MiB from /dev/zero (a running read(2)
 *            under a native method)
 *   alloc    allocates and keeps a ring of arrays (GC work for the VM's threads)
 *   sleeper  Thread.sleep (blocked: taken at a safepoint, as jstack shows it)
 *   gc       System.gc() in a loop over 500,000 live objects (the GC
 *            threads busy most of the time)
 * args[1]: the threads to start, comma-separated (default all but gc).
 * Prints "ready" once every thread runs, then lives for args[0] ms. */
public class MixedHost {
    static volatile long sink;

    public static void main(String[] args) throws Exception {
        long ms = args.length > 0 ? Long.parseLong(args[0]) : 5000;
        String which = args.length > 1 ? args[1] : "crc,spin,reader,alloc,sleeper";
        for (String name : which.split(",")) {
            Runnable r = name.equals("crc") ? MixedHost::crcLoop
                         : name.equals("spin") ? MixedHost::spinLoop
                         : name.equals("reader") ? MixedHost::readLoop
                         : name.equals("alloc") ? MixedHost::allocLoop
                         : name.equals("gc") ? MixedHost::gcLoop
                         : MixedHost::sleepLoop;
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            t.start();
        }
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(ms);
    }

    static void crcLoop() {
        byte[] b = new byte[64 << 20];
        CRC32 c = new CRC32();
        while (true) {
            c.reset();
            c.update(b, 0, b.length);
            sink += c.getValue();
        }
    }

    static void spinLoop() {
        long x = 1;
        while (true) {
            x = spin(x);
            sink += x;
        }
    }

    static long spin(long x) {
        for (int i = 0; i < 200_000_000; i++)
            x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static void readLoop() {
        try (FileInputStream in = new FileInputStream("/dev/zero")) {
            byte[] b = new byte[8 << 20];
            while (true)
                sink += in.read(b);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    static void allocLoop() {
        Object[] ring = new Object[20000];
        int i = 0;
        while (true) {
            ring[i] = new byte[512];
            i = (i + 1) % ring.length;
        }
    }

    static Object[] live;

    static void gcLoop() {
        live = new Object[500_000];
        for (int i = 0; i < live.length; i++)
            live[i] = new int[4];
        while (true)
            System.gc();
    }

    static void sleepLoop() {
        try {
            while (true)
                Thread.sleep(10_000);
        } catch (InterruptedException e) {
        }
    }
}
