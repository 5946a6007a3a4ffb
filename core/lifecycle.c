/* lifecycle.c: starting and stopping the agent, and what fork() does to it.
 *
 * A source (the native sampler or the JVMTI sampler) produces rounds;
 * exporters consume them. Start order: configuration, process facts,
 * exporters, source. Stop order is the reverse, all within one deadline
 * (STACKSHOT_SHUTDOWN_TIMEOUT) so the host's exit is never held up longer.
 *
 * fork(): the child has none of the parent's threads. It forgets the
 * parent's exporters and sampler state without touching them (their locks
 * may be held by threads that no longer exist) and starts afresh with its
 * own pid, so its samples are its own. The restart is deferred: the at-fork
 * handler creates no thread; it arms a timer on the forking thread's CPU
 * clock, and the first tick that finds the restart due (100 ms after the
 * fork, whatever the interval) at a safe point creates the "stackshot-fork"
 * thread, which starts the agent, saying so at debug only: the parent's
 * start line stands for its children (see "a forked child's restart
 * without a thread at fork" below; where that cannot be armed, the thread
 * is created at fork, due 100 ms later). A child that execs or exits
 * within those 100 ms (a fork storm, posix-style spawning, a forking
 * server's short connection) never starts an agent of its own, writes no
 * file and no line, and has no thread of ours for its exit to wait for.
 * The host's fork() returns in the child without waiting for the agent's
 * threads, files and connections.
 *
 * exec(): this image ends as at exit, but no destructor runs. The exec
 * functions (loader/loader_exec.c) stop the agent first: queued rounds are
 * flushed within the shutdown deadline and no sampling signal is left
 * pending (it would kill the new image: handlers are reset at exec,
 * pending signals are not). If the exec fails the agent starts again. The
 * new image starts its own agent from the preload constructor if
 * LD_PRELOAD and SPLUNK_PROFILER_ENABLED are still in its environment.
 *
 * Stepping aside (ss_agent_step_aside, for the loader's wrappers of exec,
 * unshare, setns, clone, the set*id family and capset; leaving, for a
 * host short of threads, is a step aside with no way back that also ends
 * gRPC's threads): a forked child's
 * restart thread, which only waits, is joined (or its timer disarmed) and a
 * thread is started again after the call with the same due time; a running agent stops as for exec and
 * starts again after the call, from the calling thread, so that its new
 * threads have the caller's credentials. For the set*id family it stops
 * only when one of its threads' credentials differ from the caller's
 * (thread_creds.c): glibc runs the call on every thread and aborts
 * the process when their results differ, and threads with the same
 * credentials get the same result and follow the host's change. After a
 * set*id call or capset, if one of its threads holds a capability the
 * caller does not (capset changes the caller alone; PR_SET_KEEPCAPS, per
 * thread, decides what a uid change keeps), it stops and starts again. */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/fork_timer.h"
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "proc/threads.h"
#include "agent/span.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "agent/version.h"
#include "loader/ss_core_api.h"
#include "include/stackshot.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

static ss_config config;
static const ss_source_ops *source;
static _Atomic bool running;
static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static bool atfork_installed;
static bool loader_forks; /* the loader's at-fork handler calls ss_agent_fork_child */
/* A forked child's agent is to start (on the stackshot-fork thread);
 * ss_agent_stop cancels it. */
static _Atomic bool restart_pending;
static pid_t restart_pid; /* the child that is to restart (not a vfork child of it) */
/* The stackshot-fork thread, under lifecycle_lock: it waits on restart_cv
 * until restart_due_ns, so that stepping aside can wake and join it. */
static pthread_t restart_thread;
static bool restart_thread_joinable; /* the thread exists and nobody joined it */
static bool restart_cancel;
static uint64_t restart_due_ns;
/* CLOCK_MONOTONIC; initialised at fork (the thread exists only in a forked child) */
static pthread_cond_t restart_cv;

/* A forked child starts its own agent this long after the fork, whatever
 * the interval: one that lives less (a connection of a forking server, a
 * child that execs late) takes no round, says nothing and leaves no file.
 * Its parent's start line stands for it. */
#define RESTART_DELAY_MS 100u

/* STACKSHOT_SHUTDOWN_TIMEOUT of the running agent, readable without the
 * lock: what a host thread may wait for it at exit, exec or a step aside. */
static _Atomic uint32_t shutdown_ms = 2000;
/* Waits on the host's paths that reached the shutdown deadline: the
 * agent's thread was left behind (running, detached) instead. */
static _Atomic uint64_t waits_given_up;

static uint64_t shutdown_deadline(void) {
    return ss_mono_ns() + (uint64_t)atomic_load(&shutdown_ms) * 1000000ull;
}

/* lifecycle_lock, for a host thread: waited for until `deadline_ns` at
 * most (the holder, an agent thread starting the agent, could be stuck
 * in a system call). false: not taken, counted. */
static bool lock_until(uint64_t deadline_ns) {
    struct timespec ts = ss_realtime_at(deadline_ns);
    if (pthread_mutex_timedlock(&lifecycle_lock, &ts) == 0)
        return true;
    atomic_fetch_add(&waits_given_up, 1);
    return false;
}

/* The restart thread, joined until `deadline_ns` at most; later, it is
 * left detached (ss_thread_join) and counted. */
static void join_restart(pthread_t t, uint64_t deadline_ns) {
    if (ss_thread_join(t, deadline_ns) != 0)
        atomic_fetch_add(&waits_given_up, 1);
}

bool ss_agent_running(void) { return atomic_load(&running); }

static void exporter_names(char *out, size_t n, uint32_t bits) {
    out[0] = '\0';
    size_t len = 0;
    for (int i = 0; ss_exporter_table[i].name && i < 32; i++)
        if (bits & (1u << i)) {
            int w = snprintf(out + len, n - len, "%s%s", len ? "," : "",
                             ss_exporter_table[i].name);
            if (w < 0 || (size_t)w >= n - len)
                break;
            len += (size_t)w;
        }
    if (!len)
        snprintf(out, n, "none");
}

/* How a start is told in the host's log: the first start of a process
 * at info; a restart after stepping aside for an exec that failed or a
 * namespace call, and a forked child's own start, at debug (the host's
 * log heard the first start already: a forking server's log gets one
 * line per server start, not one per connection). */
typedef enum start_kind { START_FIRST = 0, START_AGAIN, START_FORKED } start_kind;

/* Is this process a forked copy of a parent that runs this agent too
 * (its start armed or done: a thread of ours in it), same executable? A
 * forking server's children forked before its first round (PostgreSQL's
 * background processes, forked in its first second) start their own
 * agent from the loader's start thread, as a first start: their line
 * would be one more per child. Unreadable: no. */
static bool parent_runs_agent_too(void) {
    char path[64], mine[PATH_MAX], theirs[PATH_MAX];
    pid_t ppid = getppid();
    if (ppid <= 1)
        return false;
    ssize_t a = readlink("/proc/self/exe", mine, sizeof mine - 1);
    snprintf(path, sizeof path, "/proc/%d/exe", (int)ppid);
    ssize_t b = readlink(path, theirs, sizeof theirs - 1);
    if (a <= 0 || b <= 0 || a != b || memcmp(mine, theirs, (size_t)a) != 0)
        return false;
    return ss_proc_has_thread_named(ppid, "stackshot-") == 1;
}

static void forget_parent(void);
static bool fork_forget_due;

static int start_locked(start_kind kind) {
    /* a forked child's first start: what its at-fork handler left */
    if (fork_forget_due)
        forget_parent();
    ss_mem_set_limit(config.max_memory);
    ss_process_refresh();
    (void)ss_otel_proc_publish(); /* for readers outside: docs/otel-context.md */
    ss_exporters_start(&config);
    int rc = source->start(&config);
    if (rc != 0) {
        /* -EBUSY: the signal is the host's, and the sampler said so */
        ss_log(rc == -EBUSY ? SS_LOG_DEBUG : SS_LOG_ERROR,
               "%s sampler did not start (%s); the agent stays off", source->name,
               strerror(-rc));
        ss_exporters_stop(ss_mono_ns() + (uint64_t)config.shutdown_ms * 1000000ull);
        return rc;
    }
    atomic_store(&running, true);
    char names[128];
    exporter_names(names, sizeof names, config.exporters);
    /* a forked child says what its parent said: tests and readers match it */
    static const char *const said[] = {"started", "started again", "started"};
    if (kind == START_FIRST && parent_runs_agent_too())
        kind = START_FORKED;
    ss_log(kind == START_FIRST ? SS_LOG_INFO : SS_LOG_DEBUG,
           "%s in pid %d (%s sampler, every %u ms, exporters %s, output %s)", said[kind],
           (int)ss_process()->pid, source->name, config.interval_ms, names, config.output_dir);
    return 0;
}

/* The stackshot-fork thread: waits until the restart is due (or is
 * cancelled: by stepping aside, which joins it; by exit or exec, which
 * detach it and do not wait), then starts the agent. Not cancelled, it
 * detaches itself: nobody will join it. */
static void *restart_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lifecycle_lock);
    while (!restart_cancel && ss_mono_ns() < restart_due_ns)
        ss_cond_wait_until(&restart_cv, &lifecycle_lock, restart_due_ns);
    /* a thread whose join gave up (left detached) and that a newer
     * restart thread replaced: the restart is not its business */
    if (!restart_cancel && pthread_equal(restart_thread, pthread_self())) {
        /* pending until started: a fork during start_locked must restart too */
        if (atomic_load(&restart_pending) && !atomic_load(&running))
            start_locked(START_FORKED);
        atomic_store(&restart_pending, false);
        restart_thread_joinable = false;
        pthread_detach(pthread_self());
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return NULL;
}

/* With lifecycle_lock held: the restart thread, due at restart_due_ns. */
static void spawn_restart_locked(void) {
    restart_cancel = false;
    atomic_store(&restart_pending, true);
    if (ss_thread_start(&restart_thread, "fork", restart_main, NULL) != 0) {
        atomic_store(&restart_pending, false);
        ss_error("cannot start a thread in the forked child (pid %d); the agent stays off "
                 "there",
                 (int)getpid());
        return;
    }
    restart_thread_joinable = true;
}

/* ---- a forked child's restart without a thread at fork -------------------
 *
 * The restart thread is created late, from a timer on the forking
 * thread's CPU clock (agent/fork_timer.c); where that cannot be armed, at
 * fork, due 100 ms later. */

/* From the timer's handler, at a safe point, the restart due. */
static bool restart_fire(void) {
    if (pthread_mutex_trylock(&lifecycle_lock) != 0)
        return false;
    if (ss_fork_timer_armed() && atomic_load(&restart_pending)) {
        ss_fork_timer_disarm();
        spawn_restart_locked();
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return true;
}

/* With lifecycle_lock held: the restart thread leaves, without starting
 * anything; returns whether there is one to join (its handle in *t).
 * With `wait` false nobody joins it and it is not even woken: it is
 * detached, and leaves by itself at its due time, or ends with the
 * process or the image (exit, exec). A forked child that exits or execs
 * before its restart pays no context switch for a thread that has
 * nothing to do. */
static bool cancel_restart_locked(pthread_t *t, bool wait) {
    ss_fork_timer_cancel();
    atomic_store(&restart_pending, false);
    restart_cancel = true;
    bool join = restart_thread_joinable;
    *t = restart_thread;
    restart_thread_joinable = false;
    if (!join)
        return false;
    if (!wait) {
        pthread_detach(*t);
        return false;
    }
    pthread_cond_broadcast(&restart_cv);
    return true;
}

/* The parent's agent state, forgotten: its exporters, its memory count,
 * its sampler's state. A child that restarts does it at its start
 * (fork_forget_due); others at once. */
static uint64_t fork_main_pthread; /* the thread that forked */

static void forget_parent(void) {
    fork_forget_due = false;
    ss_exporters_forget();
    ss_mem_reset();
    if (source && source->fork_forget)
        source->fork_forget(fork_main_pthread);
}

/* The child's at-fork handler writes as few pages as it can: each page it
 * writes is one the fork shared with the parent, copied on that first
 * write (a page fault and 4 KiB copied), and a child that exits or execs
 * before its restart, the common case for a forking server, never needs
 * the rest (forget_parent, at the child's start). What stays here is what
 * a host thread of the child may use before then: the lifecycle lock, the
 * log's lock, the registry of the agent's threads (the set*id wrappers
 * look there). The parent's /proc descriptors are closed at the start
 * too (the source's fork_forget). */
void ss_agent_fork_child(bool restart, bool libdw_inherited) {
    /* Only this thread exists now. Locks of the parent's agent threads may
     * be held forever: reinitialise ours, forget the rest. A parent that
     * was itself a child still waiting for its restart passes it on (and
     * its own state still to forget, fork_forget_due). */
    pthread_mutex_init(&lifecycle_lock, NULL);
    ss_cond_init_mono(&restart_cv);
    restart_thread_joinable = false; /* the parent's, not here */
    if (!libdw_inherited && source && source->fork_lost_libdw)
        source->fork_lost_libdw();
    ss_fork_timer_forget(); /* a parent's timer is not inherited: its handler is */
    ss_log_after_fork();
    if (!atomic_load(&running) && !atomic_load(&restart_pending)) {
        /* not started, or forked while starting: forget what the start
         * had built for threads that are not here */
        ss_internal_threads_reset();
        ss_exporters_forget();
        if (source && source->after_fork_child)
            source->after_fork_child();
        if (source && source->fork_forget)
            source->fork_forget((uint64_t)pthread_self());
        fork_forget_due = false;
        return;
    }
    /* running, or a child still waiting for its restart whose own
     * parent's state is still to forget (fork_forget_due, inherited) */
    if (atomic_load(&running))
        fork_forget_due = true;
    atomic_store(&running, false);
    atomic_store(&restart_pending, false);
    ss_internal_threads_reset();
    if (fork_forget_due)
        fork_main_pthread = (uint64_t)pthread_self(); /* this child's main thread */
    if (source->after_fork_child)
        source->after_fork_child();
    if (!restart) {
        if (fork_forget_due)
            forget_parent();
        return;
    }
    restart_pid = (pid_t)syscall(SYS_getpid);
    restart_due_ns = ss_mono_ns() + (uint64_t)RESTART_DELAY_MS * 1000000ull;
    restart_cancel = false;
    atomic_store(&restart_pending, true);
    int sampler_signals[2] = {config.signal, SIGRTMIN}; /* SIGRTMIN: a Go program's */
    if (!ss_fork_timer_arm(restart_due_ns, sampler_signals, 2, restart_fire))
        spawn_restart_locked();
}

static void child_after_fork(void) { ss_agent_fork_child(true, true); }

void ss_agent_set_loader_forks(bool yes) { loader_forks = yes; }

bool ss_agent_active(void) {
    return atomic_load(&running) || atomic_load(&restart_pending);
}

int ss_agent_start(const ss_source_ops *src, const ss_config *cfg) {
    pthread_mutex_lock(&lifecycle_lock);
    if (atomic_load(&running)) {
        pthread_mutex_unlock(&lifecycle_lock);
        return 0;
    }
    if (cfg)
        config = *cfg;
    else
        ss_config_load(&config);
    atomic_store(&shutdown_ms, config.shutdown_ms);
    source = src;
    int rc = start_locked(START_FIRST);
    if (rc == 0)
        (void)ss_fork_timer_scan();
    if (rc == 0 && !atfork_installed && !loader_forks) {
        pthread_atfork(NULL, NULL, child_after_fork);
        atfork_installed = true;
    }
    pthread_mutex_unlock(&lifecycle_lock);
    return rc;
}

/* Stops within STACKSHOT_SHUTDOWN_TIMEOUT, counted from the call: the
 * host's exit and exec wait no longer. An agent thread that holds the
 * lifecycle lock past it (stuck while starting the agent) is left as it
 * is: the process ends without it. */
void ss_agent_stop(void) {
    pthread_t t;
    uint64_t deadline = shutdown_deadline();
    if (!lock_until(deadline)) {
        ss_warn("the agent did not stop within STACKSHOT_SHUTDOWN_TIMEOUT (%u ms): one of "
                "its threads is busy starting it; left behind",
                (unsigned)atomic_load(&shutdown_ms));
        return;
    }
    /* a forked child exiting early: its restart thread is not waited for */
    bool join = cancel_restart_locked(&t, false);
    bool stopped = atomic_exchange(&running, false);
    if (stopped) {
        source->stop(deadline);
        ss_exporters_stop(deadline);
    }
    pthread_mutex_unlock(&lifecycle_lock);
    if (join)
        join_restart(t, deadline);
    if (stopped) {
        ss_log_report();
        uint64_t given_up = atomic_load(&waits_given_up);
        if (given_up)
            ss_debug("lifecycle: %llu waits for the agent's threads given up at the "
                     "shutdown deadline (threads left behind)",
                     (unsigned long long)given_up);
    }
}

/* ---- stepping aside -------------------------------------------------- */

enum { BACK_NONE = 0, BACK_START, BACK_REARM, BACK_CHECK_CAPS };

int ss_agent_step_aside(int kind) {
    pid_t pid = (pid_t)syscall(SYS_getpid);
    pthread_t t;
    uint64_t deadline = shutdown_deadline();
    /* not taken in time: a thread of ours is stuck starting the agent;
     * the host's call goes ahead (an exec ends that thread anyway) */
    if (!lock_until(deadline))
        return BACK_NONE;
    /* A forked child whose restart is still due: its thread only waits.
     * It is joined; after the call it is started again, due as before
     * (not after an exec, which ends this image). */
    if (atomic_load(&restart_pending) && restart_pid == pid) {
        bool join = cancel_restart_locked(&t, kind != SS_ASIDE_EXEC);
        pthread_mutex_unlock(&lifecycle_lock);
        if (join)
            join_restart(t, deadline);
        return kind == SS_ASIDE_EXEC || kind == SS_ASIDE_LEAVE ? BACK_NONE : BACK_REARM;
    }
    bool here = atomic_load(&running) && ss_process()->ns_pid == pid;
    pthread_mutex_unlock(&lifecycle_lock);
    /* A vfork child shares our memory but not our threads: the agent is
     * the parent's, and must go on for it. */
    if (!here)
        return BACK_NONE;
    if (kind == SS_ASIDE_CAPS)
        return BACK_CHECK_CAPS; /* nothing changes for our threads before */
    /* Same credentials, same result: they follow the host's change. What
     * /proc does not show (PR_SET_KEEPCAPS, per thread) can still leave
     * them with capabilities the caller lost: looked at after. */
    if (kind == SS_ASIDE_IDS && ss_creds_same_as_caller())
        return BACK_CHECK_CAPS;
    ss_agent_stop();
    if (kind == SS_ASIDE_LEAVE) {
        ss_exporters_release();
        return BACK_NONE;
    }
    /* a signal the last round sent to this thread is taken on the return
     * of this system call at the latest */
    sched_yield();
    return BACK_START;
}

static void start_again(void) {
    if (!lock_until(shutdown_deadline()))
        return;
    if (!atomic_load(&running) && source)
        start_locked(START_AGAIN);
    pthread_mutex_unlock(&lifecycle_lock);
}

void ss_agent_step_back(int token) {
    if (token == BACK_START) {
        start_again();
    } else if (token == BACK_REARM) {
        if (!lock_until(shutdown_deadline()))
            return;
        if (!atomic_load(&running) && !atomic_load(&restart_pending))
            spawn_restart_locked();
        pthread_mutex_unlock(&lifecycle_lock);
    } else if (token == BACK_CHECK_CAPS && ss_creds_exceed_caller()) {
        /* the caller gave up capabilities our threads still hold: they
         * end, and new ones start from the caller with its own */
        ss_agent_stop();
        start_again();
    }
}

bool ss_agent_exec_begin(void) {
    return ss_agent_step_aside(SS_ASIDE_EXEC) == BACK_START;
}

void ss_agent_exec_failed(void) { start_again(); }

/* ---- the public API (include/stackshot.h) -------------------------- */

const char *stackshot_version(void) { return SS_VERSION; }

void stackshot_stop(void) { ss_agent_stop(); }
