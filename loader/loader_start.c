/* loader_start.c: when a preloaded agent starts.
 *
 * At load the loader only reads what it needs to decide (enabled, not a
 * JVM, not a sandboxed Chromium helper, the interval) and arms the start:
 * one "stackshot-start" thread that sleeps until the first round is due
 * (one interval after load), then opens the agent core and starts it.
 * Until then nothing else exists: the core and its libraries are not
 * mapped, no file is created, no line is printed, no signal handler is
 * installed. A process that exits or execs before the first round is due
 * leaves nothing behind.
 *
 * Why a thread at all: with no thread of its own, code of the agent can
 * run at a chosen time only if a host thread is interrupted (a signal),
 * and a signal makes a host thread's nanosleep, poll or epoll_wait return
 * EINTR. A process whose only thread sleeps has nobody else to run the
 * start. The start thread blocks every signal, takes no lock a host
 * thread takes, and sleeps on a condition variable of its own.
 *
 * What a host can notice is the thread itself. The calls that need a
 * single-threaded process (unshare, setns, clone for a new process, the
 * exec family) or that glibc runs on every thread (the set*id family:
 * loader_ids.c) are interposed by the loader and quiesce it first
 * (ss_start_quiesce: the start thread is joined, or the running agent
 * steps aside, agent/lifecycle.c), then resume (ss_start_resume: a start
 * thread spawned again by the caller has the caller's credentials).
 * Hosts that count their threads with raw system calls cannot be served
 * that way: the sandboxed helpers of Chromium-based programs (command
 * line with --type=zygote, renderer, gpu-process, utility...) check it
 * right after start and run under seccomp afterwards, so the agent stays
 * out of them (the browser process itself is profiled).
 *
 * Launchers: a process whose threads all wait for children or signals
 * while a child runs another program (timeout, runuser, a shell waiting
 * for its command) has nothing to show but that wait; its start is put
 * off by one interval at a time for as long as it stays so. One whose
 * child runs another program but that is not waiting yet, or that waits
 * for a child forked less than a second ago that has not exec'd yet, is
 * looked at again every 50 ms, for a second at most. Its child, the
 * program, starts its own agent.
 *
 * A launcher stops looking like one at its end: timeout's timer fires,
 * it kills its child and reaps it, then exits; a shell's command ends.
 * Two rules cover every moment of that end. A child that is exiting or a
 * zombie (its executable no longer readable) still counts as running
 * another program when its name differs from ours (exec sets the name,
 * fork keeps it), so a launcher killing its child is still one. And a
 * process once seen as a launcher is looked at again every 50 ms, for a
 * second at most, when it no longer looks like one: it has reaped its
 * child and is on its way out (the exit cancels the start), or it
 * launches again, or after that second it has work of its own and
 * starts. Programs whose only job is to launch another (timeout, env,
 * nice, setpriv, flock, xargs...) are known by name: launchers at rest
 * whatever they do, which covers the moments the rules above cannot
 * tell from a program (not forked yet, or already past their child's
 * end, at the first look).
 *
 * fork(): a child of an armed process arms again (its first round is due
 * when its parent's is, but not before 100 ms after the fork, whatever
 * the interval: a short-lived child leaves nothing). Its start thread is
 * created at fork, unless its parent forks often (more than OFTEN_FORKS
 * times within a second: a shell, make, a fork loop): then once due, from
 * a timer on the forking thread's CPU clock, at a safe point
 * (agent/fork_timer.c), and a child that exits or execs first has had no
 * thread of ours. The timer fires only while that thread computes: a
 * daemon's few workers, idle after their fork, keep a thread at fork and
 * have their agent while idle. A child of a started process is the core's
 * business (agent/lifecycle.c), reached through api->fork_child. */
#include "agent/fork_timer.h"
#include "agent/ms_keys.h"
#include "loader/ss_loader.h"
#include "agent/main_arena.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FORK_DELAY_NS 100000000ull /* a forked child: at least this after fork */

typedef enum start_state {
    START_OFF = 0, /* disabled, a JVM, a sandboxed helper, or no longer armed */
    START_ARMED,   /* the start thread sleeps until `due_ns` */
    START_RUNNING, /* the start thread is opening and starting the core */
    START_DONE,    /* the core is loaded: its own lifecycle rules */
} start_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond; /* CLOCK_MONOTONIC */
/* Written under `lock`; read without it where a stale value is harmless
 * (the span API's hot path, a vfork child's check). */
static _Atomic start_state state;
static bool thread_alive; /* a start thread exists (joinable) */
/* Which start thread is the current one: a thread whose generation is
 * no longer `generation` leaves by itself, without anybody waiting for
 * it (exit and exec cancel that way: ss_start_disarm). */
static unsigned generation;
static pthread_t start_thread;
static uint64_t due_ns;      /* monotonic: the first round is due */
static uint64_t interval_ns;
/* STACKSHOT_SHUTDOWN_TIMEOUT: the longest the host's exit or exec waits
 * for the start thread */
static uint64_t shutdown_ns = 2000000000ull;
static pid_t armed_pid; /* the process the start thread belongs to */
/* The start thread's stack, ours (not glibc's): unmapped once the thread
 * is joined. glibc keeps the stacks of ended threads for new ones, and a
 * process that locks its memory (loader_mlock.c) would find a cached
 * stack of ours counted against its limit. NULL once the thread is
 * detached (it may still run on it). */
static void *start_stack;
#define START_STACK_SIZE (1024u * 1024u)

uint64_t ss_loader_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t current_pid(void) { return (pid_t)syscall(SYS_getpid); }

static void init_cond(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&cond, &a);
    pthread_condattr_destroy(&a);
}

/* A key in ms as the core reads it; a bad value is the core's to report
 * (at start), here it means the default. */
static uint32_t ms_from_env(const char *key, uint32_t def, uint32_t min, uint32_t max) {
    uint32_t ms = def;
    return ss_ms_parse(getenv(key), min, max, &ms) == 0 ? ms : def;
}

static uint32_t interval_from_env(void) {
    return ms_from_env(SS_INTERVAL_KEY, SS_INTERVAL_DEFAULT_MS, SS_INTERVAL_MIN_MS,
                       SS_INTERVAL_MAX_MS);
}

/* ---- who is a launcher at rest ---------------------------------------- */

/* System calls in which a thread waits for a child or a signal. */
static bool waits_for_child(long nr) {
    return nr == SYS_wait4 || nr == SYS_waitid || nr == SYS_rt_sigsuspend ||
           nr == SYS_pause || nr == SYS_rt_sigtimedwait;
}

static long thread_syscall(const char *tid) {
    char path[300], buf[64];
    snprintf(path, sizeof path, "/proc/self/task/%s/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -2;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -2;
    buf[n] = '\0';
    if (strncmp(buf, "running", 7) == 0)
        return -1;
    return strtol(buf, NULL, 10);
}

/* Clock ticks since boot at which process `child` started (field 22 of
 * /proc/<pid>/stat), or 0 when unreadable. */
static unsigned long long child_start_ticks(long child) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", child);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    if (!p)
        return 0;
    /* after ")": field 3 (state) ... field 22 (starttime) */
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Has process `child` run for less than YOUNG_CHILD_NS? Unknown: no. */
#define YOUNG_CHILD_NS 1000000000ull
static bool child_is_young(long child) {
    unsigned long long start = child_start_ticks(child);
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec now;
    if (!start || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0)
        return false;
    uint64_t started_ns = (uint64_t)(start * (1000000000ull / (unsigned long long)hz));
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
    return now_ns < started_ns + YOUNG_CHILD_NS;
}

/* The name (comm) of process `pid` ("self" or a number), "" unreadable. */
static void proc_comm(const char *pid, char *out, size_t n) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/comm", pid);
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t len = read(fd, out, n - 1);
    close(fd);
    out[len > 0 ? len : 0] = '\0';
}

/* A child whose executable can no longer be read (exiting, or a zombie)
 * ran another program if its name differs from ours: exec sets the name,
 * fork keeps it. */
static bool exiting_child_ran_other(long child) {
    char pid[24], theirs[32], ours[32];
    snprintf(pid, sizeof pid, "%ld", child);
    proc_comm(pid, theirs, sizeof theirs);
    proc_comm("self", ours, sizeof ours);
    return theirs[0] && ours[0] && strcmp(theirs, ours) != 0;
}

typedef enum child_kind {
    NO_CHILD = 0,
    CHILD_OURS,      /* runs our executable and has for a while (a worker) */
    CHILD_FORKED,    /* runs our executable, forked a moment ago: may be on its way to exec */
    CHILD_OTHER,     /* runs another program */
} child_kind;

/* What the children listed in /proc/self/task/<tid>/children run: the
 * "highest" kind found. */
static child_kind children_of(const char *tid, const char *self_exe) {
    char path[300], list[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/children", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NO_CHILD;
    ssize_t n = read(fd, list, sizeof list - 1);
    close(fd);
    if (n <= 0)
        return NO_CHILD;
    list[n] = '\0';
    child_kind found = NO_CHILD;
    for (char *p = list, *end; *p; p = end) {
        long child = strtol(p, &end, 10);
        if (end == p)
            break;
        char exe[PATH_MAX];
        snprintf(path, sizeof path, "/proc/%ld/exe", child);
        ssize_t len = readlink(path, exe, sizeof exe - 1);
        if (len <= 0) {
            /* no memory left: it is exiting or a zombie (a launcher's
             * program just killed, not reaped yet); its name still says
             * whether it ran another program */
            if (exiting_child_ran_other(child))
                return CHILD_OTHER;
            continue;
        }
        exe[len] = '\0';
        if (strcmp(exe, self_exe) != 0)
            return CHILD_OTHER;
        child_kind k = child_is_young(child) ? CHILD_FORKED : CHILD_OURS;
        if (k > found)
            found = k;
    }
    return found;
}

/* Programs that only launch another: they set something up (a timer,
 * limits, a scheduling class, credentials, namespaces, a root, a lock)
 * and exec the program or fork it and wait. Known by name, such a
 * process is a launcher at rest whatever it does: before it has forked
 * (a loaded machine may not have run it that far when the start first
 * looks), after it has reaped its child (on its way out), while it
 * waits in poll (sudo) or for a lock (flock) or reads its input (xargs):
 * moments a launcher unknown by name cannot be told from a program. Its
 * start is put off for as long as it lives; what it runs starts its own
 * agent. The name is the executable's (or, for a multi-call binary such
 * as busybox, the one it was run by: comm). */
static const char *const known_launchers[] = {
    "timeout", "nohup",   "env",     "nice",    "ionice", "stdbuf",  "setsid",
    "taskset", "chrt",    "prlimit", "runuser", "su",     "sudo",    "setpriv",
    "unshare", "nsenter", "chroot",  "flock",   "xargs",  "numactl", "tini",
    "dumb-init", NULL,
};

static bool is_known_launcher(const char *name) {
    for (const char *const *k = known_launchers; *k; k++)
        if (strcmp(name, *k) == 0)
            return true;
    return false;
}

static bool known_launcher(const char *self_exe) {
    const char *slash = strrchr(self_exe, '/');
    if (self_exe[0] && is_known_launcher(slash ? slash + 1 : self_exe))
        return true;
    char comm[32];
    proc_comm("self", comm, sizeof comm);
    comm[strcspn(comm, "\n")] = '\0';
    return comm[0] && is_known_launcher(comm);
}

typedef enum launcher_state {
    NOT_LAUNCHER = 0,
    LAUNCHING,        /* a child runs another program; we are not waiting yet */
    LAUNCHER_AT_REST, /* ... and every thread waits for it or for a signal */
} launcher_state;

/* Every thread but ours waits for a child or a signal, and a child runs
 * another program: timeout, runuser, sudo's parent, a shell running a
 * command. A child forked a moment ago that still runs our executable
 * may be about to exec (a loaded machine can take long to get it there):
 * a process waiting for such a child is looked at again, like one that
 * launched and does not wait yet. Anything unreadable means "no". */
static launcher_state launcher(void) {
    char self_exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe[len > 0 ? len : 0] = '\0';
    if (known_launcher(self_exe))
        return LAUNCHER_AT_REST;
    if (len <= 0)
        return NOT_LAUNCHER;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return NOT_LAUNCHER;
    pid_t me = (pid_t)syscall(SYS_gettid);
    bool waiting = true;
    child_kind children = NO_CHILD;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == me)
            continue;
        if (waiting)
            waiting = waits_for_child(thread_syscall(e->d_name));
        if (children != CHILD_OTHER) {
            child_kind k = children_of(e->d_name, self_exe);
            if (k > children)
                children = k;
        }
    }
    closedir(d);
    if (children == CHILD_OTHER)
        return waiting ? LAUNCHER_AT_REST : LAUNCHING;
    return children == CHILD_FORKED && waiting ? LAUNCHING : NOT_LAUNCHER;
}

/* ---- the start thread -------------------------------------------------- */

#define LAUNCH_SETTLE_NS 50000000ull /* 50 ms */
#define LAUNCH_SETTLE_TRIES 20         /* a second at most */

static void *start_main(void *arg) {
    unsigned mine = (unsigned)(uintptr_t)arg;
    pthread_setname_np(pthread_self(), "stackshot-start");
    int settling = 0;
    /* seen as a launcher once: it stays one until it has looked like
     * anything else for a second (see the header) */
    bool launched = false;
    /* for the children the host forks before the start: here, not in the
     * constructor (a process that only starts and exits pays nothing) */
    (void)ss_fork_timer_scan();
    pthread_mutex_lock(&lock);
    for (;;) {
        while (mine == generation && ss_loader_mono_ns() < due_ns) {
            struct timespec ts = {.tv_sec = (time_t)(due_ns / 1000000000ull),
                                  .tv_nsec = (long)(due_ns % 1000000000ull)};
            pthread_cond_timedwait(&cond, &lock, &ts);
        }
        if (mine != generation) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        pthread_mutex_unlock(&lock);
        launcher_state ls = launcher();
        pthread_mutex_lock(&lock);
        if (mine != generation) {
            pthread_mutex_unlock(&lock);
            return NULL; /* cancelled while it looked: exit or exec under way */
        }
        if (ls != NOT_LAUNCHER)
            launched = true;
        if (ls == LAUNCHER_AT_REST) {
            due_ns = ss_loader_mono_ns() + interval_ns; /* look again one interval later */
            settling = 0;
        } else if ((ls == LAUNCHING || launched) && settling < LAUNCH_SETTLE_TRIES) {
            /* it launched a program and is on its way to wait for it (a
             * loaded machine may not have run it that far), or it was a
             * launcher and its program has just ended or is being killed
             * (timeout's timer fired): look again soon, a few times */
            due_ns = ss_loader_mono_ns() + LAUNCH_SETTLE_NS;
            settling++;
        } else {
            break;
        }
    }
    state = START_RUNNING;
    pthread_mutex_unlock(&lock);

    const ss_core_api *api = ss_loader_load_core();
    if (api)
        api->autostart();

    pthread_mutex_lock(&lock);
    state = api ? START_DONE : START_OFF;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* The start thread: under an RLIMIT_AS, on glibc's main malloc arena
 * before anything it does allocates (the task listing, dlopen's link
 * maps), and off it at its end (main_arena.c). */
static void *start_run(void *arg) {
    ss_agent_thread_set(true);
    bool shared = ss_main_arena_find();
    void *r = start_main(arg);
    if (shared)
        ss_main_arena_detach();
    return r;
}

static size_t page_bytes(void) {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

/* A guard page, then START_STACK_SIZE bytes; NULL if it cannot be had. */
static void *map_start_stack(void) {
    size_t guard = page_bytes();
    void *base = mmap(NULL, guard + START_STACK_SIZE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    if (mprotect(base, guard, PROT_NONE) != 0) {
        munmap(base, guard + START_STACK_SIZE);
        return NULL;
    }
    return base;
}

/* The stack of a start thread that has been joined; never the one the
 * calling thread runs on. */
static void unmap_stack(void *base) {
    size_t len = page_bytes() + START_STACK_SIZE;
    char here;
    if (base && !((uintptr_t)&here - (uintptr_t)base < len))
        munmap(base, len);
}

/* With the lock held: a start thread that sleeps until due_ns. */
static void spawn_locked(void) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the thread */
    generation++;
    /* a small stack: the thread sleeps, then opens the core (dlopen runs
     * the libraries' constructors on it, and under ASan frames are larger) */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    start_stack = map_start_stack();
    if (start_stack)
        pthread_attr_setstack(&attr, (char *)start_stack + page_bytes(), START_STACK_SIZE);
    else
        pthread_attr_setstacksize(&attr, START_STACK_SIZE);
    /* never real-time, as the core's threads (agent/thread.c): a real-time
     * host's thread would have made it so */
    int policy = sched_getscheduler(0);
    if (policy >= 0 && ((policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO ||
                        (policy & ~SCHED_RESET_ON_FORK) == SCHED_RR)) {
        struct sched_param sp = {.sched_priority = 0};
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_OTHER);
        pthread_attr_setschedparam(&attr, &sp);
    }
    bool was = ss_agent_thread_set(true); /* its EAGAIN is not the host's */
    int rc = pthread_create(&start_thread, &attr, start_run, (void *)(uintptr_t)generation);
    ss_agent_thread_set(was);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        unmap_stack(start_stack);
        start_stack = NULL;
    }
    thread_alive = rc == 0;
    armed_pid = current_pid();
    state = rc == 0 ? START_ARMED : START_OFF;
}

/* With the lock held: make the start thread leave; wait for a start in
 * progress to end. Returns the state found (ARMED: it was cancelled and
 * may be spawned again). The host's exit or exec waits
 * STACKSHOT_SHUTDOWN_TIMEOUT at most: a start still under way then (none
 * should be: the agent's lines never wait for a reader) is left behind,
 * detached, and RUNNING is returned.
 *
 * A thread that only waits is not waited for when `join` is false (exit
 * and exec: the kernel ends it with the process or the image, and a
 * short-lived process must not pay a context switch for a thread that has
 * nothing to do): it is detached and its generation ends, and it leaves
 * by itself if it wakes first. Not even woken: waking it would have it
 * compete for a CPU with the exiting thread. The calls that need the
 * process single-threaded (unshare, setns, clone, the set*id family)
 * join it. */
static start_state stop_thread_locked(bool join) {
    ss_fork_timer_cancel(); /* a forked child whose thread is not created yet */
    uint64_t until = ss_loader_mono_ns() + shutdown_ns;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    while (state == START_RUNNING && ss_loader_mono_ns() < until)
        pthread_cond_timedwait(&cond, &lock, &ts);
    start_state was = state;
    if (!thread_alive)
        return was;
    thread_alive = false;
    generation++; /* the thread's own: it leaves at its next look */
    if (was == START_RUNNING || !join) {
        pthread_detach(start_thread);
        start_stack = NULL; /* it may run on it yet: left mapped */
        return was;
    }
    pthread_cond_broadcast(&cond);
    pthread_t t = start_thread;
    void *stack = start_stack;
    start_stack = NULL;
    pthread_mutex_unlock(&lock);
    pthread_join(t, NULL); /* it only waits, on our condition variable */
    pthread_mutex_lock(&lock);
    unmap_stack(stack);
    return was;
}

/* ---- fork ---------------------------------------------------------------- */

#define FORK_WAIT_START_NS 500000000ull /* a fork waits this long at most */

/* The forks of this armed process within the current second, counted by
 * the prepare handler (glibc runs those one fork at a time); a child reads
 * its parent's count (the fork copied it) and starts its own. */
#define OFTEN_FORKS 8
static _Atomic uint64_t forks_since_ns;
static _Atomic unsigned forks_counted;

static void count_fork(void) {
    uint64_t now = ss_loader_mono_ns();
    if (now - atomic_load_explicit(&forks_since_ns, memory_order_relaxed) >= 1000000000ull) {
        atomic_store_explicit(&forks_since_ns, now, memory_order_relaxed);
        atomic_store_explicit(&forks_counted, 0, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&forks_counted, 1, memory_order_relaxed);
}

/* A fork that comes while the start thread opens and starts the core
 * would copy a half-built agent (its locks held by a thread the child
 * does not have): it waits for the start to end, a bounded time (the
 * start itself could be waiting for glibc's at-fork lock, held during
 * this handler, if a library's constructor registered a handler). Only
 * the one fork that meets the start waits, once per process. */
static void atfork_prepare(void) {
    start_state now = atomic_load(&state);
    if (now == START_ARMED)
        count_fork();
    if (now != START_RUNNING)
        return;
    uint64_t until = ss_loader_mono_ns() + FORK_WAIT_START_NS;
    pthread_mutex_lock(&lock);
    while (state == START_RUNNING && ss_loader_mono_ns() < until) {
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                              .tv_nsec = (long)(until % 1000000000ull)};
        pthread_cond_timedwait(&cond, &lock, &ts);
    }
    pthread_mutex_unlock(&lock);
}

/* From the fork timer's handler, at a safe point, the start due. */
static bool start_fire(void) {
    if (pthread_mutex_trylock(&lock) != 0)
        return false;
    if (ss_fork_timer_armed()) {
        ss_fork_timer_disarm();
        if (state == START_ARMED && !thread_alive)
            spawn_locked();
    }
    pthread_mutex_unlock(&lock);
    return true;
}

/* A forked child's start, armed without a thread when its parent forks
 * often: the timer creates it when due. false: the thread is to be
 * created now. The count starts again for the child's own forks. */
static bool arm_late(void) {
    bool often = atomic_load_explicit(&forks_counted, memory_order_relaxed) > OFTEN_FORKS;
    atomic_store_explicit(&forks_counted, 0, memory_order_relaxed);
    atomic_store_explicit(&forks_since_ns, 0, memory_order_relaxed);
    if (!often || !ss_fork_timer_arm(due_ns, NULL, 0, start_fire))
        return false;
    armed_pid = current_pid();
    state = START_ARMED;
    return true;
}

static void atfork_child(void) {
    ss_altstack_after_fork_child();
    ss_fork_timer_forget(); /* a parent's timer is not inherited: its handler is */
    /* only this thread exists: our lock may have been held by another */
    pthread_mutex_init(&lock, NULL);
    init_cond();
    /* the parent's start thread is not here. Its stack is left mapped:
     * its descriptor there holds the only pointer to what glibc allocated
     * for that thread (its TLS vector), which glibc's child does not free
     * for a stack it did not allocate (as glibc's own stack cache would
     * have kept the stack in the child too) */
    start_stack = NULL;
    thread_alive = false;
    if (!ss_loader_after_fork_child()) {
        /* forked while the start thread was opening the core: that
         * dlopen is half done in this copy; this child starts nothing */
        state = START_OFF;
        return;
    }
    if (state == START_ARMED || state == START_RUNNING) {
        /* The start had not happened (or was under way on a thread that
         * is not here): arm again, no sooner than a moment after fork. */
        uint64_t soonest = ss_loader_mono_ns() + FORK_DELAY_NS;
        if (due_ns < soonest)
            due_ns = soonest;
        const ss_core_api *api = ss_loader_core();
        bool started = api && api->running();
        /* The core (if open) forgets what the start thread was building
         * when the fork came: its locks may be held by that thread, which
         * is not here. Started already, it restarts itself. */
        if (api)
            api->fork_child(true);
        if (started)
            state = START_DONE;
        else if (!arm_late())
            spawn_locked();
        return;
    }
    const ss_core_api *api = ss_loader_core();
    if (api)
        api->fork_child(true);
}

/* ---- public (loader) ------------------------------------------------- */

/* Sandboxed helpers of Chromium-based programs: the browser re-executes
 * itself with --type=<kind>. */
static bool chromium_helper(int argc, char **argv) {
    for (int i = 1; argv && i < argc && argv[i]; i++)
        if (strncmp(argv[i], "--type=", 7) == 0)
            return true;
    return false;
}

void ss_start_fork_handler(void) {
    static atomic_flag installed = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&installed))
        pthread_atfork(atfork_prepare, NULL, atfork_child);
}

bool ss_start_wanted(int argc, char **argv) {
    return !ss_process_is_jvm() && !chromium_helper(argc, argv);
}

void ss_start_arm(int argc, char **argv) {
    if (!ss_start_wanted(argc, argv))
        return;
    init_cond();
    ss_main_arena_note_main(); /* on the main thread: the constructor */
    interval_ns = (uint64_t)interval_from_env() * 1000000ull;
    shutdown_ns = (uint64_t)ms_from_env(SS_SHUTDOWN_KEY, SS_SHUTDOWN_DEFAULT_MS, SS_SHUTDOWN_MIN_MS, SS_SHUTDOWN_MAX_MS) * 1000000ull;
    ss_start_fork_handler();
    pthread_mutex_lock(&lock);
    due_ns = ss_loader_mono_ns() + interval_ns;
    spawn_locked();
    pthread_mutex_unlock(&lock);
}

int ss_start_quiesce(int kind) {
    pthread_mutex_lock(&lock);
    if (current_pid() != armed_pid && state != START_DONE) {
        pthread_mutex_unlock(&lock);
        return SS_QUIESCE_NONE; /* a vfork child: the thread is the parent's */
    }
    start_state was = stop_thread_locked(kind != SS_ASIDE_EXEC);
    pthread_mutex_unlock(&lock);
    if (was == START_ARMED)
        return SS_QUIESCE_ARMED;
    if (was == START_DONE) {
        const ss_core_api *api = ss_loader_core();
        int token = api ? api->step_aside(kind) : 0;
        if (token > 0)
            return SS_QUIESCE_CORE + token;
    }
    return SS_QUIESCE_NONE;
}

void ss_start_resume(int token) {
    if (token == SS_QUIESCE_ARMED) {
        /* spawned by the caller: the thread has its credentials */
        pthread_mutex_lock(&lock);
        if (state == START_ARMED && !thread_alive)
            spawn_locked();
        pthread_mutex_unlock(&lock);
    } else if (token > SS_QUIESCE_CORE) {
        const ss_core_api *api = ss_loader_core();
        if (api)
            api->step_back(token - SS_QUIESCE_CORE);
    }
}

void ss_start_child_of_clone(void) {
    /* Like fork, only this thread was copied; unlike fork, glibc ran no
     * at-fork handler. Such children (sandbox and container set-up) run
     * a function and exit or exec: nothing starts here, the exec'd
     * program starts its own agent. */
    pthread_mutex_init(&lock, NULL);
    init_cond();
    ss_fork_timer_forget();
    thread_alive = false;
    state = START_OFF;
    const ss_core_api *api = ss_loader_core();
    if (api)
        api->fork_child(false);
}

bool ss_start_armed(void) {
    start_state now = atomic_load(&state);
    return now == START_ARMED || now == START_RUNNING;
}

void ss_start_leave(void) {
    pthread_mutex_lock(&lock);
    ss_fork_timer_cancel();
    if (state == START_ARMED && !thread_alive)
        state = START_OFF;
    pthread_mutex_unlock(&lock);
}

void ss_start_disarm(void) {
    pthread_mutex_lock(&lock);
    stop_thread_locked(false);
    if (state == START_ARMED)
        state = START_OFF;
    pthread_mutex_unlock(&lock);
}
