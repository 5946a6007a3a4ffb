/* fork_anatomy.c: what a process's fork()+_exit+wait costs per thing it
 * holds, without any agent: the kernel's price list that bounds what an
 * in-process agent can cost a forking host.
 *
 *   fork_anatomy [forks=3000] [repeats=5]
 *
 * Each configuration runs in a fresh process (so nothing of one is in
 * another's address space) and times `forks` fork()+_exit(0)+waitpid;
 * configurations are interleaved and repeated, medians printed:
 *
 *   bare                  the process as it starts
 *   N private mappings    N anonymous mappings of one written page each,
 *                         each followed by a guard page (PROT_NONE) so that
 *                         none merges with the next: 2N mappings in all
 *   N empty mappings      the same, never written (no page, no anon_vma)
 *   one of N pages        one anonymous mapping of N written pages
 *   libraries             libdw, libelf, libunwind and what they need
 *                         (what the agent's core maps), dlopen'd
 *   thread                one idle thread (glibc's stack)
 *
 * Printed: each one's time and its extra over bare, per mapping or per
 * page (docs/safety/guest.md has the figures and what they mean for the
 * agent). Prints a table; never a test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_MAPS 100
#define N_PAGES 1000

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *idle(void *arg) {
    for (;;)
        pause();
    return arg;
}

/* n mappings of `pages` pages each (written when `write`), each followed
 * by a guard page so that none merges with its neighbour. */
static int map_some(int n, int pages, int write) {
    long pg = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n; i++) {
        char *p = mmap(NULL, (size_t)(pages + 1) * (size_t)pg, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || mprotect(p + (size_t)pages * (size_t)pg, (size_t)pg, PROT_NONE))
            return -1;
        for (int k = 0; write && k < pages; k++)
            p[(size_t)k * (size_t)pg] = 1;
    }
    return 0;
}

/* In a fresh process: set up configuration `which`, then time the forks;
 * prints ns per fork on stdout. */
static int run_one(const char *which, int forks) {
    int rc = 0;
    if (!strcmp(which, "maps"))
        rc = map_some(N_MAPS, 1, 1);
    else if (!strcmp(which, "empty"))
        rc = map_some(N_MAPS, 1, 0);
    else if (!strcmp(which, "pages"))
        rc = map_some(1, N_PAGES, 1);
    else if (!strcmp(which, "libs")) {
        const char *libs[] = {"libdw.so.1", "libelf.so.1", "libunwind.so.8"};
        for (int i = 0; i < 3 && rc == 0; i++)
            rc = dlopen(libs[i], RTLD_NOW) ? 0 : -1;
    } else if (!strcmp(which, "thread")) {
        pthread_t t;
        rc = pthread_create(&t, NULL, idle, NULL);
    }
    if (rc != 0)
        return 1;
    uint64_t t0 = now_ns();
    for (int i = 0; i < forks; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        int st;
        if (p < 0 || waitpid(p, &st, 0) != p || st != 0)
            return 1;
    }
    printf("%llu\n", (unsigned long long)((now_ns() - t0) / (uint64_t)forks));
    return 0;
}

static uint64_t measure(const char *self, const char *which, int forks) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --one %s %d", self, which, forks);
    FILE *f = popen(cmd, "r");
    unsigned long long ns = 0;
    if (!f || fscanf(f, "%llu", &ns) != 1)
        ns = 0;
    if (f)
        pclose(f);
    return ns;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--one"))
        return run_one(argv[2], atoi(argv[3]));
    int forks = argc > 1 ? atoi(argv[1]) : 3000, repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (forks < 1 || repeats < 1 || repeats > 64)
        return 2;
    static const char *const which[] = {"bare", "maps", "empty", "pages", "libs", "thread"};
    enum { N = sizeof which / sizeof which[0] };
    uint64_t t[N][64], med[N];
    for (int r = 0; r < repeats; r++)
        for (int i = 0; i < N; i++)
            t[i][r] = measure(argv[0], which[i], forks);
    for (int i = 0; i < N; i++) {
        qsort(t[i], (size_t)repeats, sizeof t[i][0], cmp);
        med[i] = t[i][repeats / 2];
        if (!med[i]) {
            fprintf(stderr, "%s: failed\n", which[i]);
            return 1;
        }
    }
    double bare = (double)med[0];
    printf("fork()+_exit+wait, %d forks, median of %d runs\n", forks, repeats);
    printf("%-38s %10s %10s %8s %14s\n", "process holds", "us/fork", "extra us", "ratio", "extra per unit");
    printf("%-38s %10.1f %10s %8.2f\n", "nothing more (bare)", bare / 1e3, "", 1.0);
    const struct {
        int i;
        const char *what;
        double units;
        const char *unit;
    } rows[] = {
        {1, "100 x (1 written page + guard)", N_MAPS, "ns per 2 maps"},
        {2, "100 x (1 page never written + guard)", N_MAPS, "ns per 2 maps"},
        {3, "1 mapping of 1000 written pages", N_PAGES, "ns/page"},
        {4, "libdw, libelf, libunwind (+deps)", 1, "ns in all"},
        {5, "1 idle thread (glibc's stack)", 1, "ns in all"},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        double v = (double)med[rows[k].i], extra = v - bare;
        printf("%-38s %10.1f %10.1f %8.2f %9.0f %s\n", rows[k].what, v / 1e3, extra / 1e3, v / bare,
               extra / rows[k].units, rows[k].unit);
    }
    return 0;
}
