/* spin MS [STATUS]: a native host for the packaging tests: burns CPU in a
 * named function for MS milliseconds (so the agent has stacks to take),
 * prints "spun", and exits with STATUS (default 0). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static unsigned long spin_for(double ms) {
    volatile unsigned long x = 0;
    double end = now_ms() + ms;
    while (now_ms() < end)
        for (int i = 0; i < 10000; i++)
            x += (unsigned long)i * 2654435761u;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 1000;
    int status = argc > 2 ? atoi(argv[2]) : 0;
    spin_for(ms);
    puts("spun");
    return status;
}
