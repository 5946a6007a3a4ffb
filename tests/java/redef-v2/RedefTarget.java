/*
 * Version 2 of RedefTarget (tests/java/Redef.java): same methods, another
 * source file, and the sleep on line 16 of this file.
 */
class RedefTarget {
    static void nap() {
        int spacer = 0;
        spacer++;
        spacer++;
        spacer++;
        spacer++;
        spacer++;
        spacer++;
        spacer++;
        if (spacer > 0)
            Redef.sleep(50);
    }
}
