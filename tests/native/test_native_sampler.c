/* test_native_sampler.c: the native sampler in-process (cmocka).
 *
 * /proc readers against threads in known conditions, the state table of
 * docs/native.md, and whole rounds taken with ss_native_sample_once:
 * names, frames, the blocked count, idle-stack reuse, depth cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "proc/threads.h"
#include "samplers/ss_samplers.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static atomic_int tid_sleeper, tid_blocker, tid_spinner;

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

__attribute__((noinline)) static void test_sleeping_here(void) {
    while (!atomic_load(&stop))
        nap_ms(300);
}

static void *sleeper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-sleeper");
    atomic_store(&tid_sleeper, ss_gettid());
    test_sleeping_here();
    return NULL;
}

static void *blocker(void *arg) {
    sigset_t s;
    sigfillset(&s);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    pthread_setname_np(pthread_self(), "t-blocker");
    atomic_store(&tid_blocker, ss_gettid());
    (void)arg;
    while (!atomic_load(&stop))
        nap_ms(200);
    return NULL;
}

/* Blocks every signal and never sleeps: cannot be sampled at all. */
static atomic_int tid_deaf;
static void *deaf_spinner(void *arg) {
    sigset_t s;
    sigfillset(&s);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    pthread_setname_np(pthread_self(), "t-deaf");
    atomic_store(&tid_deaf, ss_gettid());
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&stop))
        x++;
    return NULL;
}

static void *spinner(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-spinner");
    atomic_store(&tid_spinner, ss_gettid());
    volatile unsigned long x = 0;
    while (!atomic_load(&stop))
        x++;
    return NULL;
}

static pthread_t th[4];

static int setup(void **state) {
    (void)state;
    pthread_create(&th[0], NULL, sleeper, NULL);
    pthread_create(&th[1], NULL, blocker, NULL);
    pthread_create(&th[2], NULL, spinner, NULL);
    pthread_create(&th[3], NULL, deaf_spinner, NULL);
    while (!atomic_load(&tid_sleeper) || !atomic_load(&tid_blocker) || !atomic_load(&tid_spinner) ||
           !atomic_load(&tid_deaf))
        nap_ms(1);
    nap_ms(100);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ss_native_release();
    return 0;
}

static void test_proc_readers(void **state) {
    (void)state;
    ss_proc_stat st;
    /* the sleeper wakes every 300 ms, and a loaded machine may keep it
     * runnable for a while then: looked at until it sleeps */
    long nr = -1;
    for (int i = 0; i < 100 && nr < 0; i++) {
        assert_int_equal(ss_proc_read_stat(tid_sleeper, &st), 0);
        nr = st.state == 'S' ? ss_proc_read_syscall(tid_sleeper) : -1;
        if (nr < 0)
            nap_ms(5);
    }
    assert_string_equal(st.name, "t-sleeper");
    assert_int_equal(st.state, 'S');
    assert_true(nr == SYS_clock_nanosleep || nr == SYS_nanosleep);
    assert_int_equal(ss_proc_read_stat(tid_spinner, &st), 0);
    assert_int_equal(st.state, 'R');
    assert_int_equal(ss_proc_blocks_signal(tid_blocker, SIGRTMAX - 3), 1);
    assert_int_equal(ss_proc_blocks_signal(tid_sleeper, SIGRTMAX - 3), 0);
    uint64_t a = ss_thread_cpu_ns(tid_spinner), b = a;
    for (int i = 0; i < 100 && b == a; i++) { /* a loaded machine may not run it at once */
        nap_ms(20);
        b = ss_thread_cpu_ns(tid_spinner);
    }
    assert_true(a != SS_UNKNOWN_U64 && b > a);
    /* utime, stime and priority (the Qubership top reads them here): the
     * spinner's ticks grow; a SCHED_OTHER thread's priority is 20 + nice */
    assert_int_equal(ss_proc_read_stat(tid_spinner, &st), 0);
    uint64_t t0 = st.utime + st.stime, t1 = t0;
    for (int i = 0; i < 200 && t1 == t0; i++) {
        nap_ms(20);
        assert_int_equal(ss_proc_read_stat(tid_spinner, &st), 0);
        t1 = st.utime + st.stime;
    }
    assert_true(t1 > t0);
    assert_int_equal(ss_proc_read_stat(tid_sleeper, &st), 0);
    assert_int_equal(st.priority, 20 + st.nice);
    assert_int_equal(ss_proc_read_stat(999999999, &st), -ENOENT);
    pid_t *tids = NULL;
    size_t cap = 0;
    int n = ss_proc_list_tids(&tids, &cap);
    assert_true(n >= 4);
    for (int i = 1; i < n; i++)
        assert_true(tids[i - 1] < tids[i]);
    free(tids);
}

/* Kept descriptors: the same one is read again (no open per read); one
 * the host closed and got back for a file of its own is never closed by
 * us; ss_proc_close_all closes ours. */
static bool under_tsan(void) {
#if defined(__SANITIZE_THREAD__)
    return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return true;
#endif
#endif
    return false;
}

/* The host opens a file of its own on the number `fd` just closed: the
 * kept descriptors live in the top eighth of the table, above the lowest
 * free number an open() gets, so the test puts it there (a host whose
 * lower numbers are all in use gets it the same way). */
static int host_takes(int fd) {
    int host = open("/dev/null", O_RDONLY);
    if (host >= 0 && host != fd) {
        int moved = dup2(host, fd);
        close(host);
        host = moved;
    }
    return host;
}

static void test_kept_files(void **state) {
    (void)state;
    ss_task_files f;
    memset(&f, 0, sizeof f);
    ss_proc_stat st;
    ss_proc_syscall sc;
    /* the first kept read also keeps /proc/self/task open (opens go from there) */
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    ss_task_files_close(&f);
    uint32_t kept0 = ss_proc_fds_kept();
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    assert_string_equal(st.name, "t-sleeper");
    for (int i = 0; i < 100; i++) { /* until it sleeps (see test_proc_readers) */
        assert_int_equal(ss_task_read_syscall(tid_sleeper, &f, &sc), 0);
        if (!sc.running)
            break;
        nap_ms(5);
    }
    assert_false(sc.running);
    assert_true(sc.nr == SYS_clock_nanosleep || sc.nr == SYS_nanosleep);
    assert_true(sc.sp != 0 && sc.pc != 0);
    assert_int_equal(ss_proc_fds_kept(), kept0 + 2);
    int fd_stat = f.fd[SS_TASK_STAT];
    assert_true(fd_stat >= 0);
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    assert_int_equal(f.fd[SS_TASK_STAT], fd_stat); /* pread again, no new open */
    assert_int_equal(ss_proc_fds_kept(), kept0 + 2);
    /* a spinning thread has no registers to give (read a few times: a
     * sanitizer's runtime may make it wait for a moment now and then) */
    bool running = false;
    for (int i = 0; i < 20 && !running; i++)
        running = ss_task_read_syscall(tid_spinner, NULL, &sc) == 0 && sc.running;
    assert_true(running);

    /* the host closes our descriptor and opens a file of its own, which
     * gets the same number: closing the task's files leaves it open */
    close(fd_stat);
    int host = host_takes(fd_stat);
    assert_int_equal(host, fd_stat);
    ss_task_files_close(&f);
    assert_true(fcntl(host, F_GETFD) >= 0);
    close(host);
    assert_int_equal(ss_proc_fds_kept(), kept0);

    /* the same, then a read: the right file is read again, the host's
     * descriptor is dropped from ours */
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    fd_stat = f.fd[SS_TASK_STAT];
    close(fd_stat);
    host = host_takes(fd_stat);
    assert_int_equal(host, fd_stat);
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    assert_string_equal(st.name, "t-sleeper");
    assert_int_not_equal(f.fd[SS_TASK_STAT], host);
    ss_task_files_close(&f);
    assert_true(fcntl(host, F_GETFD) >= 0);
    close(host);
    assert_int_equal(ss_proc_fds_kept(), kept0);

    /* close_all: every kept one goes, the task's numbers become stale */
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    int fd = f.fd[SS_TASK_STAT];
    assert_true(fd >= 0);
    ss_proc_close_all();
    assert_int_equal(ss_proc_fds_kept(), 0);
    assert_int_equal(fcntl(fd, F_GETFD), -1);
    ss_task_files_close(&f); /* stale: closes nothing */
    assert_true(ss_proc_fd_budget() >= 1);
    /* kept in the top eighth of the table (ss_fd_move_high) */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    rlim_t top = rl.rlim_cur - rl.rlim_cur / 8;
    /* not under ThreadSanitizer, where kept descriptors are not moved
     * (agent/kept_fd.c says why) */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= INT_MAX && !under_tsan())
        assert_true((rlim_t)f.fd[SS_TASK_STAT] >= (top < 1024 ? top : 1024));
    ss_task_files_close(&f);
}

static const ss_frame *frames_named(const char **names, int n) {
    static ss_frame f[8];
    for (int i = 0; i < n; i++) {
        memset(&f[i], 0, sizeof f[i]);
        f[i].fn = ss_funcinfo_intern("global", names[i], "libc.so.6", NULL, SS_FRAME_NATIVE);
    }
    return f;
}

static void test_state_table(void **state) {
    (void)state;
    ss_thread_state s;
    const char *status, *detail;
    ss_native_state('R', -1, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_RUNNABLE);
    assert_string_equal(status, "runnable");
    ss_native_state('S', SYS_clock_nanosleep, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_TIMED_WAITING);
    assert_string_equal(status, "sleeping");
    const char *mutex[] = {"futex_wait", "__lll_lock_wait", "pthread_mutex_lock", "f"};
    ss_native_state('S', SYS_futex, frames_named(mutex, 4), 4, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_BLOCKED);
    assert_string_equal(status, "waiting for monitor entry");
    assert_string_equal(detail, "on mutex");
    const char *tcond[] = {"futex_wait", "__pthread_cond_timedwait64", "f"};
    ss_native_state('S', SYS_futex, frames_named(tcond, 3), 3, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_TIMED_WAITING);
    assert_string_equal(detail, "on condition");
    const char *cond[] = {"futex_wait", "__pthread_cond_wait_common", "f"};
    ss_native_state('S', SYS_futex, frames_named(cond, 3), 3, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_WAITING);
    assert_string_equal(status, "waiting on condition");
    ss_native_state('S', SYS_epoll_wait, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_WAITING);
    assert_string_equal(detail, "epoll_wait");
    /* a timed call resumed after a stop (a debugger's attach and detach) */
    ss_native_state('S', SYS_restart_syscall, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_TIMED_WAITING);
    assert_string_equal(status, "sleeping");
    ss_native_state('S', SYS_restart_syscall, frames_named(tcond, 3), 3, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_TIMED_WAITING);
    assert_string_equal(detail, "on condition");
    ss_native_state('D', SYS_read, NULL, 0, &s, &status, &detail);
    assert_string_equal(detail, "uninterruptible");
    ss_native_state('t', -1, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_STOPPED);
    ss_native_state('Z', -1, NULL, 0, &s, &status, &detail);
    assert_int_equal(s, SS_STATE_TERMINATED);
}

static const ss_thread_sample *find(const ss_round *r, const char *name) {
    for (uint32_t i = 0; i < r->n_threads; i++)
        if (strcmp(r->threads[i].name, name) == 0)
            return &r->threads[i];
    return NULL;
}

static bool has_fn(const ss_round *r, const ss_thread_sample *t, const char *fn) {
    const ss_frame *f = ss_thread_frames(r, t);
    for (uint32_t i = 0; i < t->frame_count; i++)
        if (f[i].fn && strcmp(f[i].fn->name, fn) == 0)
            return true;
    return false;
}

static void test_rounds(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    ss_round *r1, *r2 = NULL;
    uint64_t rounds, sig0, reu0, sig1, reu1;
    assert_int_equal(ss_native_sample_once(&cfg, &r1), 0);
    ss_native_sample_stats(&rounds, &sig0, &reu0);
    /* a spinner that gets no CPU within the answer timeout (a loaded
     * machine) is left out of that round: take another */
    for (int i = 0; i < 5 && (!r2 || !find(r2, "t-spinner")); i++) {
        if (r2)
            ss_round_unref(r2);
        nap_ms(60);
        assert_int_equal(ss_native_sample_once(&cfg, &r2), 0);
    }
    ss_native_sample_stats(&rounds, &sig1, &reu1);

    /* A thread that blocks the signal and sleeps in a system call is
     * sampled without one; one that blocks it and runs is counted, not
     * listed, until the kernel sampled it (its perf event takes a sample
     * every half interval of its CPU time: 0.5 s at the default, not
     * within these rounds) (at least one: a sanitizer's runtime may own a thread that
     * blocks every signal, TSan's background thread does). The caller is
     * left out. */
    assert_true(r2->threads_blocked >= 1);
    assert_null(find(r2, "t-deaf"));
    const ss_thread_sample *bl = find(r2, "t-blocker");
    assert_non_null(bl);
    assert_true(has_fn(r2, bl, "blocker"));
    assert_int_equal(bl->state, SS_STATE_TIMED_WAITING);
    for (uint32_t i = 0; i < r2->n_threads; i++)
        assert_int_not_equal(r2->threads[i].nid, ss_gettid());

    const ss_thread_sample *sl = find(r2, "t-sleeper");
    assert_non_null(sl);
    assert_int_equal(sl->nid, tid_sleeper);
    assert_int_equal(sl->state, SS_STATE_TIMED_WAITING);
    assert_true(has_fn(r2, sl, "test_sleeping_here"));
    assert_true(has_fn(r2, sl, "sleeper"));
    assert_int_not_equal(sl->tid, 0);

    const ss_thread_sample *sp = find(r2, "t-spinner");
    assert_non_null(sp);
    assert_int_equal(sp->state, SS_STATE_RUNNABLE);
    assert_true(sp->on_cpu && sp->cpu_delta_ns > 0);
    assert_true(has_fn(r2, sp, "spinner"));
    /* the spinner always costs a signal in the second round */
    assert_true(sig1 - sig0 >= 1);
    ss_round_unref(r1);
    ss_round_unref(r2);

    /* the stack is cut at max depth, leaf side kept */
    cfg.max_depth = 2; /* spinner, start_thread, clone3: 3 frames */
    ss_round *r3 = NULL;
    const ss_thread_sample *sp3 = NULL;
    /* a spinner that gets no CPU within the answer timeout (a loaded
     * machine) is left out of that round: take another */
    for (int i = 0; i < 5 && !sp3; i++) {
        if (r3)
            ss_round_unref(r3);
        assert_int_equal(ss_native_sample_once(&cfg, &r3), 0);
        sp3 = find(r3, "t-spinner");
    }
    assert_non_null(sp3);
    assert_int_equal(sp3->frame_count, 2);
    assert_true(sp3->truncated);
    /* the outermost frame is the one dropped */
    assert_false(has_fn(r3, sp3, "clone3"));
    assert_false(has_fn(r3, sp3, "clone"));
#ifndef __SANITIZE_THREAD__
    /* under TSan the handler runs from the runtime's deferred-signal code,
     * so the two leaf frames are the runtime's, not the spinner's */
    assert_true(has_fn(r3, sp3, "spinner"));
#endif
    ss_round_unref(r3);
}

static pthread_mutex_t park_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_c = PTHREAD_COND_INITIALIZER;

static void *parked(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-parked");
    pthread_mutex_lock(&park_m);
    while (!atomic_load(&stop))
        pthread_cond_wait(&park_c, &park_m);
    pthread_mutex_unlock(&park_m);
    return NULL;
}

static void test_idle_reuse(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    pthread_t t;
    pthread_create(&t, NULL, parked, NULL);
    nap_ms(50);
    ss_round *r;
    uint64_t rounds, sig, reu0, reu1;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0); /* first: signalled */
    ss_round_unref(r);
    /* From the next rounds on its stack is reused: it has not run since.
     * (A round may still see the tail of our own handler's CPU time on a
     * slow machine: allow a few rounds.) */
    bool reused = false;
    for (int i = 0; i < 5 && !reused; i++) {
        nap_ms(20);
        ss_native_sample_stats(&rounds, &sig, &reu0);
        assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
        ss_native_sample_stats(&rounds, &sig, &reu1);
        const ss_thread_sample *p = find(r, "t-parked");
        assert_non_null(p);
        assert_int_equal(p->state, SS_STATE_WAITING);
        assert_string_equal(p->state_detail, "on condition");
        assert_true(has_fn(r, p, "parked"));
        reused = !p->on_cpu && reu1 > reu0;
        ss_round_unref(r);
    }
    assert_true(reused);
    atomic_store(&stop, 1);
    pthread_mutex_lock(&park_m);
    pthread_cond_broadcast(&park_c);
    pthread_mutex_unlock(&park_m);
    pthread_join(t, NULL);
}


/* The number the next open() gets (the lowest free one). */
static int next_fd(void) {
    int fd = open("/dev/null", O_RDONLY);
    close(fd);
    return fd;
}

/* A look at the sleeper's syscall line while it sleeps (it wakes every
 * 300 ms, and a sanitizer's runtime may hold it up for a moment): a
 * running thread's line is never held. */
static void look_asleep(ss_task_files *f, bool hold, ss_proc_syscall *sc) {
    for (int i = 0; i < 50; i++) {
        assert_int_equal(ss_task_look_syscall(tid_sleeper, f, hold, sc), 0);
        if (!sc->running)
            return;
        ss_proc_release_held();
        nap_ms(5);
    }
    fail_msg("the sleeper never slept");
}

/* Looks (a thread seen for the first time or idle): nothing kept, the
 * file closed after its read, or held until released for the read after
 * the walk; a held number the host took over is left to it. */
static void test_look_files(void **state) {
    (void)state;
    ss_task_files f;
    memset(&f, 0, sizeof f);
    ss_proc_stat st;
    ss_proc_syscall sc, again;
    uint32_t kept0 = ss_proc_fds_kept();
    int free0 = next_fd();
    assert_int_equal(ss_task_look_stat(tid_sleeper, &f, &st), 0);
    assert_string_equal(st.name, "t-sleeper");
    look_asleep(&f, false, &sc);
    assert_true(sc.sp != 0 && sc.pc != 0);
    /* nothing open, nothing kept (the task directory may be, once) */
    assert_int_equal(next_fd(), free0);
    assert_true(ss_proc_fds_kept() <= kept0 + 1);
    kept0 = ss_proc_fds_kept();

    /* held: open at the lowest number until released, read again there */
    look_asleep(&f, true, &sc);
    assert_true(fcntl(free0, F_GETFD) >= 0);
    assert_int_equal(next_fd(), free0 + 1);
    assert_int_equal(ss_task_read_syscall(tid_sleeper, &f, &again), 0);
    assert_true(again.running || again.nr == sc.nr); /* it may have woken */
    assert_int_equal(next_fd(), free0 + 1); /* no other open */
    assert_int_equal(ss_proc_fds_kept(), kept0); /* nor kept */
    ss_proc_release_held();
    assert_int_equal(next_fd(), free0);

    /* the host closes the held number and opens a file of its own there */
    look_asleep(&f, true, &sc);
    close(free0);
    int host = open("/dev/null", O_RDONLY);
    assert_int_equal(host, free0);
    ss_proc_release_held();
    assert_true(fcntl(host, F_GETFD) >= 0);
    /* ... and a read after the walk of a held number now the host's
     * opens the right file, leaving the host's alone */
    close(host);
    look_asleep(&f, true, &sc);
    close(free0);
    host = open("/dev/null", O_RDONLY);
    assert_int_equal(host, free0);
    assert_int_equal(ss_task_read_syscall(tid_sleeper, &f, &again), 0);
    assert_true(again.running || again.nr == sc.nr); /* it may have woken */
    ss_proc_release_held();
    assert_true(fcntl(host, F_GETFD) >= 0);
    close(host);
    ss_task_files_close(&f);

    /* a running thread's line ("running", a shape any file could have)
     * is closed after the check that it is still a file of procfs, never
     * held */
    free0 = next_fd();
    bool running = false;
    for (int i = 0; i < 20 && !running; i++) {
        assert_int_equal(ss_task_look_syscall(tid_spinner, &f, true, &sc), 0);
        running = sc.running;
        ss_proc_release_held(); /* held, were it asleep for a moment */
    }
    assert_true(running);
    assert_int_equal(next_fd(), free0);
    ss_proc_release_held(); /* nothing held: a no-op */
    assert_int_equal(next_fd(), free0);

    /* a look at a thread with a kept stat reads that one, opens nothing */
    assert_int_equal(ss_task_read_stat(tid_sleeper, &f, &st), 0);
    int kept_stat = f.fd[SS_TASK_STAT];
    assert_true(kept_stat >= 0);
    free0 = next_fd();
    assert_int_equal(ss_task_look_stat(tid_sleeper, &f, &st), 0);
    assert_int_equal(f.fd[SS_TASK_STAT], kept_stat);
    assert_int_equal(next_fd(), free0);
    ss_task_files_close(&f);
}

/* The read system calls this thread has made (its io file's syscr). */
static uint64_t my_reads(void) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/io", (int)ss_gettid());
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return UINT64_MAX;
    buf[n] = '\0';
    const char *p = strstr(buf, "syscr: ");
    return p ? strtoull(p + 7, NULL, 10) : UINT64_MAX;
}

static atomic_int fresh_stop;

static void *fresh_parked(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-fresh");
    pthread_mutex_lock(&park_m);
    while (!atomic_load(&fresh_stop))
        pthread_cond_wait(&park_c, &park_m);
    pthread_mutex_unlock(&park_m);
    return NULL;
}

typedef struct first_look {
    uint64_t reads;    /* read system calls of the round */
    uint32_t kept;     /* descriptors it kept */
    uint32_t seen;     /* new threads in the round */
    uint64_t asleep;   /* stacks read asleep */
} first_look;

/* The first round over n new threads parked in a condition variable. */
static void first_round_over(int n, first_look *out) {
    ss_config cfg;
    ss_config_load(&cfg);
    ss_round *r;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0); /* the others known */
    ss_round_unref(r);
    pthread_t *t = calloc((size_t)n, sizeof *t);
    assert_non_null(t);
    atomic_store(&fresh_stop, 0);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fresh_parked, NULL);
    nap_ms(100);
    ss_native_counts c0, c1;
    ss_native_sample_counts(&c0);
    uint32_t kept0 = ss_proc_fds_kept();
    uint64_t reads0 = my_reads();
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    out->reads = my_reads() - reads0;
    out->kept = ss_proc_fds_kept() - kept0;
    ss_native_sample_counts(&c1);
    out->asleep = c1.asleep - c0.asleep;
    out->seen = 0;
    for (uint32_t i = 0; i < r->n_threads; i++)
        out->seen += strcmp(r->threads[i].name, "t-fresh") == 0;
    ss_round_unref(r);
    atomic_store(&fresh_stop, 1);
    pthread_mutex_lock(&park_m);
    pthread_cond_broadcast(&park_c);
    pthread_mutex_unlock(&park_m);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
    print_message("first round over %d new threads: %llu reads, %u descriptors kept, %llu "
                  "read asleep\n", n, (unsigned long long)out->reads, out->kept,
                  (unsigned long long)out->asleep);
}

/* A first round over new sleeping threads: each is read asleep with
 * three or four reads (its stat, its syscall line, its stack, now and
 * then its thread descriptor; the syscall line again only where the CPU
 * clock counts ticks) and keeps no descriptor. Before: seven or eight (a
 * read that found the end after each /proc read, the syscall line read
 * again after the walk) and its syscall file kept open. The reads a
 * thread costs are the difference between rounds over 16 and 64 new
 * threads: the rest of the round (the test's other threads, the table of
 * mappings read again for the new stacks, far longer under TSan) is in
 * both. */
static void test_first_round_reads(void **state) {
    (void)state;
    first_look small, big;
    first_round_over(16, &small);
    first_round_over(64, &big);
    assert_int_equal(small.seen, 16);
    assert_int_equal(big.seen, 64);
    assert_true(small.asleep >= 16 && big.asleep >= 64);
    double per_thread = ((double)big.reads - (double)small.reads) / 48.0;
    print_message("%.2f reads a new thread\n", per_thread);
    assert_true(per_thread <= 5.5);
    assert_true(big.kept < 16);
}

/* Where the thread CPU clock counts ticks, a thread read asleep has its
 * syscall line read again after the walk, from its file held open
 * between the two reads: the threads are read asleep as well, one more
 * read each, and nothing is left open after the round. */
static void test_first_round_coarse_clock(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    ss_round *r;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0); /* a sampler to set */
    ss_round_unref(r);
    ss_native_test_coarse_clock(true);
    int free0 = next_fd();
    first_look small, big;
    first_round_over(16, &small);
    first_round_over(64, &big);
    ss_native_test_coarse_clock(false);
    assert_int_equal(next_fd(), free0); /* the held files closed */
    assert_int_equal(small.seen, 16);
    assert_int_equal(big.seen, 64);
    assert_true(small.asleep >= 16 && big.asleep >= 64);
    double per_thread = ((double)big.reads - (double)small.reads) / 48.0;
    print_message("%.2f reads a new thread, the syscall line read twice\n", per_thread);
    assert_true(per_thread >= 3.5 && per_thread <= 8.0); /* one read more than above */
    assert_true(big.kept < 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_readers),
        cmocka_unit_test(test_kept_files),
        cmocka_unit_test(test_look_files),
        cmocka_unit_test(test_state_table),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_first_round_reads),
        cmocka_unit_test(test_first_round_coarse_clock),
        cmocka_unit_test(test_idle_reuse),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
