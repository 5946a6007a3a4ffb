/* limits_host.c: a host that checks its own behaviour under tight limits
 * (tests/native/check_limits.py runs it with and without the agent).
 *
 *   nofile N MB      two threads; after settle_ms, opens N files and
 *                    mallocs MB megabytes: exit 0 if all succeeded; says
 *                    how many of glibc's 64 MiB arena heaps it has (its
 *                    own threads never allocate: none is its own)
 *   restart MB       after settle_ms, stops and starts the agent three
 *                    times through its API (stackshot_stop, stackshot_start,
 *                    looked up with dlsym: nothing without the agent), then
 *                    mallocs MB megabytes and says how many arena heaps it
 *                    has: exit 0 if the malloc succeeded
 *   lower            lowers its RLIMIT_NOFILE to 8 (after the agent kept
 *                    files for its threads), then opens 5 files: exit 0
 *                    if all 5 opened
 *   chroot DIR       chroots into DIR (no /proc there) after settle_ms,
 *                    then lives 3 s
 *   deep             its main thread busy 30 frames deep from the start,
 *                    for run_ms
 *   sleeper          a thread sleeping in nanosleep; prints its tid and
 *                    lives run_ms (the test stops it with a debugger)
 *   coro             its main thread busy 30 frames deep on a stack of
 *                    its own (makecontext), for run_ms
 *
 * settle_ms and run_ms come from SS_SETTLE_MS / SS_RUN_MS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static long env_ms(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? atol(v) : dflt;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile int stop;

static void *idle_thread(void *arg) {
    (void)arg;
    while (!stop)
        sleep_ms(5);
    return NULL;
}

static void *sleeper_thread(void *arg) {
    (void)arg;
    printf("sleeper %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    struct timespec ts = {3600, 0}; /* one long nanosleep, restarted after a stop */
    nanosleep(&ts, NULL);
    return NULL;
}

/* n files, each open tried again a few times 20 ms apart on EMFILE: under
 * a small limit the agent reads each /proc file through a descriptor open
 * for one read, which holds a number for a moment (longer when the
 * machine is loaded and its thread is preempted there); what it keeps is
 * what a retry cannot get back. */
static int open_files(int n) {
    int got = 0, retries = 0;
    for (int i = 0; i < n; i++) {
        int fd = open("/dev/null", O_RDONLY);
        for (int t = 0; fd < 0 && errno == EMFILE && t < 5; t++, retries++) {
            sleep_ms(20);
            fd = open("/dev/null", O_RDONLY);
        }
        if (fd < 0) {
            fprintf(stderr, "host: open %d of %d: %s\n", i + 1, n, strerror(errno));
            break;
        }
        got++;
    }
    if (retries)
        printf("host: %d opens tried again after EMFILE\n", retries);
    return got;
}

/* glibc's heaps of arenas other than the main one: 64 MiB-aligned
 * anonymous regions of 64 MiB, the used part read-write, the rest
 * PROT_NONE (as two adjacent mappings, or one when all of it is in use). */
#define HEAP_SIZE (64ul << 20)
static int arena_heaps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    unsigned long start = 0, end = 0; /* a candidate heap so far */
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perm[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perm, path) < 3)
            continue;
        bool anon = path[0] == '\0';
        if (anon && end && lo == end && strcmp(perm, "---p") == 0 && hi <= start + HEAP_SIZE)
            end = hi; /* the reserved rest of the candidate */
        else if (anon && lo % HEAP_SIZE == 0 && strcmp(perm, "rw-p") == 0 && hi - lo <= HEAP_SIZE)
            start = lo, end = hi;
        else
            start = end = 0;
        if (end && end == start + HEAP_SIZE) {
            n++;
            start = end = 0;
        }
    }
    fclose(f);
    return n;
}

static int run_nofile(int n, long mb) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, idle_thread, NULL);
    sleep_ms(env_ms("SS_SETTLE_MS", 500));
    int heaps = arena_heaps(); /* before the files take every descriptor */
    int got = open_files(n);
    char *p = malloc((size_t)mb << 20);
    if (p)
        memset(p, 1, (size_t)mb << 20);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("host: opened %d of %d files, malloc(%ld MB) %s, %d arena heaps of 64 MiB\n", got, n,
           mb, p ? "ok" : "failed", heaps);
    return got == n && p ? 0 : 1;
}

static int run_restart(long mb) {
    int (*start)(void);
    void (*stop)(void);
    *(void **)&start = dlsym(RTLD_DEFAULT, "stackshot_start");
    *(void **)&stop = dlsym(RTLD_DEFAULT, "stackshot_stop");
    long settle = env_ms("SS_SETTLE_MS", 500);
    sleep_ms(settle);
    for (int i = 0; i < 3 && start && stop; i++) {
        stop();
        start();
        sleep_ms(settle / 3); /* a few rounds of the new agent */
    }
    int heaps = arena_heaps();
    char *p = malloc((size_t)mb << 20);
    if (p)
        memset(p, 1, (size_t)mb << 20);
    printf("host: agent %s, malloc(%ld MB) %s, %d arena heaps of 64 MiB\n",
           start && stop ? "restarted 3 times" : "absent", mb, p ? "ok" : "failed", heaps);
    return p ? 0 : 1;
}

static int run_lower(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, idle_thread, NULL);
    long settle = env_ms("SS_SETTLE_MS", 500);
    sleep_ms(settle);
    struct rlimit rl = {8, 8};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        perror("setrlimit");
        return 2;
    }
    /* a few rounds after the change, as a host does later on */
    sleep_ms(settle);
    int got = open_files(5);
    sleep_ms(env_ms("SS_RUN_MS", 1000));
    stop = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    printf("host: opened %d of 5 files under RLIMIT_NOFILE 8\n", got);
    return got == 5 ? 0 : 1;
}

static int run_chroot(const char *dir) {
    sleep_ms(env_ms("SS_SETTLE_MS", 500));
    if (chroot(dir) != 0 || chdir("/") != 0) {
        perror("chroot");
        return 2;
    }
    sleep_ms(3000);
    printf("host: lived 3 s in the chroot\n");
    return 0;
}

/* 30 frames, each keeping a little of the stack, the innermost spinning */
static volatile unsigned long sink;

__attribute__((noinline)) static unsigned long deep(int level, double until) {
    volatile char pad[256];
    pad[0] = (char)level;
    if (level > 0)
        return deep(level - 1, until) + pad[0];
    unsigned long x = 0;
    while (now_s() < until)
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i * 7;
    return x;
}

static int run_deep(void) {
    sink = deep(30, now_s() + (double)env_ms("SS_RUN_MS", 2000) / 1000.0);
    printf("host: done\n");
    return 0;
}

static ucontext_t coro_ctx, main_ctx;

static void coro_entry(void) { sink = deep(30, now_s() + (double)env_ms("SS_RUN_MS", 2000) / 1000.0); }

static int run_coro(void) {
    size_t size = 1 << 20;
    void *stack = malloc(size);
    if (!stack || getcontext(&coro_ctx) != 0)
        return 2;
    coro_ctx.uc_stack.ss_sp = stack;
    coro_ctx.uc_stack.ss_size = size;
    coro_ctx.uc_link = &main_ctx;
    makecontext(&coro_ctx, coro_entry, 0);
    if (swapcontext(&main_ctx, &coro_ctx) != 0)
        return 2;
    printf("host: done\n");
    return 0;
}

static int run_sleeper(void) {
    printf("main %ld 0x%016lx\n", (long)getpid(), (unsigned long)pthread_self());
    pthread_t t;
    pthread_create(&t, NULL, sleeper_thread, NULL);
    pthread_detach(t);
    sleep_ms(env_ms("SS_RUN_MS", 4000));
    printf("host: done\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && strcmp(argv[1], "nofile") == 0)
        return run_nofile(atoi(argv[2]), atol(argv[3]));
    if (argc >= 3 && strcmp(argv[1], "restart") == 0)
        return run_restart(atol(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "lower") == 0)
        return run_lower();
    if (argc >= 3 && strcmp(argv[1], "chroot") == 0)
        return run_chroot(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "deep") == 0)
        return run_deep();
    if (argc >= 2 && strcmp(argv[1], "coro") == 0)
        return run_coro();
    if (argc >= 2 && strcmp(argv[1], "sleeper") == 0)
        return run_sleeper();
    fprintf(stderr, "usage: limits_host nofile N MB | restart MB | lower | chroot DIR | deep | coro | sleeper\n");
    return 2;
}
