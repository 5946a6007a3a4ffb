/*
 * agent/round.h: the sample model: frames, thread samples and the immutable round,
 * and the builder a sampler fills.
 */
#ifndef SS_AGENT_ROUND_H
#define SS_AGENT_ROUND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* What a frame's code is, set by the source that made the frame. A new
 * kind is a value here and a row in agent/round.c (ss_frame_kind_about). */
typedef enum ss_frame_kind {
    SS_FRAME_NATIVE = 0,
    SS_FRAME_JAVA = 1,
} ss_frame_kind;
#define SS_FRAME_KINDS 2

/* What an exporter needs to know of a frame kind, so it formats what it is
 * given instead of testing which runtime made the frame. */
typedef struct ss_frame_kind_info {
    /* OpenTelemetry profile.frame.type: "native", "jvm" */
    const char *type;
    /* How a function is named in profiles: ns, qualify, name
     * ("java.util.HashMap" "." "get"; no qualify when ns is ""). NULL: by
     * the native resolver's namespaces (a C++ scope joined by "::",
     * "global" and "jit" dropped). */
    const char *qualify;
    /* ss_frame.addr is an instruction address in ss_frame.map: the frame
     * has a module and an offset in it. false: addr is a bytecode index,
     * the frame has no mapping (its function and line say where it is). */
    bool addressed;
} ss_frame_kind_info;

/* Never NULL: an unknown kind reads as native. */
const ss_frame_kind_info *ss_frame_kind_about(unsigned kind);

/* A loaded native module, as the symbol resolver saw it. Interned: never
 * freed while the agent runs, so rounds may point at it after dlclose. */
typedef struct ss_mapping {
    const char *path;       /* file name as mapped, "[vdso]" for the vDSO */
    const char *build_id;   /* GNU build id, lowercase hex; "" if none */
    uint64_t start, limit;  /* mapped address range */
    uint64_t file_offset;
} ss_mapping;

/* What a frame's code is. Interned by content and never freed while the
 * agent runs: frames and caches hold plain pointers. */
typedef struct ss_funcinfo {
    const char *ns;      /* "java.util.HashMap", "std::vector<int>", "global", "unknown" */
    const char *name;    /* method or function name, "unknown" */
    const char *file;    /* "Demo.java", "demo.c", "libc.so.6", "Native Method", "unknown" */
    const char *module;  /* Java module with version ("java.base@17.0.15"), or NULL */
    uint8_t kind;        /* ss_frame_kind */
    const char *signature; /* Java method descriptor ("(J)V"), or NULL */
} ss_funcinfo;

typedef struct ss_frame {
    const ss_funcinfo *fn;
    const ss_mapping *map; /* native frames: the module, or NULL */
    uint64_t addr;         /* native: instruction address; Java: bci */
    int32_t line;          /* source line, 0 unknown */
    uint8_t inlined;       /* inlined into the next frame (its caller) */
} ss_frame;

/* Intern a funcinfo (copies the strings). Thread-safe, not signal-safe.
 * Returns NULL only when out of memory. */
const ss_funcinfo *ss_funcinfo_intern(const char *ns, const char *name,
                                      const char *file, const char *module,
                                      ss_frame_kind kind);
/* The same with a Java method descriptor: overloads are distinct functions. */
const ss_funcinfo *ss_funcinfo_intern_sig(const char *ns, const char *name,
                                          const char *file, const char *module,
                                          ss_frame_kind kind, const char *signature);
const ss_mapping *ss_mapping_intern(const char *path, const char *build_id,
                                    uint64_t start, uint64_t limit,
                                    uint64_t file_offset);
/* Intern an arbitrary string (copied; lives as long as the agent). */
const char *ss_intern(const char *s);
/* Tests: take (true) or release (false) the table's lock, as an agent
 * thread in the middle of an insert holds it. */
void ss_intern_hold(bool hold);

typedef enum ss_thread_state {
    SS_STATE_UNKNOWN = 0,
    SS_STATE_NEW,
    SS_STATE_RUNNABLE,
    SS_STATE_BLOCKED,
    SS_STATE_WAITING,
    SS_STATE_TIMED_WAITING,
    SS_STATE_TERMINATED,
    SS_STATE_STOPPED, /* native: stopped by a signal or a tracer */
} ss_thread_state;

/* "RUNNABLE", "BLOCKED", ... as java.lang.Thread.State spells them. */
const char *ss_thread_state_name(ss_thread_state s);

/* Which source made a round (ss_round.runtime). A new runtime is a value
 * here and a row in agent/round.c (ss_runtime_about). */
typedef enum ss_runtime {
    SS_RUNTIME_NATIVE = 0,
    SS_RUNTIME_JVM = 1,
} ss_runtime;

/* What an exporter needs to know of a round's runtime, so it formats what
 * it is given instead of testing which runtime made the round. */
typedef struct ss_runtime_info {
    const char *name; /* "native", "jvm" */
    /* The runtime numbers its own threads (ss_thread_sample.number: a
     * Java thread id) and readers know them by that number; the threads it
     * did not number (number <= 0 and not virtual: a VM's GC or compiler
     * threads) and every thread of a runtime that numbers none are OS
     * threads, known by their kernel id (nid). */
    bool numbers_threads;
    /* The state line's label of the threads it numbers in a thread dump
     * ("java.lang.Thread.State"); OS threads get "native.Thread.State". */
    const char *state_label;
} ss_runtime_info;

/* Never NULL: an unknown runtime reads as native. */
const ss_runtime_info *ss_runtime_about(unsigned runtime);

#define SS_UNKNOWN_U64 UINT64_MAX

/* One thread in one round. Strings are owned by the round (name) or static /
 * interned (status, state_detail). */
typedef struct ss_thread_sample {
    const char *name;        /* UTF-8 */
    int64_t number;          /* jstack's #n: Java thread id; native: order first seen */
    uint64_t tid;            /* pthread_t / JavaThread address, 0 unknown */
    int32_t nid;             /* kernel thread id, 0 unknown */
    int32_t prio;            /* Java priority, 0 when not Java */
    int32_t os_prio;         /* kernel nice value */
    bool daemon;
    bool is_virtual;         /* Java virtual thread */
    bool on_cpu;             /* ran since the previous round */
    bool truncated;          /* frames beyond max depth were cut (root side) */
    bool has_span;
    ss_thread_state state;
    const char *status;       /* jstack status word: "runnable", "sleeping", ... */
    const char *state_detail; /* "parking", "sleeping", "on object monitor", NULL */
    uint64_t cpu_ns;          /* CPU time consumed, SS_UNKNOWN_U64 unknown */
    uint64_t cpu_delta_ns;    /* CPU time since the previous round */
    uint64_t elapsed_ns;      /* time since the thread started, SS_UNKNOWN_U64 unknown */
    uint64_t start_wall_ms;   /* when the thread started, epoch ms, 0 unknown */
    uint64_t io_read_bytes;   /* storage bytes read, SS_UNKNOWN_U64 unknown */
    uint64_t io_write_bytes;
    uint64_t alloc_bytes;     /* bytes allocated by the thread, SS_UNKNOWN_U64 unknown */
    uint64_t wait_ns;         /* time spent blocked/waiting, SS_UNKNOWN_U64 unknown */
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t trace_flags;     /* W3C trace flags of the span, when has_span (0 unknown) */
    const char *span_attrs;  /* the span's attributes (OTEP 4947 record): "key=value"
                                lines joined by '\n', owned by the round; NULL none */
    uint32_t frame_start;    /* index into round->frames */
    uint32_t frame_count;    /* leaf first */
    /* The identity of the frames (and `truncated`): two samples with the
     * same nonzero stack_id have the same frames, in any round of any
     * thread (ids come from ss_stack_id_next and are never given twice).
     * 0: unknown, nothing may be reused. Exporters key what they made of
     * the frames (text, locations) on it instead of making it again. */
    uint64_t stack_id;
    bool same_stack;         /* the same stack_id as this thread's previous round */
} ss_thread_sample;

/* A round: every sampled thread at one moment. Immutable once built and
 * shared by all exporters through a reference count. */
typedef struct ss_round {
    _Atomic uint32_t refs;
    uint64_t seq;             /* 1, 2, 3 ... per process */
    uint64_t time_ns;         /* wall clock when the round started, epoch ns */
    uint64_t took_ns;         /* how long taking it took */
    uint32_t interval_ms;
    ss_runtime runtime;
    uint32_t n_threads;       /* in sampling order */
    ss_thread_sample *threads;
    uint32_t n_frames;
    ss_frame *frames;
    uint32_t threads_skipped; /* exited or did not answer in time */
    uint32_t threads_blocked; /* block the sampling signal: not sampled */
    size_t bytes;             /* charged to ss_mem */
} ss_round;

static inline const ss_frame *ss_thread_frames(const ss_round *r,
                                               const ss_thread_sample *t) {
    return r->frames + t->frame_start;
}

void ss_round_ref(ss_round *r);
void ss_round_unref(ss_round *r);

/* A new stack identity (see ss_thread_sample.stack_id): 1, 2, 3... for
 * the process. Thread-safe. */
uint64_t ss_stack_id_next(void);
/* STACKSHOT_STACK_REUSE (default true): samplers give stacks their
 * identity, so exporters reuse what they made of an unchanged stack.
 * false: every stack_id is 0 and everything is formatted every round (the
 * baseline of the benchmarks). ss_stack_reuse_set overrides the key. */
bool ss_stack_reuse(void);
void ss_stack_reuse_set(bool on);

/* Builds rounds on one thread (a sampler); reuses its scratch between rounds. */
typedef struct ss_round_builder ss_round_builder;

ss_round_builder *ss_round_builder_create(void);
void ss_round_builder_destroy(ss_round_builder *b);
void ss_round_builder_begin(ss_round_builder *b, uint64_t time_ns,
                            uint32_t interval_ms, ss_runtime rt);
/* Start a new thread; the name is copied. The returned sample is zeroed
 * except name and unknown markers; fill the rest. Valid until the next
 * add_thread / finish. NULL when out of memory. */
ss_thread_sample *ss_round_builder_add_thread(ss_round_builder *b,
                                              const char *name);
/* Append a frame to the current thread (leaf first). */
int ss_round_builder_add_frame(ss_round_builder *b, const ss_frame *f);
/* The same for n frames at once. */
int ss_round_builder_add_frames(ss_round_builder *b, const ss_frame *f, uint32_t n);
/* The current thread's span attributes (text of len bytes, copied;
 * ss_thread_sample.span_attrs); 0 or -1 out of memory. */
int ss_round_builder_set_span_attrs(ss_round_builder *b, const char *text, size_t len);
/* Drop the current thread (for example: it turned out to be internal). */
void ss_round_builder_drop_thread(ss_round_builder *b);
/* The immutable round, refs = 1, memory charged; NULL when out of memory. */
ss_round *ss_round_builder_finish(ss_round_builder *b, uint32_t skipped,
                                  uint32_t blocked);

#pragma GCC visibility pop

#endif /* SS_AGENT_ROUND_H */
