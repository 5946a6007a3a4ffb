/* proc_maps.h: the process's mappings. /proc/self/maps is read and parsed
 * in one place (proc_maps.c) for its two users: the unwinder's table of
 * address ranges and the symbol resolver's mappings of files. Private to
 * samplers/. */
#ifndef SS_PROC_MAPS_H
#define SS_PROC_MAPS_H

#include <stddef.h>
#include <stdint.h>

enum { SS_MAP_R = 1, SS_MAP_W = 2, SS_MAP_X = 4 };

typedef struct ss_map_range {
    uint64_t lo, hi;
    uint32_t prot;
} ss_map_range;

typedef struct ss_maps {
    uint32_t n;
    ss_map_range r[]; /* sorted, disjoint */
} ss_maps;

/* /proc/self/maps now; free() it. NULL when unreadable. */
ss_maps *ss_maps_read(void);
/* The mapping holding addr, or NULL. Async-signal-safe. */
const ss_map_range *ss_maps_find(const ss_maps *m, uint64_t addr);

/* A mapping of a file: a path starting with '/', and an inode or a device
 * (as libdwfl's own maps reader tells files from other mappings). */
typedef struct ss_map_file {
    uint64_t lo, hi, offset;
    uint64_t inode;
    uint32_t dev_major, dev_minor;
    const char *path; /* in the list's text */
} ss_map_file;

typedef struct ss_map_files {
    ss_map_file *v; /* in address order */
    size_t n;
    uint64_t vdso_lo, vdso_hi; /* the vDSO, 0 and 0 when none */
    char *text;
} ss_map_files;

/* The mappings of files of /proc/self/maps now. 0 or -errno. */
int ss_map_files_read(ss_map_files *out);
void ss_map_files_free(ss_map_files *m);

#endif /* SS_PROC_MAPS_H */
