/*
 * GuardNpe.java: the JVM's own faults, for tests/java/jvm_guard.py.
 *
 *   java GuardNpe <ms>
 *
 * A thread calls a method on a null reference in a loop until <ms> have
 * passed; once the loop is compiled, HotSpot checks for null by letting
 * the access fault (SIGSEGV, an implicit null check) and turns the fault
 * into a NullPointerException in its signal handler. Prints "npe <count>".
 */
public class GuardNpe {
    static Object nothing;
    static volatile long sink;

    static int touch(Object o) { return o.hashCode(); }

    public static void main(String[] args) throws Exception {
        long end = System.currentTimeMillis() + Long.parseLong(args[0]);
        long npe = 0;
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 1000; i++) {
                try {
                    sink += touch(i % 2 == 0 ? nothing : "x");
                } catch (NullPointerException e) {
                    npe++;
                }
            }
        }
        System.out.println("npe " + npe);
    }
}
