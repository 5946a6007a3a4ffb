/* inline_helper.c: an always-inline function inside a real one, built
 * with -O2 -g, for the inline-chain test. The capture call inside the
 * inlined body leaves a return address whose DWARF scopes are
 * inner_add (inlined) inside outer_caller. Each line number is recorded
 * on the line it names. */
#include <stdint.h>

int helper_inner_line, helper_outer_line;
uint64_t helper_ra;

__attribute__((noinline)) void helper_capture(void) {
    helper_ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) int inner_add(volatile int *p, int v) {
    helper_inner_line = __LINE__; helper_capture();
    *p += v;
    return *p;
}

__attribute__((noinline)) int outer_caller(volatile int *p) {
    int r;
    helper_outer_line = __LINE__; r = inner_add(p, 3);
    return r * 2 + *p;
}
