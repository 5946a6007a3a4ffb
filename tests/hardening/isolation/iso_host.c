/* iso_host.c: a native host that defines what the agent's libraries
 * define, run with libstackshot.so preloaded (tests/hardening/isolation).
 *
 *   iso_host <milliseconds>
 *
 * It has:
 *   - fake grpc_init, unw_backtrace, deflate, absl::Mutex::Lock... (fakes.c,
 *     in the executable or in libiso_fakes.so), which it calls once itself;
 *   - its own malloc family: blocks from glibc's __libc_* functions behind a
 *     32-byte header with a magic number. A block without the header handed
 *     to free/realloc/malloc_usable_size is "foreign": memory that glibc's
 *     malloc gave to somebody (the agent's libraries bound to glibc's malloc
 *     while libc's own strdup/getline/getaddrinfo use this one). Foreign
 *     blocks are counted, and released with __libc_free so the run goes on;
 *     a real replacement allocator (jemalloc) would crash there instead;
 *   - a busy thread "iso-busy" in iso_busy_outer -> iso_busy_inner, for the
 *     frames the test looks for in every output.
 *
 * At the end it stops the agent (stackshot_stop, found with dlsym: the host
 * does not link the agent) so everything is flushed, then prints:
 *   iso_host: self calls <ok>/<total>
 *   iso_host: libgrpc mapped yes|no
 *   iso_host: fakes called by the agent <n> [names]
 *   iso_host: foreign blocks <n>
 *   iso_host: mallocs <total>, <k> of them from the agent's libraries
 * and exits 0 (the test script judges the figures). */
#include "tests/hardening/isolation/fakes.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the host's allocator ------------------------------------------ */

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define MAGIC 0x15017a7edc0ffeeULL
#define HDR 32

typedef struct hdr {
    uint64_t magic;
    uint64_t offset; /* from the glibc block to the user pointer */
    uint64_t size;
    uint64_t pad;
} hdr;

static _Atomic unsigned long n_malloc, n_foreign;
#define N_CALLERS 65536
static uintptr_t callers[N_CALLERS];
static _Atomic unsigned n_callers;

static hdr *header_of(void *p) { return (hdr *)((char *)p - HDR); }
static bool ours(void *p) { return header_of(p)->magic == MAGIC; }

static void *host_alloc(size_t align, size_t size, void *caller) {
    if (align < HDR)
        align = HDR;
    if (size > SIZE_MAX - align) {
        errno = ENOMEM;
        return NULL;
    }
    char *base = align == HDR ? __libc_malloc(size + HDR) : __libc_memalign(align, size + align);
    if (!base)
        return NULL;
    char *p = base + align;
    hdr *h = header_of(p);
    h->magic = MAGIC;
    h->offset = align;
    h->size = size;
    atomic_fetch_add_explicit(&n_malloc, 1, memory_order_relaxed);
    unsigned i = atomic_fetch_add_explicit(&n_callers, 1, memory_order_relaxed);
    if (i < N_CALLERS)
        callers[i] = (uintptr_t)caller;
    return p;
}

void *malloc(size_t size) { return host_alloc(HDR, size, __builtin_return_address(0)); }

void free(void *p) {
    if (!p)
        return;
    if (!ours(p)) {
        atomic_fetch_add(&n_foreign, 1);
        __libc_free(p);
        return;
    }
    hdr *h = header_of(p);
    h->magic = 0;
    __libc_free((char *)p - h->offset);
}

void *calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = host_alloc(HDR, n * size, __builtin_return_address(0));
    if (p)
        memset(p, 0, n * size);
    return p;
}

void *realloc(void *p, size_t size) {
    if (!p)
        return host_alloc(HDR, size, __builtin_return_address(0));
    if (!ours(p)) {
        atomic_fetch_add(&n_foreign, 1);
        return __libc_realloc(p, size);
    }
    void *q = host_alloc(HDR, size, __builtin_return_address(0));
    if (!q)
        return NULL;
    size_t old = header_of(p)->size;
    memcpy(q, p, old < size ? old : size);
    free(p);
    return q;
}

void *reallocarray(void *p, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n * size);
}

int posix_memalign(void **out, size_t align, size_t size) {
    if (!align || (align & (align - 1)) || align % sizeof(void *))
        return EINVAL;
    void *p = host_alloc(align, size, __builtin_return_address(0));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t size) {
    return host_alloc(align, size, __builtin_return_address(0));
}
void *memalign(size_t align, size_t size) {
    return host_alloc(align, size, __builtin_return_address(0));
}
void *valloc(size_t size) { return host_alloc(4096, size, __builtin_return_address(0)); }
void *pvalloc(size_t size) {
    return host_alloc(4096, (size + 4095) & ~(size_t)4095, __builtin_return_address(0));
}

size_t malloc_usable_size(void *p) {
    if (!p)
        return 0;
    if (!ours(p)) {
        atomic_fetch_add(&n_foreign, 1);
        return 0;
    }
    return header_of(p)->size;
}

/* ---- the host's work ------------------------------------------------ */

static _Atomic bool stop;
static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t iso_busy_inner(uint64_t x) {
    for (int i = 0; i < 100000; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

__attribute__((noinline)) static void iso_busy_outer(void) {
    uint64_t x = 1;
    while (!atomic_load(&stop))
        x = iso_busy_inner(x);
    sink = x;
}

static void *busy_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "iso-busy");
    iso_busy_outer();
    return NULL;
}

/* The host calls each of its functions itself: they must be its own. */
static int call_own_fakes(void) {
    char buf[64];
    iso_self_begin();
    grpc_init();
    grpc_shutdown();
    int ok = grpc_channel_create("x", NULL, NULL) == NULL;
    ok &= unw_backtrace((void **)buf, 1) == -1;
    ok &= _ULx86_64_step(buf) == -1;
    ok &= _ULx86_64_init_local2(buf, NULL, 0) == -1;
    ok &= _Ux86_64_getcontext(buf) == -1;
    ok &= protobuf_c_message_pack(buf, (uint8_t *)buf) == 0;
    ok &= protobuf_c_message_get_packed_size(buf) == 0;
    ok &= dwfl_begin(NULL) == NULL;
    ok &= deflate(NULL, 0) == -2;
    ok &= deflateInit2_(NULL, 0, 0, 0, 0, 0, "1", 0) == -2;
    _ZN4absl7debian35Mutex4LockEv(buf);
    _ZN4absl7debian35Mutex6UnlockEv(buf);
    iso_self_end();
    int good = 0;
    for (int f = 0; f < ISO_FAKE_COUNT; f++)
        good += iso_fake_self_calls(f) == 1;
    return ok ? good : 0;
}

/* Callers inside the agent's libraries: the core and what it loaded. */
static unsigned agent_callers(void) {
    unsigned n = atomic_load(&n_callers), k = 0;
    if (n > N_CALLERS)
        n = N_CALLERS;
    for (unsigned i = 0; i < n; i++) {
        Dl_info info;
        if (!callers[i] || !dladdr((void *)callers[i], &info) || !info.dli_fname)
            continue;
        const char *f = info.dli_fname;
        if (strstr(f, "libstackshot") || strstr(f, "libgrpc") || strstr(f, "libgpr") ||
            strstr(f, "libabsl") || strstr(f, "libstdc++") || strstr(f, "libprotobuf-c") ||
            strstr(f, "libdw") || strstr(f, "libunwind"))
            k++;
    }
    return k;
}

/* Is gRPC mapped in this process (i.e. was the agent's core opened)? */
static bool grpc_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, "/libgrpc.so") != NULL;
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 2000;
    int self_ok = call_own_fakes();

    pthread_t busy;
    pthread_create(&busy, NULL, busy_main, NULL);
    /* libc allocating for the host meanwhile (through this malloc) */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        char *s = strdup("iso_host");
        free(s);
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    atomic_store(&stop, true);
    pthread_join(busy, NULL);

    void (*stop_agent)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "stackshot_stop");
    if (stop_agent)
        stop_agent();

    int foreign_total = 0;
    char names[512] = "";
    for (int f = 0; f < ISO_FAKE_COUNT; f++) {
        int n = iso_fake_foreign_calls(f);
        foreign_total += n;
        if (n && strlen(names) + strlen(iso_fake_name(f)) + 2 < sizeof names) {
            strcat(names, " ");
            strcat(names, iso_fake_name(f));
        }
    }
    printf("iso_host: self calls %d/%d\n", self_ok, ISO_FAKE_COUNT);
    printf("iso_host: libgrpc mapped %s\n", grpc_mapped() ? "yes" : "no");
    printf("iso_host: fakes called by the agent %d%s\n", foreign_total, names);
    printf("iso_host: foreign blocks %lu\n", atomic_load(&n_foreign));
    printf("iso_host: mallocs %lu, %u of them from the agent's libraries\n",
           atomic_load(&n_malloc), agent_callers());
    return 0;
}
