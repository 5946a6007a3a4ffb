/* test_otelctx.c: spans read from OpenTelemetry thread context (OTEP 4947)
 * by the native sampler, in-process (cmocka, the static core).
 *
 * A writer (writer.c, built as a TLSDESC library, a traditional
 * global-dynamic library, into the executable with initial-exec, or opened
 * with dlopen after start: one test binary each) publishes spans from
 * busy and sleeping threads. Each thread switches to a new span for every
 * turn of its loop and spends the turn in otel_in_odd or otel_in_even by
 * the span's parity: a sample whose stack is in one of them must carry
 * that thread's span of that parity (a span read late, or from another
 * thread, does not). Threads with no span, with a record marked invalid,
 * and with the pointer set back to NULL carry none. A thread using the
 * core's own stackshot_set_span_context is read the same way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/round.h"
#include "samplers/ss_samplers.h"
#include "include/stackshot.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef void (*set_fn)(const uint8_t *, const uint8_t *, uint8_t, const char *);
typedef void (*clear_fn)(void);
typedef void (*invalid_fn)(const uint8_t *, const uint8_t *);
static set_fn w_set;
static clear_fn w_clear;
static invalid_fn w_invalid;

#ifndef WRITER_DLOPEN
void otel_test_set(const uint8_t *, const uint8_t *, uint8_t, const char *);
void otel_test_clear(void);
void otel_test_invalid(const uint8_t *, const uint8_t *);
#endif

static void load_writer(void) {
#ifdef WRITER_DLOPEN
    void *h = dlopen(WRITER_DLOPEN, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fprintf(stderr, "dlopen: %s\n", dlerror());
    assert_non_null(h);
    w_set = (set_fn)dlsym(h, "otel_test_set");
    w_clear = (clear_fn)dlsym(h, "otel_test_clear");
    w_invalid = (invalid_fn)dlsym(h, "otel_test_invalid");
#else
    w_set = otel_test_set;
    w_clear = otel_test_clear;
    w_invalid = otel_test_invalid;
#endif
    assert_non_null(w_set);
    assert_non_null(w_clear);
    assert_non_null(w_invalid);
}

#define NB 3 /* busy threads */
#define NS 3 /* sleeping threads */

static atomic_int stop;
static atomic_int started;
static atomic_int loaded; /* the writer's functions are there */

/* With WRITER_DLOPEN the library is opened after the threads started: a
 * thread's DTV then has no entry for it until the thread goes through
 * __tls_get_addr, which TLS descriptors into glibc's static surplus never
 * do; the reader must find the block at its static offset. */
static void wait_loaded(void) {
    while (!atomic_load(&loaded)) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void work(bool busy) {
    if (!busy) {
        nap_ms(30);
        return;
    }
    uint64_t end = mono_ms() + 20;
    volatile uint64_t x = 0;
    while (mono_ms() < end && !atomic_load(&stop))
        for (int i = 0; i < 1000; i++)
            x += (uint64_t)i;
}

__attribute__((noinline)) void otel_in_odd(bool busy) {
    work(busy);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void otel_in_even(bool busy) {
    work(busy);
    __asm__ volatile("" ::: "memory");
}

typedef struct worker_arg {
    int idx;
    bool busy;
    char name[16];
} worker_arg;

static void ids(int idx, uint32_t e, uint8_t trace[16], uint8_t span[8]) {
    memset(trace, 0, 16);
    memset(span, 0, 8);
    trace[0] = 0x5a;
    trace[1] = (uint8_t)idx;
    trace[14] = (uint8_t)(e >> 8);
    trace[15] = (uint8_t)e;
    span[0] = (uint8_t)(idx + 1);
    span[6] = (uint8_t)(e >> 8);
    span[7] = (uint8_t)e;
}

static void *traced(void *p) {
    worker_arg *a = p;
    pthread_setname_np(pthread_self(), a->name);
    wait_loaded();
    atomic_fetch_add(&started, 1);
    for (uint32_t e = 1; !atomic_load(&stop); e++) {
        uint8_t trace[16], span[8];
        ids(a->idx, e, trace, span);
        w_set(trace, span, (uint8_t)(e & 1), "/route");
        if (e & 1)
            otel_in_odd(a->busy);
        else
            otel_in_even(a->busy);
        w_clear();
    }
    return NULL;
}

/* no span: never set (ou), marked invalid (oi), set then cleared (oc) */
static void *untraced(void *p) {
    worker_arg *a = p;
    pthread_setname_np(pthread_self(), a->name);
    wait_loaded();
    uint8_t trace[16], span[8];
    ids(a->idx, 7, trace, span);
    if (a->idx == 1)
        w_invalid(trace, span);
    if (a->idx == 2) {
        w_set(trace, span, 1, "/gone");
        w_clear();
    }
    atomic_fetch_add(&started, 1);
    while (!atomic_load(&stop)) {
        otel_in_odd(true);
        otel_in_even(false);
    }
    return NULL;
}

/* the core's own writer (stackshot_set_span_context of the static core) */
static void *own_api(void *p) {
    worker_arg *a = p;
    pthread_setname_np(pthread_self(), a->name);
    atomic_fetch_add(&started, 1);
    for (uint32_t e = 1; !atomic_load(&stop); e++) {
        uint8_t trace[16], span[8];
        ids(a->idx, e, trace, span);
        stackshot_set_span_context_flags(trace, span, (uint8_t)(e & 1));
        if (e & 1)
            otel_in_odd(a->busy);
        else
            otel_in_even(a->busy);
        stackshot_clear_span_context();
    }
    return NULL;
}

/* What an SDK publishing thread context does at start (OTEP 4719 +
 * 4947): a process context whose threadlocal.attribute_key_map names key
 * index 0 "http.route" (the protobuf written out by hand). */
static void publish_sdk_context(void) {
    static const char key[] = "threadlocal.attribute_key_map", name[] = "http.route";
    uint8_t pl[128];
    size_t n = 0;
    pl[n++] = 0x12; /* ProcessContext.extra_attributes */
    pl[n++] = (uint8_t)(2 + (sizeof key - 1) + 2 + 2 + 2 + 2 + (sizeof name - 1));
    pl[n++] = 0x0a; /* KeyValue.key */
    pl[n++] = sizeof key - 1;
    memcpy(pl + n, key, sizeof key - 1);
    n += sizeof key - 1;
    pl[n++] = 0x12; /* KeyValue.value: AnyValue */
    pl[n++] = (uint8_t)(2 + 2 + 2 + (sizeof name - 1));
    pl[n++] = 0x2a; /* AnyValue.array_value */
    pl[n++] = (uint8_t)(2 + 2 + (sizeof name - 1));
    pl[n++] = 0x0a; /* ArrayValue.values: AnyValue */
    pl[n++] = (uint8_t)(2 + (sizeof name - 1));
    pl[n++] = 0x0a; /* AnyValue.string_value */
    pl[n++] = sizeof name - 1;
    memcpy(pl + n, name, sizeof name - 1);
    n += sizeof name - 1;
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    uint8_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    memcpy(m + 32, pl, n);
    uint32_t version = 2, size = (uint32_t)n;
    uint64_t at = 1234567, payload = (uint64_t)(uintptr_t)(m + 32);
    memcpy(m + 8, &version, 4);
    memcpy(m + 12, &size, 4);
    memcpy(m + 16, &at, 8);
    memcpy(m + 24, &payload, 8);
    uint64_t sig; /* the signature last, by a release store */
    memcpy(&sig, "OTEL_CTX", 8);
    __atomic_store_n((uint64_t *)(void *)m, sig, __ATOMIC_RELEASE);
}

static bool has_fn(const ss_round *r, const ss_thread_sample *t, const char *fn) {
    const ss_frame *f = ss_thread_frames(r, t);
    for (uint32_t i = 0; i < t->frame_count; i++)
        if (f[i].fn && strcmp(f[i].fn->name, fn) == 0)
            return true;
    return false;
}

static int parity_of(const ss_round *r, const ss_thread_sample *t) {
    if (has_fn(r, t, "otel_in_odd"))
        return 1;
    if (has_fn(r, t, "otel_in_even"))
        return 0;
    return -1;
}

static void test_spans_follow_threads(void **state) {
    (void)state;
#ifndef WRITER_DLOPEN
    load_writer();
    atomic_store(&loaded, 1);
#endif
    publish_sdk_context();
    enum { NT = NB + NS + 3 + 2 };
    worker_arg args[NT];
    pthread_t th[NT];
    int n = 0;
    for (int i = 0; i < NB + NS; i++, n++) {
        args[n] = (worker_arg){.idx = i, .busy = i < NB};
        snprintf(args[n].name, sizeof args[n].name, "%s%d", i < NB ? "ob" : "os", i);
        pthread_create(&th[n], NULL, traced, &args[n]);
    }
    static const char *const none[3] = {"ou", "oi", "oc"};
    for (int i = 0; i < 3; i++, n++) {
        args[n] = (worker_arg){.idx = i};
        snprintf(args[n].name, sizeof args[n].name, "%s", none[i]);
        pthread_create(&th[n], NULL, untraced, &args[n]);
    }
    for (int i = 0; i < 2; i++, n++) {
        args[n] = (worker_arg){.idx = 40 + i, .busy = i == 0};
        snprintf(args[n].name, sizeof args[n].name, "oa%d", i);
        pthread_create(&th[n], NULL, own_api, &args[n]);
    }
#ifdef WRITER_DLOPEN
    nap_ms(20); /* the threads run before the library is there */
    load_writer();
    atomic_store(&loaded, 1);
#endif
    while (atomic_load(&started) < NT)
        nap_ms(5);

    ss_config cfg;
    ss_config_load(&cfg);
    int checked_busy = 0, checked_sleep = 0, checked_own = 0, checked_none = 0;
    int wrong = 0, attrs_seen = 0;
    for (int round = 0; round < 40 && (checked_busy < 6 || checked_sleep < 6 ||
                                      checked_own < 2 || round < 10);
         round++) {
        ss_round *r = NULL;
        assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
        for (uint32_t i = 0; i < r->n_threads; i++) {
            const ss_thread_sample *t = &r->threads[i];
            int par = parity_of(r, t);
            bool is_traced = t->name[0] == 'o' && (t->name[1] == 'b' || t->name[1] == 's');
            bool is_own = t->name[0] == 'o' && t->name[1] == 'a';
            bool is_none = t->name[0] == 'o' && strchr("uic", t->name[1]) && !t->name[2];
            if (is_none && par >= 0) {
                checked_none++;
                if (t->has_span) {
                    fprintf(stderr, "%s: a span where there is none\n", t->name);
                    wrong++;
                }
            }
            if ((!is_traced && !is_own) || par < 0)
                continue;
            int idx = atoi(t->name + 2) + (is_own ? 40 : 0);
            bool ok = t->has_span && t->trace_id[0] == 0x5a && t->trace_id[1] == idx &&
                      t->span_id[0] == idx + 1 && (t->span_id[7] & 1) == par &&
                      t->trace_id[15] == t->span_id[7] && t->trace_flags == par;
            if (!ok) {
                fprintf(stderr, "%s in %s: has_span %d trace %02x%02x..%02x span %02x..%02x "
                                "flags %u\n",
                        t->name, par ? "odd" : "even", t->has_span, t->trace_id[0],
                        t->trace_id[1], t->trace_id[15], t->span_id[0], t->span_id[7],
                        t->trace_flags);
                wrong++;
            } else if (is_own) {
                checked_own++;
                if (t->span_attrs) {
                    fprintf(stderr, "%s: attributes %s\n", t->name, t->span_attrs);
                    wrong++;
                }
            } else {
                if (t->name[1] == 'b')
                    checked_busy++;
                else
                    checked_sleep++;
                if (t->span_attrs && strcmp(t->span_attrs, "http.route=/route") == 0) {
                    attrs_seen++;
                } else {
                    fprintf(stderr, "%s: attributes %s\n", t->name,
                            t->span_attrs ? t->span_attrs : "(none)");
                    wrong++;
                }
            }
        }
        ss_round_unref(r);
        nap_ms(15);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    ss_native_release();
    fprintf(stderr, "checked: busy %d, sleeping %d, own writer %d, no span %d; with "
                    "attributes %d; wrong %d\n",
            checked_busy, checked_sleep, checked_own, checked_none, attrs_seen, wrong);
    assert_int_equal(wrong, 0);
    assert_true(checked_busy >= 1);
    assert_true(checked_sleep >= 1);
    assert_true(checked_own >= 1);
    assert_true(checked_none >= 1);
    assert_true(attrs_seen >= 2);
}

/* Writers that switch spans without pause, each span's bytes all one
 * value: a sample taken in the middle of a switch must carry either a
 * whole span (every byte the same) or none, never a mix. One thread uses
 * the library writer (pointer swapped), one the core's own (flag in
 * place). */
static void *switcher(void *p) {
    worker_arg *a = p;
    pthread_setname_np(pthread_self(), a->name);
    wait_loaded();
    atomic_fetch_add(&started, 1);
    for (uint32_t e = 1; !atomic_load(&stop); e++) {
        uint8_t v = (uint8_t)(e % 255 + 1), trace[16], span[8];
        memset(trace, v, 16);
        memset(span, v, 8);
        if (a->idx)
            stackshot_set_span_context_flags(trace, span, v);
        else
            w_set(trace, span, v, "/sw");
    }
    return NULL;
}

static void test_no_torn_record(void **state) {
    (void)state;
    load_writer();
    atomic_store(&loaded, 1);
    atomic_store(&stop, 0);
    atomic_store(&started, 0);
    worker_arg args[2] = {{.idx = 0, .name = "sw-lib"}, {.idx = 1, .name = "sw-own"}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, switcher, &args[i]);
    while (atomic_load(&started) < 2)
        nap_ms(5);
    ss_config cfg;
    ss_config_load(&cfg);
    int seen[2] = {0, 0}, torn = 0;
    for (int round = 0; round < 60 && (seen[0] < 10 || seen[1] < 10); round++) {
        ss_round *r = NULL;
        assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
        for (uint32_t i = 0; i < r->n_threads; i++) {
            const ss_thread_sample *t = &r->threads[i];
            if (strncmp(t->name, "sw-", 3) != 0 || !t->has_span)
                continue;
            int which = strcmp(t->name, "sw-own") == 0;
            seen[which]++;
            uint8_t v = t->trace_id[0];
            bool whole = t->trace_flags == v;
            for (int k = 0; k < 16; k++)
                whole &= t->trace_id[k] == v;
            for (int k = 0; k < 8; k++)
                whole &= t->span_id[k] == v;
            if (!whole) {
                fprintf(stderr, "%s: torn span %02x..%02x/%02x..%02x flags %02x\n", t->name,
                        t->trace_id[0], t->trace_id[15], t->span_id[0], t->span_id[7],
                        t->trace_flags);
                torn++;
            }
        }
        ss_round_unref(r);
        nap_ms(5);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ss_native_release();
    fprintf(stderr, "spans seen while switching: library writer %d, own writer %d; torn %d\n",
            seen[0], seen[1], torn);
    assert_int_equal(torn, 0);
    assert_true(seen[0] >= 1 && seen[1] >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spans_follow_threads),
        cmocka_unit_test(test_no_torn_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
