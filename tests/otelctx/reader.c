/* reader.c: an outside reader of another process's OpenTelemetry context,
 * written from the OTEPs' reading protocols (not from the agent's code):
 *
 *   reader <pid> [<address of a thread's otel_thread_ctx_v1>]
 *
 * Process context (OTEP 4719): the mappings of /proc/<pid>/maps named
 * /memfd:OTEL_CTX, [anon_shmem:OTEL_CTX] or [anon:OTEL_CTX]; the 32-byte
 * header read with process_vm_readv: signature "OTEL_CTX", version 2,
 * published_at_ns not 0 (else read again), payload_size bytes at payload,
 * the header again (published_at_ns unchanged, else start over). The
 * payload is decoded as ProcessContext{resource=1 Resource{attributes=1},
 * extra_attributes=2}: one line per attribute, "resource <k>=<v>" or
 * "extra <k>=<v>" (an array value as "[n]").
 *
 * Thread context (OTEP 4947), given the address of a thread's variable:
 * the pointer there, then the record's 28 bytes: "span valid=<v>
 * trace=<hex> span=<hex> flags=<f>", or "span none" for a NULL pointer.
 * Exit 0 when the process context was found, 2 when not, 1 on errors. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static pid_t pid;

static bool rd(void *dst, uint64_t addr, size_t n) {
    struct iovec l = {dst, n}, r = {(void *)(uintptr_t)addr, n};
    return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)n;
}

struct header {
    char sig[8];
    uint32_t version;
    uint32_t payload_size;
    uint64_t published_at_ns;
    uint64_t payload;
};

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int s = 0; *p < end && s < 64; s += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* the next field: number, wire type, and for LEN its bytes */
static bool field(const uint8_t **p, const uint8_t *end, uint32_t *num, uint64_t *v,
                  const uint8_t **sub, size_t *len) {
    uint64_t tag;
    if (!varint(p, end, &tag))
        return false;
    *num = (uint32_t)(tag >> 3);
    switch (tag & 7) {
    case 0:
        return varint(p, end, v);
    case 1:
        if (end - *p < 8)
            return false;
        *p += 8;
        return true;
    case 5:
        if (end - *p < 4)
            return false;
        *p += 4;
        return true;
    case 2:
        if (!varint(p, end, v) || (uint64_t)(end - *p) < *v)
            return false;
        *sub = *p;
        *len = (size_t)*v;
        *p += *v;
        return true;
    }
    return false;
}

static void print_kv(const char *what, const uint8_t *p, const uint8_t *end) {
    char key[256] = "", val[1024] = "";
    uint32_t num;
    uint64_t v;
    const uint8_t *sub;
    size_t len;
    while (p < end && field(&p, end, &num, &v, &sub, &len)) {
        if (num == 1)
            snprintf(key, sizeof key, "%.*s", (int)len, (const char *)sub);
        if (num != 2)
            continue;
        const uint8_t *q = sub, *qe = sub + len;
        uint32_t n2;
        uint64_t v2;
        const uint8_t *s2;
        size_t l2;
        while (q < qe && field(&q, qe, &n2, &v2, &s2, &l2)) {
            if (n2 == 1)
                snprintf(val, sizeof val, "%.*s", (int)l2, (const char *)s2);
            else if (n2 == 3)
                snprintf(val, sizeof val, "%" PRId64, (int64_t)v2);
            else if (n2 == 5) {
                int count = 0;
                const uint8_t *a = s2, *ae = s2 + l2;
                uint32_t n3;
                uint64_t v3;
                const uint8_t *s3;
                size_t l3;
                while (a < ae && field(&a, ae, &n3, &v3, &s3, &l3))
                    count += n3 == 1;
                snprintf(val, sizeof val, "[%d]", count);
            }
        }
    }
    printf("%s %s=%s\n", what, key, val);
}

static void decode(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    uint32_t num;
    uint64_t v;
    const uint8_t *sub;
    size_t len;
    while (p < end && field(&p, end, &num, &v, &sub, &len)) {
        if (num == 1) {
            const uint8_t *q = sub, *qe = sub + len;
            uint32_t n2;
            uint64_t v2;
            const uint8_t *s2;
            size_t l2;
            while (q < qe && field(&q, qe, &n2, &v2, &s2, &l2))
                if (n2 == 1)
                    print_kv("resource", s2, s2 + l2);
        } else if (num == 2) {
            print_kv("extra", sub, sub + len);
        }
    }
}

static int read_process_context(void) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    int rc = 2;
    while (rc == 2 && fgets(line, sizeof line, f)) {
        if (!strstr(line, "/memfd:OTEL_CTX") && !strstr(line, "[anon_shmem:OTEL_CTX]") &&
            !strstr(line, "[anon:OTEL_CTX]"))
            continue;
        uint64_t start = strtoull(line, NULL, 16);
        for (int attempt = 0; attempt < 100; attempt++) {
            struct header h, h2;
            if (!rd(&h, start, sizeof h) || memcmp(h.sig, "OTEL_CTX", 8) != 0 || h.version != 2)
                break;
            if (h.published_at_ns == 0) {
                usleep(1000);
                continue;
            }
            uint8_t *buf = malloc(h.payload_size ? h.payload_size : 1);
            bool ok = buf && rd(buf, h.payload, h.payload_size) && rd(&h2, start, sizeof h2) &&
                      h2.published_at_ns == h.published_at_ns;
            if (ok) {
                printf("mapping %s", strchr(line, '/') ? strchr(line, '/') : strchr(line, '['));
                decode(buf, h.payload_size);
                rc = 0;
            }
            free(buf);
            if (ok)
                break;
        }
    }
    fclose(f);
    return rc;
}

static void read_thread_context(uint64_t slot) {
    uint64_t rec;
    uint8_t head[28];
    if (!rd(&rec, slot, 8)) {
        printf("span unreadable\n");
        return;
    }
    if (!rec || !rd(head, rec, sizeof head)) {
        printf("span none\n");
        return;
    }
    printf("span valid=%u trace=", head[24]);
    for (int i = 0; i < 16; i++)
        printf("%02x", head[i]);
    printf(" span=");
    for (int i = 16; i < 24; i++)
        printf("%02x", head[i]);
    printf(" flags=%u\n", head[25]);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 1;
    pid = (pid_t)atoi(argv[1]);
    int rc = read_process_context();
    if (argc > 2)
        read_thread_context(strtoull(argv[2], NULL, 0));
    return rc;
}
