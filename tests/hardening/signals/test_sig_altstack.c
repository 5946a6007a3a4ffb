/* test_sig_altstack.c: threads interrupted on their alternate signal stack
 * (cmocka, in-process, rounds taken with ss_native_sample_once).
 *
 * A host thread sits inside its own SA_ONSTACK handler, so its stack
 * pointer is on its sigaltstack when our signal arrives: the kernel then
 * runs our handler (not SA_ONSTACK) on that same alternate stack.
 *
 *   alt-big:   256 KiB alternate stack, filled with a pattern. It is
 *              sampled through the signal frame (host handler and thread
 *              function both present), and the bytes our signal frame,
 *              handler and unwinder touched below the host handler are
 *              measured for every unwinder: each must stay under
 *              SS_SIG_STACK_NEED, the room the handler insists on.
 *   alt-small: 8 KiB alternate stack with a PROT_NONE guard page below
 *              it. Unwinding there would run into the guard page and kill
 *              the process; the handler must answer "not sampled".
 *
 * With STACKSHOT_UNWIND=copy both are asleep in sem_wait: they are read
 * from /proc without a signal, through the signal frame, the small one
 * too. A third thread spins inside its handler on an 8 KiB alternate stack
 * (alt-spin): it is signalled, and the copy handler (it only copies) fits
 * there and samples it through the signal frame. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/round.h"
#include "samplers/signal_sampler.h"
#include "samplers/ss_samplers.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PATTERN 0x5a
#define BIG (256u * 1024u)
#define SMALL (8u * 1024u)

static atomic_int stop;
static atomic_int in_handler; /* threads inside their alt-stack handler */

static _Thread_local sem_t *my_kick;
static _Thread_local atomic_int *my_laps;

/* The host's own handler: stays on the alternate stack until the end,
 * blocked in sem_wait; the test kicks it before a round so that it has
 * used CPU (a thread idle since its last stack is not signalled again),
 * and re-patterns the stack only while it is blocked there. */
__attribute__((noinline)) static void host_alt_handler(int sig) {
    (void)sig;
    atomic_fetch_add(&in_handler, 1);
    while (!atomic_load(&stop)) {
        sem_wait(my_kick); /* our signal may end it early (EINTR): loop */
        atomic_fetch_add(my_laps, 1);
    }
}

typedef struct alt_thread {
    size_t size;
    bool spins;
    char *stack; /* ss_sp */
    sem_t kick;
    atomic_int laps;
} alt_thread;

/* Spins on its alternate stack until the end: always running. */
__attribute__((noinline)) static void host_spin_handler(int sig) {
    (void)sig;
    atomic_fetch_add(&in_handler, 1);
    volatile unsigned long x = 0;
    while (!atomic_load(&stop))
        x++;
}

__attribute__((noinline)) static void *alt_thread_main(void *arg) {
    alt_thread *t = arg;
    my_kick = &t->kick;
    my_laps = &t->laps;
    stack_t ss = {.ss_sp = t->stack, .ss_size = t->size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        perror("sigaltstack");
        return NULL;
    }
    /* into host_alt_handler (SIGUSR2) or host_spin_handler (SIGURG), on
     * the alt stack */
    pthread_kill(pthread_self(), t->spins ? SIGURG : SIGUSR2);
    return NULL;
}

/* Alternate stack memory with a PROT_NONE page right below it. */
static char *guarded_stack(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m, page, PROT_NONE), 0);
    memset(m + page, PATTERN, size);
    return m + page;
}

static alt_thread big = {.size = BIG}, small = {.size = SMALL}, spin = {.size = SMALL, .spins = true};
static uintptr_t spin_host_low;
__attribute__((no_sanitize_address)) static uintptr_t lowest_touched(const char *lo, uintptr_t hi);
static pthread_t th_big, th_small, th_spin;

static void start(alt_thread *t, pthread_t *th, const char *name) {
    t->stack = guarded_stack(t->size);
    sem_init(&t->kick, 0, 0);
    assert_int_equal(pthread_create(th, NULL, alt_thread_main, t), 0);
    pthread_setname_np(*th, name);
}

static int setup(void **state) {
    (void)state;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = host_alt_handler;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = host_spin_handler;
    sigaction(SIGURG, &sa, NULL);
    start(&big, &th_big, "alt-big");
    start(&small, &th_small, "alt-small");
    start(&spin, &th_spin, "alt-spin");
    while (atomic_load(&in_handler) < 3) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    /* what the spinner's own handler uses: it never goes deeper */
    spin_host_low = lowest_touched(spin.stack, (uintptr_t)spin.stack + spin.size);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    atomic_store(&stop, 1);
    sem_post(&big.kick);
    sem_post(&small.kick);
    pthread_join(th_big, NULL);
    pthread_join(th_small, NULL);
    pthread_join(th_spin, NULL);
    ss_native_release();
    return 0;
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

/* Lowest byte of [lo, hi) that no longer holds the pattern. It reads
 * another thread's live stack (under ASan: its frames' redzones). */
__attribute__((no_sanitize_address)) static uintptr_t lowest_touched(const char *lo, uintptr_t hi) {
    for (const char *p = lo; (uintptr_t)p < hi; p++)
        if ((unsigned char)*p != PATTERN)
            return (uintptr_t)p;
    return hi;
}

static void nap_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* One lap of the thread's loop: it runs (its CPU clock moves) and is
 * back in sem_wait when this returns. */
static void kick(alt_thread *t) {
    int laps = atomic_load(&t->laps);
    sem_post(&t->kick);
    while (atomic_load(&t->laps) == laps)
        nap_ms(1);
    nap_ms(20); /* from the lap count back into the futex wait */
}

static ss_round *sample(const char *unwind) {
    setenv("STACKSHOT_UNWIND", unwind, 1);
    ss_config cfg;
    ss_config_load(&cfg);
    ss_round *r = NULL;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    return r;
}

/* Both threads, every unwinder: alt-big sampled through the signal frame,
 * its stack use measured; alt-small answered "not sampled", no crash. */
static void test_alt_stacks(void **state) {
    (void)state;
    static const char *const modes[] = {"step", "fast", "gcc"};
    /* what the host itself uses (its signal frame, handler, nanosleep)
     * sits at the top; everything below it is ours to measure */
    kick(&big);
    uintptr_t host_low = lowest_touched(big.stack, (uintptr_t)big.stack + big.size);
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        kick(&big);
        kick(&small);
        memset(big.stack, PATTERN, host_low - (uintptr_t)big.stack);
        uint64_t refused0 = ss_sig_no_room_total();

        ss_round *r = sample(modes[m]);
        const ss_thread_sample *b = find(r, "alt-big");
        assert_non_null(b);
        assert_true(has_fn(r, b, "host_alt_handler"));
        assert_true(has_fn(r, b, "alt_thread_main")); /* through the signal frame */
        /* alt-small: never unwound on 8 KiB, counted, left out */
        assert_null(find(r, "alt-small"));
        assert_true(ss_sig_no_room_total() >= refused0 + 1);
        assert_true(r->threads_skipped >= 1);
        ss_round_unref(r);

        /* our signal frame + handler + unwinder: an upper bound of what
         * the room check (measured from the handler's frame) guards */
        size_t used = (size_t)(host_low - lowest_touched(big.stack, host_low));
        printf("alt stack used below the host handler, unwind=%s: %zu bytes "
               "(SS_SIG_STACK_NEED %u)\n",
               modes[m], used, SS_SIG_STACK_NEED);
        assert_true(used > 0); /* our handler did run on the alt stack */
        assert_true(used < SS_SIG_STACK_NEED);
    }
}

/* Copy mode: the sleepers are read without a signal, through their
 * signal frames (even on 8 KiB); the spinner is signalled and copied. */
static void test_alt_stacks_copy(void **state) {
    (void)state;
    ss_round_unref(sample("copy")); /* a sampler of this mode, counters from here */
    kick(&big);
    kick(&small);
    uintptr_t spin_low = spin_host_low;
    memset(spin.stack, PATTERN, spin_low - (uintptr_t)spin.stack);
    uint64_t refused0 = ss_sig_no_room_total();
    ss_native_counts c0, c1;
    ss_native_sample_counts(&c0);
    ss_round *r = sample("copy");
    ss_native_sample_counts(&c1);
    const char *names[] = {"alt-big", "alt-small", "alt-spin"};
    for (int i = 0; i < 3; i++) {
        const ss_thread_sample *t = find(r, names[i]);
        assert_non_null(t);
        assert_true(has_fn(r, t, i == 2 ? "host_spin_handler" : "host_alt_handler"));
        assert_true(has_fn(r, t, "alt_thread_main")); /* through the signal frame */
    }
    assert_int_equal(ss_sig_no_room_total(), refused0);
    assert_true(c1.asleep - c0.asleep >= 2); /* the two sleepers, no signal */
    assert_true(c1.signalled - c0.signalled >= 1); /* the spinner */
    ss_round_unref(r);
    size_t used = (size_t)(spin_low - lowest_touched(spin.stack, spin_low));
    printf("alt stack used below the spinning host handler, unwind=copy: %zu bytes (kernel "
           "signal frame included; SS_SIG_COPY_STACK_NEED %u below our handler)\n",
           used, SS_SIG_COPY_STACK_NEED);
    assert_true(used > 0 && used < SMALL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alt_stacks),
        cmocka_unit_test(test_alt_stacks_copy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
