/* sig_host.c: a host program that uses signals the way real programs do,
 * run with libstackshot.so preloaded by check_signals.py.
 *
 *   sig_host late [sig]     installs its own handler for the agent's signal
 *                           after 5 rounds and counts what reaches it
 *   sig_host chain [sig]    the same, with a handler that passes what it
 *                           does not use on to the handler before it
 *   sig_host blocked N [sig] N threads block the agent's signal from birth and
 *                           sleep in a loop, 2 more block it and spin
 *   sig_host blocked_late N  the same threads block it after 5 rounds
 *   sig_host blocked_many N  as blocked, with 10 spinners
 *   sig_host blocked_turns  8 threads that block the signal spin for 0.5 s,
 *                           then nap; 2 more start spinning at 0.6 s
 *   sig_host blocked_filtered N  as blocked, under an allow-all seccomp
 *                           filter put on every thread (the agent's too)
 *                           once the agent wrote a round
 *   sig_host prof [wait]    profiles itself with setitimer(ITIMER_PROF) (wait:
 *                           for 3 agent rounds first)
 *   sig_host eintr SECONDS  counts EINTR seen by a nanosleep(50 ms) loop and
 *                           by one long nanosleep
 *   sig_host sleep5         the main thread calls sleep(5) once: how long it slept
 *   sig_host quiet ROUNDS   threads loop on nanosleep, poll, epoll_wait and
 *                           select (50 ms timeouts) until the agent wrote
 *                           ROUNDS rounds, counting EINTR
 *   sig_host undumpable ROUNDS  makes itself non-dumpable (run it as an
 *                           unprivileged user), a napping and a busy thread
 *   sig_host altstack ROUNDS  reports the alternate signal stacks its main
 *                           thread and a new thread have; a thread installs
 *                           its own and spins on, one disables its stack
 *                           and spins with a pattern below its stack
 *                           pointer, one disables it by the raw system
 *                           call and spins (0 ROUNDS: report only)
 *   sig_host forkalt ROUNDS after 3 rounds, forks: the child's main thread
 *                           spins until its own agent wrote ROUNDS rounds
 *   sig_host edge ROUNDS    a thread spins with ~2,000 bytes of stack left
 *   sig_host coro ROUNDS    makecontext coroutines on 8 and 16 KiB heap
 *                           stacks spin with ~2,000 bytes left, canaries below
 *   sig_host sigwait ROUNDS every thread blocks every signal; workers compute
 *                           and wait in turns in sigtimedwait on the full set,
 *                           in ppoll and in sigsuspend with an empty mask (the
 *                           waits unblock what they wait for), counting the
 *                           signals they did not send themselves
 *
 * Every mode prints one result line on stdout; the checks are in
 * check_signals.py. [sig] defaults to SIGRTMAX-3, the agent's default. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/auxv.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static atomic_int done;

static uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static double cpu_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleep ms, finishing the sleep after any interruption. */
static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int arg_signal(int argc, char **argv, int i) {
    return argc > i ? atoi(argv[i]) : SIGRTMAX - 3;
}

/* ---- late: the host takes the agent's signal over ----------------- */

static atomic_int from_agent;      /* signals from this process: the agent's */
static atomic_ullong last_from_agent_ms;

/* The agent signals with tgkill (in-handler unwinders) or
 * rt_tgsigqueueinfo (copy mode: SI_QUEUE): both are its, from this pid. */
static bool from_this_process(const siginfo_t *si) {
    return (si->si_code == SI_TKILL || si->si_code == SI_QUEUE) && si->si_pid == getpid();
}

static void host_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (from_this_process(si)) {
        atomic_fetch_add(&from_agent, 1);
        atomic_store(&last_from_agent_ms, mono_ms());
    }
}

__attribute__((noinline)) static void *busy(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
    return NULL;
}

__attribute__((noinline)) static void *napper(void *arg) {
    (void)arg;
    while (!atomic_load(&done))
        nap_ms(5);
    return NULL;
}

/* Rounds the text exporter has written so far (its file is
 * $STACKSHOT_OUTPUT_DIR/ss_sig_host.<pid>.txt). */
static int rounds_written(void) {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/ss_sig_host.%d.txt", dir ? dir : ".", (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, "Full thread dump", 16) == 0;
    fclose(f);
    return n;
}

/* After 5 rounds (the first one reads symbols, slow under a sanitizer; at
 * most 20 s), put `fn` on the agent's signal; the one before in *prev. */
static uint64_t install_after_rounds(int sig, void (*fn)(int, siginfo_t *, void *),
                                     struct sigaction *prev) {
    for (int i = 0; i < 400 && rounds_written() < 5; i++)
        nap_ms(50);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fn;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);
    uint64_t at_wall = wall_ms();
    sigaction(sig, &sa, prev);
    return at_wall;
}

static int mode_late(int sig) {
    pthread_t a, b;
    pthread_create(&a, NULL, busy, NULL);
    pthread_setname_np(a, "host-busy");
    pthread_create(&b, NULL, napper, NULL);
    pthread_setname_np(b, "host-napper");
    uint64_t at_wall = install_after_rounds(sig, host_handler, NULL);
    uint64_t at = mono_ms();
    nap_ms(600);
    atomic_store(&done, 1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    uint64_t last = atomic_load(&last_from_agent_ms);
    printf("late: installed_wall_ms=%llu agent_signals=%d last_after_ms=%lld\n",
           (unsigned long long)at_wall, atomic_load(&from_agent),
           last ? (long long)(last - at) : -1LL);
    return 0;
}

/* ---- chain: the host's handler passes on what it does not use ------ */

static struct sigaction chained_prev;
static atomic_int chained_seen;

/* A runtime's handler in the manner of HotSpot's libjsig: it takes every
 * signal and hands the ones it does not use to the handler installed
 * before its own. */
static void chaining_handler(int sig, siginfo_t *si, void *uc) {
    atomic_fetch_add(&chained_seen, 1);
    if ((chained_prev.sa_flags & SA_SIGINFO) && chained_prev.sa_sigaction)
        chained_prev.sa_sigaction(sig, si, uc);
    else if (chained_prev.sa_handler != SIG_DFL && chained_prev.sa_handler != SIG_IGN)
        chained_prev.sa_handler(sig);
}

static int mode_chain(int sig) {
    pthread_t a;
    pthread_create(&a, NULL, busy, NULL);
    pthread_setname_np(a, "host-busy");
    uint64_t at_wall = install_after_rounds(sig, chaining_handler, &chained_prev);
    int before = rounds_written();
    for (int i = 0; i < 400 && rounds_written() < before + 20; i++)
        nap_ms(50);
    atomic_store(&done, 1);
    pthread_join(a, NULL);
    printf("chain: installed_wall_ms=%llu seen=%d rounds_after=%d\n",
           (unsigned long long)at_wall, atomic_load(&chained_seen), rounds_written() - before);
    return 0;
}

/* ---- blocked: threads that block the agent's signal --------------- */

static int blocked_sig;
static atomic_int go_block; /* "late": block only once this is set */

__attribute__((noinline)) static void *blocker(void *arg) {
    pid_t *tid = arg;
    *tid = (pid_t)syscall(SYS_gettid);
    while (!atomic_load(&go_block))
        nap_ms(10);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, blocked_sig);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    while (!atomic_load(&done))
        nap_ms(10);
    return NULL;
}

/* Blocks the signal and never sleeps: no stack can be had. */
__attribute__((noinline)) static void *blocking_spinner(void *arg) {
    pid_t *tid = arg;
    *tid = (pid_t)syscall(SYS_gettid);
    while (!atomic_load(&go_block))
        nap_ms(10);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, blocked_sig);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
    return NULL;
}

/* blocked_turns: spins until *arg's time (monotonic ms), then naps until
 * done; or, given a negative time, naps until -time, then spins. */
static atomic_ullong turns_t0;

__attribute__((noinline)) static void early_spin(void) {
    volatile unsigned long x = 0;
    while (mono_ms() < atomic_load(&turns_t0) + 500)
        for (int i = 0; i < 100000; i++)
            x++;
}

__attribute__((noinline)) static void late_spin(void) {
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
}

static void *turn_taker(void *arg) {
    bool late = arg != NULL;
    if (late) {
        while (mono_ms() < atomic_load(&turns_t0) + 600)
            nap_ms(10);
        late_spin();
    } else {
        early_spin();
        while (!atomic_load(&done))
            nap_ms(10);
    }
    return NULL;
}

/* The signal blocked in every thread it makes: 8 that spin first and
 * nap after, 2 that spin later ("earlyspin-i", "latespin-i"). */
static int mode_blocked_turns(int sig) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, sig);
    for (int i = 0; i < 400 && rounds_written() < 1; i++)
        nap_ms(10);
    atomic_store(&turns_t0, mono_ms());
    pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_t th[10];
    for (int i = 0; i < 10; i++) {
        char name[32];
        pthread_create(&th[i], NULL, turn_taker, i < 8 ? NULL : (void *)1);
        snprintf(name, sizeof name, i < 8 ? "earlyspin-%d" : "latespin-%d", i < 8 ? i : i - 8);
        pthread_setname_np(th[i], name);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    uint64_t wall = wall_ms();
    nap_ms(2400);
    atomic_store(&done, 1);
    for (int i = 0; i < 10; i++)
        pthread_join(th[i], NULL);
    printf("turns: started_wall_ms=%llu\n", (unsigned long long)wall);
    return 0;
}

/* Is sig pending for the thread (SigPnd of its status)? */
static int pending_in(pid_t tid, int sig) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int pend = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigPnd:", 7) == 0)
            pend = (strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1;
    fclose(f);
    return pend;
}

/* An allow-all seccomp filter on every thread of the process (TSYNC):
 * the agent's threads then run under a filter, as in a service. */
static int filter_all_threads(void) {
    struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {.len = 1, .filter = allow};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

/* late == 0: the blockers block the signal from birth (created with it
 * blocked in main's mask, which they inherit). late == 1: they run with
 * it unblocked for 5 rounds, then block it; 2: as 0, under a seccomp
 * filter. N of them sleep in a loop ("blocker-i"), SPINNERS more spin
 * ("blockspin-i"). */
static int SPINNERS = 2;
static int mode_blocked(int n, int sig, int late) {
    blocked_sig = sig;
    if (late == 2) { /* filtered */
        for (int i = 0; i < 400 && rounds_written() < 1; i++)
            nap_ms(10);
        if (filter_all_threads() != 0) {
            perror("seccomp");
            return 1;
        }
        late = 0;
    }
    pthread_t *th = calloc((size_t)n + SPINNERS, sizeof *th);
    pid_t *tids = calloc((size_t)n + SPINNERS, sizeof *tids);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, sig);
    if (!late) {
        atomic_store(&go_block, 1);
        pthread_sigmask(SIG_BLOCK, &set, &old);
    }
    for (int i = 0; i < n + SPINNERS; i++) {
        char name[32];
        pthread_create(&th[i], NULL, i < n ? blocker : blocking_spinner, &tids[i]);
        snprintf(name, sizeof name, i < n ? "blocker-%d" : "blockspin-%d", i < n ? i : i - n);
        pthread_setname_np(th[i], name);
    }
    if (!late)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_t w;
    pthread_create(&w, NULL, napper, NULL);
    pthread_setname_np(w, "host-napper");
    uint64_t blocked_wall = wall_ms();
    if (late) {
        for (int i = 0; i < 400 && rounds_written() < 5; i++)
            nap_ms(50);
        blocked_wall = wall_ms();
        atomic_store(&go_block, 1);
    }
    uint64_t t0 = mono_ms();
    nap_ms(1500);
    int pending = 0;
    for (int i = 0; i < n + SPINNERS; i++)
        pending += pending_in(tids[i], sig);
    atomic_store(&done, 1);
    for (int i = 0; i < n + SPINNERS; i++)
        pthread_join(th[i], NULL);
    pthread_join(w, NULL);
    printf("blocked: threads=%d pending=%d ran_ms=%llu blocked_wall_ms=%llu\n", n, pending,
           (unsigned long long)(mono_ms() - t0), (unsigned long long)blocked_wall);
    free(th);
    free(tids);
    return 0;
}

/* ---- prof: the host profiles itself with ITIMER_PROF -------------- */

static atomic_int ticks, prof_from_agent;

static void prof_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (from_this_process(si))
        atomic_fetch_add(&prof_from_agent, 1);
    else
        atomic_fetch_add(&ticks, 1);
}

__attribute__((noinline)) static void spin_for_prof(double seconds) {
    volatile unsigned long x = 0;
    double t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    while (cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0 < seconds)
        for (int i = 0; i < 10000; i++)
            x++;
}

/* wait: the agent is there; let it take 3 rounds first (its first round
 * reads symbols, slow under a sanitizer) so the measured second is a
 * sampled one. */
static int mode_prof(bool wait) {
    for (int i = 0; wait && i < 400 && rounds_written() < 3; i++)
        nap_ms(50);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = prof_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 10000}, {0, 10000}}; /* every 10 ms of CPU */
    setitimer(ITIMER_PROF, &it, NULL);
    double p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
    spin_for_prof(1.0);
    double used = cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    printf("prof: ticks=%d process_cpu_ms=%.0f ticks_per_cpu_s=%.1f agent_signals=%d\n",
           atomic_load(&ticks), used * 1000, atomic_load(&ticks) / used,
           atomic_load(&prof_from_agent));
    return 0;
}

/* ---- eintr: how often the agent's signal ends a host sleep -------- */

static atomic_int loop_eintr, loops, long_eintr;

__attribute__((noinline)) static void *loop_sleeper(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        struct timespec ts = {0, 50 * 1000000L};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            atomic_fetch_add(&loop_eintr, 1);
        atomic_fetch_add(&loops, 1);
    }
    return NULL;
}

__attribute__((noinline)) static void *long_sleeper(void *arg) {
    struct timespec ts = {*(int *)arg, 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        atomic_fetch_add(&long_eintr, 1);
    return NULL;
}

static int mode_eintr(int seconds) {
    pthread_t a, b;
    pthread_create(&a, NULL, loop_sleeper, NULL);
    pthread_setname_np(a, "loop-sleeper");
    pthread_create(&b, NULL, long_sleeper, &seconds);
    pthread_setname_np(b, "long-sleeper");
    pthread_join(b, NULL);
    atomic_store(&done, 1);
    pthread_join(a, NULL);
    printf("eintr: loop_eintr=%d loops=%d long_eintr=%d\n", atomic_load(&loop_eintr),
           atomic_load(&loops), atomic_load(&long_eintr));
    return 0;
}

/* ---- sleep5: one sleep(5) on the main thread ---------------------- */

static int mode_sleep5(void) {
    uint64_t t0 = mono_ms();
    unsigned left = sleep(5); /* returns early (the seconds left) when interrupted */
    printf("sleep5: slept_ms=%llu left_s=%u\n", (unsigned long long)(mono_ms() - t0), left);
    return 0;
}

/* ---- quiet: timed waits in a loop, counting EINTR ------------------ */

static int quiet_pipe[2];
static atomic_int eintr_nanosleep, eintr_poll, eintr_epoll, eintr_select, quiet_loops;

__attribute__((noinline)) static void *loop_nanosleep(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        struct timespec ts = {0, 50 * 1000000L};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            atomic_fetch_add(&eintr_nanosleep, 1);
        atomic_fetch_add(&quiet_loops, 1);
    }
    return NULL;
}

__attribute__((noinline)) static void *loop_poll(void *arg) {
    (void)arg;
    struct pollfd p = {quiet_pipe[0], POLLIN, 0};
    while (!atomic_load(&done))
        if (poll(&p, 1, 50) < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_poll, 1);
    return NULL;
}

__attribute__((noinline)) static void *loop_epoll(void *arg) {
    (void)arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = quiet_pipe[0]};
    epoll_ctl(ep, EPOLL_CTL_ADD, quiet_pipe[0], &ev);
    while (!atomic_load(&done)) {
        struct epoll_event out;
        if (epoll_wait(ep, &out, 1, 50) < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_epoll, 1);
    }
    close(ep);
    return NULL;
}

__attribute__((noinline)) static void *loop_select(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(quiet_pipe[0], &r);
        struct timeval tv = {0, 50000};
        if (select(quiet_pipe[0] + 1, &r, NULL, NULL, &tv) < 0 && errno == EINTR)
            atomic_fetch_add(&eintr_select, 1);
    }
    return NULL;
}

/* Four named threads, run until the agent wrote `rounds` rounds (at most
 * 60 s), then stopped (`done`) and joined: the rounds written. */
static int run_four_until(void *(*fns[4])(void *), const char *names[4], int rounds) {
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        pthread_create(&th[i], NULL, fns[i], NULL);
        pthread_setname_np(th[i], names[i]);
    }
    int got = 0;
    for (int i = 0; i < 1200 && (got = rounds_written()) < rounds; i++)
        nap_ms(50);
    atomic_store(&done, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    return got;
}

/* Until the agent wrote `rounds` rounds (at most 60 s). */
static int mode_quiet(int rounds) {
    if (pipe(quiet_pipe) != 0)
        return 1;
    void *(*fns[])(void *) = {loop_nanosleep, loop_poll, loop_epoll, loop_select};
    const char *names[] = {"q-nanosleep", "q-poll", "q-epoll", "q-select"};
    int got = run_four_until(fns, names, rounds);
    printf("quiet: rounds=%d loops=%d nanosleep=%d poll=%d epoll=%d select=%d\n", got,
           atomic_load(&quiet_loops), atomic_load(&eintr_nanosleep), atomic_load(&eintr_poll),
           atomic_load(&eintr_epoll), atomic_load(&eintr_select));
    return 0;
}

/* ---- sigwait: every signal blocked, waited for in turns -------------- */

/* A common shape of daemons: every signal blocked in every thread, and a
 * loop that computes, then waits for a signal or a timeout in a system call
 * that unblocks for the wait only (sigtimedwait unblocks the set it waits
 * for; ppoll, pselect and epoll_pwait swap in their mask; sigsuspend too).
 * While a worker waits, its status shows a mask that is not its own: a
 * signal sent on the strength of it arrives while the worker computes,
 * blocked, and its next wait takes it: sigtimedwait returns it to the host,
 * ppoll and sigsuspend return EINTR. None of that happens without the agent
 * (this process sends no signal of its own). */
static atomic_int sw_waited, sw_taken, sw_last_sig, sw_eintr_ppoll, sw_eintr_suspend;

static void spin_ms(long ms) {
    uint64_t end = mono_ms() + (uint64_t)ms;
    volatile unsigned long x = 0;
    while (mono_ms() < end)
        x++;
}

__attribute__((noinline)) static void *sw_timedwait(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    while (!atomic_load(&done)) {
        spin_ms(3);
        struct timespec ts = {0, 3000000};
        siginfo_t si;
        int sig = sigtimedwait(&all, &si, &ts);
        atomic_fetch_add(&sw_waited, 1);
        if (sig > 0) {
            atomic_fetch_add(&sw_taken, 1);
            atomic_store(&sw_last_sig, sig);
        }
    }
    return NULL;
}

__attribute__((noinline)) static void *sw_ppoll(void *arg) {
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    while (!atomic_load(&done)) {
        spin_ms(3);
        struct timespec ts = {0, 3000000};
        if (ppoll(NULL, 0, &ts, &none) < 0 && errno == EINTR)
            atomic_fetch_add(&sw_eintr_ppoll, 1);
        atomic_fetch_add(&sw_waited, 1);
    }
    return NULL;
}

/* sigsuspend with an empty mask: returns only when a handler ran (a timer
 * of this thread's, SIGUSR1 every 3 ms, the only signal expected); any
 * other signal that reaches a handler is the agent's. */
static _Thread_local int usr1_seen;
static void on_usr1(int sig) {
    (void)sig;
    usr1_seen++;
}

__attribute__((noinline)) static void *sw_suspend(void *arg) {
    (void)arg;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGUSR1;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t t;
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0)
        return NULL;
    struct itimerspec its = {{0, 3000000}, {0, 3000000}};
    timer_settime(t, 0, &its, NULL);
    sigset_t none;
    sigemptyset(&none);
    while (!atomic_load(&done)) {
        spin_ms(3);
        int before = usr1_seen;
        sigsuspend(&none);
        atomic_fetch_add(&sw_waited, 1);
        if (usr1_seen == before)
            atomic_fetch_add(&sw_eintr_suspend, 1); /* woken by a signal not its own */
    }
    timer_delete(t);
    return NULL;
}

static int mode_sigwait(int rounds) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* inherited by every thread */
    void *(*fns[])(void *) = {sw_timedwait, sw_timedwait, sw_ppoll, sw_suspend};
    const char *names[] = {"sw-timedwait-0", "sw-timedwait-1", "sw-ppoll", "sw-suspend"};
    int got = run_four_until(fns, names, rounds);
    printf("sigwait: rounds=%d waits=%d taken=%d last_sig=%d eintr_ppoll=%d eintr_suspend=%d\n",
           got, atomic_load(&sw_waited), atomic_load(&sw_taken), atomic_load(&sw_last_sig),
           atomic_load(&sw_eintr_ppoll), atomic_load(&sw_eintr_suspend));
    return 0;
}

/* ---- undumpable: the host makes itself non-dumpable ---------------- */

/* Its /proc/self/task/<tid>/syscall then belongs to root: an unprivileged
 * agent cannot read where a thread sleeps. A thread asleep in a wait that
 * a signal ends with EINTR (nanosleep here) must not be signalled; one
 * caught running still is. The napper computes about a millisecond
 * between its naps, so that it ran since the last round; every EINTR its
 * naps or the main thread's get is counted. */
static atomic_int ud_eintr;

static void ud_nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        atomic_fetch_add(&ud_eintr, 1);
}

__attribute__((noinline)) static void *ud_napper(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        struct timespec t0, t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        volatile unsigned long x = 0;
        do {
            for (int i = 0; i < 10000; i++)
                x++;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000L);
        ud_nap_ms(5);
    }
    return NULL;
}

static int mode_undumpable(int rounds) {
    prctl(PR_SET_DUMPABLE, 0);
    pthread_t a, b;
    pthread_create(&a, NULL, ud_napper, NULL);
    pthread_setname_np(a, "ud-napper");
    pthread_create(&b, NULL, busy, NULL);
    pthread_setname_np(b, "ud-busy");
    int got = 0;
    for (int i = 0; i < 400 && (got = rounds_written()) < rounds; i++)
        ud_nap_ms(50);
    atomic_store(&done, 1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("undumpable: rounds=%d dumpable=%d eintr=%d\n", got, prctl(PR_GET_DUMPABLE),
           atomic_load(&ud_eintr));
    return 0;
}

/* ---- altstack: the alternate signal stacks threads get -------------- */

#define PATTERN 0x5a
#define ZONE (32u * 1024u)
#define OWN_ALT (128u * 1024u)

static atomic_int off_ready, own_ready;
static atomic_ullong off_clobbered = 1ull << 40;
static atomic_int own_kept = -1;
static stack_t thread_alt;

/* What the loader's alternate stack should measure: max(64 KiB,
 * 4 * AT_MINSIGSTKSZ), whole pages. */
static size_t agent_alt_size(void) {
    size_t min = (size_t)getauxval(AT_MINSIGSTKSZ), page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = 4 * min > 65536 ? 4 * min : 65536;
    return (n + page - 1) / page * page;
}

static void *report_alt(void *arg) {
    (void)arg;
    sigaltstack(NULL, &thread_alt);
    return NULL;
}

/* Installs a 128 KiB alternate stack of its own, spins, then says whether
 * it is still the one in place. */
__attribute__((noinline)) static void own_spin(void) {
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
}

static void *alt_own(void *arg) {
    (void)arg;
    static char *mine;
    mine = malloc(OWN_ALT);
    stack_t ss = {.ss_sp = mine, .ss_size = OWN_ALT, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return NULL;
    atomic_store(&own_ready, 1);
    own_spin();
    stack_t now;
    sigaltstack(NULL, &now);
    atomic_store(&own_kept, !(now.ss_flags & SS_DISABLE) && now.ss_sp == mine &&
                                now.ss_size == OWN_ALT);
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    free(mine);
    return NULL;
}

/* Disables its alternate stack, lets any signal already on its way land,
 * then writes a pattern below its stack pointer (the bytes a signal frame
 * would take) and spins without a call, so that nothing of its own goes
 * there: a changed byte is a signal frame on its stack. */
__attribute__((noinline)) static void *alt_off(void *arg) {
    (void)arg;
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    nap_ms(300);
    volatile unsigned char *top = (volatile unsigned char *)__builtin_frame_address(0) - 2048;
    for (size_t i = 1; i <= ZONE; i++)
        top[-(long)i] = PATTERN;
    atomic_store(&off_ready, 1);
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
    unsigned long long bad = 0;
    for (size_t i = 1; i <= ZONE; i++)
        bad += top[-(long)i] != PATTERN;
    atomic_store(&off_clobbered, bad);
    return NULL;
}

/* Disables its alternate stack behind the loader's back (the raw system
 * call, as the Go runtime makes it) and spins: the registry still has it
 * safe, so it is signalled, and the handler finds itself on the thread's
 * own stack. */
static atomic_int raw_ready;

__attribute__((noinline)) static void raw_spin(void) {
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
}

static void *alt_raw(void *arg) {
    (void)arg;
    stack_t off = {.ss_flags = SS_DISABLE};
    syscall(SYS_sigaltstack, &off, NULL);
    atomic_store(&raw_ready, 1);
    raw_spin();
    return NULL;
}

/* Mappings of the process now (lines of /proc/self/maps). */
static int count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* 200 threads created and joined one after the other: the mappings they
 * leave behind (an alternate stack not freed at exit: two each). */
static int churn_growth(void) {
    pthread_t t;
    pthread_create(&t, NULL, report_alt, NULL); /* glibc's stack cache warm */
    pthread_join(t, NULL);
    int before = count_maps();
    for (int i = 0; i < 200; i++) {
        pthread_create(&t, NULL, report_alt, NULL);
        pthread_join(t, NULL);
    }
    return count_maps() - before;
}

/* Wait (at most 20 s) until `want` more rounds were written. */
static int wait_rounds(int want) {
    int start = rounds_written(), now = start;
    for (int i = 0; i < 400 && (now = rounds_written()) < start + want; i++)
        nap_ms(50);
    return now - start;
}

static int mode_altstack(int rounds) {
    stack_t main_alt;
    sigaltstack(NULL, &main_alt);
    pthread_t r, own, off, raw;
    pthread_create(&r, NULL, report_alt, NULL);
    pthread_join(r, NULL);
    int growth = 0, got = 0;
    if (rounds > 0) {
        pthread_create(&own, NULL, alt_own, NULL);
        pthread_setname_np(own, "alt-own");
        pthread_create(&off, NULL, alt_off, NULL);
        pthread_setname_np(off, "alt-off");
        pthread_create(&raw, NULL, alt_raw, NULL);
        pthread_setname_np(raw, "alt-raw");
        while (!atomic_load(&off_ready) || !atomic_load(&own_ready) || !atomic_load(&raw_ready))
            nap_ms(5);
        got = wait_rounds(rounds);
        growth = churn_growth(); /* the agent runs: its own mappings are made */
        atomic_store(&done, 1);
        pthread_join(own, NULL);
        pthread_join(off, NULL);
        pthread_join(raw, NULL);
    }
    printf("altstack: main_on=%d main_size=%zu thread_on=%d thread_size=%zu want_size=%zu "
           "own_kept=%d off_clobbered=%llu churn_maps=%d rounds=%d\n",
           !(main_alt.ss_flags & SS_DISABLE), main_alt.ss_size,
           !(thread_alt.ss_flags & SS_DISABLE), thread_alt.ss_size, agent_alt_size(),
           atomic_load(&own_kept), rounds > 0 ? atomic_load(&off_clobbered) : 0ull, growth, got);
    return 0;
}

/* ---- forkalt: the calling thread of fork, in the child --------------- */

/* Spins, looking at the child's own rounds now and then. */
__attribute__((noinline)) static int child_spin(int rounds) {
    int got = 0;
    uint64_t until = mono_ms() + 20000;
    volatile unsigned long x = 0;
    while ((got = rounds_written()) < rounds && mono_ms() < until)
        for (unsigned long i = 0; i < 20000000ul; i++)
            x++;
    return got;
}

static int mode_forkalt(int rounds) {
    wait_rounds(3);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        stack_t ss;
        sigaltstack(NULL, &ss);
        int got = child_spin(rounds);
        printf("forkalt-child: pid=%d alt_on=%d rounds=%d\n", (int)getpid(),
               !(ss.ss_flags & SS_DISABLE), got);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("forkalt: child_exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
    return 0;
}

/* ---- edge: a thread at the end of its stack ------------------------- */

#define EDGE_LEFT 2000u
static uintptr_t edge_lo;
static atomic_ullong edge_left;
static atomic_int edge_ready;

/* Takes all its stack but about `n` bytes above the bottom and spins. */
__attribute__((noinline)) static void edge_spin(size_t n) {
    volatile char *p = __builtin_alloca(n);
    p[0] = 1;
    atomic_store(&edge_left, (unsigned long long)((uintptr_t)p - edge_lo));
    atomic_store(&edge_ready, 1);
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
}

static void *edge_thread(void *arg) {
    (void)arg;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    edge_spin(here - edge_lo - EDGE_LEFT - 256); /* 256: edge_spin's own frame */
    return NULL;
}

static int mode_edge(int rounds) {
    /* a stack of our own with a guard page below it: its end is known */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 256 * 1024;
    char *m = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0)
        return 1;
    edge_lo = (uintptr_t)(m + page);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstack(&a, m + page, size);
    pthread_t t;
    if (pthread_create(&t, &a, edge_thread, NULL) != 0)
        return 1;
    pthread_setname_np(t, "edge");
    while (!atomic_load(&edge_ready))
        nap_ms(5);
    int got = wait_rounds(rounds);
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    printf("edge: left=%llu rounds=%d\n", (unsigned long long)atomic_load(&edge_left), got);
    return 0;
}

/* ---- coro: makecontext coroutines on small heap stacks -------------- */

#define CANARY_BYTES (8u * 1024u)
#define CANARY_WORD 0xc0ffee5aa5eeff0cull
#define CORO_LEFT 2000u

static ucontext_t runner_ctx;
static atomic_int coro_phase, coro_spinning;

typedef struct coro {
    size_t size;
    unsigned char *block; /* canaries, then the stack */
    ucontext_t ctx;
    int phase;            /* spins until coro_phase reaches it */
} coro;

__attribute__((noinline)) static void coro_spin(coro *c, size_t n) {
    volatile char *p = __builtin_alloca(n);
    p[0] = 1;
    atomic_store(&coro_spinning, c->phase);
    volatile unsigned long x = 0;
    while (atomic_load(&coro_phase) < c->phase)
        x++;
}

static coro *running_coro;

static void coro_main(void) {
    coro *c = running_coro;
    uintptr_t lo = (uintptr_t)(c->block + CANARY_BYTES);
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    coro_spin(c, here - lo - CORO_LEFT - 256);
}

/* Runs coroutine c until it returns (to runner_ctx, its uc_link). */
__attribute__((noinline)) static void run_coro(coro *c) {
    getcontext(&c->ctx);
    c->ctx.uc_stack.ss_sp = c->block + CANARY_BYTES;
    c->ctx.uc_stack.ss_size = c->size;
    c->ctx.uc_link = &runner_ctx;
    makecontext(&c->ctx, coro_main, 0);
    running_coro = c;
    swapcontext(&runner_ctx, &c->ctx);
}

static void *coro_runner(void *arg) {
    coro *cs = arg;
    run_coro(&cs[0]);
    run_coro(&cs[1]);
    return NULL;
}

static unsigned canaries_changed(const coro *c) {
    unsigned bad = 0;
    const uint64_t *w = (const uint64_t *)c->block;
    for (size_t i = 0; i < CANARY_BYTES / 8; i++)
        bad += w[i] != CANARY_WORD;
    return bad;
}

static int mode_coro(int rounds) {
    coro cs[2] = {{.size = 8 * 1024, .phase = 1}, {.size = 16 * 1024, .phase = 2}};
    for (int i = 0; i < 2; i++) {
        cs[i].block = malloc(CANARY_BYTES + cs[i].size);
        uint64_t *w = (uint64_t *)cs[i].block;
        for (size_t j = 0; j < CANARY_BYTES / 8; j++)
            w[j] = CANARY_WORD;
    }
    pthread_t t;
    pthread_create(&t, NULL, coro_runner, cs);
    pthread_setname_np(t, "coro-runner");
    int got = 0;
    for (int phase = 1; phase <= 2; phase++) {
        while (atomic_load(&coro_spinning) < phase)
            nap_ms(2);
        got += wait_rounds(rounds);
        atomic_store(&coro_phase, phase);
    }
    pthread_join(t, NULL);
    printf("coro: changed8=%u changed16=%u rounds=%d\n", canaries_changed(&cs[0]),
           canaries_changed(&cs[1]), got);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "late") == 0)
        return mode_late(arg_signal(argc, argv, 2));
    if (strcmp(mode, "chain") == 0)
        return mode_chain(arg_signal(argc, argv, 2));
    if (strcmp(mode, "blocked") == 0 && argc > 2)
        return mode_blocked(atoi(argv[2]), arg_signal(argc, argv, 3), 0);
    if (strcmp(mode, "blocked_turns") == 0)
        return mode_blocked_turns(arg_signal(argc, argv, 2));
    if (strcmp(mode, "blocked_many") == 0 && argc > 2) {
        SPINNERS = 10;
        return mode_blocked(atoi(argv[2]), arg_signal(argc, argv, 3), 0);
    }
    if (strcmp(mode, "blocked_filtered") == 0 && argc > 2)
        return mode_blocked(atoi(argv[2]), arg_signal(argc, argv, 3), 2);
    if (strcmp(mode, "blocked_late") == 0 && argc > 2)
        return mode_blocked(atoi(argv[2]), arg_signal(argc, argv, 3), 1);
    if (strcmp(mode, "prof") == 0)
        return mode_prof(argc > 2 && strcmp(argv[2], "wait") == 0);
    if (strcmp(mode, "eintr") == 0 && argc > 2)
        return mode_eintr(atoi(argv[2]));
    if (strcmp(mode, "sleep5") == 0)
        return mode_sleep5();
    if (strcmp(mode, "quiet") == 0 && argc > 2)
        return mode_quiet(atoi(argv[2]));
    if (strcmp(mode, "undumpable") == 0 && argc > 2)
        return mode_undumpable(atoi(argv[2]));
    if (strcmp(mode, "altstack") == 0 && argc > 2)
        return mode_altstack(atoi(argv[2]));
    if (strcmp(mode, "forkalt") == 0 && argc > 2)
        return mode_forkalt(atoi(argv[2]));
    if (strcmp(mode, "edge") == 0 && argc > 2)
        return mode_edge(atoi(argv[2]));
    if (strcmp(mode, "coro") == 0 && argc > 2)
        return mode_coro(atoi(argv[2]));
    if (argc > 2 && strcmp(argv[1], "sigwait") == 0)
        return mode_sigwait(atoi(argv[2]));
    fprintf(stderr, "usage: sig_host late|blocked N|prof|eintr SECONDS|sleep5|quiet ROUNDS [sig]\n");
    return 2;
}
