// Spin MS [STATUS]: the JVM host of the packaging tests: busy in spin() for
// MS milliseconds, prints "spun", exits with STATUS (default 0).
public class Spin {
    static long spin(long ms) throws InterruptedException {
        long end = System.currentTimeMillis() + ms, x = 0;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 100000; i++)
                x += i * 31L;
            Thread.sleep(1);
        }
        return x;
    }

    public static void main(String[] a) throws Exception {
        spin(Long.parseLong(a[0]));
        System.out.println("spun");
        System.exit(a.length > 1 ? Integer.parseInt(a[1]) : 0);
    }
}
