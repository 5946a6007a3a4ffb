/* bench_self_mem.c: what one read of the process's own memory costs, by
 * size, the way the walker reads (ss_uw_read_memory: fstat identity check
 * + pread on /proc/self/mem) against process_vm_readv (what it used
 * before) and a bare pread (no identity check). A walk makes one read of
 * the stack (up to STACKSHOT_STACK_COPY, 64 KiB by default, usually a few
 * KiB: SP to the top of the mapping) and a few small ones (a CFI table
 * entry, an FDE, a thread descriptor, a page of stack beyond the copy).
 *
 * usage: bench_self_mem [iterations]   (default 20000). Prints ns of CPU per
 * read, the median of 5 runs; asserts nothing. */
#define _GNU_SOURCE
#include "samplers/self_mem.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static char src[65536], dst[65536];

static uint64_t now_ns(void) {
    struct timespec ts;
    /* the thread's CPU time (user + kernel): a loaded machine delays the
     * bench, it does not make a read cost more CPU */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum { VM, PREAD, AGENT };

static double per_read(int how, int fd, size_t n, int iters) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < iters; i++) {
        if (how == VM) {
            struct iovec l = {dst, n}, r = {src, n};
            process_vm_readv(getpid(), &l, 1, &r, 1, 0);
        } else if (how == PREAD) {
            pread(fd, dst, n, (off_t)(uintptr_t)src);
        } else {
            ss_uw_read_memory(dst, (uint64_t)(uintptr_t)src, n);
        }
    }
    return (double)(now_ns() - t0) / iters;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
    memset(src, 1, sizeof src);
    static const size_t sizes[] = {8, 64, 512, 4096, 16384, 65536};
    static const char *const names[] = {"process_vm_readv", "pread /proc/self/mem",
                                        "ss_uw_read_memory"};
    printf("%-22s", "CPU ns per read");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        printf("%9zu B", sizes[s]);
    printf("\n");
    for (int how = VM; how <= AGENT; how++) {
        printf("%-22s", names[how]);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int it = iters / (int)(1 + sizes[s] / 4096);
            double runs[5];
            for (int r = 0; r < 5; r++)
                runs[r] = per_read(how, fd, sizes[s], it);
            qsort(runs, 5, sizeof runs[0], cmp);
            printf("%11.0f", runs[2]);
        }
        printf("\n");
    }
    close(fd);
    return 0;
}
