/* qb_drive.c: runs the agent core with a synthetic source (rounds built
 * with ss_round_builder, as a sampler would) and the exporters chosen by
 * the environment, for a given number of seconds, then stops it like a
 * process exit would. Used by the qubership integration tests where the
 * stacks must be known exactly, independent of the native sampler.
 *
 *   qb_drive SECONDS [EXTRA_THREADS]
 *
 * Threads: 1 "main" idle in nanosleep (no CPU: an idle thread), 2
 * "busy-worker" in compute_primes (leaf alternates is_prime), 3 "changer"
 * whose root method changes every 3 rounds, and EXTRA_THREADS more busy
 * ones. Prints "max_mem=<bytes>" (peak ss_mem_used) at the end. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/lifecycle.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_t thread;
static _Atomic bool stop_flag;
static double seconds;
static int extra;
static _Atomic size_t max_mem;

static const ss_funcinfo *fi(const char *name, const char *file) {
    return ss_funcinfo_intern("global", name, file, NULL, SS_FRAME_NATIVE);
}

static void frames(ss_round_builder *b, const char *const *names, int n) {
    for (int i = n - 1; i >= 0; i--) { /* leaf first */
        ss_frame f = {.fn = fi(names[i], strstr(names[i], "sleep") || strstr(names[i], "start_thread")
                                              ? "libc.so.6" : "demo.c"),
                      .addr = 0x1000u + (uint64_t)i, .line = 10 + i};
        ss_round_builder_add_frame(b, &f);
    }
}

static ss_thread_sample *thread_sample(ss_round_builder *b, const char *name, int64_t number,
                                       uint64_t cpu_ns, uint64_t cpu_delta) {
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    t->number = number;
    t->nid = (int32_t)(1000 + number);
    t->state = cpu_delta ? SS_STATE_RUNNABLE : SS_STATE_TIMED_WAITING;
    t->status = cpu_delta ? "runnable" : "sleeping";
    t->cpu_ns = cpu_ns;
    t->cpu_delta_ns = cpu_delta;
    t->on_cpu = cpu_delta > 0;
    return t;
}

static void *source_main(void *arg) {
    const ss_config *cfg = arg;
    ss_round_builder *b = ss_round_builder_create();
    uint64_t interval_ns = (uint64_t)cfg->interval_ms * 1000000u;
    uint64_t end = ss_mono_ns() + (uint64_t)(seconds * 1e9);
    uint64_t busy_cpu = 0, n = 0;
    uint64_t next = ss_mono_ns();
    while (!atomic_load(&stop_flag) && ss_mono_ns() < end) {
        ss_round_builder_begin(b, ss_wall_ns(), cfg->interval_ms, SS_RUNTIME_NATIVE);
        static const char *const idle[] = {"main", "run_loop", "nanosleep"};
        thread_sample(b, "main", 1, 5000000, 0);
        frames(b, idle, 3);
        uint64_t d = interval_ns * 9 / 10;
        busy_cpu += d;
        static const char *const busy1[] = {"start_thread", "worker", "compute_primes", "is_prime"};
        static const char *const busy2[] = {"start_thread", "worker", "compute_primes"};
        ss_thread_sample *t = thread_sample(b, "busy-worker", 2, busy_cpu, d);
        t->alloc_bytes = n * 1048576;
        t->io_read_bytes = n * 4096;
        t->io_write_bytes = n * 512;
        t->wait_ns = n * 1000000;
        if (n % 2)
            frames(b, busy1, 4);
        else
            frames(b, busy2, 3);
        static const char *const ch1[] = {"task_alpha", "step"};
        static const char *const ch2[] = {"task_beta", "step"};
        thread_sample(b, "changer", 3, n * 1000000, 1000000);
        if ((n / 3) % 2)
            frames(b, ch2, 2);
        else
            frames(b, ch1, 2);
        for (int k = 0; k < extra; k++) {
            char name[32];
            snprintf(name, sizeof name, "extra-%d", k);
            thread_sample(b, name, 10 + k, busy_cpu, d);
            frames(b, busy1, 4);
        }
        ss_round *r = ss_round_builder_finish(b, 0, 0);
        if (r)
            ss_exporters_publish(r);
        size_t used = ss_mem_used();
        if (used > atomic_load(&max_mem))
            atomic_store(&max_mem, used);
        n++;
        /* absolute deadlines, as a sampler keeps them: a slow round on a
         * loaded machine does not push every later one back (a window
         * would then hold one sample less than it stands for) */
        next += interval_ns;
        uint64_t now = ss_mono_ns();
        if (next > now)
            ss_sleep_ns(next - now);
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
    extra = argc > 2 ? atoi(argv[2]) : 0;
    if (ss_agent_start(&synth, NULL) != 0)
        return 1;
    ss_sleep_ns((uint64_t)(seconds * 1e9) + 100000000u);
    ss_agent_stop();
    printf("max_mem=%zu\n", atomic_load(&max_mem));
    return 0;
}
