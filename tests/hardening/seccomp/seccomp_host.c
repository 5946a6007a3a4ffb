/* seccomp_host.c: a hardened service, as systemd's SystemCallFilter= or a
 * container runtime's profile makes one, with the agent preloaded.
 *
 *   seccomp_host MODE WHEN SECONDS AGENT_LIB
 *     MODE   none | kill | eperm: what the filter does to a denied call
 *            (SECCOMP_RET_KILL_PROCESS, or SECCOMP_RET_ERRNO with EPERM)
 *            service: an allow list instead, the calls whose numbers
 *            $SS_ALLOW holds (comma separated; check_seccomp.py puts
 *            systemd's @system-service there, less the deny list
 *            below), anything else kills: SystemCallFilter=@system-service
 *            with SystemCallFilter=~@debug process_vm_readv process_vm_writev
 *     WHEN   before: installed with prctl(PR_SET_SECCOMP) by this program,
 *                    which then executes itself with AGENT_LIB in
 *                    LD_PRELOAD: the filter is there from the first
 *                    instruction of every thread, the agent's included
 *                    (what systemd does before it executes a service)
 *            after:  installed once the agent wrote 2 rounds, on every
 *                    thread at once (seccomp(2) with
 *                    SECCOMP_FILTER_FLAG_TSYNC: prctl filters only the
 *                    calling thread, and the agent's threads would go on
 *                    unfiltered)
 *   seccomp_host --list   the denied calls this program knows, one a line
 *   libseccomp_late.so (this file built with SS_SECCOMP_LATE, a JVMTI
 *            agent: -agentpath:libseccomp_late.so=kill|eperm after the
 *            stackshot agent): installs the deny filter on every thread
 *            of the JVM at once (TSYNC) once the agent wrote 2 rounds,
 *            the JVM's "after" (check_seccomp_jvm.py)
 *   seccomp_host --exec kill|eperm PROGRAM ARGS...
 *            installs the deny filter below with prctl (no_new_privs
 *            first) and executes PROGRAM: a JVM started under the filter
 *            (check_seccomp_jvm.py); nothing of the service runs
 *
 * Denied: the calls of systemd's @debug set (systemd-analyze
 * syscall-filter @debug, systemd 252: lookup_dcookie, perf_event_open,
 * pidfd_getfd, ptrace; rtas, s390_runtime_instr and
 * sys_debug_setcontext do not exist on x86-64), and process_vm_readv and
 * process_vm_writev, which systemd files under @ipc but hardened
 * container profiles and "SystemCallFilter=~process_vm_readv" deny (the
 * usual "no debugging of anyone, ourselves included"). check_seccomp.py
 * compares this list with systemd-analyze's when systemd is installed.
 * Calls of the x32 ABI are denied too (a deny list must not be bypassed
 * through them).
 *
 * The program: 4 sleeper threads loop on nanosleep, poll, select and
 * epoll_wait with 20 ms timeouts, counting EINTR and sleeps that ended
 * early; one thread spins. After SECONDS it prints
 *   seccomp_host: filter=<0|1> sleeps=N eintr=N short=N
 * and exits 0. Killed by the filter, it dies of SIGSYS (exit 159). */

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NAP_MS 20

#ifdef SS_SECCOMP_LATE
/* the JVMTI agent uses the filter and the round count, not the service */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

extern char **environ;

/* ---- the filter ---------------------------------------------------- */

typedef struct denied {
    const char *name;
    long nr; /* -1: not a call of this architecture */
} denied;

#define CALL(n) {#n, SYS_##n}
#define ABSENT(n) {#n, -1}

static const denied deny_list[] = {
    /* @debug */
    CALL(lookup_dcookie),
    CALL(perf_event_open),
#ifdef SYS_pidfd_getfd
    CALL(pidfd_getfd),
#else
    {"pidfd_getfd", 438},
#endif
    CALL(ptrace),
    ABSENT(rtas),
    ABSENT(s390_runtime_instr),
    ABSENT(sys_debug_setcontext),
    /* debugging of processes, ourselves included */
    CALL(process_vm_readv),
    CALL(process_vm_writev),
};

#define NDENY (sizeof deny_list / sizeof deny_list[0])

static int list_denied(void) {
    for (size_t i = 0; i < NDENY; i++)
        printf("%s %ld\n", deny_list[i].name, deny_list[i].nr);
    return 0;
}

/* A classic BPF program: wrong architecture -> kill; x32 call -> deny;
 * a listed call -> deny; anything else -> allow. */
static size_t build_filter(struct sock_filter *f, uint32_t deny) {
    size_t n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u /* __X32_SYSCALL_BIT */, 0, 1);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
    for (size_t i = 0; i < NDENY; i++) {
        if (deny_list[i].nr < 0)
            continue;
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)deny_list[i].nr, 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    return n;
}

/* The allow list: wrong architecture or x32 -> kill; a call of $SS_ALLOW
 * -> allow; anything else -> kill. f has room for 3 + 2 * 2048. */
static size_t build_allow(struct sock_filter *f) {
    size_t n = 0;
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    const char *p = getenv("SS_ALLOW");
    for (int k = 0; p && *p && k < 2048; k++) {
        char *end;
        unsigned long nr = strtoul(p, &end, 10);
        if (end == p)
            break;
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        p = *end == ',' ? end + 1 : end;
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    return n;
}

static int install_filter(const char *mode, int all_threads) {
    uint32_t deny = strcmp(mode, "kill") == 0 ? SECCOMP_RET_KILL_PROCESS
                                              : SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
    static struct sock_filter f[8 + 2 * 2048];
    size_t n = strcmp(mode, "service") == 0 ? build_allow(f) : build_filter(f, deny);
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("seccomp_host: PR_SET_NO_NEW_PRIVS");
        return -1;
    }
    long rc = all_threads ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)
                          : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
    if (rc != 0) {
        perror("seccomp_host: installing the filter");
        return -1;
    }
    return 0;
}

/* ---- the service --------------------------------------------------- */

static atomic_int done;
static atomic_long sleeps, eintr, short_sleeps;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One sleep's outcome: interrupted, or shorter than asked (a timeout
 * rounds up, never down: any sleep shorter than NAP_MS was cut). */
static void count(int rc, int err, uint64_t t0) {
    uint64_t took = mono_ns() - t0;
    atomic_fetch_add(&sleeps, 1);
    if (rc < 0 && err == EINTR)
        atomic_fetch_add(&eintr, 1);
    else if (took < (uint64_t)NAP_MS * 1000000u)
        atomic_fetch_add(&short_sleeps, 1);
}

__attribute__((noinline)) static void *sleep_nanosleep(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        struct timespec ts = {0, NAP_MS * 1000000L};
        uint64_t t0 = mono_ns();
        int rc = nanosleep(&ts, NULL);
        count(rc, errno, t0);
    }
    return NULL;
}

__attribute__((noinline)) static void *sleep_poll(void *arg) {
    (void)arg;
    int p[2];
    if (pipe(p) != 0)
        return NULL;
    while (!atomic_load(&done)) {
        struct pollfd pfd = {p[0], POLLIN, 0};
        uint64_t t0 = mono_ns();
        int rc = poll(&pfd, 1, NAP_MS);
        count(rc, errno, t0);
    }
    close(p[0]);
    close(p[1]);
    return NULL;
}

__attribute__((noinline)) static void *sleep_select(void *arg) {
    (void)arg;
    while (!atomic_load(&done)) {
        struct timeval tv = {0, NAP_MS * 1000};
        uint64_t t0 = mono_ns();
        int rc = select(0, NULL, NULL, NULL, &tv);
        count(rc, errno, t0);
    }
    return NULL;
}

__attribute__((noinline)) static void *sleep_epoll(void *arg) {
    (void)arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return NULL;
    while (!atomic_load(&done)) {
        struct epoll_event ev;
        uint64_t t0 = mono_ns();
        int rc = epoll_wait(ep, &ev, 1, NAP_MS);
        count(rc, errno, t0);
    }
    close(ep);
    return NULL;
}

__attribute__((noinline)) static void *busy_spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load(&done))
        x++;
    return NULL;
}

/* Rounds the text exporter wrote so far ($STACKSHOT_OUTPUT_DIR/<exe>.<pid>.txt). */
static int rounds_written(void) {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/%s.%d.txt", dir ? dir : ".", program_invocation_short_name,
             (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strncmp(line, "Full thread dump", 16) == 0;
    fclose(f);
    return n;
}

static void nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int serve(const char *mode, const char *when, double seconds) {
    static void *(*const fn[])(void *) = {sleep_nanosleep, sleep_poll, sleep_select, sleep_epoll,
                                          busy_spin};
    static const char *const names[] = {"sl-nanosleep", "sl-poll", "sl-select", "sl-epoll", "busy"};
    pthread_t t[5];
    for (int i = 0; i < 5; i++) {
        pthread_create(&t[i], NULL, fn[i], NULL);
        pthread_setname_np(t[i], names[i]);
    }
    int filtered = strcmp(mode, "none") != 0 && strcmp(when, "before") == 0;
    uint64_t end = mono_ns() + (uint64_t)(seconds * 1e9);
    if (strcmp(mode, "none") != 0 && strcmp(when, "after") == 0) {
        /* the agent has started and read memory before the filter came */
        while (rounds_written() < 2 && mono_ns() < end)
            nap(10);
        filtered = install_filter(mode, 1) == 0;
        if (!filtered)
            return 2;
        /* the run goes on as long after the filter as "before" runs */
        end = mono_ns() + (uint64_t)(seconds * 1e9);
    }
    while (mono_ns() < end)
        nap(50);
    atomic_store(&done, 1);
    for (int i = 0; i < 5; i++)
        pthread_join(t[i], NULL);
    printf("seccomp_host: filter=%d sleeps=%ld eintr=%ld short=%ld\n", filtered,
           atomic_load(&sleeps), atomic_load(&eintr), atomic_load(&short_sleeps));
    fflush(stdout);
    return 0;
}

/* Stage one: filter this process (before), then run again with the agent
 * preloaded ("--served" marks the second stage). */
static int relaunch(int argc, char **argv) {
    const char *mode = argv[1], *when = argv[2], *lib = argv[4];
    if (strcmp(mode, "none") != 0 && strcmp(when, "before") == 0 && install_filter(mode, 0) != 0)
        return 2;
    char pre[4096];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", lib);
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    char *args[] = {argv[0], argv[1], argv[2], argv[3], "--served", NULL};
    if (!env)
        return 2;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = environ[i];
    if (lib[0])
        env[k++] = pre;
    (void)argc;
    /* by its own path: the process keeps its name (not "exe") */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return 2;
    self[len] = 0;
    execve(self, args, env);
    perror("seccomp_host: execve");
    return 2;
}

/* A JVM (or any program) under the filter from its first instruction:
 * the filter is inherited across execve and by every thread it makes. */
static int exec_filtered(char **argv) {
    if (strcmp(argv[0], "kill") != 0 && strcmp(argv[0], "eperm") != 0)
        return 2;
    if (install_filter(argv[0], 0) != 0)
        return 2;
    execv(argv[1], argv + 1);
    perror("seccomp_host: execv");
    return 2;
}

#ifdef SS_SECCOMP_LATE
/* ---- the JVM's late filter --------------------------------------- */

static char late_mode[16];

static void *late_filter(void *arg) {
    (void)arg;
    uint64_t end = mono_ns() + 30ull * 1000000000u;
    while (rounds_written() < 2 && mono_ns() < end)
        nap(10);
    int rc = install_filter(late_mode, 1);
    fprintf(stderr, "seccomp_late: filter %s after %d rounds\n", rc == 0 ? "installed" : "FAILED",
            rounds_written());
    return NULL;
}

/* JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *, char *, void *): the
 * same on x86-64 without jni.h. 0 is JNI_OK. */
__attribute__((visibility("default"))) int Agent_OnLoad(void *vm, char *options, void *reserved) {
    (void)vm;
    (void)reserved;
    snprintf(late_mode, sizeof late_mode, "%s", options ? options : "kill");
    pthread_t t;
    if (pthread_create(&t, NULL, late_filter, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}
#else
int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--list") == 0)
        return list_denied();
    if (argc >= 4 && strcmp(argv[1], "--exec") == 0)
        return exec_filtered(argv + 2);
    if (argc == 5 && strcmp(argv[4], "--served") == 0)
        return serve(argv[1], argv[2], atof(argv[3]));
    if (argc != 5) {
        fprintf(stderr, "usage: seccomp_host none|kill|eperm before|after SECONDS AGENT_LIB\n");
        return 2;
    }
    return relaunch(argc, argv);
}
#endif
