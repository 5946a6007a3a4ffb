/* empty.c: a preloaded library that does nothing, the floor a preloaded
 * agent is measured against (the dynamic linker's own cost of one more
 * library). */
int ss_bench_empty_library;
