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
 * remap. Loads are reported to libdwfl as its own reader would report
 * them (a module per run of mappings of one file); remaps are kept here,
 * each resolved as the address the same file offset has in the load.
 *
 * The maps are read and parsed by proc_maps.c, as for the unwinder. */
#include "proc/maps.h"
#include "samplers/symbols_internal.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAME_LOAD_SPAN (1ull << 30) /* segments of one load lie closer than this */

/* A file's load: the mapping of its lowest offset (ld.so maps the ELF
 * header first), lowest address among equals. */
typedef struct file_load {
    const ss_map_file *first; /* identifies the file */
    uint64_t start, bias;
} file_load;

static bool same_file(const ss_map_file *a, const ss_map_file *b) {
    return a->inode == b->inode && a->dev_major == b->dev_major &&
           a->dev_minor == b->dev_minor && strcmp(a->path, b->path) == 0;
}

static file_load *find_load(file_load *v, size_t n, const ss_map_file *m) {
    for (size_t i = 0; i < n; i++)
        if (same_file(v[i].first, m))
            return &v[i];
    return NULL;
}

static bool in_load(const file_load *l, const ss_map_file *m) {
    uint64_t dist = m->lo > l->start ? m->lo - l->start : l->start - m->lo;
    return m->lo - m->offset == l->bias || dist < SAME_LOAD_SPAN;
}

void ss_remaps_free(ss_remap *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(r[i].path);
    free(r);
}

/* Report each run of a file's mappings in its load as one module, as
 * libdwfl's maps reader does: another file's mapping ends a run, a
 * mapping of no file (bss, heap) does not; remaps are left out. */
static int report_loads(Dwfl *dwfl, const ss_map_files *mf, file_load *loads,
                        size_t n_loads) {
    const ss_map_file *run = NULL;
    uint64_t lo = 0, hi = 0;
    for (size_t i = 0; i <= mf->n; i++) {
        const ss_map_file *m = i < mf->n ? &mf->v[i] : NULL;
        if (m && !in_load(find_load(loads, n_loads, m), m))
            continue; /* a remap */
        if (m && run && same_file(run, m)) {
            hi = m->hi;
            continue;
        }
        if (run && !dwfl_report_module(dwfl, run->path, lo, hi))
            return -EIO;
        run = m;
        if (m) {
            lo = m->lo;
            hi = m->hi;
        }
    }
    return 0;
}

int ss_maps_report(Dwfl *dwfl, ss_remap **remaps_out, size_t *n_out) {
    *remaps_out = NULL;
    *n_out = 0;
    ss_map_files mf;
    int rc = ss_map_files_read(&mf);
    if (rc != 0)
        return rc;
    size_t n = mf.n;
    file_load *loads = calloc(n ? n : 1, sizeof *loads);
    ss_remap *remaps = calloc(n ? n : 1, sizeof *remaps);
    size_t n_loads = 0, n_remaps = 0;
    rc = loads && remaps ? 0 : -ENOMEM;
    /* each file's load */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ss_map_file *m = &mf.v[i];
        file_load *l = find_load(loads, n_loads, m);
        if (!l)
            loads[n_loads++] = (file_load){m, m->lo, m->lo - m->offset};
        else if (m->lo - m->offset != l->bias && m->offset < l->start - l->bias) {
            l->start = m->lo; /* a lower offset: nearer the ELF header */
            l->bias = m->lo - m->offset;
        }
    }
    /* the remaps apart */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ss_map_file *m = &mf.v[i];
        const file_load *l = find_load(loads, n_loads, m);
        if (in_load(l, m))
            continue;
        char *path = strdup(m->path);
        if (!path) {
            rc = -ENOMEM;
            break;
        }
        /* the load's address of this file offset, minus ours */
        remaps[n_remaps++] = (ss_remap){m->lo, m->hi, m->offset + l->bias - m->lo, path, NULL};
    }
    if (rc == 0)
        rc = report_loads(dwfl, &mf, loads, n_loads);
    /* the vDSO has no file: read from memory by libdwfl's find_elf, which
     * knows it by this name (as its own maps reader names it) */
    if (rc == 0 && mf.vdso_hi > mf.vdso_lo) {
        char name[48];
        snprintf(name, sizeof name, "[vdso: %d]", (int)getpid());
        dwfl_report_module(dwfl, name, mf.vdso_lo, mf.vdso_hi);
    }
    free(loads);
    ss_map_files_free(&mf);
    if (rc != 0) {
        ss_remaps_free(remaps, n_remaps);
        return rc;
    }
    *remaps_out = remaps;
    *n_out = n_remaps;
    return 0;
}
