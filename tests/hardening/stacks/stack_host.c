/* stack_host.c: a C host that owns its alternate signal stacks
 * (tests/hardening/stacks/check_stacks.py).
 *
 * Servers catch their own stack overflows: a SIGSEGV handler installed
 * with SA_ONSTACK runs on a sigaltstack the thread set up, looks at the
 * faulting address and, when it is the thread's guard page, says so before
 * leaving. That only works while nothing else pushes a signal frame onto
 * the thread's stack: a frame pushed there when the stack is nearly full
 * faults in the guard page, the kernel cannot deliver that signal and
 * sends a SIGSEGV of its own (si_code SI_KERNEL, no address), which the
 * host cannot tell from any other crash.
 *
 * usage: stack_host overflow   once a line (or end of file) is read from
 *                              stdin (the test waits for the agent's first
 *                              round), thread "deep" (256 KiB stack, its own
 *                              64 KiB sigaltstack) recurses until it
 *                              overflows; its last 16 KiB go slowly (a
 *                              server working with its stack nearly
 *                              full). The handler prints "stack_host:
 *                              stack overflow caught in thread deep ..."
 *                              and exits 42; any other SIGSEGV: "stack_host:
 *                              SIGSEGV outside the guard page ..." and 43.
 *        stack_host keep MS    once a line (or end of file) is read from
 *                              stdin, the main thread and thread "keeper" each set
 *                              their own sigaltstack, then work for MS ms
 *                              checking all along (sigaltstack(NULL, &ss))
 *                              that it is still theirs; "keeper" forks
 *                              half-way and its child (the agent restarts
 *                              there) checks the same for the rest.
 *                              "stack_host: keep ok ..." and 0, or
 *                              "stack_host: keep FAILED ..." and 1.
 *        stack_host forks      once a line (or end of file) is read from
 *                              stdin, four idle threads wait while thread
 *                              "forker" (on the agent's alternate stack)
 *                              forks twice: plainly, and from a handler
 *                              running on that stack (SA_ONSTACK). Each
 *                              child counts the alternate stacks of the
 *                              agent's kind in its maps (only the forking
 *                              thread's is inherited: the others are not
 *                              there), prints "stack_host: child <pid>",
 *                              computes 1.5 s (its agent samples it, its
 *                              signal landing on the inherited stack) and
 *                              exits 0. "stack_host: forks ok ..." and 0,
 *                              or "stack_host: forks FAILED ..." and 1. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ALT_SIZE (64 * 1024)
#define DEEP_STACK (256 * 1024)
/* The stack's last bytes are taken slowly: SLOW_MS per level in the last
 * SLOW_ZONE bytes, SLOWER_MS in the last SLOWER_ZONE, where a signal
 * frame no longer fits. */
#define SLOW_ZONE (16 * 1024)
#define SLOW_MS 40
#define SLOWER_ZONE (8 * 1024)
#define SLOWER_MS 100

/* the deep thread's stack, for the handler: [stack_lo, stack_hi), guard
 * below stack_lo */
static uintptr_t stack_lo, stack_hi, guard_size;
static volatile unsigned depth;

static void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* hex without stdio (the handler's own output) */
static void say_hex(uintptr_t v) {
    char b[19] = "0x";
    int n = 2;
    for (int sh = 60; sh >= 0; sh -= 4)
        if ((v >> sh) || sh == 0 || n > 2)
            b[n++] = "0123456789abcdef"[(v >> sh) & 15];
    b[n] = 0;
    say(b);
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (stack_lo && a >= stack_lo - guard_size - 4096 && a < stack_lo + 4096) {
        say("stack_host: stack overflow caught in thread deep (fault at ");
        say_hex(a);
        say(", depth ");
        say_hex(depth);
        say(")\n");
        _exit(42);
    }
    say("stack_host: SIGSEGV outside the guard page (si_code ");
    say_hex((uintptr_t)(intptr_t)si->si_code);
    say(", address ");
    say_hex(a);
    say(")\n");
    _exit(43);
}

static int install_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGSEGV, &sa, NULL);
}

/* the calling thread's own alternate stack; NULL on failure */
static void *own_altstack(void) {
    void *p = mmap(NULL, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    stack_t ss = {.ss_sp = p, .ss_size = ALT_SIZE, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        perror("stack_host: sigaltstack");
        return NULL;
    }
    return p;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t spin(double ms, uint64_t x) {
    double end = now_ms() + ms;
    while (now_ms() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

/* one level: 512 bytes of frame; the stack's last bytes go slowly, running
 * (the agent signals running threads) */
static uint64_t down(uint64_t x) {
    volatile unsigned char here[512];
    if (++depth == 0) /* never: a way out the compiler cannot rule out */
        return x;
    for (unsigned i = 0; i < sizeof here; i++)
        here[i] = (unsigned char)(x >> (i % 56));
    uintptr_t left = (uintptr_t)here - stack_lo;
    if (left < SLOWER_ZONE)
        x = spin(SLOWER_MS, x);
    else if (left < SLOW_ZONE)
        x = spin(SLOW_MS, x);
    return down(x + here[x % sizeof here]) ^ here[(x >> 7) % sizeof here];
}

static void *deep_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "deep");
    pthread_attr_t a;
    void *lo;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &a) != 0 || pthread_attr_getstack(&a, &lo, &size) != 0 ||
        pthread_attr_getguardsize(&a, &guard_size) != 0) {
        say("stack_host: no stack attributes\n");
        _exit(1);
    }
    pthread_attr_destroy(&a);
    stack_lo = (uintptr_t)lo;
    stack_hi = stack_lo + size;
    if (!own_altstack())
        _exit(1);
    return (void *)(uintptr_t)down(1);
}

static int overflow(void) {
    if (install_handler() != 0) {
        perror("stack_host: sigaction");
        return 1;
    }
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        line[0] = 0; /* end of file: go too */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, DEEP_STACK);
    pthread_t t;
    if (pthread_create(&t, &a, deep_main, NULL) != 0) {
        say("stack_host: pthread_create failed\n");
        return 1;
    }
    printf("stack_host: overflow started\n");
    fflush(stdout);
    pthread_join(t, NULL); /* never returns: the handler exits */
    printf("stack_host: the deep thread returned\n");
    return 1;
}

struct keeper {
    const char *name;
    double ms;
    bool fork_midway; /* fork half-way, the child goes on checking */
    void *alt;
    unsigned long checks;
    pid_t child;
    char error[160];
};

static bool still_own(struct keeper *k) {
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == k->alt && cur.ss_size == ALT_SIZE &&
        !(cur.ss_flags & SS_DISABLE))
        return true;
    snprintf(k->error, sizeof k->error, "%s%s: sigaltstack is %p size %zu flags %d, not its own %p size %d",
             k->name, k->child == 0 && k->fork_midway ? " (forked child)" : "", cur.ss_sp, cur.ss_size,
             cur.ss_flags, k->alt, ALT_SIZE);
    return false;
}

/* works for k->ms and checks all along that the thread's alternate stack
 * is still the one it set; with fork_midway, forks half-way (the child
 * inherits the forking thread's alternate stack) and both go on */
static void keep_checking(struct keeper *k) {
    k->alt = own_altstack();
    if (!k->alt) {
        snprintf(k->error, sizeof k->error, "%s: no sigaltstack", k->name);
        return;
    }
    double start = now_ms(), end = start + k->ms;
    bool forked = !k->fork_midway;
    uint64_t x = 1;
    k->child = -1;
    while (now_ms() < end) {
        x = spin(1, x);
        if (!still_own(k))
            break;
        k->checks++;
        if (!forked && now_ms() > start + k->ms / 2) {
            forked = true;
            k->child = fork();
            if (k->child < 0)
                snprintf(k->error, sizeof k->error, "%s: fork failed", k->name);
            if (k->child == 0) {
                pthread_setname_np(pthread_self(), "keeper-child");
                k->checks = 0;
            }
        }
    }
    if (k->child == 0) { /* the forked child: its own verdict, its own exit */
        printf("stack_host: child %s checks=%lu %s\n", k->error[0] ? "FAILED" : "ok", k->checks, k->error);
        fflush(stdout);
        _exit(k->error[0] ? 1 : 0);
    }
    int st;
    if (k->child > 0 && (waitpid(k->child, &st, 0) != k->child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) &&
        !k->error[0])
        snprintf(k->error, sizeof k->error, "%s: forked child status 0x%x", k->name, st);
}

static void *keeper_main(void *arg) {
    pthread_setname_np(pthread_self(), "keeper");
    keep_checking(arg);
    return NULL;
}

static int keep(double ms) {
    if (install_handler() != 0) {
        perror("stack_host: sigaction");
        return 1;
    }
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        line[0] = 0; /* end of file: go too */
    struct keeper main_k = {.name = "main", .ms = ms},
                  thr_k = {.name = "keeper", .ms = ms, .fork_midway = true};
    pthread_t t;
    if (pthread_create(&t, NULL, keeper_main, &thr_k) != 0) {
        printf("stack_host: keep FAILED: pthread_create\n");
        return 1;
    }
    keep_checking(&main_k);
    pthread_join(t, NULL);
    if (main_k.error[0] || thr_k.error[0]) {
        printf("stack_host: keep FAILED: %s %s\n", main_k.error, thr_k.error);
        return 1;
    }
    printf("stack_host: keep ok main_checks=%lu keeper_checks=%lu\n", main_k.checks, thr_k.checks);
    return 0;
}

/* ---- forks ----------------------------------------------------------- */

/* Mappings of the size of the calling thread's alternate stack right
 * after a PROT_NONE page (the agent's kind), by /proc/self/maps. */
static int count_altstacks(size_t size) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512], prev_perm[8] = "";
    unsigned long prev_hi = 0;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3)
            continue;
        if (hi - lo == size && strcmp(perm, "rw-p") == 0 && strcmp(prev_perm, "---p") == 0 &&
            prev_hi == lo)
            n++;
        prev_hi = hi;
        snprintf(prev_perm, sizeof prev_perm, "%s", perm);
    }
    fclose(f);
    return n;
}

static volatile int forks_ok = 1;
static int parent_stacks;

/* In a child: one alternate stack of the agent's kind (the forking
 * thread's, which is its own), then work to be sampled. */
static void child_of_forker(const char *how, size_t size) {
    int n = count_altstacks(size);
    printf("stack_host: child %d (%s): %d alternate stacks, the parent %d\n", (int)getpid(), how,
           n, parent_stacks);
    uint64_t x = spin(1500, (uint64_t)getpid());
    _exit(n == 1 && x != 1 ? 0 : 1);
}

static size_t own_size;

static void on_usr2(int sig) {
    (void)sig;
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || !(ss.ss_flags & SS_ONSTACK))
        forks_ok = 0; /* not on the alternate stack */
    pid_t pid = fork();
    if (pid == 0)
        child_of_forker("from a handler on the alternate stack", own_size);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        forks_ok = 0;
}

static void *idle_thread(void *arg) {
    (void)arg;
    pause();
    return NULL;
}

static void *forker(void *arg) {
    (void)arg;
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || (ss.ss_flags & SS_DISABLE)) {
        say("stack_host: forks FAILED: forker has no alternate stack\n");
        forks_ok = 0;
        return NULL;
    }
    own_size = ss.ss_size;
    parent_stacks = count_altstacks(own_size);
    spin(300, 1);
    pid_t pid = fork();
    if (pid == 0)
        child_of_forker("plain", own_size);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        forks_ok = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, NULL) != 0 || raise(SIGUSR2) != 0)
        forks_ok = 0;
    return NULL;
}

static int forks(void) {
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        (void)0; /* end of file: go on */
    pthread_t idle[4], t;
    for (int i = 0; i < 4; i++)
        if (pthread_create(&idle[i], NULL, idle_thread, NULL) != 0)
            return 1;
    if (pthread_create(&t, NULL, forker, NULL) != 0)
        return 1;
    pthread_setname_np(t, "forker");
    pthread_join(t, NULL);
    printf("stack_host: forks %s (the parent: %d alternate stacks)\n", forks_ok ? "ok" : "FAILED",
           parent_stacks);
    return forks_ok ? 0 : 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "forks") == 0)
        return forks();
    if (argc == 2 && strcmp(argv[1], "overflow") == 0)
        return overflow();
    if (argc == 3 && strcmp(argv[1], "keep") == 0)
        return keep(atof(argv[2]));
    fprintf(stderr, "usage: stack_host overflow | keep MS | forks\n");
    return 2;
}
