/* proc_maps.c: the process's mappings (/proc/self/maps), read and parsed
 * here for both users:
 *
 *   - the sampler's table of address ranges (ss_maps_read): it bounds what
 *     a walk reads of a sleeping thread's stack (never past the mapping
 *     its stack pointer is in), gives the main thread's stack (whose top
 *     never moves) to its signal handler, and tells executable addresses
 *     (return addresses into JIT code) from others. A table is a snapshot:
 *     it is never handed to a signal handler, where a mapping changed
 *     since would make a copy fault;
 *   - the symbol resolver's mappings of files (ss_map_files_read), which
 *     symbols_maps.c groups into modules. */
#include "agent/grow.h"
#include "proc/maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void skip_spaces(const char **p) {
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

/* One line: "lo-hi perms offset major:minor inode   path". */
typedef struct map_line {
    uint64_t lo, hi, offset, inode;
    uint32_t prot, dev_major, dev_minor;
    const char *path; /* NULL: none */
    size_t path_len;
    const char *next; /* the next line, NULL at the end */
} map_line;

static void parse_line(const char *p, map_line *l) {
    memset(l, 0, sizeof *l);
    const char *nl = strchr(p, '\n');
    l->next = nl ? nl + 1 : NULL;
    l->lo = parse_hex(&p);
    if (*p == '-')
        p++;
    l->hi = parse_hex(&p);
    skip_spaces(&p);
    if (p[0] == 'r')
        l->prot |= SS_MAP_R;
    if (p[0] && p[1] == 'w')
        l->prot |= SS_MAP_W;
    if (p[0] && p[1] && p[2] == 'x')
        l->prot |= SS_MAP_X;
    while (*p && *p != ' ' && *p != '\n')
        p++;
    skip_spaces(&p);
    l->offset = parse_hex(&p);
    skip_spaces(&p);
    l->dev_major = (uint32_t)parse_hex(&p);
    if (*p == ':')
        p++;
    l->dev_minor = (uint32_t)parse_hex(&p);
    skip_spaces(&p);
    while (*p >= '0' && *p <= '9')
        l->inode = l->inode * 10 + (uint64_t)(*p++ - '0');
    skip_spaces(&p);
    const char *end = nl ? nl : p + strlen(p);
    if (p < end) {
        l->path = p;
        l->path_len = (size_t)(end - p);
    }
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
    map_line l;
    for (const char *p = text; p && *p; p = l.next) {
        parse_line(p, &l);
        if (l.hi > l.lo && m->n <= lines) /* the kernel lists them sorted */
            m->r[m->n++] = (ss_map_range){l.lo, l.hi, l.prot};
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

int ss_map_files_read(ss_map_files *out) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = read_maps(&len);
    if (!text)
        return errno ? -errno : -EIO;
    size_t cap = 0;
    map_line l;
    for (char *p = text; p && *p; p = (char *)l.next) {
        parse_line(p, &l);
        /* a file as libdwfl's own maps reader counts one */
        bool file = l.inode != 0 || l.dev_major != 0 || l.dev_minor != 0;
        if (l.path && l.path[0] == '/' && file) {
            if (ss_grow((void **)&out->v, &cap, out->n + 1, sizeof *out->v, 256) != 0) {
                free(text);
                ss_map_files_free(out);
                return -ENOMEM;
            }
            ((char *)l.path)[l.path_len] = '\0'; /* the line's newline */
            out->v[out->n++] = (ss_map_file){l.lo, l.hi, l.offset, l.inode,
                                             l.dev_major, l.dev_minor, l.path};
        } else if (l.path && l.path_len == 6 && memcmp(l.path, "[vdso]", 6) == 0) {
            out->vdso_lo = l.lo;
            out->vdso_hi = l.hi;
        }
    }
    out->text = text;
    return 0;
}

void ss_map_files_free(ss_map_files *m) {
    free(m->v);
    free(m->text);
    memset(m, 0, sizeof *m);
}
