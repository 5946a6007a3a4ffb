/* stripx.c: a small library that the profiles tests strip of its symbol
 * table (libstripx.so). stripx_run is exported (named by .dynsym even when
 * stripped); the two spin functions are hidden, so a stripped copy has no
 * name for them: their frames must show as libstripx.so+0x<offset>, two
 * distinct offsets, not one merged "unknown". */
#include <stdint.h>

#define HIDDEN __attribute__((noinline, noclone, visibility("hidden")))

HIDDEN uint64_t stripx_spin_a(uint64_t n) {
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ull + i;
    return x;
}

HIDDEN uint64_t stripx_spin_b(uint64_t n) {
    volatile uint64_t x = 7;
    for (uint64_t i = 0; i < n; i++)
        x = (x ^ (x >> 7)) + i * 3;
    return x;
}

uint64_t stripx_run(uint64_t n) {
    uint64_t a = stripx_spin_a(n);
    uint64_t b = stripx_spin_b(n);
    return a ^ b ^ n; /* after both calls: no tail call */
}
