/* loader_short.c: a host short of threads or processes gets the agent's.
 *
 * The agent's threads count against the host's limits on tasks:
 * RLIMIT_NPROC (every thread and process of the user), a cgroup's
 * pids.max (systemd's TasksMax=, a container's --pids-limit) and the
 * kernel's threads-max; their stacks count against RLIMIT_AS. A host that
 * creates threads or forks up to its limit got EAGAIN two or three calls
 * earlier with the agent running (a user under `ulimit -u 30` made 27
 * threads instead of 29), and a server sized to its TasksMax failed its
 * last connections.
 *
 * So pthread_create (loader_altstack.c), fork, posix_spawn and
 * posix_spawnp are watched while the agent is enabled for the process.
 * When the host's call fails with EAGAIN and the agent has a thread here
 * (its start thread, a running agent, a forked child's pending restart),
 * the agent leaves the process as it does for mlockall (loader_mlock.c):
 * its threads are joined, what it collected is flushed, the alternate
 * stacks it keeps are unmapped, and it does not come back in this
 * process or in a child it forks. One line says so. The call is then made
 * again. The kernel frees a joined thread's slot when it reaps the thread,
 * a moment after the join, and gRPC's threads (7, ended by grpc_shutdown)
 * go within about a second, more on a loaded machine: while the core
 * counts threads of the agent's not yet reaped (api->threads_alive), for
 * DRAIN_MS after the leave at most, a host call that fails with EAGAIN is
 * retried every millisecond before its EAGAIN is the host's.
 *
 * The calls of the agent's own threads are never taken for the host's:
 * the loader's start thread, the core's threads (marked through
 * ss_core_host.agent_thread_set) and every thread they create through
 * pthread_create carry a mark (their calls reach the loader when the core
 * is not deep-bound, as under a sanitizer), and so does a host thread
 * while it creates one of the agent's threads (the loader's or the core's
 * lock is held then, which leaving would take).
 *
 * Not covered: vfork (a wrapper cannot return twice on one stack),
 * glibc's own spawns (system, popen: internal calls), raw clone (a JVM's
 * thread creation is watched apart: loader_jvm_threads.c), and a cause
 * other than the agent: a host that is short for its own reasons loses
 * its agent (said in the line) and gets its EAGAINs late while the agent's
 * threads end (DRAIN_MS at most). */
#include "loader/ss_loader.h"

#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

#define DRAIN_MS 3000
#define FINAL_TRIES 10

/* CLOCK_MONOTONIC ns until which the agent's threads may still be ending */
static _Atomic uint64_t drain_until;

static __thread bool agent_thread;

bool ss_agent_thread_set(bool on) {
    bool was = agent_thread;
    agent_thread = on;
    return was;
}

bool ss_agent_thread_is(void) { return agent_thread; }

/* Has the agent a thread in this process that it could give back? */
static bool agent_has_threads(void) {
    if (!ss_altstack_enabled())
        return false;
    if (ss_start_armed())
        return true;
    const ss_core_api *api = ss_loader_core();
    return api && api->running();
}

/* The pids.max of the process's cgroup (v2, or v1's pids hierarchy) into
 * out, if it has one below "max". */
static bool pids_max(char *out, size_t n) {
    char line[512], path[700], val[32] = "";
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *rel = NULL, *root = NULL;
        if (strncmp(line, "0::", 3) == 0) {
            rel = line + 3, root = "/sys/fs/cgroup";
        } else {
            char *c = strstr(line, ":pids:");
            if (c)
                rel = c + 6, root = "/sys/fs/cgroup/pids";
        }
        if (!rel)
            continue;
        snprintf(path, sizeof path, "%s%s/pids.max", root, rel);
        FILE *m = fopen(path, "re");
        if (!m)
            continue;
        if (fgets(val, sizeof val, m) && strncmp(val, "max", 3) != 0) {
            val[strcspn(val, "\n")] = '\0';
            snprintf(out, n, "pids.max %s", val);
            found = true;
        }
        fclose(m);
    }
    fclose(f);
    return found;
}

static void say_left(const char *call) {
    /* what may have been reached: root is not held to RLIMIT_NPROC */
    char limits[96] = "", pids[48];
    struct rlimit rl;
    if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(limits, sizeof limits, "RLIMIT_NPROC %llu", (unsigned long long)rl.rlim_cur);
    if (pids_max(pids, sizeof pids))
        snprintf(limits + strlen(limits), sizeof limits - strlen(limits), "%s%s",
                 limits[0] ? ", " : "", pids);
    char msg[320];
    snprintf(msg, sizeof msg,
             "the process is short of threads or processes: %s failed with EAGAIN%s%s%s; the "
             "agent leaves it, so that its threads are the host's",
             call, limits[0] ? " (" : "", limits, limits[0] ? ")" : "");
    ss_loader_say(msg);
}

/* In a JVM (loader_jvm_threads.c) the agent is the core's alone: no start
 * thread, no alternate stacks of ours */
static bool jvm_agent_leaves(void) {
    const ss_core_api *api = ss_loader_core();
    if (!api || !api->running())
        return false;
    api->step_aside(SS_ASIDE_LEAVE); /* nothing to give back */
    return true;
}

static bool short_of_tasks(const char *call, bool jvm) {
    static pthread_mutex_t leave_lock = PTHREAD_MUTEX_INITIALIZER;
    if (agent_thread)
        return false;
    pthread_mutex_lock(&leave_lock);
    bool left = false;
    if (jvm) {
        left = jvm_agent_leaves();
    } else if (agent_has_threads()) {
        ss_start_quiesce(SS_ASIDE_LEAVE); /* nothing to give back */
        ss_altstack_leave();
        ss_start_leave();
        left = true;
    }
    if (left) {
        atomic_store(&drain_until, ss_loader_mono_ns() + DRAIN_MS * 1000000ull);
        say_left(call);
    }
    pthread_mutex_unlock(&leave_lock);
    return ss_loader_mono_ns() < atomic_load(&drain_until);
}

bool ss_short_of_tasks(const char *call) { return short_of_tasks(call, false); }

bool ss_short_of_tasks_jvm(const char *call) { return short_of_tasks(call, true); }

bool ss_short_retry_wait(int *state) {
    if (ss_loader_mono_ns() >= atomic_load(&drain_until))
        return false;
    /* The core's threads leave its count as they end, a moment before the
     * kernel reaps them (a joined start thread, the only one before the
     * core is loaded, too): once none is counted, a few more tries */
    const ss_core_api *api = ss_loader_core();
    bool counted = api && api->size >= offsetof(ss_core_api, threads_alive) + sizeof api->threads_alive;
    if ((!api || (counted && api->threads_alive() == 0)) && (*state)++ >= FINAL_TRIES)
        return false;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    return true;
}

/* ---- the wrappers ---------------------------------------------------- */

typedef pid_t (*fork_fn)(void);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

SS_EXPORT pid_t fork(void) {
    static _Atomic(fork_fn) next;
    fork_fn fn = atomic_load_explicit(&next, memory_order_relaxed);
    if (!fn) {
        if (!(fn = (fork_fn)ss_loader_next("fork")))
            return -1;
        atomic_store_explicit(&next, fn, memory_order_relaxed);
    }
    pid_t pid = fn();
    if (pid >= 0 || errno != EAGAIN)
        return pid;
    if (!ss_short_of_tasks("fork")) {
        errno = EAGAIN;
        return pid;
    }
    int state = 0;
    while ((pid = fn()) < 0 && errno == EAGAIN && ss_short_retry_wait(&state))
        ;
    return pid;
}

static int spawn(spawn_fn fn, const char *call, pid_t *pid, const char *path,
                 const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr,
                 char *const argv[], char *const envp[]) {
    int rc = fn(pid, path, actions, attr, argv, envp);
    if (rc != EAGAIN || !ss_short_of_tasks(call))
        return rc;
    int state = 0;
    while ((rc = fn(pid, path, actions, attr, argv, envp)) == EAGAIN && ss_short_retry_wait(&state))
        ;
    return rc;
}

/* libc's posix_spawn or posix_spawnp, looked up on first use */
static spawn_fn next_spawn(_Atomic(spawn_fn) *slot, const char *name) {
    spawn_fn fn = atomic_load_explicit(slot, memory_order_relaxed);
    if (!fn && (fn = (spawn_fn)ss_loader_next(name)) != NULL)
        atomic_store_explicit(slot, fn, memory_order_relaxed);
    return fn;
}

SS_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    static _Atomic(spawn_fn) next;
    spawn_fn fn = next_spawn(&next, "posix_spawn");
    return fn ? spawn(fn, "posix_spawn", pid, path, actions, attr, argv, envp) : ENOSYS;
}

SS_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    static _Atomic(spawn_fn) next;
    spawn_fn fn = next_spawn(&next, "posix_spawnp");
    return fn ? spawn(fn, "posix_spawnp", pid, file, actions, attr, argv, envp) : ENOSYS;
}
