/* busy.c: a single-threaded program that says its pid and computes for
 * the given milliseconds (the program at the end of a wrapper chain). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long work(unsigned long x) {
    for (int i = 0; i < 200000; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return x;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 1000;
    printf("ss_hosts_busy: pid %d\n", (int)getpid());
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 1;
    do {
        x = work(x);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    return 0;
}
