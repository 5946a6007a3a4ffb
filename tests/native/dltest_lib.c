/* dltest_lib.c: the library dl_loop.c loads and unloads. */
#include <time.h>

__attribute__((visibility("default"))) void dltest_work(int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec / 1e9 + ms / 1000.0;
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 10000; i++)
            x += (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((double)ts.tv_sec + ts.tv_nsec / 1e9 >= end)
            break;
    }
}
