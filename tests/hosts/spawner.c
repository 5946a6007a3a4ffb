/* spawner.c: a host that spawns short-lived children while its agent runs.
 *
 * `ss_hosts_spawner MODE N MS [THREADS]`: computes for 300 ms (the agent,
 * preloaded at a short interval, starts and samples; on a loaded machine
 * it waits up to 5 s more until the start thread is gone), then forks N
 * children one after the other, waiting for each. A child lives MS
 * milliseconds (asleep), then, by MODE: `exit` calls exit(0) (destructors
 * run: the agent's too), `exec` execs /bin/true, `tasks` counts its
 * threads (/proc/self/task) and _exits with that count as its status,
 * `work` computes MS milliseconds instead of sleeping (its agent starts
 * and samples it) and calls exit(0), `naps` computes 2 ms and sleeps 3 ms
 * (nanosleep, not resumed) in turns for MS milliseconds and _exits with
 * 100 + the number of sleeps that ended with EINTR if any did, else with
 * its thread count, `parentclose` is `work` in a host that first closes
 * every descriptor >= 3 (as a daemon does; its agent's among them) and
 * computes 300 ms more (its agent meets them closed), `childclose` is
 * `work` in children that close every descriptor >= 3 first (the copies
 * of their parent's agent's among them), `resetwork` is `work` in children
 * that first set every signal's action back to the default (as a daemon
 * or code on its way to exec does). A MODE prefixed with `armed-`
 * forks after 100 ms asleep, without the 300 ms nor the wait: the children of a
 * process whose agent is still armed (its first round not due yet); with
 * `burst-` after that, 10 children that _exit(0) at once come first (a
 * process that forks often).
 * THREADS (default 0) threads compute
 * meanwhile (a busy host). Prints each child's pid ("child N", with
 * "tasks N" in `tasks` mode), then the mean cost of a child in
 * microseconds ("per child N us"); exits 0 when every child exited 0 (in
 * `tasks` mode: with a count). */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/host_threads.h"

#ifdef SPAWNER_OWN_MALLOC
/* ss_hosts_spawner_ownmalloc: the malloc family is this program's own (as
 * a host that links jemalloc in), a bump allocator that never gives back:
 * a signal handler that interrupts it must not allocate, so the agent
 * creates a forked child's restart thread at fork here. */
#include <stddef.h>
#include <sys/mman.h>
#define ARENA_BYTES (256u << 20)
static unsigned char *arena;
static atomic_size_t arena_used;

static void *bump(size_t align, size_t size) {
    if (!arena) {
        void *m = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        arena = m; /* first call: before any thread */
    }
    if (align < 16)
        align = 16;
    size_t need = size + align + 16;
    size_t off = atomic_fetch_add(&arena_used, need);
    if (off + need > ARENA_BYTES)
        return NULL;
    uintptr_t p = ((uintptr_t)arena + off + 16 + align - 1) & ~(uintptr_t)(align - 1);
    ((size_t *)p)[-1] = size;
    return (void *)p;
}

void *malloc(size_t n) { return bump(16, n); }
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) { return bump(16, a * b); } /* mmap'd: zeroed */
void *realloc(void *p, size_t n) {
    void *q = bump(16, n);
    if (p && q)
        memcpy(q, p, ((size_t *)p)[-1] < n ? ((size_t *)p)[-1] : n);
    return q;
}
void *memalign(size_t align, size_t n) { return bump(align, n); }
void *aligned_alloc(size_t align, size_t n) { return bump(align, n); }
int posix_memalign(void **out, size_t align, size_t n) {
    *out = bump(align, n);
    return *out ? 0 : 12;
}
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }
#endif

static atomic_bool done;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *spin(void *arg) {
    volatile unsigned long x = (unsigned long)(uintptr_t)arg;
    while (!atomic_load_explicit(&done, memory_order_relaxed))
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return NULL;
}

static int tasks_now(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void compute_ms(long ms) {
    uint64_t until = now_ns() + (uint64_t)ms * 1000000ull;
    volatile unsigned long x = 1;
    while (now_ns() < until)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ul + 1442695040888963407ul;
}

/* Computes and sleeps in turns for ms; the sleeps an interrupting signal
 * ended early (EINTR), counted. */
static int naps_ms(long ms) {
    uint64_t until = now_ns() + (uint64_t)ms * 1000000ull;
    int eintr = 0;
    while (now_ns() < until) {
        compute_ms(2);
        struct timespec d = {0, 3000000};
        if (nanosleep(&d, NULL) != 0)
            eintr++;
    }
    return eintr;
}

static void sleep_ms(long ms) {
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&d, &d) != 0)
        ;
}

/* Every descriptor >= 3 closed, as a daemon does at its start. */
static void close_from_3(void) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
        close((int)fd);
}

int main(int argc, char **argv) {
    if (argc < 4)
        return 2;
    bool armed = strncmp(argv[1], "armed-", 6) == 0;
    if (armed)
        argv[1] += 6;
    bool burst = strncmp(argv[1], "burst-", 6) == 0;
    if (burst)
        argv[1] += 6;
    bool exec_mode = strcmp(argv[1], "exec") == 0;
    bool tasks_mode = strcmp(argv[1], "tasks") == 0;
    bool work_mode = strcmp(argv[1], "work") == 0;
    bool naps_mode = strcmp(argv[1], "naps") == 0;
    bool parent_close = strcmp(argv[1], "parentclose") == 0;
    bool child_close = strcmp(argv[1], "childclose") == 0;
    bool reset_signals = strcmp(argv[1], "resetwork") == 0;
    work_mode |= parent_close || child_close || reset_signals;
    int n = atoi(argv[2]);
    long ms = atol(argv[3]);
    int threads = argc > 4 ? atoi(argv[4]) : 0;
    pthread_t t[16];
    for (int i = 0; i < threads && i < 16; i++)
        pthread_create(&t[i], NULL, spin, (void *)(uintptr_t)(i + 1));
    /* armed: 100 ms asleep, in which the loader's start thread reads what
     * a fork timer needs (its first moments) */
    uint64_t until = now_ns() + (armed ? 0 : 300000000ull);
    if (armed)
        sleep_ms(100);
    volatile unsigned long x = 1;
    while (now_ns() < until)
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005ul + 1442695040888963407ul;
    /* a preloaded agent has started (its start thread is gone): the
     * children are a running agent's, on a loaded machine too */
    for (int i = 0; !armed && i < 500 && thread_named("stackshot-start"); i++)
        sleep_ms(10);
    if (parent_close) {
        close_from_3();
        compute_ms(300);
    }
    for (int i = 0; burst && i < 10; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        while (p > 0 && waitpid(p, NULL, 0) < 0)
            ;
    }
    int failed = 0;
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pid_t p = fork();
        if (p < 0)
            return 3;
        if (p == 0) {
            if (naps_mode) {
                int eintr = naps_ms(ms);
                _exit(eintr ? 100 + (eintr < 100 ? eintr : 99) : tasks_now());
            }
            if (child_close)
                close_from_3();
            for (int sig = 1; reset_signals && sig < 65; sig++)
                signal(sig, SIG_DFL);
            if (work_mode)
                compute_ms(ms);
            else if (ms)
                sleep_ms(ms);
            if (tasks_mode)
                _exit(tasks_now());
            if (exec_mode) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(127);
            }
            exit(0);
        }
        int st;
        while (waitpid(p, &st, 0) < 0)
            ;
        bool counted = tasks_mode || naps_mode;
        if (!WIFEXITED(st) || (counted ? WEXITSTATUS(st) == 0 : WEXITSTATUS(st) != 0))
            failed++;
        if (counted)
            printf("child %d tasks %d\n", (int)p, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        else
            printf("child %d\n", (int)p);
    }
    uint64_t per = (now_ns() - t0) / (uint64_t)(n ? n : 1) / 1000u;
    atomic_store(&done, true);
    for (int i = 0; i < threads && i < 16; i++)
        pthread_join(t[i], NULL);
    printf("per child %llu us\n", (unsigned long long)per);
    return failed ? 1 : 0;
}
