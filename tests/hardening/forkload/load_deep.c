/* load_deep.c: four threads, each 10,000 frames deep in a recursion,
 * busy at the leaf (so every round signals them) for LOAD_SECONDS
 * (default 3).
 *
 * It also measures how much stack the sampling costs a thread: at the
 * leaf it paints PAINT bytes below its stack pointer, runs, and then
 * finds the lowest byte that changed. Without the agent that is the
 * leaf's own use (clock_gettime, nanosleep); with it, the kernel's signal
 * frame and our handler on top. Prints "load: stack_use_bytes" (the
 * largest of the four threads). */
#include "tests/hardening/forkload/load_common.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/prctl.h>

#define DEPTH 10000
#define PAINT (256 * 1024)
#define MARK 0xA5

static double secs;

__attribute__((noinline)) static size_t paint_and_run(void) {
    volatile char here = 0;
    uintptr_t sp = (uintptr_t)&here;
    unsigned char *top = (unsigned char *)(sp - 1024); /* below our callees' frames */
    unsigned char *bottom = (unsigned char *)(sp - PAINT);
    memset(bottom, MARK, (size_t)(top - bottom));
    double end = now() + secs;
    while (now() < end)
        spin_for(0.005);
    unsigned char *p = bottom;
    while (p < top && *p == MARK)
        p++;
    return (size_t)(sp - (uintptr_t)p);
}

__attribute__((noinline)) static size_t recurse(int n) {
    volatile int pad[4] = {n, n, n, n};
    if (n == 0)
        return paint_and_run();
    size_t r = recurse(n - 1);
    return r + (size_t)(pad[0] - n); /* not a tail call */
}

static void *deep(void *arg) {
    prctl(PR_SET_NAME, "deep");
    *(size_t *)arg = recurse(DEPTH);
    return NULL;
}

int main(int argc, char **argv) {
    secs = run_seconds(argc, argv, 3);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 16u << 20);
    pthread_t th[4];
    size_t used[4] = {0};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], &attr, deep, &used[i]);
    size_t most = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (used[i] > most)
            most = used[i];
    }
    report("stack_use_bytes", (long long)most);
    report_memory();
    return 0;
}
