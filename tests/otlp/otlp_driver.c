/* otlp_driver.c: the agent core with a synthetic source, for exporter tests.
 *
 *   otlp_driver <rounds> [threads]
 *
 * Starts the agent as a host would (configuration from the environment,
 * the fan-out, the exporters selected by STACKSHOT_EXPORTERS), but the
 * rounds come from a scripted source instead of a sampler: every
 * SPLUNK_PROFILER_CALL_STACK_INTERVAL ms one round of `threads` threads
 * (default 3):
 *   "otlp-spinner"  RUNNABLE, nid 4001, spin_work <- worker_main <- start_thread
 *   "otlp-sleeper"  TIMED_WAITING, nid 4002, nanosleep <- sleep_work <- ...
 *   "otlp-traced"   TIMED_WAITING, nid 4003, inside span
 *                   trace 0102030405060708090a0b0c0d0e0f10 span a1a2a3a4a5a6a7a8
 *   "otlp-worker-N" RUNNABLE, nid 4000 + N + 1 (when threads > 3)
 * With OTLP_DRIVER_THREADS=1 it prints, before stopping, one line per
 * thread of the process: "thread <tid> <comm> internal=<0|1>" (the
 * tests check that gRPC's threads are registered as the agent's own).
 * With OTLP_DRIVER_FORK=1 it forks once the first round has gone: the
 * child (where the agent restarts itself: its restart thread is created
 * from a timer on its CPU time, so it computes) runs 500 ms, stops its
 * agent and exits; the parent goes on and waits for it.
 * After the last round it stops the agent (flush within
 * STACKSHOT_SHUTDOWN_TIMEOUT, counters printed) and exits 0.
 *
 * It makes the exporter tests independent of the native sampler; the
 * preload tests (otlp_demo) cover the sampler's side. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/lifecycle.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint32_t n_rounds = 5, n_threads = 3;
static pthread_t source_thread;
static _Atomic bool source_done;

static const uint8_t trace_id[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t span_id[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};

static void add_frames(ss_round_builder *b, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        const ss_funcinfo *fn = ss_funcinfo_intern("global", names[i],
                                                   i < 1 ? "libc.so.6" : "otlp_demo.c", NULL,
                                                   SS_FRAME_NATIVE);
        ss_frame f = {.fn = fn, .line = i < 1 ? 0 : 40 + i, .addr = 0x401000u + (uint64_t)i};
        ss_round_builder_add_frame(b, &f);
    }
}

static void add_thread(ss_round_builder *b, uint32_t i) {
    static const char *const spin[] = {"spin_work", "worker_main", "start_thread"};
    static const char *const nap[] = {"clock_nanosleep", "sleep_work", "worker_main",
                                      "start_thread"};
    char name[32];
    if (i == 0)
        snprintf(name, sizeof name, "otlp-spinner");
    else if (i == 1)
        snprintf(name, sizeof name, "otlp-sleeper");
    else if (i == 2)
        snprintf(name, sizeof name, "otlp-traced");
    else
        snprintf(name, sizeof name, "otlp-worker-%u", i);
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    if (!t)
        return;
    bool sleeping = i == 1 || i == 2;
    t->number = i + 2;
    t->nid = 4001 + (int32_t)i;
    t->state = sleeping ? SS_STATE_TIMED_WAITING : SS_STATE_RUNNABLE;
    t->status = sleeping ? "sleeping" : "runnable";
    t->cpu_ns = 1000000ull * (i + 1);
    t->elapsed_ns = 2000000000ull;
    if (i == 2) {
        t->has_span = true;
        memcpy(t->trace_id, trace_id, 16);
        memcpy(t->span_id, span_id, 8);
    }
    if (sleeping)
        add_frames(b, nap, 4);
    else
        add_frames(b, spin, 3);
}

static void *source_main(void *arg) {
    const ss_config *cfg = arg;
    ss_round_builder *b = ss_round_builder_create();
    for (uint32_t k = 0; b && k < n_rounds; k++) {
        ss_round_builder_begin(b, ss_wall_ns(), cfg->interval_ms, SS_RUNTIME_NATIVE);
        for (uint32_t i = 0; i < n_threads; i++)
            add_thread(b, i);
        ss_round *r = ss_round_builder_finish(b, 0, 0);
        if (r)
            ss_exporters_publish(r);
        ss_sleep_ns((uint64_t)cfg->interval_ms * 1000000ull);
    }
    ss_round_builder_destroy(b);
    atomic_store(&source_done, true);
    return NULL;
}

static int source_start(const ss_config *cfg) {
    return ss_thread_start(&source_thread, "drive", source_main, (void *)cfg);
}

static void source_stop(uint64_t deadline_ns) {
    ss_thread_join(source_thread, deadline_ns);
}

static const ss_source_ops driver_source = {
    .name = "scripted",
    .start = source_start,
    .stop = source_stop,
};

static void list_threads(void) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int tid = atoi(e->d_name);
        if (tid <= 0)
            continue;
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = '\0';
            fclose(f);
        }
        comm[strcspn(comm, "\n")] = '\0';
        printf("thread %d %s internal=%d\n", tid, comm, ss_internal_thread_is(tid) ? 1 : 0);
    }
    if (d)
        closedir(d);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc > 1)
        n_rounds = (uint32_t)atoi(argv[1]);
    if (argc > 2)
        n_threads = (uint32_t)atoi(argv[2]);
    ss_config cfg;
    ss_config_load(&cfg);
    if (!cfg.enabled) {
        fprintf(stderr, "otlp_driver: SPLUNK_PROFILER_ENABLED is not true\n");
        return 2;
    }
    if (ss_agent_start(&driver_source, &cfg) != 0)
        return 1;
    pid_t child = -1;
    if (getenv("OTLP_DRIVER_FORK")) {
        ss_sleep_ns((uint64_t)cfg.interval_ms * 1500000ull);
        child = fork();
        if (child == 0) {
            uint64_t until = ss_mono_ns() + 500000000ull;
            volatile unsigned long x = 1;
            while (ss_mono_ns() < until)
                x = x * 6364136223846793005ul + 1442695040888963407ul;
            ss_agent_stop();
            _exit(0);
        }
    }
    while (!atomic_load(&source_done))
        ss_sleep_ns(10000000);
    if (child > 0)
        waitpid(child, NULL, 0);
    if (getenv("OTLP_DRIVER_THREADS")) {
        /* gRPC may start a thread at any time; exporters register new
         * ones within a tick (100 ms): give them three */
        ss_sleep_ns(300000000ull);
        list_threads();
    }
    ss_agent_stop();
    return 0;
}
