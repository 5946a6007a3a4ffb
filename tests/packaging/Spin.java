// Spin MS [STATUS]: the JVM host of the packaging tests: busy in spin() for
// MS milliseconds, prints "spun", exits with STATUS (default 0).
// -Duntil=FILE: ends as soon as FILE exists (MS is then the longest run),
// and prints "tick" every 200 ms, which shows the JVM running on.
import java.io.File;

public class Spin {
    static final File UNTIL = System.getProperty("until") == null ? null
            : new File(System.getProperty("until"));

    static long spin(long ms) throws InterruptedException {
        long end = System.currentTimeMillis() + ms, x = 0, tick = 0;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 100000; i++)
                x += i * 31L;
            Thread.sleep(1);
            if (UNTIL != null && System.currentTimeMillis() >= tick) {
                if (UNTIL.exists())
                    break;
                System.out.println("tick");
                tick = System.currentTimeMillis() + 200;
            }
        }
        return x;
    }

    public static void main(String[] a) throws Exception {
        spin(Long.parseLong(a[0]));
        System.out.println("spun");
        System.exit(a.length > 1 ? Integer.parseInt(a[1]) : 0);
    }
}
