/* loader.c: libstackshot.so, the library the host loads.
 *
 * It depends on libc only and exports exactly the entry points of
 * stackshot.map: the public API (include/stackshot.h), the JVMTI entry
 * points and the exec family (loader_exec.c). The agent itself, with
 * libunwind, libdw and zlib, is libstackshot-core.so in the same
 * directory (and gRPC is its module libstackshot-grpc.so, which the core
 * opens only for OTLP export), opened only when the agent is wanted:
 *
 *   - preloaded: when the first round is due (loader_start.c: one
 *     interval after load), unless SPLUNK_PROFILER_ENABLED is unset, blank
 *     or false (the core then applies the full rule: true, and not a JVM);
 *   - in a JVM: by Agent_OnLoad / Agent_OnAttach;
 *   - embedded: by stackshot_start.
 *
 * The core is opened RTLD_LOCAL, so none of its libraries is added to the
 * global scope (the host never binds to them), and RTLD_DEEPBIND, so the
 * core and every library loaded with it look symbols up in the core's own
 * dependency tree before the global scope (the host's own grpc_init or
 * unw_step, or a function of that name, is never called by the agent).
 * Sanitizer runtimes abort the process on RTLD_DEEPBIND: with one present
 * the core is opened without it (and says so at debug level).
 *
 * STACKSHOT_CORE=<path> names another core file (tests). */
#include "loader/ss_loader.h"
#include "agent/main_arena.h"
#include "agent/otel_ctx.h"
#include "agent/enabled.h"
#include "agent/version.h"
#include "include/stackshot.h"

#include <dlfcn.h>
#include <errno.h> /* program_invocation_short_name */
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(const ss_core_api *) core;
static bool load_failed; /* under load_lock: say it once, try once */

/* The span context of include/stackshot.h, published the way OpenTelemetry
 * SDKs publish theirs (OTEP 4947, agent/otel_ctx.h): the exported TLS
 * variable otel_thread_ctx_v1 points at the thread's record, so an eBPF
 * profiler on the host and the agent's own sampler (which reads every
 * module's otel_thread_ctx_v1 the same way, agent/otel_thread.c) see the
 * same spans. The record is the thread's own, in TLS, set in place; the
 * pointer is set at the thread's first call and never changes after.
 * This file is compiled with -mtls-dialect=gnu2 (TLSDESC, the dialect the
 * OTEP recommends to writers). No call into the core: the writer works
 * whether the agent runs or not, and costs the host a few stores. */
SS_EXPORT __thread ss_otel_rec *_Atomic otel_thread_ctx_v1;
static __thread ss_otel_rec span_rec;
/* Set at the first span: until then the agent's reader skips this
 * module's variable (it would read a NULL pointer per thread). */
SS_EXPORT atomic_int stackshot_span_context_used;

static void span_used(void) {
    if (!atomic_load_explicit(&stackshot_span_context_used, memory_order_relaxed))
        atomic_store_explicit(&stackshot_span_context_used, 1, memory_order_relaxed);
}

const ss_core_api *ss_loader_core(void) {
    return atomic_load_explicit(&core, memory_order_acquire);
}

/* A sanitizer runtime in the process refuses RTLD_DEEPBIND (it aborts). */
static const char *sanitizer_present(void) {
    if (dlsym(RTLD_DEFAULT, "__asan_init"))
        return "AddressSanitizer runtime present";
    if (dlsym(RTLD_DEFAULT, "__tsan_init"))
        return "ThreadSanitizer runtime present";
    if (dlsym(RTLD_DEFAULT, "__msan_init"))
        return "MemorySanitizer runtime present";
    return NULL;
}

/* Is the agent to stay off because of a sanitizer runtime? Its core
 * must be loaded isolated (RTLD_DEEPBIND), which such a runtime refuses
 * (it aborts the process); a core built with the sanitizer (the test
 * suite's sanitizer builds: SS_LOADER_SANITIZED) is made to do without
 * it. A program built with -fsanitize=address starts with a preloaded
 * library ahead of its runtime only under ASAN_OPTIONS=
 * verify_asan_link_order=0: it then runs as without the agent, and is
 * told so once. */
#ifndef SS_LOADER_SANITIZED
/* bound by the dynamic loader when the loader is loaded (-z now), to the
 * runtime's if the program has one: no lookup at run time */
extern void __asan_init(void) __attribute__((weak));
extern void __tsan_init(void) __attribute__((weak));
extern void __msan_init(void) __attribute__((weak));
#endif

static bool sanitizer_keeps_off(void) {
#ifdef SS_LOADER_SANITIZED
    return false;
#else
    static _Atomic int said;
    if (!__asan_init && !__tsan_init && !__msan_init)
        return false;
    const char *why = sanitizer_present();
    if (!why)
        why = "its init function is bound";
    if (!atomic_exchange(&said, 1)) {
        char msg[240];
        snprintf(msg, sizeof msg,
                 "the agent stays off in this process: it has a sanitizer runtime (%s), which "
                 "refuses the isolated loading (RTLD_DEEPBIND) the agent's core needs", why);
        ss_loader_say(msg);
    }
    return true;
#endif
}

/* The process's allocator: what the global scope binds malloc to, i.e.
 * what libc's own allocations use. The loader is not deep-bound, so
 * RTLD_DEFAULT from here sees the host's replacement if there is one. */
static void resolve_alloc(ss_core_alloc *a) {
    a->malloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    a->free = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
    a->calloc = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT, "calloc");
    a->realloc = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "realloc");
    a->posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_DEFAULT, "posix_memalign");
    a->aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT, "aligned_alloc");
    a->memalign = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT, "memalign");
    a->valloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "valloc");
    a->pvalloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "pvalloc");
    a->malloc_usable_size = (size_t(*)(void *))dlsym(RTLD_DEFAULT, "malloc_usable_size");
}

/* The core's path: STACKSHOT_CORE, else next to this library (dladdr of
 * one of our own symbols gives the path we were loaded from). */
static const char *core_path(char *buf, size_t n) {
    const char *env = getenv("STACKSHOT_CORE");
    if (env && *env)
        return env;
    Dl_info info;
    if (dladdr((void *)&ss_loader_core, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            int len = snprintf(buf, n, "%.*s/%s", (int)(slash - info.dli_fname),
                               info.dli_fname, SS_CORE_FILE_NAME);
            if (len > 0 && (size_t)len < n)
                return buf;
        }
    }
    return SS_CORE_FILE_NAME; /* the loader's search path */
}

/* The name the program was run by, taken at load: programs that set
 * their title (nginx, postgres) overwrite argv[0], and with it what
 * program_invocation_short_name points to. */
static char program_name_buf[256];
static char *program_name_ptr;

/* The environment at load, copied in one block: a server may clear its
 * environment (nginx's workers keep only TZ) or overwrite the strings
 * with its title before the first round is due. */
static char **environ_copy;

static void keep_environment(char **envp) {
    size_t n = 0, bytes = 0;
    for (char **e = envp; e && *e; e++, n++)
        bytes += strlen(*e) + 1;
    char **copy = malloc((n + 1) * sizeof *copy + bytes);
    if (!copy)
        return; /* the core then reads the environment of the moment */
    char *p = (char *)(copy + n + 1);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(envp[i]) + 1;
        memcpy(p, envp[i], len);
        copy[i] = p;
        p += len;
    }
    copy[n] = NULL;
    environ_copy = copy;
}

/* fd 2 at load: the stderr the agent's lines may go to (agent/log.c). */
static int stderr_at_load; /* 0 not looked at, 1 open, -1 closed */
static struct stat stderr_st;

static void keep_program_name(int argc, char **argv) {
    if (argc < 1 || !argv || !argv[0] || !argv[0][0])
        return;
    const char *slash = strrchr(argv[0], '/');
    snprintf(program_name_buf, sizeof program_name_buf, "%s", slash ? slash + 1 : argv[0]);
    program_name_ptr = program_name_buf;
}

/* The agent samples a JVM: a thread creation of libjvm's that fails
 * with EAGAIN makes it leave (loader_jvm_threads.c) */
static void jvm_live(void) {
    if (!ss_jvm_watch_threads())
        ss_loader_say("libjvm's thread creation could not be watched: a JVM short of threads "
                      "keeps the agent's");
}

static const ss_core_api *open_core(void) {
    if (sanitizer_keeps_off())
        return NULL;
    char buf[PATH_MAX];
    const char *path = core_path(buf, sizeof buf);
    if (!program_name_ptr)
        program_name_ptr = program_invocation_short_name;
    ss_core_host host = {.size = sizeof host, .deepbind = true, .loader_forks = true,
                         .program_name = &program_name_ptr,
                         .environ_at_load = environ_copy,
                         .stderr_at_load = stderr_at_load,
                         .stderr_dev = (uint64_t)stderr_st.st_dev,
                         .stderr_ino = (uint64_t)stderr_st.st_ino,
                         .thread_signal_room = ss_altstack_enabled() ? ss_altstack_room : NULL,
                         .agent_thread_set = ss_agent_thread_set,
                         .jvm_live = jvm_live};
    host.why_not_deepbind = sanitizer_present();
    if (host.why_not_deepbind)
        host.deepbind = false;
    resolve_alloc(&host.alloc);
    ss_main_arena_get(&host.malloc_arena_tp_off, &host.malloc_arena);

    int flags = RTLD_NOW | RTLD_LOCAL | (host.deepbind ? RTLD_DEEPBIND : 0);
    void *h = dlopen(path, flags);
    if (!h) {
        fprintf(stderr, "stackshot: cannot load the agent core: %s; the agent stays off\n",
                dlerror());
        return NULL;
    }
    ss_core_entry_fn entry = (ss_core_entry_fn)dlsym(h, SS_CORE_ENTRY_NAME);
    const ss_core_api *api = entry ? entry(&host) : NULL;
    if (!api || api->size < sizeof(ss_core_api)) {
        fprintf(stderr, "stackshot: %s: not a matching agent core (no %s); the agent stays off\n",
                path, SS_CORE_ENTRY_NAME);
        /* not dlclosed: its constructors ran, its memory may be in use */
        return NULL;
    }
    return api;
}

/* A thread is inside open_core: a child forked now holds a copy of a
 * half-done dlopen and must not try again. */
static _Atomic bool loading;

bool ss_loader_after_fork_child(void) {
    pthread_mutex_init(&load_lock, NULL);
    if (!atomic_load(&loading))
        return true;
    load_failed = true; /* never again in this child */
    return false;
}

void *ss_loader_next(const char *name) {
    void *fn = dlsym(RTLD_NEXT, name);
    if (!fn)
        errno = ENOSYS;
    return fn;
}

/* The core, loaded on first need; NULL if it cannot be (said once). */
const ss_core_api *ss_loader_load_core(void) {
    const ss_core_api *api = ss_loader_core();
    if (api)
        return api;
    pthread_mutex_lock(&load_lock);
    api = ss_loader_core();
    if (!api && !load_failed) {
        atomic_store(&loading, true);
        api = open_core();
        atomic_store(&loading, false);
        if (api) {
            ss_start_fork_handler();
            atomic_store_explicit(&core, api, memory_order_release);
        } else {
            load_failed = true;
        }
    }
    pthread_mutex_unlock(&load_lock);
    return api;
}

/* One line of the loader's own, before the core exists: on the host's
 * thread (this runs in its constructor), so it never blocks: a stderr
 * that cannot take it now (a full pipe) does not get it. */
void ss_loader_say(const char *msg) {
    char line[320];
    int n = snprintf(line, sizeof line, SS_NAME ": %s\n", msg);
    if (n <= 0)
        return;
    if ((size_t)n >= sizeof line)
        n = (int)sizeof line - 1;
    struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n);
        (void)w;
    }
}

/* Is the agent off (agent/enabled.c: only SPLUNK_PROFILER_ENABLED=true
 * turns it on, OTEL_SDK_DISABLED=true turns it off)? Then the core is not
 * even opened. A value that is a mistake gets its one line here, in a
 * native process; in a JVM the core decides from Agent_OnLoad, where the
 * option string may say otherwise, and says it there. */
static bool disabled_in_env(void) {
    /* A set-user-ID or set-group-ID program, or one with file capabilities
     * (AT_SECURE): its environment is its caller's, who must not steer a
     * privileged process (files it writes, where it sends). ld.so ignores
     * LD_PRELOAD there, but /etc/ld.so.preload still loads us: stay off,
     * silently. */
    if (getauxval(AT_SECURE))
        return true;
    char why[256];
    ss_enabled on = ss_enabled_decide(getenv("SPLUNK_PROFILER_ENABLED"),
                                      getenv("OTEL_SDK_DISABLED"), why, sizeof why);
    if (on == SS_ENABLED_ON)
        return false;
    if (on != SS_ENABLED_OFF && !ss_process_is_jvm())
        ss_loader_say(why);
    return true;
}

/* Preloaded: nothing at all (no library mapped, no constructor of theirs
 * run) while the agent is disabled; enabled, host threads get alternate
 * signal stacks from now on and the start is armed for when the first
 * round is due (loader_start.c). glibc passes the program's
 * arguments to the constructors of preloaded objects too. */
__attribute__((constructor)) static void ss_loader_start(int argc, char **argv, char **envp) {
    if (disabled_in_env() || sanitizer_keeps_off())
        return;
    keep_program_name(argc, argv);
    keep_environment(envp);
    stderr_at_load = fstat(2, &stderr_st) == 0 ? 1 : -1;
    if (ss_process_is_jvm())
        ss_jvm_inject_agent(argc, argv); /* profiled through JVMTI (loader_jvm.c) */
    if (!ss_start_wanted(argc, argv))
        return;
    /* from here every host thread gets an alternate signal stack
     * (loader_altstack.c), the main thread now */
    ss_altstack_enable();
    ss_start_arm(argc, argv);
}

/* At exit: a start thread still waiting is told to leave (not waited
 * for: loader_start.c), so that nothing starts while the process ends. The core, if it runs, stops from its own
 * destructor. */
__attribute__((destructor)) static void ss_loader_end(void) { ss_start_disarm(); }

/* ---- the public API: stubs that forward to the core ----------------- */

SS_EXPORT int stackshot_start(void) {
    ss_start_disarm(); /* asked for now: no need to wait for the first round */
    const ss_core_api *api = ss_loader_load_core();
    return api ? api->start() : -ENOENT;
}

SS_EXPORT void stackshot_stop(void) {
    const ss_core_api *api = ss_loader_core();
    if (api)
        api->stop();
}

/* Called by the host's threads on every span switch: a few stores into
 * the thread's own record, no call into the core. */
SS_EXPORT void stackshot_set_span_context_flags(const uint8_t trace_id[16],
                                                const uint8_t span_id[8], uint8_t trace_flags) {
    span_used();
    ss_otel_write(&otel_thread_ctx_v1, &span_rec, trace_id, span_id, trace_flags);
}

SS_EXPORT void stackshot_set_span_context(const uint8_t trace_id[16], const uint8_t span_id[8]) {
    span_used();
    ss_otel_write(&otel_thread_ctx_v1, &span_rec, trace_id, span_id, SS_OTEL_FLAGS_UNKNOWN);
}

SS_EXPORT void stackshot_clear_span_context(void) {
    ss_otel_write(&otel_thread_ctx_v1, &span_rec, NULL, NULL, 0);
}

SS_EXPORT const char *stackshot_version(void) { return SS_VERSION; }

/* ---- JVMTI: the JVM calls these by name ----------------------------- */

SS_EXPORT int Agent_OnLoad(void *vm, char *options, void *reserved) {
    const ss_core_api *api = ss_loader_load_core();
    /* JNI_OK even without a core: the JVM must start anyway */
    return api ? api->agent_onload(vm, options, reserved) : 0;
}

SS_EXPORT int Agent_OnAttach(void *vm, char *options, void *reserved) {
    const ss_core_api *api = ss_loader_load_core();
    return api ? api->agent_onattach(vm, options, reserved) : 0;
}

SS_EXPORT void Agent_OnUnload(void *vm) {
    const ss_core_api *api = ss_loader_core();
    if (api)
        api->agent_onunload(vm);
}
