/* proc_maps.c: the process's mappings (/proc/self/maps) as a sorted table.
 *
 * The sampler uses it to bound what a walk reads of a sleeping thread's
 * stack (never past the mapping its stack pointer is in), to learn the
 * main thread's stack (whose top never moves) for its signal handler, and
 * to tell executable addresses (return addresses into JIT code) from
 * others. A table is a snapshot: it is never handed to a signal handler,
 * where a mapping changed since would make a copy fault. */
#include "unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t parse_hex(const char **p) {
    uint64_t v = 0;
    for (;; (*p)++) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return v;
        v = v << 4 | (uint64_t)d;
    }
}

/* The whole file: /proc/self/maps may be hundreds of KiB with many
 * threads (two lines per thread stack). */
static char *read_maps(size_t *len) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 64 * 1024, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - n < 4096) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

ss_maps *ss_maps_read(void) {
    size_t len;
    char *text = read_maps(&len);
    if (!text)
        return NULL;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    ss_maps *m = malloc(sizeof *m + (lines + 1) * sizeof(ss_map_range));
    if (!m) {
        free(text);
        return NULL;
    }
    m->n = 0;
    for (const char *p = text; *p;) {
        uint64_t lo = parse_hex(&p);
        if (*p == '-')
            p++;
        uint64_t hi = parse_hex(&p);
        while (*p == ' ')
            p++;
        uint32_t prot = 0;
        if (p[0] == 'r')
            prot |= SS_MAP_R;
        if (p[0] && p[1] == 'w')
            prot |= SS_MAP_W;
        if (p[0] && p[1] && p[2] == 'x')
            prot |= SS_MAP_X;
        if (hi > lo && m->n <= lines) /* the kernel lists them sorted */
            m->r[m->n++] = (ss_map_range){lo, hi, prot};
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    free(text);
    return m;
}

const ss_map_range *ss_maps_find(const ss_maps *m, uint64_t addr) {
    if (!m)
        return NULL;
    uint32_t lo = 0, hi = m->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (addr < m->r[mid].lo)
            hi = mid;
        else if (addr >= m->r[mid].hi)
            lo = mid + 1;
        else
            return &m->r[mid];
    }
    return NULL;
}
