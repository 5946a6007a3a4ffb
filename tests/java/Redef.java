/*
 * Redef.java: a method redefined while the agent samples it.
 *
 *   java -javaagent:redef-agent.jar -cp <classes> Redef <path of v2 RedefTarget.class>
 *
 * The main thread calls RedefTarget.nap() in a loop (each call sleeps
 * 50 ms). After 1.5 s RedefTarget is redefined with the class file of
 * redef-v2/RedefTarget.java (other source file, other line numbers) and
 * the loop goes on for 3 s. Redef is also the java.lang.instrument agent
 * (Premain-Class) that hands over the Instrumentation.
 */
import java.lang.instrument.ClassDefinition;
import java.lang.instrument.Instrumentation;
import java.nio.file.Files;
import java.nio.file.Paths;

public class Redef {
    static Instrumentation inst;

    public static void premain(String args, Instrumentation i) {
        inst = i;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void loop(long ms) {
        long end = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() < end)
            RedefTarget.nap();
    }

    public static void main(String[] args) throws Exception {
        loop(1500);
        byte[] v2 = Files.readAllBytes(Paths.get(args[0]));
        inst.redefineClasses(new ClassDefinition(RedefTarget.class, v2));
        System.out.println("redefined");
        System.out.flush();
        loop(3000);
    }
}

/* Version 1: the sleep is on line 51 of Redef.java. */
class RedefTarget {
    static void nap() {
        Redef.sleep(50);
    }
}
