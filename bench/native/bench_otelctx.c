/* bench_otelctx.c: the cost of span association (OTEP 4947 thread
 * context), run by hand: build/bench/native/bench_otelctx.
 *
 *   1. per read: ss_otel_read_self (the signal handler's: plain loads)
 *      and ss_otel_read_thread through the own-memory reader (a thread
 *      asleep), against a writer library with TLS descriptors;
 *   2. per round: ss_native_sample_once over 100 threads that wake every
 *      20 ms (each round reads each of them asleep), with no span set,
 *      then with a span set on every thread. */
#include "agent/config.h"
#include "agent/round.h"
#include "agent/span.h"
#include "samplers/ss_samplers.h"
#include "samplers/unwind.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void otel_test_set(const uint8_t *, const uint8_t *, uint8_t, const char *);
void otel_test_clear(void);

#define THREADS 100
#define ROUNDS 60

static atomic_int with_span, stop, ready;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *worker(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    uint8_t trace[16] = {0x5a, (uint8_t)i, 1}, span[8] = {(uint8_t)(i + 1), 2};
    atomic_fetch_add(&ready, 1);
    while (!atomic_load(&stop)) {
        if (atomic_load(&with_span))
            otel_test_set(trace, span, 1, "/bench");
        else
            otel_test_clear();
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static double round_us(const ss_config *cfg, uint32_t *with) {
    uint64_t total = 0;
    *with = 0;
    for (int r = 0; r < ROUNDS; r++) {
        ss_round *round = NULL;
        uint64_t t0 = now_ns();
        if (ss_native_sample_once(cfg, &round) != 0)
            return -1;
        total += now_ns() - t0;
        for (uint32_t i = 0; i < round->n_threads; i++)
            *with += round->threads[i].has_span;
        ss_round_unref(round);
        struct timespec ts = {0, 30 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return (double)total / ROUNDS / 1000.0;
}

/* The process context an SDK would publish, naming key 0 (the writer's
 * attribute), so the rounds format attributes as in a real host. */
static void publish_sdk_context(void) {
    static const uint8_t pl[] = {
        0x12, 49, 0x0a, 29, 't', 'h', 'r', 'e', 'a', 'd', 'l', 'o', 'c', 'a', 'l', '.', 'a',
        't', 't', 'r', 'i', 'b', 'u', 't', 'e', '_', 'k', 'e', 'y', '_', 'm', 'a', 'p', 0x12,
        16, 0x2a, 14, 0x0a, 12, 0x0a, 10, 'h', 't', 't', 'p', '.', 'r', 'o', 'u', 't', 'e'};
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        return;
    uint8_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    memcpy(m + 32, pl, sizeof pl);
    uint32_t version = 2, size = sizeof pl;
    uint64_t at = 1, payload = (uint64_t)(uintptr_t)(m + 32);
    memcpy(m + 8, &version, 4);
    memcpy(m + 12, &size, 4);
    memcpy(m + 16, &at, 8);
    memcpy(m + 24, &payload, 8);
    uint64_t sig; /* the signature last, by a release store */
    memcpy(&sig, "OTEL_CTX", 8);
    __atomic_store_n((uint64_t *)(void *)m, sig, __ATOMIC_RELEASE);
}

int main(void) {
    publish_sdk_context();
    uint8_t trace[16] = {1}, span[8] = {2}, t[16], s[8], f, attrs[SS_OTEL_ATTRS_MAX];
    uint16_t na;
    otel_test_set(trace, span, 1, "/bench");
    ss_otel_refresh();
    enum { N = 1000000 };
    uint64_t t0 = now_ns();
    int hits = 0;
    for (int i = 0; i < N; i++)
        hits += ss_otel_read_self(t, s, &f, attrs, sizeof attrs, &na);
    double self_ns = (double)(now_ns() - t0) / N;
    ss_otel_rec rec;
    uint64_t me = (uint64_t)(uintptr_t)pthread_self();
    ss_otel_cache cache;
    memset(&cache, 0, sizeof cache);
    t0 = now_ns();
    for (int i = 0; i < N / 100; i++)
        hits += ss_otel_read_thread(me, ss_uw_read_memory, &cache, &rec);
    double remote_ns = (double)(now_ns() - t0) / (N / 100);
    printf("read in the handler (own thread, plain loads, with its 8 bytes of attrs-data): %.1f ns\n", self_ns);
    printf("read of a thread asleep (own-memory reader, its variable known): %.0f ns\n", remote_ns);
    if (hits != N + N / 100)
        printf("(unexpected: %d hits)\n", hits);

    pthread_t th[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    while (atomic_load(&ready) < THREADS) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    ss_config cfg;
    ss_config_load(&cfg);
    uint32_t w0, w1;
    round_us(&cfg, &w0); /* warm up: symbols, first reads */
    double without = round_us(&cfg, &w0);
    atomic_store(&with_span, 1);
    round_us(&cfg, &w1);
    double with = round_us(&cfg, &w1);
    printf("round of %d threads: %.0f us without spans (%u samples with one), "
           "%.0f us with (%u samples with one): %+.0f us, %+.2f us per thread\n",
           THREADS, without, w0, with, w1, with - without, (with - without) / THREADS);
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    return 0;
}
