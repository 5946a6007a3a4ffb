/*
 * Oom.java: runs into an OutOfMemoryError (start it with a small -Xmx),
 * catches it, lets the heap go and lives on for a while, so that the
 * agent can find, zip and upload the heap dump the JVM wrote.
 *
 *   java -Xmx32m -agentpath:libstackshot.so -cp out Oom [live ms] [calm]
 *
 * "calm": no OutOfMemoryError (a JVM that starts where an earlier one left
 * a dump behind).
 */
import java.util.ArrayList;

public class Oom {
    public static void main(String[] args) throws Exception {
        long live = args.length > 0 ? Long.parseLong(args[0]) : 3000;
        if (args.length < 2 || !args[1].equals("calm")) {
            ArrayList<long[]> hog = new ArrayList<>();
            try {
                while (true)
                    hog.add(new long[64 * 1024]);
            } catch (OutOfMemoryError e) {
                hog = null;
                System.out.println("OutOfMemoryError caught");
            }
        }
        Thread.sleep(live);
    }
}
