/* otel_proc.c: the OpenTelemetry process context (OTEP 4719) the agent
 * publishes, so that readers outside the process (the OpenTelemetry eBPF
 * profiler) know the resource its stacks belong to.
 *
 * The header, at the start of a mapping named OTEL_CTX (32 bytes, host
 * order, from the OTEP's "Header Structure"):
 *
 *   offset  size  field
 *        0     8  signature "OTEL_CTX" (written last)
 *        8     4  version: 2
 *       12     4  payload_size
 *       16     8  published_at_ns (CLOCK_REALTIME; 0 while an update runs)
 *       24     8  payload: address of the protobuf payload (here: right
 *                 after the header, in the same mapping, when it fits)
 *
 * The payload is a ProcessContext message (exporters/otlp/process_ctx.c:
 * ss_otel_proc_payload, declared in ss_agent.h as the exporter table is).
 *
 * Publication, as the OTEP's steps: memfd_create("OTEL_CTX"), sized, mapped
 * shared, closed (it shows as /memfd:OTEL_CTX in /proc/<pid>/maps); without
 * memfd a shared anonymous mapping; MADV_DONTFORK (a child does not
 * inherit it: it publishes its own when its agent starts); the payload,
 * the header fields, the signature last by a release store; then the mapping
 * is named OTEL_CTX with prctl(PR_SET_VMA_ANON_NAME) in any case (it
 * fails on a memfd mapping and on kernels without the feature: ignored;
 * an eBPF reader hooking prctl still sees the call).
 *
 * Update (a new start whose resource differs): published_at_ns = 0 by an
 * atomic exchange (a full barrier), the payload and its size and address,
 * the new timestamp by a release store, the name again. A reader checks the timestamp before and
 * after it reads, so it never takes a torn payload. A payload larger
 * than the mapping's room goes to a new buffer of its own (the old one is
 * kept: a reader may be reading it). Only the agent's start and stop
 * call these, under the lifecycle lock. */
#include "ss_agent.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif

#define HEADER 32u
#define MAP_BYTES 8192u /* two pages, as the OTEP's reference writers use */
#define ROOM (MAP_BYTES - HEADER)

typedef struct otel_ctx_header {
    char signature[8];
    uint32_t version;
    uint32_t payload_size;
    uint64_t published_at_ns;
    uint64_t payload;
} otel_ctx_header;

_Static_assert(sizeof(otel_ctx_header) == HEADER, "OTEP 4719 header");

static otel_ctx_header *mapped;
static pid_t mapped_pid;
static char *payload_now;
static size_t payload_len;

static void name_it(void) {
    (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)mapped, MAP_BYTES,
                (unsigned long)"OTEL_CTX");
}

static void *map_new(void) {
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    void *p = MAP_FAILED;
    if (fd >= 0) {
        if (ftruncate(fd, MAP_BYTES) == 0)
            p = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    if (p == MAP_FAILED)
        p = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (madvise(p, MAP_BYTES, MADV_DONTFORK) != 0) {
        munmap(p, MAP_BYTES);
        return NULL;
    }
    return p;
}

/* Where the payload goes: the mapping's room, or a buffer of its own. */
static char *payload_place(size_t len) {
    if (len <= ROOM)
        return (char *)mapped + HEADER;
    return malloc(len);
}

static int first(const char *payload, size_t len) {
    mapped = map_new();
    if (!mapped)
        return -errno;
    mapped_pid = getpid();
    char *dst = payload_place(len);
    if (!dst)
        return -ENOMEM;
    memcpy(dst, payload, len);
    mapped->version = 2;
    mapped->payload_size = (uint32_t)len;
    mapped->payload = (uint64_t)(uintptr_t)dst;
    mapped->published_at_ns = ss_wall_ns() | 1; /* never 0: 0 means "updating" */
    /* the signature last: a release store orders every write above before it */
    uint64_t sig;
    memcpy(&sig, "OTEL_CTX", 8);
    __atomic_store_n((uint64_t *)(void *)mapped->signature, sig, __ATOMIC_RELEASE);
    name_it();
    return 0;
}

static int update(const char *payload, size_t len) {
    uint64_t *at = &mapped->published_at_ns;
    /* an exchange: a full barrier, no write below moves above it */
    uint64_t was = __atomic_exchange_n(at, 0, __ATOMIC_SEQ_CST);
    char *dst = payload_place(len);
    if (!dst) {
        __atomic_store_n(at, was, __ATOMIC_RELEASE); /* the old payload stays */
        return -ENOMEM;
    }
    memcpy(dst, payload, len);
    mapped->payload = (uint64_t)(uintptr_t)dst;
    mapped->payload_size = (uint32_t)len;
    uint64_t now = ss_wall_ns() | 1;
    if (now == was) /* readers compare timestamps: make it another */
        now += 2;
    __atomic_store_n(at, now, __ATOMIC_RELEASE);
    name_it();
    return 0;
}

int ss_otel_proc_publish(void) {
    ss_buf b;
    ss_buf_init(&b);
    int rc = ss_otel_proc_payload(&b);
    if (rc == 0 && b.len > UINT32_MAX)
        rc = -E2BIG;
    if (rc == 0) {
        /* a forked child has no mapping (MADV_DONTFORK): the parent's
         * address may hold anything here, never touched */
        if (mapped && mapped_pid != getpid()) {
            mapped = NULL;
            payload_now = NULL;
            payload_len = 0;
        }
        if (mapped && payload_now && payload_len == b.len &&
            memcmp(payload_now, b.data, b.len) == 0)
            rc = 0; /* the same resource: nothing to do */
        else
            rc = mapped ? update(b.data, b.len) : first(b.data, b.len);
        if (rc == 0) {
            free(payload_now);
            payload_now = b.data; /* kept to compare with the next start */
            payload_len = b.len;
            b.data = NULL;
        }
    }
    ss_buf_free(&b);
    if (rc != 0)
        ss_log(SS_LOG_DEBUG, "process context (OTEL_CTX) not published: %s", strerror(-rc));
    return rc;
}
