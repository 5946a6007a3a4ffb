/* ss_core_api.h: the one interface between the loader (libstackshot.so)
 * and the agent core (libstackshot-core.so).
 *
 * The loader dlopens the core and looks up exactly one symbol,
 * ss_core_entry_v1. It passes the process's allocator (resolved in the
 * global scope, where the host's malloc replacement lives) and gets back a
 * table of the core's entry points. A new, incompatible table gets a new
 * entry name (ss_core_entry_v2); fields are only ever appended to v1, and
 * `size` says how many the core filled. */
#ifndef SS_CORE_API_H
#define SS_CORE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The allocator the host process uses (what libc's own strdup, getline,
 * getaddrinfo... call). The core's malloc family forwards here, so memory
 * crosses between libc and the core safely under RTLD_DEEPBIND. Any field
 * may be NULL if the process has no such function. */
typedef struct ss_core_alloc {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
} ss_core_alloc;

typedef struct ss_core_host {
    size_t size;          /* sizeof(ss_core_host) of the loader */
    ss_core_alloc alloc;  /* the process's allocator */
    bool deepbind;        /* loaded with RTLD_DEEPBIND (no sanitizer runtime) */
    const char *why_not_deepbind; /* e.g. "AddressSanitizer runtime present" */
    bool loader_forks;    /* the loader's at-fork handler calls api->fork_child:
                             the core registers none of its own */
    /* &program_invocation_short_name as the host binds it: a program that
     * references it gets a copy relocation, and the deep-bound core would
     * read libc's stale original instead */
    char *const *program_name;
    /* The environment as it was at load (a copy, NULL-terminated), or
     * NULL: servers rewrite or clear theirs before the first round */
    char *const *environ_at_load;
    /* fd 2 at load (the loader's constructor): 0 not looked at, 1 open
     * (its device and inode below), -1 closed. The agent's lines go to
     * fd 2 only if it is still that file when the agent starts (or the
     * host's own log there: agent/log.c). */
    int stderr_at_load;
    uint64_t stderr_dev, stderr_ino;
    /* Can thread `tid` take the sampling signal without it touching the
     * thread's own stack (loader/loader_altstack.c)? SS_SIGNAL_ROOM_*:
     * NONE (unknown, no alternate stack, or one too small) means "do not
     * signal it". NULL: no registry in this process (the agent was not
     * enabled when the loader was loaded, a JVM): every thread is
     * signalled as before. */
    int (*thread_signal_room)(pid_t tid);
    /* glibc's main malloc arena for the agent's threads under an
     * RLIMIT_AS (agent/main_arena.c): its pointer's offset from the
     * thread pointer, and the arena; NULL: each thread gets glibc's own */
    intptr_t malloc_arena_tp_off;
    void *malloc_arena;
    /* Marks the calling thread as the agent's (on: true; returns what
     * was): the loader never takes its calls, nor those of the threads it
     * creates, for the host's (loader/loader_short.c). The core marks each
     * of its threads first, and a thread while it creates one. NULL:
     * nothing to call. */
    bool (*agent_thread_set)(bool on);
    /* The agent samples this JVM (called once it started there): the
     * loader watches libjvm's thread creation (loader/loader_jvm_threads.c).
     * NULL: nothing to call. */
    void (*jvm_live)(void);
} ss_core_host;

/* What thread_signal_room says of a thread. */
enum { SS_SIGNAL_ROOM_NONE = 0, SS_SIGNAL_ROOM_OURS, SS_SIGNAL_ROOM_HOST };
/* A host's own alternate stack can take the signal when it holds the
 * kernel's frame (AT_MINSIGSTKSZ) and this much more for the handler: the
 * copy-mode handler's need (SS_SIG_COPY_STACK_NEED of samplers/; the core
 * checks that they agree). */
#define SS_SIGNAL_ROOM_NEED (2u * 1024u)

typedef struct ss_core_api {
    size_t size; /* sizeof(ss_core_api) of the core */
    /* What the preload constructor did before the split: start in a
     * native process if SPLUNK_PROFILER_ENABLED is true, nothing in a JVM. */
    void (*autostart)(void);
    int (*start)(void);
    void (*stop)(void);
    void (*set_span_context)(const uint8_t trace_id[16], const uint8_t span_id[8]);
    void (*clear_span_context)(void);
    int (*agent_onload)(void *vm, char *options, void *reserved);
    int (*agent_onattach)(void *vm, char *options, void *reserved);
    void (*agent_onunload)(void *vm);
    bool (*exec_begin)(void);
    void (*exec_failed)(void);
    /* In a child (fork: restart = true; clone: false, the child starts
     * nothing until it execs), with only the calling thread left. */
    void (*fork_child)(bool restart);
    bool (*running)(void); /* the agent runs (or a forked child's restart is due) */
    /* Around a call of the host that the agent's threads must not meet
     * as they are (kinds below): step_aside before it returns a token,
     * step_back after it (the call failed, or did not end the image)
     * takes it. The thread that calls step_back starts whatever starts
     * again, so new threads have its credentials. */
    int (*step_aside)(int kind);
    void (*step_back)(int token);
    /* The signal the sampler sends (its handler installed), else 0: a
     * thread about to enter seccomp's strict mode blocks it
     * (loader/loader_seccomp.c). */
    int (*sampling_signal)(void);
    /* How many of the agent's threads (its own, gRPC's) are not yet
     * reaped: after the agent left, the loader retries a host's call that
     * failed with EAGAIN until none is (loader/loader_short.c). */
    unsigned (*threads_alive)(void);
} ss_core_api;

/* What a call needs of the agent's threads (api->step_aside). */
enum {
    SS_ASIDE_EXEC = 1, /* the image ends: stop as at exit (flushed), a
                          forked child's pending restart is dropped */
    SS_ASIDE_ALONE,    /* unshare, setns, clone: no thread of ours during
                          the call (stopped, restarted after) */
    SS_ASIDE_IDS,      /* the set*id family: glibc runs the call on every
                          thread and aborts when the results differ; our
                          threads take part only when their credentials
                          are the caller's, else they are stopped first */
    SS_ASIDE_CAPS,     /* capset: the caller's alone changes; our threads
                          start again from it if they kept more */
    SS_ASIDE_LEAVE,    /* the agent leaves a process that goes on (a host
                          short of threads): stopped and flushed, its
                          libraries' threads ended too (gRPC's), never
                          back */
};

typedef const ss_core_api *(*ss_core_entry_fn)(const ss_core_host *host);

/* Core side (core/preload.c): the preload start, run by the core's
 * entry table once the loader has handed over the allocator. */
void ss_preload_autostart(void);
/* Core side (core/core_alloc.c): point the core's malloc family at the
 * host's allocator. 0, or -EINVAL if `a` lacks malloc/free/calloc/realloc
 * or points back at the core itself. */
int ss_core_alloc_install(const ss_core_alloc *a);
/* Bytes the dependencies' constructors took from the bootstrap arena. */
size_t ss_core_alloc_arena_used(void);
/* The core allocates from its own heap (an RLIMIT_AS: core/core_heap.c). */
bool ss_core_alloc_own_heap(void);
/* In a forked child, before anything allocates: the core's heap starts
 * afresh (its lock may be held by a thread that is not in the child). */
void ss_core_alloc_after_fork_child(void);
/* Core side (core/lifecycle.c): the core's api->step_aside/step_back. */
int ss_agent_step_aside(int kind);
void ss_agent_step_back(int token);
/* Core side (core/core_entry.c): was the core opened RTLD_DEEPBIND? Its
 * modules are opened the same way (core/module_dl.c). */
bool ss_core_deepbind(void);

#define SS_CORE_ENTRY_NAME "ss_core_entry_v1"
#define SS_CORE_FILE_NAME "libstackshot-core.so"

#endif /* SS_CORE_API_H */
