/* synth.c: synthetic rounds (synth.h). */
#include "agent/round.h"
#include "tests/profiles/synth.h"

#include <stdio.h>
#include <string.h>

static void frame(ss_round_builder *b, const char *ns, const char *name, const char *file,
                  int line, bool java, bool inlined, uint64_t addr, const ss_mapping *m) {
    ss_frame f;
    memset(&f, 0, sizeof f);
    f.fn = ss_funcinfo_intern(ns, name, file, NULL, java ? SS_FRAME_JAVA : SS_FRAME_NATIVE);
    f.map = m;
    f.addr = addr;
    f.line = line;
    f.inlined = inlined;
    ss_round_builder_add_frame(b, &f);
}

ss_round *ss_synth_known(uint32_t i) {
    ss_round_builder *b = ss_round_builder_create();
    if (!b)
        return NULL;
    const ss_mapping *m = ss_mapping_intern("/opt/demo/demo", "abcdef0123456789", 0x400000,
                                            0x500000, 0);
    const ss_mapping *libc = ss_mapping_intern("/usr/lib/x86_64-linux-gnu/libc.so.6", "",
                                               0x7f0000000000, 0x7f0000200000, 0);
    ss_round_builder_begin(b, SS_SYNTH_T0 + (uint64_t)i * 10000000ull, 10, SS_RUNTIME_NATIVE);

    ss_thread_sample *t = ss_round_builder_add_thread(b, "main");
    t->nid = 100;
    t->number = 1;
    t->state = SS_STATE_RUNNABLE;
    t->on_cpu = true;
    t->cpu_delta_ns = 9000000;
    if (i % 3 == 2)
        frame(b, "global", "is_prime", "demo.c", 7, false, false, 0x401010, m);
    else
        frame(b, "global", "compute_primes", "demo.c", 12, false, false, 0x401100, m);
    frame(b, "global", "worker", "demo.c", 20, false, false, 0x401200, m);
    frame(b, "global", "main", "demo.c", 30, false, false, 0x401300, m);

    t = ss_round_builder_add_thread(b, "idle");
    t->nid = 101;
    t->number = 2;
    t->state = SS_STATE_WAITING;
    frame(b, "global", "inner", "demo.c", 5, false, true, 0x401400, m);
    frame(b, "global", "outer", "demo.c", 50, false, false, 0x401400, m);
    frame(b, "global", "start", "libc.so.6", 0, false, false, 0x7f0000001234, libc);

    t = ss_round_builder_add_thread(b, "java-worker");
    t->nid = 102;
    t->number = 12;
    t->state = SS_STATE_TIMED_WAITING;
    t->has_span = true;
    for (int k = 0; k < 16; k++)
        t->trace_id[k] = (uint8_t)(k + 1);
    for (int k = 0; k < 8; k++)
        t->span_id[k] = (uint8_t)(0xa1 + k);
    frame(b, "java.lang.Thread", "sleep", "Native Method", 0, true, false, 0, NULL);
    frame(b, "com.example.Demo", "run", "Demo.java", 12, true, false, 4, NULL);
    frame(b, "java.lang.Thread", "run", "Thread.java", 840, true, false, 11, NULL);

    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

ss_round *ss_synth_bench(uint32_t round, uint32_t threads, uint32_t depth) {
    ss_round_builder *b = ss_round_builder_create();
    if (!b)
        return NULL;
    static const ss_mapping *maps[4];
    if (!maps[0]) {
        maps[0] = ss_mapping_intern("/usr/lib/jvm/lib/server/libjvm.so", "0123456789abcdef0123",
                                    0x7f1000000000, 0x7f1001000000, 0);
        maps[1] = ss_mapping_intern("/usr/lib/x86_64-linux-gnu/libc.so.6", "fedcba9876543210fedc",
                                    0x7f2000000000, 0x7f2000200000, 0);
        maps[2] = ss_mapping_intern("/opt/app/bin/server", "00112233445566778899",
                                    0x400000, 0x900000, 0);
        maps[3] = maps[2];
    }
    ss_round_builder_begin(b, SS_SYNTH_T0 + (uint64_t)round * 1000000000ull, 1000,
                           SS_RUNTIME_JVM);
    char name[64], cls[96], meth[64];
    for (uint32_t k = 0; k < threads; k++) {
        snprintf(name, sizeof name, "worker-%u", k);
        ss_thread_sample *t = ss_round_builder_add_thread(b, name);
        t->nid = (int32_t)(1000 + k);
        t->number = k + 1;
        /* One thread in four is busy; the others mostly wait. */
        bool busy = k % 4 == 0;
        t->state = busy ? SS_STATE_RUNNABLE : SS_STATE_WAITING;
        t->on_cpu = busy;
        t->cpu_delta_ns = busy ? 800000000ull : 0;
        /* The leaf changes in about one round in four. */
        uint32_t variant = busy ? (round * 7 + k) % 5 : ((round + k) / 4) % 3;
        for (uint32_t d = 0; d < depth; d++) {
            uint32_t fn = d == 0 ? 1000 + variant : (k % 8) * 100 + d;
            bool java = d >= 3;
            if (java) {
                snprintf(cls, sizeof cls, "com.example.service.layer%u.Component%u", d % 10,
                         fn % 37);
                snprintf(meth, sizeof meth, "handle%u", fn);
                frame(b, cls, meth, "Component.java", (int)(10 + fn % 300), true, false, fn % 64,
                      NULL);
            } else {
                snprintf(meth, sizeof meth, "native_fn_%u", fn);
                frame(b, "global", meth, "native.c", 0, false, false,
                      0x400000 + (uint64_t)fn * 64 + d, maps[d % 3]);
            }
        }
    }
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}
