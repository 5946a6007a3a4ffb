/* symbols_maps.c: the modules of /proc/self/maps, as the resolver hands
 * them to libdwfl.
 *
 * libdwfl's own reader (dwfl_linux_proc_report) makes one module of every
 * mapping of one file, from the lowest address to the highest. A program
 * that maps part of its own file again far away (node maps the code of its
 * V8 builtins a second time near the top of the address space) then gets
 * one module spanning terabytes, and every JIT address in between is
 * "inside" it, named after its last symbol. Here the mappings of a file
 * are grouped by load: a mapping joins its file's first load when it lies
 * at the same bias (address - file offset) or within SAME_LOAD_SPAN of it
 * (the segments of one ELF load); any other mapping of the file is a
 * remap. Loads go to libdwfl (through dwfl_linux_proc_maps_report, which
 * reads the same format); remaps are kept here, each resolved as the
 * address the same file offset has in the load. */
#include "symbols_internal.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAME_LOAD_SPAN (1ull << 30) /* segments of one load lie closer than this */

/* One mapping of a file, as parsed. */
typedef struct file_map {
    uint64_t start, end, offset, key;
    char *line;       /* in the maps text */
    size_t line_len;
    size_t path_at;
} file_map;

/* A file's load: the mapping of its lowest offset (ld.so maps the ELF
 * header first), lowest address among equals. */
typedef struct file_load {
    uint64_t key, start, bias;
    const char *path;
    size_t path_len;
} file_load;

static char *read_maps(size_t *len) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 4096 > cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
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
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static bool same_path(const char *a, size_t alen, const char *b, size_t blen) {
    return alen == blen && memcmp(a, b, alen) == 0;
}

static file_load *find_load(file_load *v, size_t n, const file_map *m) {
    const char *path = m->line + m->path_at;
    size_t plen = m->line_len - m->path_at;
    for (size_t i = 0; i < n; i++)
        if (v[i].key == m->key && same_path(v[i].path, v[i].path_len, path, plen))
            return &v[i];
    return NULL;
}

/* Parse the file-backed mappings (path starting with '/', an inode). */
static size_t parse_maps(char *maps, file_map **out, uint64_t *vdso_start, uint64_t *vdso_end) {
    size_t n = 0, cap = 0;
    file_map *v = NULL;
    for (char *line = maps; *line;) {
        char *nl = strchr(line, '\n');
        size_t llen = nl ? (size_t)(nl - line) : strlen(line);
        uint64_t start, end, offset, inode;
        unsigned major, minor;
        int path_at = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*4s %" SCNx64 " %x:%x %" SCNu64 " %n",
                   &start, &end, &offset, &major, &minor, &inode, &path_at) >= 6 &&
            path_at > 0 && (size_t)path_at < llen) {
            if (line[path_at] == '/' && inode != 0) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 256;
                    file_map *nv = realloc(v, cap * sizeof *nv);
                    if (!nv)
                        break;
                    v = nv;
                }
                v[n++] = (file_map){start, end, offset, inode * 1000003u ^ ((uint64_t)major << 20 | minor),
                                    line, llen, (size_t)path_at};
            } else if (strncmp(line + path_at, "[vdso]", 6) == 0) {
                *vdso_start = start;
                *vdso_end = end;
            }
        }
        line += llen + (nl ? 1 : 0);
    }
    *out = v;
    return n;
}

void ss_remaps_free(ss_remap *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(r[i].path);
    free(r);
}

int ss_maps_report(Dwfl *dwfl, ss_remap **remaps_out, size_t *n_out) {
    *remaps_out = NULL;
    *n_out = 0;
    size_t len = 0;
    char *maps = read_maps(&len);
    if (!maps)
        return -EIO;
    uint64_t vdso_start = 0, vdso_end = 0;
    file_map *m = NULL;
    size_t n = parse_maps(maps, &m, &vdso_start, &vdso_end);
    file_load *loads = calloc(n ? n : 1, sizeof *loads);
    ss_remap *remaps = calloc(n ? n : 1, sizeof *remaps);
    char *kept = malloc(len + 1);
    size_t n_loads = 0, n_remaps = 0, kept_len = 0;
    int rc = loads && remaps && kept ? 0 : -ENOMEM;
    /* each file's load */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        file_load *l = find_load(loads, n_loads, &m[i]);
        if (!l) {
            l = &loads[n_loads++];
            *l = (file_load){m[i].key, m[i].start, m[i].start - m[i].offset,
                             m[i].line + m[i].path_at, m[i].line_len - m[i].path_at};
        } else if (m[i].start - m[i].offset != l->bias && m[i].offset < l->start - l->bias) {
            l->start = m[i].start; /* a lower offset: nearer the ELF header */
            l->bias = m[i].start - m[i].offset;
        }
    }
    /* the text without the remaps; the remaps apart */
    const char *copied_to = maps;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        file_load *l = find_load(loads, n_loads, &m[i]);
        uint64_t dist = m[i].start > l->start ? m[i].start - l->start : l->start - m[i].start;
        if (m[i].start - m[i].offset == l->bias || dist < SAME_LOAD_SPAN)
            continue;
        /* copy up to this line, skip it */
        size_t chunk = (size_t)(m[i].line - copied_to);
        memcpy(kept + kept_len, copied_to, chunk);
        kept_len += chunk;
        copied_to = m[i].line + m[i].line_len + (m[i].line[m[i].line_len] == '\n');
        char *path = strndup(l->path, l->path_len);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        /* the load's address of this file offset, minus ours */
        remaps[n_remaps++] = (ss_remap){m[i].start, m[i].end, m[i].offset + l->bias - m[i].start,
                                        path, NULL};
    }
    if (rc == 0) {
        size_t rest = len - (size_t)(copied_to - maps);
        memcpy(kept + kept_len, copied_to, rest);
        kept_len += rest;
        kept[kept_len] = '\0';
        FILE *f = fmemopen(kept, kept_len ? kept_len : 1, "r");
        rc = f ? dwfl_linux_proc_maps_report(dwfl, f) : -errno;
        if (f)
            fclose(f);
        if (rc > 0)
            rc = -rc;
        /* the vDSO has no file: read from memory by libdwfl's find_elf,
         * which knows it by this name (as its own maps reader names it) */
        char name[48];
        snprintf(name, sizeof name, "[vdso: %d]", (int)getpid());
        if (rc == 0 && vdso_end > vdso_start)
            dwfl_report_module(dwfl, name, vdso_start, vdso_end);
    }
    free(kept);
    free(loads);
    free(m);
    free(maps);
    if (rc != 0) {
        ss_remaps_free(remaps, n_remaps);
        return rc < 0 ? rc : -EIO;
    }
    *remaps_out = remaps;
    *n_out = n_remaps;
    return 0;
}
