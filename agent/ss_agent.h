/*
 * ss_agent.h: the agent core, as the other folders see it.
 *
 * This is the one header of agent/: samplers, jvmti and exporters include it
 * and nothing else from this folder. It defines
 *
 *   - the agent's own logging (one line per message, on stderr);
 *   - configuration: typed, table-driven readers of environment keys, with
 *     the JVMTI option string taking precedence;
 *   - the sample model: ss_frame, ss_thread_sample, ss_round;
 *   - memory accounting for everything queued;
 *   - the exporter interface and the fan-out of rounds to exporters;
 *   - agent threads (named "stackshot-<role>", never sampled);
 *   - the lifecycle of sources (native sampler, JVMTI) and exporters.
 *
 * Threading rules: nothing here may be called from a signal handler except
 * the functions marked async-signal-safe.
 */
#ifndef SS_AGENT_H
#define SS_AGENT_H

#include "otel_ctx.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define SS_VERSION "0.1.0"
#define SS_NAME "stackshot"

/* What this header declares is also the core's API for its modules
 * (libstackshot-<name>.so, exporters/common/module_dl.c): default
 * visibility here, exported by loader/core.map to the modules only (the
 * core is opened RTLD_LOCAL, the host never sees it). */
#pragma GCC visibility push(default)

/* ------------------------------------------------------------------ */
/* Time                                                                 */
/* ------------------------------------------------------------------ */

uint64_t ss_wall_ns(void);  /* CLOCK_REALTIME, nanoseconds since the epoch */
uint64_t ss_mono_ns(void);  /* CLOCK_MONOTONIC, nanoseconds */
void ss_sleep_ns(uint64_t ns);
/* A condition variable whose timed waits run on ss_mono_ns's clock, and
 * such a wait until deadline_ns (monotonic): pthread_cond_timedwait's
 * result. */
void ss_cond_init_mono(pthread_cond_t *cv);
/* CLOCK_REALTIME deadlines, for the waits that take no other clock
 * (pthread_mutex_timedlock, pthread_timedjoin_np): `ns` from now, and the
 * instant that is the monotonic deadline_ns. */
struct timespec ss_realtime_in(uint64_t ns);
struct timespec ss_realtime_at(uint64_t mono_deadline_ns);
/* "YYYY-MM-DDTHH:MM:SS" in UTC, without libc's time zone code (time.c). */
void ss_utc_format(uint64_t secs, char out[20]);
int ss_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns);

/* An exporter's last sends at exit end this much before its shutdown
 * deadline: an eighth of the time left, at most 200 ms, kept for ending
 * the call in flight and closing its transport. */
uint64_t ss_shutdown_send_until(uint64_t deadline_ns);

/* ------------------------------------------------------------------ */
/* Logging                                                              */
/* ------------------------------------------------------------------ */

typedef enum ss_log_level {
    SS_LOG_OFF = 0,
    SS_LOG_ERROR,
    SS_LOG_WARN,
    SS_LOG_INFO,
    SS_LOG_DEBUG,
} ss_log_level;

/* Writes "stackshot: <message>\n" with one write, so lines of different
 * threads never interleave, to STACKSHOT_LOG_FILE or to the agent's own
 * duplicate of the stderr it started with (never to whatever fd 2 is
 * later). Never waits for a reader: a line the destination cannot take
 * now is dropped and counted. Not async-signal-safe. */
void ss_log(ss_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ss_vlog(ss_log_level level, const char *fmt, va_list ap);
void ss_log_set_level(ss_log_level level);
/* STACKSHOT_LOG_FILE: lines go to this file (appended, created 0600; %p
 * is the pid, %u the effective uid) instead of stderr; NULL or "":
 * stderr. A file that cannot be opened: one line on stderr, stderr kept. */
void ss_log_set_file(const char *path);
ss_log_level ss_log_get_level(void);
bool ss_log_enabled(ss_log_level level);
/* At the agent's start (the core's entry): take the private duplicate of
 * stderr. known: the loader looked at fd 2 at load; open_at_load, dev and
 * ino say what it found. If fd 2 is no longer that file (or was closed),
 * the host put its own file there: no line goes to stderr. Not known:
 * fd 2 as it is now. Without this call, the first line takes it so. */
void ss_log_take_stderr(bool known, bool open_at_load, uint64_t dev, uint64_t ino);
/* Tests that move fd 2 to capture the lines (tests/unit/stderr_capture.h):
 * forget the duplicate; the next line takes fd 2 as it is then. */
void ss_log_retake_stderr(void);
/* Lines dropped so far (destination full, gone or the host's). */
uint64_t ss_log_dropped(void);
/* At the agent's stop: one line (info) if lines were dropped since the
 * last report, else a debug line with the counters. */
void ss_log_report(void);

/* A message that can repeat (once per round, per thread...): the first
 * occurrence is written, then at most one line per SS_LOG_LIMIT_NS (a
 * minute) saying how many were suppressed since the last line written.
 * The state is a zero-initialised static next to the call site; any
 * thread may use it (atomics; a race at most writes one line more). */
#define SS_LOG_LIMIT_NS (60ull * 1000000000ull)
typedef struct ss_log_limit {
    _Atomic uint64_t last_ns;    /* when a line was last written; 0: never */
    _Atomic uint64_t suppressed; /* occurrences not written since */
} ss_log_limit;
void ss_log_limited(ss_log_limit *state, ss_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ss_error(...) ss_log(SS_LOG_ERROR, __VA_ARGS__)
#define ss_warn(...) ss_log(SS_LOG_WARN, __VA_ARGS__)
#define ss_info(...) ss_log(SS_LOG_INFO, __VA_ARGS__)
#define ss_debug(...) ss_log(SS_LOG_DEBUG, __VA_ARGS__)

/* ------------------------------------------------------------------ */
/* Growable byte buffer                                                 */
/* ------------------------------------------------------------------ */

typedef struct ss_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed; /* an allocation failed; contents are truncated */
} ss_buf;

void ss_buf_init(ss_buf *b);
void ss_buf_free(ss_buf *b);
void ss_buf_reset(ss_buf *b); /* len = 0, keeps the allocation */
int ss_buf_reserve(ss_buf *b, size_t extra);
int ss_buf_append(ss_buf *b, const void *p, size_t n);
int ss_buf_puts(ss_buf *b, const char *s);
int ss_buf_putc(ss_buf *b, char c);
int ss_buf_printf(ss_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ */
/* Configuration                                                        */
/* ------------------------------------------------------------------ */

/* The core keys, parsed once at start (ss_config_load). Exporters read
 * their own keys through the typed readers below. */
typedef struct ss_config {
    bool enabled;              /* SPLUNK_PROFILER_ENABLED */
    uint32_t interval_ms;      /* SPLUNK_PROFILER_CALL_STACK_INTERVAL */
    bool include_internal;     /* SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS */
    char output_dir[1024];     /* STACKSHOT_OUTPUT_DIR */
    uint32_t exporters;        /* STACKSHOT_EXPORTERS: bit i = ss_exporter_table[i] */
    uint32_t max_depth;        /* STACKSHOT_MAX_DEPTH */
    uint64_t max_memory;       /* STACKSHOT_MAX_MEMORY, bytes */
    ss_log_level log_level;    /* STACKSHOT_LOG_LEVEL */
    int signal;                /* STACKSHOT_SIGNAL */
    uint32_t shutdown_ms;      /* STACKSHOT_SHUTDOWN_TIMEOUT */
    uint32_t answer_ms;        /* STACKSHOT_SIGNAL_TIMEOUT */
    /* Not a key: the start was already put off by one interval (the
     * loader's start thread waits that long), so the first round is
     * taken at once rather than one more interval later. */
    bool start_deferred;
    /* Not a key: every exporter named was a mistake (an unknown name, an
     * unusable destination), each said in one line; the agent does not
     * start (enabled is false), not even by stackshot_start(). */
    bool nothing_to_run;
} ss_config;

/* Is the agent turned on (agent/enabled.c, also compiled into the
 * loader)? From the values of SPLUNK_PROFILER_ENABLED and OTEL_SDK_DISABLED
 * (NULL: unset). Anything but SS_ENABLED_ON and SS_ENABLED_OFF leaves the
 * agent off and puts the one line to say in why (without the "stackshot: "
 * prefix). */
typedef enum ss_enabled {
    SS_ENABLED_OFF = 0,      /* unset, blank or false: off, silently */
    SS_ENABLED_ON,           /* true (any case) */
    SS_ENABLED_BAD_VALUE,    /* anything else: off, one line */
    SS_ENABLED_SDK_DISABLED, /* true, but OTEL_SDK_DISABLED=true: off, one line */
} ss_enabled;
ss_enabled ss_enabled_decide(const char *enabled, const char *sdk_disabled, char *why,
                             size_t why_len);

/* Install the JVMTI option string ("key=value,key=value"), which takes
 * precedence over the environment. Unknown keys and malformed pairs print
 * one line each. Returns the number of problems found. NULL clears. */
int ss_config_set_options(const char *options);

/* The value of KEY: from the option string if set there, else from the
 * environment, else NULL. The pointer stays valid until the options change. */
const char *ss_config_raw(const char *key);
/* An environment variable: from the environment saved at load by the
 * loader (ss_env_set_snapshot, NULL-terminated "KEY=value" strings), else
 * getenv. */
const char *ss_env(const char *key);
void ss_env_set_snapshot(char *const *env);

/* Typed readers. Each prints one line for a bad value
 * ("stackshot: KEY=value: why; using <default>") and returns the default. */
bool ss_config_bool(const char *key, bool def);
int64_t ss_config_int(const char *key, int64_t def, int64_t min, int64_t max);
uint64_t ss_config_size(const char *key, uint64_t def, uint64_t min, uint64_t max);
const char *ss_config_str(const char *key, const char *def);

/* Report a bad value in the one standard shape. `fallback` says what the
 * agent does instead ("using 1000", "exporter disabled"). */
void ss_config_bad(const char *key, const char *value, const char *why,
                   const char *fallback);

/* Parse all core keys into *cfg. Never fails: bad values fall back. */
void ss_config_load(ss_config *cfg);

/* Is `key` one this agent knows (for the option string check)? */
bool ss_config_known_key(const char *key);

/* The configuration the running agent uses (valid after start). */
const ss_config *ss_config_current(void);

/* Parse a signal spec ("SIGPROF", "PROF", "SIGRTMIN+5", "SIGRTMAX-2", "34").
 * Returns the signal number or -1. */
int ss_parse_signal(const char *s);

/* Call fn with each name in the directory path (relative to dirfd), "."
 * and ".." left out, without opendir (which allocates on the calling
 * thread: agent/dir.c). fn returns 0 to go on, anything else to stop.
 * 0, or -errno when the directory cannot be read. */
int ss_dir_each(int dirfd, const char *path, int (*fn)(const char *name, void *arg), void *arg);

/* ------------------------------------------------------------------ */
/* Memory accounting                                                    */
/* ------------------------------------------------------------------ */

/* Everything queued (rounds, encoded batches waiting for a retry) is
 * charged here; the limit is STACKSHOT_MAX_MEMORY. */
void ss_mem_charge(size_t n);
void ss_mem_release(size_t n);
size_t ss_mem_used(void);
size_t ss_mem_limit(void);
void ss_mem_set_limit(size_t limit);

/* ------------------------------------------------------------------ */
/* The sample model                                                     */
/* ------------------------------------------------------------------ */

typedef enum ss_frame_kind {
    SS_FRAME_NATIVE = 0,
    SS_FRAME_JAVA = 1,
} ss_frame_kind;

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

typedef enum ss_runtime {
    SS_RUNTIME_NATIVE = 0,
    SS_RUNTIME_JVM = 1,
} ss_runtime;

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

/* What an exporter made of a stack, kept by stack_id from round to round:
 * bytes (the frames' text) and/or a number (a table index). An entry not
 * used (found or put) during a round is forgotten at the round's sweep,
 * so a memo holds at most the stacks of the last round; its bytes are
 * charged to ss_mem and capped (a put over the cap, or while ss_mem is
 * over its limit, keeps nothing: the caller formats again next time).
 * One owner thread; not thread-safe. */
typedef struct ss_stack_memo ss_stack_memo;
typedef struct ss_memo_entry {
    uint64_t id;
    uint64_t value;
    char *data;
    size_t len;
    uint64_t used; /* sweep generation of its last use */
} ss_memo_entry;

/* max_bytes: the cap of the memo (entries and their bytes). */
ss_stack_memo *ss_stack_memo_create(size_t max_bytes);
void ss_stack_memo_destroy(ss_stack_memo *m);
/* The entry of id, marked used; NULL when none (id 0: always NULL). */
const ss_memo_entry *ss_stack_memo_get(ss_stack_memo *m, uint64_t id);
/* Keep a copy of data[0..len) and value for id (replacing an entry of
 * that id). 0, -EINVAL (id 0), -ENOSPC (over the cap) or -ENOMEM. */
int ss_stack_memo_put(ss_stack_memo *m, uint64_t id, uint64_t value, const void *data,
                      size_t len);
/* Forget the entries not used since the previous sweep. */
void ss_stack_memo_sweep(ss_stack_memo *m);
/* Forget everything (a profile period's table indices). */
void ss_stack_memo_clear(ss_stack_memo *m);
typedef struct ss_memo_stats {
    uint64_t hits, misses, refused; /* gets found, gets not found, puts not kept */
    uint32_t entries;
    size_t bytes;                   /* charged to ss_mem now */
} ss_memo_stats;
void ss_stack_memo_stats(const ss_stack_memo *m, ss_memo_stats *st);

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

/* ------------------------------------------------------------------ */
/* The process being profiled                                           */
/* ------------------------------------------------------------------ */

/* What a JVM offers the exporters beyond rounds (jvmti/heapdump.c sets
 * it; NULL in a native process). The calls may block (JNI, a
 * stop-the-world heap dump): agent threads only, never while the VM dies. */
typedef struct ss_jvm_services {
    /* Make an OutOfMemoryError write a heap dump into dir (the manageable
     * flags HeapDumpOnOutOfMemoryError and HeapDumpPath, unless the user
     * set them). 0, 1 (the user's HeapDumpPath points elsewhere) or
     * -errno; `why` says what was done or why not. */
    int (*heap_dump_on_oom)(const char *dir, char *why, size_t n);
    /* Write a heap dump (live objects) to path now. 0 or -errno, `why`. */
    int (*dump_heap)(const char *path, char *why, size_t n);
    /* How many ResourceExhausted events (an OutOfMemoryError) so far. */
    uint64_t (*exhausted)(void);
} ss_jvm_services;

typedef struct ss_process_info {
    pid_t pid;                   /* as the host sees it: the outermost PID namespace
                                    /proc shows (pid 1 in a container is its real pid) */
    pid_t ns_pid;                /* getpid(): in the process's own PID namespace */
    pid_t ppid;
    char exe_path[1024];         /* /proc/self/exe target */
    char exe_name[256];          /* basename of exe_path */
    char program_name[256];      /* the name it was run by (argv[0]'s basename):
                                    local files are named after it */
    char command_line[2048];     /* argv joined by spaces */
    char host_name[256];
    uint64_t start_wall_ms;      /* when the agent started, epoch ms */
    /* JVM only (set by jvmti before exporters start); "" otherwise. */
    char runtime_name[128];      /* java.runtime.name */
    char runtime_version[128];   /* java.runtime.version */
    char runtime_description[256]; /* vendor, vm name, vm version */
    char runtime_banner[256];    /* what jstack prints after "Full thread dump ":
                                    "<java.vm.name> (<java.vm.version> <java.vm.info>)" */
    const ss_jvm_services *jvm;
    ss_runtime runtime;
} ss_process_info;

/* Filled at agent start and again in a forked child. */
const ss_process_info *ss_process(void);
ss_process_info *ss_process_mut(void);
void ss_process_refresh(void);
/* Where the program's short name lives as the host binds it (the loader
 * passes &program_invocation_short_name); NULL: the core's own view. */
void ss_process_set_program_name_ref(char *const *ref);

/* ------------------------------------------------------------------ */
/* Agent threads                                                        */
/* ------------------------------------------------------------------ */

/* Start a native agent thread named "stackshot-<role>" (truncated to the
 * kernel's 15 characters). It blocks every signal, so the host's signals
 * go to the host's threads and the sampler never signals it; threads it
 * creates inherit that mask. Its tid is registered as internal. */
int ss_thread_start(pthread_t *thread, const char *role,
                    void *(*fn)(void *), void *arg);

/* Join with a deadline (monotonic ns). Returns 0 when joined, -ETIMEDOUT
 * when the thread is still running (it is then detached). */
int ss_thread_join(pthread_t thread, uint64_t deadline_ns);

/* Register / look up internal threads by kernel tid (async-signal-safe
 * lookup). Agent threads started by other means (JVMTI) register too. */
void ss_internal_thread_add(pid_t tid);
void ss_internal_thread_remove(pid_t tid);
bool ss_internal_thread_is(pid_t tid);
/* The agent's threads created from now on wait (1 s at most) for thread
 * `tid` of this process to end before they run (thread.c). */
void ss_internal_threads_after(pid_t tid);

/* A library of the agent (gRPC) starts threads of its own, lazily, that
 * its module registers only a moment later: until then a young thread with
 * the agent's signal mask may be one of them (the native sampler leaves
 * those out). Said by the module once; asked by the sampler. */
void ss_internal_threads_lazy(void);
bool ss_internal_threads_are_lazy(void);

pid_t ss_gettid(void); /* async-signal-safe */

/* ------------------------------------------------------------------ */
/* Span context (include/stackshot.h), read by samplers                 */
/* ------------------------------------------------------------------ */

/* Read the calling thread's span context. Async-signal-safe: a handler
 * interrupting a half-done update still reads a consistent pair. */
bool ss_span_current(uint8_t trace_id[16], uint8_t span_id[8]);
/* Where the core's own writer's otel_thread_ctx_v1 lies (agent/span.c):
 * *offset bytes from a thread's thread pointer, *size bytes; false while
 * no thread ever set a span through it. */
bool ss_span_tls_where(ptrdiff_t *offset, size_t *size);

/* OpenTelemetry thread context (OTEP 4947, agent/otel_thread.c): the
 * record of the thread, from every module exporting otel_thread_ctx_v1
 * (libstackshot.so's own writer among them). ss_otel_refresh on the
 * sampler thread before a round (finds the modules; cheap when none was
 * loaded since). ss_otel_read_self in a signal handler, on its own
 * thread (async-signal-safe: loads only; attrs-data up to cap bytes);
 * ss_otel_read_thread for a thread that is not running (the caller checks
 * it did not run meanwhile), through a reader that cannot fault (it
 * returns the bytes read, or < 0). true: a valid
 * record (out->valid is 1, attrs_size what was copied, at most
 * SS_OTEL_ATTRS_MAX). */
void ss_otel_refresh(void);
/* OpenTelemetry process context (OTEP 4719, agent/otel_proc.c): publish
 * (or update) the OTEL_CTX mapping with ss_otel_proc_payload's bytes.
 * Called at every start (a forked child's too); 0 or -errno. */
int ss_otel_proc_publish(void);
/* The ProcessContext message: defined by exporters/otlp/process_ctx.c
 * (the resource every OTLP export carries). */
int ss_otel_proc_payload(ss_buf *b);
bool ss_otel_have_sources(void);
/* A record's attrs-data as "key=value" lines joined by '\n' into out (at
 * most cap bytes, no NUL): key names from threadlocal.attribute_key_map of
 * a process context another publisher made (ss_otel_keymap_refresh);
 * the last occurrence of a key wins; entries whose index the map does not
 * have are left out, and *unknown set (the caller refreshes the map).
 * Returns the length written. Sampler thread only. */
size_t ss_otel_attrs_text(const uint8_t *attrs, size_t n, char *out, size_t cap, bool *unknown);
/* Read the key map again from the process's OTEL_CTX mappings other than
 * the agent's own, through rd (a reader that cannot fault); the number of
 * keys now known. Sampler thread only. */
uint32_t ss_otel_keymap_refresh(long (*rd)(void *, uint64_t, size_t));
bool ss_otel_read_self(uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags,
                       uint8_t *attrs, size_t cap, uint16_t *n_attrs);
/* What ss_otel_read_thread keeps per thread (zero it to start). */
#define SS_OTEL_CACHE 4
typedef struct ss_otel_cache {
    const void *table;
    uint64_t pthread;
    uint64_t slot[SS_OTEL_CACHE];
} ss_otel_cache;
bool ss_otel_read_thread(uint64_t pthread, long (*read)(void *, uint64_t, size_t),
                         ss_otel_cache *cache, ss_otel_rec *out);

/* ------------------------------------------------------------------ */
/* Exporters                                                            */
/* ------------------------------------------------------------------ */

/* Counters every exporter keeps; summed up at exit in the one accounting
 * line (info when something was lost, else debug) and printed on every
 * round at debug level. */
typedef struct ss_exporter_stats {
    _Atomic uint64_t rounds_in;       /* rounds handed to the exporter */
    _Atomic uint64_t rounds_dropped;  /* dropped from its queue (memory cap) */
    _Atomic uint64_t rounds_lost;     /* handed to consume, but their data never reached
                                         the backend (reported as dropped, not delivered) */
    _Atomic uint64_t records_exported;/* records the backend accepted */
    _Atomic uint64_t records_dropped; /* records given up (non-retryable, too big, shutdown) */
    _Atomic uint64_t records_rejected;/* rejected by the backend (partial success) */
    _Atomic uint64_t retries;         /* export attempts retried */
    _Atomic uint64_t failures;        /* failed attempts */
    _Atomic uint64_t bytes_sent;
    /* What the exporter says it consumed and took (set at its close, for
     * the exit's accounting line; 0 and 0: consumed = delivered, records
     * taken = exported + dropped + rejected). */
    _Atomic uint64_t rounds_consumed;
    _Atomic uint64_t records_taken;
} ss_exporter_stats;

/* Rounds lost after they were consumed, for exporters whose data leaves
 * in units that are not rounds (OTLP requests, Zorka traces): a request
 * or trace carries data of the consumed rounds lo..hi (numbered 1, 2, ...
 * in the order the exporter consumed them); when it is dropped or
 * rejected, each of those rounds is counted once in stats->rounds_lost
 * (the fan-out's exit equation then reports it dropped, not delivered).
 * A round counts as lost when any of its data was. Rounds already counted
 * are remembered as a few spans: losses come in runs, and a request and
 * the next one share at most a boundary round. */
#define SS_ROUND_LOSS_SPANS 16
typedef struct ss_round_loss {
    pthread_mutex_t mu; /* marks may come from a sender thread and the exporter's */
    uint32_t n;
    struct {
        uint64_t lo, hi;
    } span[SS_ROUND_LOSS_SPANS]; /* disjoint, not adjacent, ascending */
} ss_round_loss;

void ss_round_loss_init(ss_round_loss *l);
void ss_round_loss_destroy(ss_round_loss *l);
/* Count the rounds lo..hi not counted yet into stats->rounds_lost; returns
 * how many were new. lo == 0 or lo > hi: nothing. */
uint64_t ss_round_loss_mark(ss_round_loss *l, ss_exporter_stats *stats, uint64_t lo, uint64_t hi);

typedef struct ss_exporter_ops {
    const char *name;   /* as written in STACKSHOT_EXPORTERS, "otlp_logs" */
    const char *role;   /* thread name suffix, at most 5 characters */
    uint32_t tick_ms;   /* call tick at least this often (0: never) */
    /* On the exporter thread, before the first round. 0 or -errno; on
     * failure the exporter is disabled (one line says why; -ENOPKG: a
     * module it needs cannot be opened, and ss_module_api said so). */
    int (*open)(void **state, const ss_config *cfg, ss_exporter_stats *stats);
    /* One round. The exporter borrows it; ss_round_ref to keep it. */
    void (*consume)(void *state, ss_round *round);
    /* Periodic work (flush, retry); may be NULL. */
    void (*tick)(void *state, uint64_t mono_now_ns);
    /* Flush what is held before deadline (monotonic ns), then free. */
    void (*close)(void *state, uint64_t deadline_ns);
} ss_exporter_ops;

/* One row of the exporter table: everything the agent needs to know of an
 * exporter (exporters/registry.c fills the table; configuration, the
 * start-up line and the fan-out iterate it). */
typedef struct ss_exporter_def {
    const char *name;          /* as written in STACKSHOT_EXPORTERS; NULL ends the table */
    const ss_exporter_ops *ops; /* NULL when it lives in a module */
    const char *module;        /* ... this one (libstackshot-<module>.so), or NULL */
    const char *const *keys;   /* the configuration keys it reads, NULL-terminated */
    const char *with;          /* also runs whenever the exporter of this name is
                                  selected (NULL: only when named itself) */
    /* Configuration time, before anything starts: 0 when its destination
     * can be used; else it has said why in one line and is left out (a
     * mistake never falls back to a default destination). NULL: nothing
     * to check. */
    int (*check)(void);
} ss_exporter_def;

/* Row i is bit 1u << i of ss_config.exporters (at most 32 rows). */
extern const ss_exporter_def ss_exporter_table[];

/* The row named name[0..n) (case-insensitive), or NULL; its bit. */
const ss_exporter_def *ss_exporter_by_name(const char *name, size_t n);
uint32_t ss_exporter_bit(const char *name); /* 0: no such exporter */
/* The ops of a row: its own, or its module's (opened now, on the calling
 * exporter thread); NULL after one line when the module cannot be opened. */
const ss_exporter_ops *ss_exporter_ops_of(const ss_exporter_def *def);

/* Start the exporters selected in cfg (one thread and one bounded queue
 * each). Returns the number started. */
int ss_exporters_start(const ss_config *cfg);
/* Hand a round (one reference) to every running exporter. Never blocks on
 * an exporter: when queued memory passes the limit the oldest rounds go. */
void ss_exporters_publish(ss_round *round);
/* Flush and stop every exporter before deadline (monotonic ns); prints
 * the counters line of each. */
void ss_exporters_stop(uint64_t deadline_ns);
/* 0 while the exporters run; once their stop has begun, its deadline
 * (monotonic; *began_ns when not NULL: when it began): for waits on a
 * backend that must hear of the exit. */
uint64_t ss_exporters_exit_deadline(uint64_t *began_ns);
/* Print each exporter's counters (level: SS_LOG_INFO at exit). */
void ss_exporters_report(ss_log_level level);

/* ------------------------------------------------------------------ */
/* Lifecycle                                                            */
/* ------------------------------------------------------------------ */

/* A source of rounds: the native sampler or the JVMTI sampler. */
typedef struct ss_source_ops {
    const char *name;
    int (*start)(const ss_config *cfg);
    void (*stop)(uint64_t deadline_ns);
    /* In a forked child, before start() is called again: forget the
     * parent's threads and state without joining or locking. May be NULL. */
    void (*after_fork_child)(void);
} ss_source_ops;

/* Start the agent with a source: load config (already loaded by the
 * caller when cfg is not NULL), start exporters, start the source. */
int ss_agent_start(const ss_source_ops *source, const ss_config *cfg);
/* Stop the source, flush exporters within the shutdown deadline. */
void ss_agent_stop(void);
bool ss_agent_running(void);
/* Around an exec by this process (loader/loader_exec.c): begin stops the
 * agent as at exit (flushing within the shutdown deadline) and returns
 * whether it was running here; after a failed exec, ss_agent_exec_failed
 * starts it again. */
bool ss_agent_exec_begin(void);
void ss_agent_exec_failed(void);
/* In a child with only the calling thread (fork: restart = true, the
 * agent starts again after a moment; clone: false, nothing starts). Run
 * by the core's own at-fork handler, or by the loader's when it has one
 * (ss_agent_set_loader_forks: the core then registers none). */
void ss_agent_fork_child(bool restart);
void ss_agent_set_loader_forks(bool yes);
/* Running, or a forked child's restart is due. */
bool ss_agent_active(void);

/* Is this process a JVM that loads the agent through JVMTI (so the
 * preload constructor must stay out of its way)? */
bool ss_process_is_jvm(void);

#pragma GCC visibility pop

#endif /* SS_AGENT_H */
