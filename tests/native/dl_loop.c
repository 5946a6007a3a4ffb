/* dl_loop.c: dlopen / dlclose a small library in a loop for argv[2]
 * seconds, with a thread running inside the library's function while it
 * is loaded. argv[1] is the library's path. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef void (*work_fn)(int ms);

static void *run(void *fn) {
    ((work_fn)fn)(30);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    double end = now() + (argc > 2 ? atof(argv[2]) : 2.0);
    int loops = 0;
    while (now() < end) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dl_loop: %s\n", dlerror());
            return 1;
        }
        work_fn fn = (work_fn)dlsym(h, "dltest_work");
        pthread_t t;
        if (!fn || pthread_create(&t, NULL, run, (void *)fn) != 0)
            return 1;
        pthread_join(t, NULL);
        dlclose(h);
        loops++;
    }
    printf("dl_loop: %d loops\n", loops);
    return 0;
}
