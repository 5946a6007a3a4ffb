/* core_entry.c: the one symbol libstackshot-core.so exports to its loader.
 *
 * ss_core_entry_v1 takes the host's allocator, installs it (before this
 * call only the dependencies' constructors have run, on the bootstrap
 * arena of core_alloc.c) and returns the table of entry points the
 * loader's stubs forward to. Everything else in the core is local (see
 * loader/core.map). */
#include "loader/ss_core_api.h"
#include "agent/config.h"
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "proc/process.h"
#include "agent/thread.h"
#include "agent/main_arena.h"
#include "core/core_heap.h"
#include "samplers/ss_samplers.h"
#include "samplers/signal_sampler.h" /* SS_SIG_COPY_STACK_NEED */
#include "include/stackshot.h"
#include "jvmti/jvmti_internal.h" /* ss_jvmti_set_live_hook */

#include <jvmti.h> /* declares Agent_OnLoad and friends */
#include <stdatomic.h>
#include <stdio.h>

/* Copied: the loader may be unloaded (a JVM after Agent_OnUnload) while
 * the core stays mapped. */
static char why_not_deepbind[96];

/* The loader judges a host's alternate stack with the handler's need. */
_Static_assert(SS_SIGNAL_ROOM_NEED == SS_SIG_COPY_STACK_NEED,
               "the loader and the handler disagree on the stack room the handler needs");
static bool deepbind;
static atomic_flag told = ATOMIC_FLAG_INIT;

/* One debug line on how the core was loaded, once the configuration (and
 * with it the log level) is known. */
static void tell_once(void) {
    if (atomic_flag_test_and_set(&told))
        return;
    if (deepbind)
        ss_debug("core loaded isolated (RTLD_DEEPBIND); its libraries' constructors "
                 "took %zu bytes of the bootstrap arena", ss_core_alloc_arena_used());
    else
        ss_debug("core loaded without RTLD_DEEPBIND (%s): its libraries may bind "
                 "to the host's symbols of the same names",
                 why_not_deepbind);
}

bool ss_core_deepbind(void) { return deepbind; }

/* The loader's at-fork handler runs before any the core registers: the
 * core's heap (core/core_heap.c) is made usable in the child first, as
 * ss_agent_fork_child allocates. */
static void fork_child(bool restart) {
    ss_core_alloc_after_fork_child();
    ss_agent_fork_child(restart, ss_core_zone_inherited());
}

static void autostart(void) {
    /* Under an RLIMIT_AS the agent's threads wait for this one (the
     * loader's start thread) to end before they run: dlopen gave it a
     * malloc arena of glibc's (64 MiB of address space), which its end
     * puts on glibc's free list, and the first agent thread that enters
     * glibc's malloc (libdw's fopen, strdup...) then takes it over
     * instead of reserving one more (core/core_heap.c). Not needed
     * when the agent's threads use the main arena (agent/main_arena.c). */
    if (ss_core_alloc_own_heap() && !ss_main_arena_known())
        ss_internal_threads_after(ss_gettid());
    ss_preload_autostart();
    if (ss_agent_running())
        tell_once();
}

static int start(void) {
    int rc = stackshot_start();
    tell_once();
    return rc;
}

static int onload(void *vm, char *options, void *reserved) {
    int rc = Agent_OnLoad((JavaVM *)vm, options, reserved);
    tell_once();
    return rc;
}

static int onattach(void *vm, char *options, void *reserved) {
    int rc = Agent_OnAttach((JavaVM *)vm, options, reserved);
    tell_once();
    return rc;
}

static void onunload(void *vm) { Agent_OnUnload((JavaVM *)vm); }

static const ss_core_api api = {
    .size = sizeof(ss_core_api),
    .autostart = autostart,
    .start = start,
    .stop = stackshot_stop,
    .set_span_context = stackshot_set_span_context,
    .clear_span_context = stackshot_clear_span_context,
    .agent_onload = onload,
    .agent_onattach = onattach,
    .agent_onunload = onunload,
    .exec_begin = ss_agent_exec_begin,
    .exec_failed = ss_agent_exec_failed,
    .fork_child = fork_child,
    .running = ss_agent_active,
    .step_aside = ss_agent_step_aside,
    .step_back = ss_agent_step_back,
    .sampling_signal = ss_sig_signal,
    .threads_alive = ss_internal_threads_alive,
};

__attribute__((visibility("default"))) const ss_core_api *
ss_core_entry_v1(const ss_core_host *host) {
    /* fields are only appended: the loader filled the first host->size
     * bytes (thread_signal_room came last) */
    if (!host || host->size < offsetof(ss_core_host, thread_signal_room))
        return NULL;
    if (ss_core_alloc_install(&host->alloc) != 0)
        return NULL;
    deepbind = host->deepbind;
    ss_agent_set_loader_forks(host->loader_forks);
    ss_process_set_program_name_ref(host->program_name);
    ss_env_set_snapshot(host->environ_at_load);
    /* the agent's start: its own duplicate of stderr, if fd 2 is still
     * the file it was at load */
    ss_log_take_stderr(host->stderr_at_load != 0, host->stderr_at_load > 0, host->stderr_dev,
                       host->stderr_ino);
    ss_native_note_dlopened();
    if (host->size >= offsetof(ss_core_host, thread_signal_room) + sizeof host->thread_signal_room)
        ss_native_set_signal_room(host->thread_signal_room);
    if (host->size >= offsetof(ss_core_host, malloc_arena) + sizeof host->malloc_arena &&
        host->malloc_arena)
        ss_main_arena_use(host->malloc_arena_tp_off, host->malloc_arena);
    if (host->size >= offsetof(ss_core_host, agent_thread_set) + sizeof host->agent_thread_set)
        ss_internal_threads_mark_with(host->agent_thread_set);
    if (host->size >= offsetof(ss_core_host, jvm_live) + sizeof host->jvm_live)
        ss_jvmti_set_live_hook(host->jvm_live);
    snprintf(why_not_deepbind, sizeof why_not_deepbind, "%s",
             host->why_not_deepbind ? host->why_not_deepbind : "unknown");
    return &api;
}
