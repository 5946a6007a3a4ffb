/*
 * synth.h: synthetic rounds with known content for the profiles tests and
 * benchmark.
 *
 * ss_synth_known(i) is round i (0-based) of a fixed scenario:
 *   - "main" (nid 100, RUNNABLE, on CPU every round): main -> worker ->
 *     compute_primes in demo.c (native, mapping /opt/demo/demo with build id
 *     "abcdef0123456789"); in every third round (i % 3 == 2) the leaf is
 *     is_prime instead.
 *   - "idle" (nid 101, WAITING, never on CPU): start -> outer -> inner, inner
 *     inlined into outer (one location, two lines).
 *   - "java-worker" (Java #12, nid 102, TIMED_WAITING, off CPU) with a span
 *     (trace 0102..10, span a1..a8): java.lang.Thread.run ->
 *     com.example.Demo.run(Demo.java:12) -> java.lang.Thread.sleep (Native Method).
 * Round i has time 1e18 + i * 10 ms and a 10 ms interval.
 */
#ifndef SS_TEST_PROFILES_SYNTH_H
#define SS_TEST_PROFILES_SYNTH_H

#include "agent/round.h"

ss_round *ss_synth_known(uint32_t i);

/* A benchmark round: `threads` threads of depth `depth`, native and Java
 * frames over a pool of functions; thread k's stack changes in about one
 * round in four (its leaf), as a mostly idle server's would. */
ss_round *ss_synth_bench(uint32_t round, uint32_t threads, uint32_t depth);

#define SS_SYNTH_T0 1000000000000000000ull

#endif
