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
 * ss_otel_proc_payload, declared in agent/span.h: the exporter table is
 * declared in agent/exporter.h the same way).
 *
 * Publication, as the OTEP's steps but for the order of the first two (see
 * map_new): a shared anonymous mapping named OTEL_CTX, or where the
 * kernel cannot name it a memfd_create("OTEL_CTX"), sized, mapped shared,
 * closed; MADV_DONTFORK (a child does not
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
#include "agent/buf.h"
#include "agent/log.h"
#include "agent/span.h"
#include "agent/time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

/* A descriptor is opened only when it must be: a host may close every
 * descriptor at any moment and reopen files of its own under the same
 * numbers (docs/safety/descriptors.md), and an ftruncate or close through
 * a number taken over would hit the host's file. So: a shared anonymous
 * mapping first, which needs no descriptor, named OTEL_CTX (readers find
 * "[anon_shmem:OTEL_CTX]"); only where the kernel cannot name it, the
 * memfd the OTEP prefers ("/memfd:OTEL_CTX"), its identity checked with
 * fstat before each use. */
static void *map_memfd(void) {
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    if (fd < 0)
        return MAP_FAILED;
    struct stat st, now;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && ftruncate(fd, MAP_BYTES) == 0 && fstat(fd, &now) == 0 &&
        now.st_ino == st.st_ino && now.st_dev == st.st_dev && now.st_size == MAP_BYTES)
        p = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fstat(fd, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
        close(fd);
    else if (p != MAP_FAILED) { /* the number was taken over meanwhile: not ours */
        munmap(p, MAP_BYTES);
        p = MAP_FAILED;
    }
    return p;
}

static void *map_new(void) {
    void *p = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED &&
        prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, MAP_BYTES,
              (unsigned long)"OTEL_CTX") != 0) {
        void *m = map_memfd();
        if (m != MAP_FAILED) {
            munmap(p, MAP_BYTES);
            p = m;
        }
    }
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

static bool another_publisher(void);

int ss_otel_proc_publish(void) {
    if (!mapped || mapped_pid != getpid()) {
        /* one process context per process (OTEP 4719): an SDK of the host
         * that published its own keeps it */
        if (another_publisher()) {
            ss_log(SS_LOG_DEBUG, "process context (OTEL_CTX) already published by the "
                                 "process: the agent publishes none");
            return 0;
        }
    }
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
            free(payload_now); /* the child's copy of the parent's heap */
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

/* ---- the key map of another publisher (OTEP 4947) --------------------
 *
 * An OpenTelemetry SDK in the host that publishes thread context puts the
 * names of its records' attribute keys in its own process context:
 * threadlocal.attribute_key_map, an array of strings (index i names key
 * index i), among ProcessContext.extra_attributes (field 2), or among the
 * resource's attributes (field 1.1) for older writers. Read with the
 * OTEP 4719 reading protocol (signature, version 2, published_at_ns not 0
 * and unchanged after the payload was read), through the caller's
 * reader (the mapping is another library's: it may be replaced while read). */

#define MAX_KEYS 64u
#define KEY_LEN 64u
#define PAYLOAD_MAX (64u * 1024u)

static char keys[MAX_KEYS][KEY_LEN];
static uint32_t n_keys;

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *r, uint64_t *v) {
    *v = 0;
    for (int s = 0; r->p < r->end && s < 64; s += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The next field; for length-delimited ones *sub is its bytes. */
static bool pb_field(pb *r, uint32_t *num, pb *sub) {
    uint64_t tag, v;
    if (!pb_varint(r, &tag))
        return false;
    *num = (uint32_t)(tag >> 3);
    sub->p = sub->end = NULL;
    switch (tag & 7) {
    case 0:
        return pb_varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return false;
        r->p += 8;
        return true;
    case 5:
        if (r->end - r->p < 4)
            return false;
        r->p += 4;
        return true;
    case 2:
        if (!pb_varint(r, &v) || (uint64_t)(r->end - r->p) < v)
            return false;
        sub->p = r->p;
        sub->end = r->p + v;
        r->p += v;
        return true;
    }
    return false;
}

/* A KeyValue: when it is the key map, its strings into keys[]. */
static bool take_key_map(pb kv) {
    static const char name[] = "threadlocal.attribute_key_map";
    uint32_t num;
    pb f, value = {NULL, NULL};
    bool is_map = false;
    while (kv.p < kv.end && pb_field(&kv, &num, &f)) {
        if (num == 1 && f.p && (size_t)(f.end - f.p) == sizeof name - 1 &&
            memcmp(f.p, name, sizeof name - 1) == 0)
            is_map = true;
        else if (num == 2 && f.p)
            value = f;
    }
    if (!is_map || !value.p)
        return false;
    uint32_t n = 0;
    pb arr;
    while (value.p < value.end && pb_field(&value, &num, &arr)) {
        if (num != 5 || !arr.p) /* AnyValue.array_value */
            continue;
        pb any;
        while (arr.p < arr.end && pb_field(&arr, &num, &any)) {
            if (num != 1 || !any.p) /* ArrayValue.values */
                continue;
            pb str;
            char *k = n < MAX_KEYS ? keys[n] : NULL;
            if (k)
                k[0] = '\0';
            while (any.p < any.end && pb_field(&any, &num, &str))
                if (num == 1 && str.p && k) { /* AnyValue.string_value */
                    size_t len = (size_t)(str.end - str.p);
                    if (len >= KEY_LEN)
                        len = KEY_LEN - 1;
                    memcpy(k, str.p, len);
                    k[len] = '\0';
                }
            n++;
        }
    }
    n_keys = n < MAX_KEYS ? n : MAX_KEYS;
    return true;
}

static bool find_key_map(const uint8_t *p, size_t len) {
    pb r = {p, p + len}, f, g, kv;
    uint32_t num, num2;
    while (r.p < r.end && pb_field(&r, &num, &f)) {
        if (num == 2 && f.p && take_key_map(f))
            return true;
        if (num == 1 && f.p) /* Resource */
            while (f.p < f.end && pb_field(&f, &num2, &g)) {
                kv = g;
                if (num2 == 1 && kv.p && take_key_map(kv))
                    return true;
            }
    }
    return false;
}

static bool read_context_at(uint64_t at, long (*rd)(void *, uint64_t, size_t)) {
    otel_ctx_header h, h2;
    for (int attempt = 0; attempt < 4; attempt++) {
        if (rd(&h, at, sizeof h) != (long)sizeof h || memcmp(h.signature, "OTEL_CTX", 8) != 0 ||
            h.version != 2 || h.payload_size > PAYLOAD_MAX)
            return false;
        if (h.published_at_ns == 0)
            continue; /* being updated */
        uint8_t *buf = malloc(h.payload_size ? h.payload_size : 1);
        if (!buf)
            return false;
        bool ok = rd(buf, h.payload, h.payload_size) == (long)h.payload_size &&
                  rd(&h2, at, sizeof h2) == (long)sizeof h2 &&
                  h2.published_at_ns == h.published_at_ns;
        bool found = ok && find_key_map(buf, h.payload_size);
        free(buf);
        if (ok)
            return found;
    }
    return false;
}

/* An OTEL_CTX mapping in this process that is not the agent's. */
static bool another_publisher(void) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (!strstr(line, "OTEL_CTX"))
            continue;
        uint64_t at = strtoull(line, NULL, 16);
        found = !(mapped && at == (uint64_t)(uintptr_t)mapped && mapped_pid == getpid());
    }
    fclose(f);
    return found;
}

uint32_t ss_otel_keymap_refresh(long (*rd)(void *, uint64_t, size_t)) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return n_keys;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "OTEL_CTX"))
            continue;
        uint64_t at = strtoull(line, NULL, 16);
        if (mapped && at == (uint64_t)(uintptr_t)mapped && mapped_pid == getpid())
            continue; /* ours: no keys */
        if (read_context_at(at, rd))
            break;
    }
    fclose(f);
    return n_keys;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if none. */
static size_t utf8_seq(const uint8_t *p, size_t n) {
    size_t len = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
               : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || len > n || (len == 2 && p[0] < 0xc2))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

/* A value as text: control bytes (the line separator among them) and
 * bytes of invalid UTF-8 become '?', so every exporter may send it as a
 * string. */
static size_t put_value(char *out, const uint8_t *v, size_t n) {
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(v + i, n - i);
        if (!l || v[i] < 0x20 || v[i] == 0x7f) {
            out[w++] = '?';
            i++;
            continue;
        }
        memcpy(out + w, v + i, l);
        w += l;
        i += l;
    }
    return w;
}

size_t ss_otel_attrs_text(const uint8_t *attrs, size_t n, char *out, size_t cap, bool *unknown) {
    /* the last occurrence of each key wins */
    uint16_t at[MAX_KEYS];
    uint8_t len[MAX_KEYS];
    bool have[MAX_KEYS] = {false};
    *unknown = false;
    for (size_t i = 0; i + 2 <= n;) {
        uint8_t k = attrs[i], l = attrs[i + 1];
        if (i + 2 + l > n)
            break; /* a truncated entry ends the parse */
        if (k < n_keys) {
            have[k] = true;
            at[k] = (uint16_t)(i + 2);
            len[k] = l;
        } else {
            *unknown = true;
        }
        i += 2u + l;
    }
    size_t w = 0;
    for (uint32_t k = 0; k < n_keys; k++) {
        if (!have[k])
            continue;
        size_t kl = strlen(keys[k]);
        if (w + (w ? 1 : 0) + kl + 1 + len[k] > cap)
            break;
        if (w)
            out[w++] = '\n';
        memcpy(out + w, keys[k], kl);
        w += kl;
        out[w++] = '=';
        w += put_value(out + w, attrs + at[k], len[k]);
    }
    return w;
}
