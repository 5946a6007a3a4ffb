/* zk_drive.c: the agent core with a synthetic source whose stacks are
 * known exactly, and the exporters the environment chooses; runs SECONDS,
 * then stops as a process exit does. For the zorka end-to-end tests, and
 * small enough to run under ASan and TSan.
 *
 *   zk_drive SECONDS [steady]
 *
 * Threads of every round (root first):
 *   "idle"     main > run_loop > nanosleep, never changes
 *   "worker"   start_thread > worker > compute_primes, every other round
 *              with is_prime on top
 *   "changer"  task_alpha > step for 3 rounds, then task_beta > step
 *              (the root changes: a new trace every 3 rounds)
 *   "spanned"  Java frames java.lang.Thread.run()V > com.example.Api.handle
 *              (Ljava/lang/String;)I, with a span context that changes
 *              every 4 rounds (trace 0x11.., span 0x22.. + n / 4)
 *   "deep"     a stack cut at the root side (truncated) of 3 frames
 * With "steady" only "idle" and "worker" (whose traces end with the
 * periods only, so nothing is sent between them). Prints "rounds=<n>" at the end. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/lifecycle.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_t thread;
static _Atomic bool stop_flag;
static _Atomic uint64_t rounds;
static double seconds;
static bool steady;

static void native_frames(ss_round_builder *b, const char *const *root_first, int n) {
    static const ss_mapping *exe;
    if (!exe)
        exe = ss_mapping_intern("/opt/demo/bin/zk-demo", "", 0x400000, 0x500000, 0);
    for (int i = n - 1; i >= 0; i--) { /* leaf first */
        const char *name = root_first[i];
        bool libc = !strcmp(name, "nanosleep") || !strcmp(name, "start_thread");
        ss_frame f = {.fn = ss_funcinfo_intern("global", name, libc ? "libc.so.6" : "zk-demo.c",
                                               NULL, SS_FRAME_NATIVE),
                      .map = libc ? NULL : exe,
                      .addr = 0x401000u + (uint64_t)i,
                      .line = libc ? 0 : 10 + i};
        ss_round_builder_add_frame(b, &f);
    }
}

static ss_thread_sample *sample(ss_round_builder *b, const char *name, int64_t number,
                                bool busy) {
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    t->number = number;
    t->nid = (int32_t)(2000 + number);
    t->state = busy ? SS_STATE_RUNNABLE : SS_STATE_TIMED_WAITING;
    t->state_detail = busy ? NULL : "sleeping";
    t->status = busy ? "runnable" : "sleeping";
    t->on_cpu = busy;
    return t;
}

static void round_of(ss_round_builder *b, uint64_t n, uint32_t interval_ms) {
    ss_round_builder_begin(b, ss_wall_ns(), interval_ms, SS_RUNTIME_NATIVE);
    static const char *const idle[] = {"main", "run_loop", "nanosleep"};
    sample(b, "idle", 1, false);
    native_frames(b, idle, 3);

    static const char *const busy[] = {"start_thread", "worker", "compute_primes", "is_prime"};
    sample(b, "worker", 2, true);
    native_frames(b, busy, n % 2 ? 4 : 3);

    if (steady)
        return;
    static const char *const alpha[] = {"task_alpha", "step"};
    static const char *const beta[] = {"task_beta", "step"};
    sample(b, "changer", 3, true);
    native_frames(b, (n / 3) % 2 ? beta : alpha, 2);

    ss_thread_sample *t = sample(b, "spanned", 4, false);
    t->has_span = true;
    memset(t->trace_id, 0x11, 16);
    memset(t->span_id, 0x22, 8);
    t->span_id[7] = (uint8_t)(0x22 + n / 4);
    ss_frame handle = {.fn = ss_funcinfo_intern_sig("com.example.Api", "handle", "Api.java", NULL,
                                                    SS_FRAME_JAVA, "(Ljava/lang/String;)I"),
                       .line = 42};
    ss_frame run = {.fn = ss_funcinfo_intern_sig("java.lang.Thread", "run", "Thread.java",
                                                 "java.base@17", SS_FRAME_JAVA, "()V"),
                    .line = 840};
    ss_round_builder_add_frame(b, &handle);
    ss_round_builder_add_frame(b, &run);

    t = sample(b, "deep", 5, true);
    static const char *const deep[] = {"level_997", "level_998", "level_999"};
    native_frames(b, deep, 3);
    t->truncated = true;
}

static void *source_main(void *arg) {
    const ss_config *cfg = arg;
    ss_round_builder *b = ss_round_builder_create();
    uint64_t interval_ns = (uint64_t)cfg->interval_ms * 1000000u;
    uint64_t end = ss_mono_ns() + (uint64_t)(seconds * 1e9);
    for (uint64_t n = 0; !atomic_load(&stop_flag) && ss_mono_ns() < end; n++) {
        round_of(b, n, cfg->interval_ms);
        ss_round *r = ss_round_builder_finish(b, 0, 0);
        if (r)
            ss_exporters_publish(r);
        atomic_fetch_add(&rounds, 1);
        ss_sleep_ns(interval_ns);
    }
    ss_round_builder_destroy(b);
    return NULL;
}

static int synth_start(const ss_config *cfg) {
    return ss_thread_start(&thread, "synth", source_main, (void *)cfg);
}

static void synth_stop(uint64_t deadline_ns) {
    atomic_store(&stop_flag, true);
    ss_thread_join(thread, deadline_ns);
}

static const ss_source_ops synth = {.name = "synthetic", .start = synth_start, .stop = synth_stop};

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 3;
    steady = argc > 2 && !strcmp(argv[2], "steady");
    if (ss_agent_start(&synth, NULL) != 0)
        return 1;
    ss_sleep_ns((uint64_t)(seconds * 1e9) + 100000000u);
    ss_agent_stop();
    printf("rounds=%llu\n", (unsigned long long)atomic_load(&rounds));
    return 0;
}
