/* thread.c: the agent's own threads.
 *
 * Every agent thread is named "stackshot-<role>", blocks every signal (so
 * the host's signals are delivered to the host's threads, and so threads
 * it creates, such as gRPC's, inherit a mask that keeps them unsampled)
 * and registers its kernel tid, so samplers leave it out.
 *
 * Stacks are small (glibc's default is RLIMIT_STACK, usually 8 MiB of
 * address space per thread, which counts against a host's RLIMIT_AS):
 * 256 KiB, and 1 MiB for the native sampler, the one thread that runs
 * libdw and libstdc++'s demangler (whose work arrays live on the stack,
 * about 100 bytes per character of a name: names of 4 KiB or more are
 * not demangled, samplers/symbols_demangle.c). gRPC's threads are
 * gRPC's own.
 *
 * They never run real-time. A thread inherits the scheduling policy of
 * the one that creates it, and a real-time host (SCHED_FIFO or SCHED_RR:
 * audio servers, control loops, cyclictest) made the agent's threads
 * real-time at its own priority: a round of the sampler or an export then
 * ran ahead of every normal thread of the machine and of the host's
 * real-time threads of lower priority, and was preempted by none of equal
 * priority until it blocked. They are created SCHED_OTHER (nice kept), and
 * set back to it when the host makes them real-time later (`chrt -a -p`,
 * a loop over /proc/self/task): ss_internal_threads_keep_normal, each
 * round. */
#include "agent/thread.h"
#include "agent/time.h"
#include "agent/main_arena.h"
#include "agent/kept_fd.h"

#include <stdatomic.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pid_t ss_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* A small lock-free set: lookups happen in signal handlers. */
#define MAX_INTERNAL 64
static _Atomic pid_t internal_tids[MAX_INTERNAL];

void ss_internal_thread_add(pid_t tid) {
    for (int i = 0; i < MAX_INTERNAL; i++) {
        pid_t expected = 0;
        if (atomic_compare_exchange_strong(&internal_tids[i], &expected, tid))
            return;
    }
    /* full: the name prefix still identifies agent threads */
}

void ss_internal_thread_remove(pid_t tid) {
    for (int i = 0; i < MAX_INTERNAL; i++) {
        pid_t expected = tid;
        if (atomic_compare_exchange_strong(&internal_tids[i], &expected, 0))
            return;
    }
}

bool ss_internal_thread_is(pid_t tid) {
    for (int i = 0; i < MAX_INTERNAL; i++)
        if (atomic_load_explicit(&internal_tids[i], memory_order_relaxed) == tid)
            return true;
    return false;
}

/* Processes of the agent's that ended or are ending (the gRPC helper,
 * by its pidfd): not the host's children, so init, which adopted them,
 * reaps them, and until then each holds a task of the user's
 * RLIMIT_NPROC and of the cgroup's pids.max. A host that ran short and
 * makes its call again waits for them as for the agent's threads. The
 * pidfds are kept descriptors (the host may close every number); a
 * forked child's copies are its parent's. */
#define MAX_ENDING 8
static pthread_mutex_t ending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    ss_kept_fd fd;
    pid_t owner; /* the process that kept it */
} ending[MAX_ENDING];

void ss_internal_process_ending(int pidfd) {
    pthread_mutex_lock(&ending_lock);
    int slot = -1;
    for (int i = 0; i < MAX_ENDING && slot < 0; i++)
        if (ending[i].fd.fd < 0 || ending[i].owner != getpid())
            slot = i;
    if (slot < 0) {
        close(pidfd); /* more than MAX_ENDING at once: this one is not waited for */
    } else {
        if (ending[slot].fd.fd >= 0)
            ss_kept_fd_close_inherited(&ending[slot].fd);
        ending[slot].fd = (ss_kept_fd)SS_KEPT_FD_NONE;
        if (ss_kept_fd_adopt(&ending[slot].fd, pidfd) == 0)
            ending[slot].owner = getpid();
    }
    pthread_mutex_unlock(&ending_lock);
}

static unsigned processes_alive(void) {
    unsigned n = 0;
    pthread_mutex_lock(&ending_lock);
    for (int i = 0; i < MAX_ENDING; i++) {
        if (ending[i].fd.fd < 0 || ending[i].owner != getpid())
            continue;
        int fd = ss_kept_fd_get(&ending[i].fd);
        if (fd >= 0 && syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0) == 0)
            n++; /* running, or a zombie not reaped yet */
        else
            ss_kept_fd_close(&ending[i].fd); /* reaped, or the number is the host's now */
    }
    pthread_mutex_unlock(&ending_lock);
    return n;
}

unsigned ss_internal_threads_alive(void) {
    pid_t pid = getpid();
    unsigned n = processes_alive();
    for (int i = 0; i < MAX_INTERNAL; i++) {
        pid_t tid = atomic_load_explicit(&internal_tids[i], memory_order_relaxed);
        if (tid > 0 && (syscall(SYS_tgkill, pid, tid, 0) == 0 || errno != ESRCH))
            n++;
    }
    return n;
}

static bool real_time(int policy) {
    policy &= ~SCHED_RESET_ON_FORK;
    return policy == SCHED_FIFO || policy == SCHED_RR;
}

/* A thread created with `attr` by a real-time thread runs SCHED_OTHER. */
static void normal_policy(pthread_attr_t *attr) {
    int policy = sched_getscheduler(0);
    if (policy < 0 || !real_time(policy))
        return; /* inherited: SCHED_OTHER, SCHED_BATCH or SCHED_IDLE as the host chose */
    struct sched_param sp = {.sched_priority = 0};
    pthread_attr_setinheritsched(attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(attr, SCHED_OTHER);
    pthread_attr_setschedparam(attr, &sp);
}

bool ss_internal_threads_keep_normal(void) {
    int policy = sched_getscheduler(0);
    if (policy < 0 || !real_time(policy))
        return false;
    struct sched_param sp = {.sched_priority = 0};
    for (int i = 0; i < MAX_INTERNAL; i++) {
        pid_t tid = atomic_load_explicit(&internal_tids[i], memory_order_relaxed);
        if (tid > 0)
            sched_setscheduler(tid, SCHED_OTHER, &sp);
    }
    sched_setscheduler(0, SCHED_OTHER, &sp);
    return true;
}

static _Atomic bool lazy_threads;

void ss_internal_threads_lazy(void) { atomic_store(&lazy_threads, true); }

bool ss_internal_threads_are_lazy(void) { return atomic_load(&lazy_threads); }

/* Forget every registration (a forked child has none of these threads). */
void ss_internal_threads_reset(void) {
    for (int i = 0; i < MAX_INTERNAL; i++)
        atomic_store(&internal_tids[i], 0);
}

typedef struct start_args {
    void *(*fn)(void *);
    void *arg;
    char name[16];
} start_args;

static _Atomic pid_t after_tid;

void ss_internal_threads_after(pid_t tid) { atomic_store(&after_tid, tid); }

/* Until thread `after_tid` has ended (gone from the kernel: glibc released
 * its malloc arena before), 1 s at most. */
static void wait_after(void) {
    pid_t tid = atomic_load(&after_tid);
    if (tid <= 0 || tid == ss_gettid())
        return;
    for (int i = 0; i < 1000; i++) {
        if (syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH)
            break;
        ss_sleep_ns(1000000);
    }
    atomic_compare_exchange_strong(&after_tid, &tid, 0);
}

static bool (*_Atomic mark_hook)(bool on);

void ss_internal_threads_mark_with(bool (*mark)(bool on)) { atomic_store(&mark_hook, mark); }

bool ss_internal_thread_mark(bool on) {
    bool (*mark)(bool) = atomic_load(&mark_hook);
    return mark ? mark(on) : false;
}

static void *trampoline(void *p) {
    bool (*mark)(bool) = atomic_load(&mark_hook);
    if (mark)
        mark(true);
    /* before anything allocates: glibc's main arena under an RLIMIT_AS */
    bool shared = ss_main_arena_attach();
    start_args a = *(start_args *)p;
    pthread_setname_np(pthread_self(), a.name);
    wait_after();
    free(p); /* after the wait: a free may enter glibc's malloc */
    pid_t tid = ss_gettid();
    ss_internal_thread_add(tid);
    void *r = a.fn(a.arg);
    ss_internal_thread_remove(tid);
    if (shared)
        ss_main_arena_detach();
    return r;
}

/* Sanitizer builds take several times the stack (redzones, ASan's and
 * TSan's own frames): their threads get 4 times as much. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STACK_SCALE 4
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STACK_SCALE 4
#endif
#endif
#ifndef STACK_SCALE
#define STACK_SCALE 1
#endif
#define STACK_SMALL ((size_t)STACK_SCALE * (256 << 10))
#define STACK_SAMPLER ((size_t)STACK_SCALE * (1 << 20))

static size_t stack_size(const char *role) {
    return strcmp(role, "sampler") == 0 ? STACK_SAMPLER : STACK_SMALL;
}

int ss_thread_start(pthread_t *thread, const char *role,
                    void *(*fn)(void *), void *arg) {
    start_args *a = malloc(sizeof *a);
    if (!a)
        return -ENOMEM;
    a->fn = fn;
    a->arg = arg;
    snprintf(a->name, sizeof a->name, "stackshot-%s", role);
    /* The new thread inherits the mask in force at pthread_create: block
     * everything around the call, then restore ours. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    bool have_attr = pthread_attr_init(&attr) == 0;
    if (have_attr) {
        pthread_attr_setstacksize(&attr, stack_size(role)); /* else glibc's default */
        normal_policy(&attr);
    }
    bool (*mark)(bool) = atomic_load(&mark_hook);
    bool was = mark ? mark(true) : false; /* our EAGAIN is not the host's */
    int rc = pthread_create(thread, have_attr ? &attr : NULL, trampoline, a);
    if (mark)
        mark(was);
    if (have_attr)
        pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        free(a);
        return -rc;
    }
    return 0;
}

int ss_thread_join(pthread_t thread, uint64_t deadline_ns) {
    struct timespec ts = ss_realtime_at(deadline_ns);
    int rc = pthread_timedjoin_np(thread, NULL, &ts);
    if (rc == 0)
        return 0;
    pthread_detach(thread);
    return -ETIMEDOUT;
}
