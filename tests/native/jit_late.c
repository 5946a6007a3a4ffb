/* jit_late.c: code written into a page mapped after the agent started.
 *
 * The sampler checks return addresses against its table of mappings; a
 * JIT writes code into pages it maps at any time (V8 and HotSpot grow
 * their code space as they go). This host waits <ms before> (the agent
 * takes its first rounds and reads its table), then maps a new page,
 * writes a stub into it that builds a frame-pointer frame and calls
 * spin_here(), and spins there for <ms spin>. Every round of that time
 * must walk through the stub (no CFI: its frame pointer) down to
 * outer_caller() and main().
 *
 * With "flip", the page is mapped writable before the wait (the agent's
 * table sees a data page there) and only made executable after it, as V8
 * flips its code pages between writable and executable.
 *
 * usage: jit_late <ms before> <ms spin> [flip]; prints "jit: spinning"
 * and "jit: done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tests/common/host_clock.h"

static long spin_ms;

/* spin_for's work under a name of its own: the rounds must show it */
__attribute__((noinline)) void spin_here(void) {
    volatile uint64_t x = 0;
    double until = now() + (double)spin_ms / 1000.0;
    while (now() < until)
        for (int i = 0; i < 1000; i++)
            x += (uint64_t)i;
}

static uint8_t *map_page(void) {
    uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return NULL;
    page[0] = 0xcc; /* touched: a data page like any other */
    return page;
}

/* push rbp; mov rbp,rsp; movabs rax,<spin_here>; call rax; pop rbp; ret */
static void (*write_stub(uint8_t *page))(void) {
    if (!page)
        return NULL;
    uint8_t code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0,
                      0xff, 0xd0, 0x5d, 0xc3};
    uint64_t target = (uint64_t)(uintptr_t)spin_here;
    memcpy(code + 6, &target, 8);
    memcpy(page, code, sizeof code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        return NULL;
    return (void (*)(void))(uintptr_t)page;
}

__attribute__((noinline)) static void outer_caller(void (*stub)(void)) {
    stub();
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    long before = atol(argv[1]);
    spin_ms = atol(argv[2]);
    bool flip = argc > 3 && strcmp(argv[3], "flip") == 0;
    uint8_t *page = flip ? map_page() : NULL;
    nap((double)before / 1000.0);
    void (*stub)(void) = write_stub(flip ? page : map_page());
    if (!stub)
        return 1;
    printf("jit: spinning\n");
    fflush(stdout);
    outer_caller(stub);
    printf("jit: done\n");
    return 0;
}
