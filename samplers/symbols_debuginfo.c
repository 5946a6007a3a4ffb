/* symbols_debuginfo.c: separate debuginfo, found on this machine only.
 *
 * A stripped library's DWARF (and often its full symbol table) lives in a
 * separate file: Debian's -dbg and -dbgsym packages install it under
 * /usr/lib/debug, named after the library's GNU build id
 * (.build-id/ab/cdef....debug), and a library may name its debug file in
 * .gnu_debuglink (with the file's CRC), looked for next to the library,
 * in its .debug/ directory and under /usr/lib/debug/<its directory>/.
 *
 * libdwfl's dwfl_standard_find_debuginfo does these searches too, but
 * when they find nothing for a module that has a build id (most modules
 * of a process: the agent's own libraries, libdw, libunwind...) it goes
 * on to the debuginfod client: libdw 0.188 dlopens libdebuginfod
 * whatever DEBUGINFOD_URLS says, and with it libcurl-gnutls, GnuTLS,
 * Kerberos, LDAP, libssh2 and more: about 30 files and 13 MiB of a
 * host's memory for a client that, from inside a production process,
 * must never download anything anyway. This callback does the local
 * searches and nothing else.
 *
 * A candidate is used only when it is the right file: its build id equals
 * the module's (when the module has one), else its CRC equals the one in
 * .gnu_debuglink. A dwz-compressed debug file names its shared part in
 * .gnu_debugaltlink (a path and that part's build id); libdwfl asks for it
 * through this callback too, and it is found the same way. */
#include "samplers/symbols_internal.h"
#include "agent/kept_fd.h"

#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include "proc/maps.h"

#define DEBUG_ROOT "/usr/lib/debug"

typedef struct want {
    const unsigned char *id; /* the build id the file must have; NULL: none */
    size_t id_len;
    bool check_crc;          /* no build id to compare: the CRC must match */
    GElf_Word crc;
    dev_t not_dev;           /* never the module's own file */
    ino_t not_ino;
} want;

static bool same_build_id(int fd, const want *w) {
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return false;
    const void *id = NULL;
    ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
    bool same = n > 0 && (size_t)n == w->id_len && memcmp(id, w->id, w->id_len) == 0;
    elf_end(elf);
    return same;
}

/* CRC-32 of the whole file, as .gnu_debuglink records it (zlib's). */
static bool same_crc(int fd, GElf_Word want_crc) {
    unsigned char buf[16384];
    uLong crc = crc32(0L, Z_NULL, 0);
    off_t at = 0;
    for (;;) {
        ssize_t r = pread(fd, buf, sizeof buf, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        crc = crc32(crc, buf, (uInt)r);
        at += r;
    }
    return (GElf_Word)crc == want_crc;
}

/* path opened when it is the file wanted: the fd, *name set; else -1. */
static int try_path(const char *path, const want *w, char **name) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              !(st.st_dev == w->not_dev && st.st_ino == w->not_ino);
    if (ok)
        ok = w->id ? same_build_id(fd, w) : !w->check_crc || same_crc(fd, w->crc);
    if (ok && (*name = strdup(path)) != NULL)
        return fd;
    close(fd);
    return -1;
}

/* DEBUG_ROOT/.build-id/ab/cdef....debug */
static int by_build_id(const want *w, char **name) {
    if (!w->id || w->id_len < 2 || w->id_len > 64)
        return -1;
    char path[sizeof DEBUG_ROOT + 16 + 2 * 64 + 8];
    int len = snprintf(path, sizeof path, "%s/.build-id/%02x/", DEBUG_ROOT, w->id[0]);
    for (size_t i = 1; i < w->id_len; i++)
        len += snprintf(path + len, sizeof path - (size_t)len, "%02x", w->id[i]);
    snprintf(path + len, sizeof path - (size_t)len, ".debug");
    return try_path(path, w, name);
}

/* The debuglink (or altlink) name next to `file`, in its .debug/, and
 * under DEBUG_ROOT; an absolute name as it is, too. */
static int by_link(const char *file, const char *link, const want *w, char **name) {
    if (!link || !*link)
        return -1;
    int fd = -1;
    if (link[0] == '/' && (fd = try_path(link, w, name)) >= 0)
        return fd;
    const char *base = strrchr(link, '/');
    base = base ? base + 1 : link;
    const char *slash = file && file[0] == '/' ? strrchr(file, '/') : NULL;
    if (!slash || !*base)
        return -1;
    int dir_len = (int)(slash - file);
    char path[4096];
    /* next to the file (a relative altlink name from there as it is) */
    static const char *const forms[] = {"%.*s/%s", "%.*s/.debug/%s", DEBUG_ROOT "%.*s/%s"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms && fd < 0; i++) {
        const char *tail = i == 0 && link[0] != '/' ? link : base;
        int n = snprintf(path, sizeof path, forms[i], dir_len, file, tail);
        if (n > 0 && (size_t)n < sizeof path)
            fd = try_path(path, w, name);
    }
    return fd;
}

/* The .gnu_debugaltlink of `file`: its name and the build id of the
 * shared file (both point into the returned Elf's data). */
static Elf *altlink_of(const char *file, int *fd_out, const char **alt_name,
                       const unsigned char **alt_id, size_t *alt_id_len) {
    int fd = file ? open(file, O_RDONLY | O_CLOEXEC) : -1;
    Elf *elf = fd >= 0 ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    size_t shstrndx;
    if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0)
        goto none;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr shdr;
        const char *sname = gelf_getshdr(scn, &shdr) ? elf_strptr(elf, shstrndx, shdr.sh_name)
                                                      : NULL;
        if (!sname || strcmp(sname, ".gnu_debugaltlink") != 0)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        const char *p = d ? d->d_buf : NULL;
        const char *nul = p ? memchr(p, '\0', d->d_size) : NULL;
        if (!nul || (size_t)(nul + 1 - p) >= d->d_size)
            goto none;
        *alt_name = p;
        *alt_id = (const unsigned char *)nul + 1;
        *alt_id_len = d->d_size - (size_t)(nul + 1 - p);
        *fd_out = fd;
        return elf;
    }
none:
    if (elf)
        elf_end(elf);
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* libdwfl asks for the shared part of a dwz-compressed debug file with
 * the debug file as `file`, its altlink name as `link` and CRC 0. */
static int find_altlink(const char *file, const char *link, char **name, bool *was_alt) {
    int efd = -1;
    const char *alt_name = NULL;
    const unsigned char *alt_id = NULL;
    size_t alt_id_len = 0;
    Elf *elf = altlink_of(file, &efd, &alt_name, &alt_id, &alt_id_len);
    *was_alt = elf && strcmp(alt_name, link) == 0;
    int fd = -1;
    if (*was_alt) {
        want w = {alt_id, alt_id_len, false, 0, 0, 0};
        fd = by_build_id(&w, name);
        if (fd < 0)
            fd = by_link(file, link, &w, name);
    }
    if (elf) {
        elf_end(elf);
        close(efd);
    }
    return fd;
}

int ss_find_debuginfo(Dwfl_Module *mod, void **user, const char *modname, Dwarf_Addr base,
                      const char *file, const char *link, GElf_Word crc, char **name) {
    (void)user, (void)modname, (void)base;
    *name = NULL;
    elf_version(EV_CURRENT);
    if (link && crc == 0) {
        bool was_alt = false;
        int fd = find_altlink(file, link, name, &was_alt);
        if (was_alt)
            return fd;
    }
    want w = {NULL, 0, link != NULL, crc, 0, 0};
    GElf_Addr vaddr;
    int len = mod ? dwfl_module_build_id(mod, &w.id, &vaddr) : -1;
    if (len > 0)
        w.id_len = (size_t)len;
    else
        w.id = NULL;
    struct stat st;
    if (file && stat(file, &st) == 0) {
        w.not_dev = st.st_dev;
        w.not_ino = st.st_ino;
    }
    int fd = by_build_id(&w, name);
    if (fd < 0)
        fd = by_link(file, link, &w, name);
    if (fd < 0)
        errno = ENOENT;
    /* libdw keeps it as long as the module: up with the agent's others */
    return ss_fd_move_high(fd);
}

/* ---- giving back the compressed bytes ------------------------------- */

/* Debian compresses the DWARF of its debug files (SHF_COMPRESSED, zlib).
 * libdw decompresses every DWARF section into memory of its own when it
 * opens a module's DWARF (libdw 0.188 reads them all at once), and never
 * reads the compressed bytes again; yet the pages libelf read them from
 * stay mapped: 3.7 MiB of libc6-dbg's file counted in the host's resident
 * memory for nothing. They are clean pages of a read-only file, so
 * dropping them from the mapping loses nothing (a read would fault them
 * back in from the file); the page cache keeps or reclaims them as it
 * sees fit.
 *
 * The section table is read from the file itself, not from libelf's
 * mapping, whose section headers libelf rewrites as it decompresses (and
 * whose pages are then private copies that must not be dropped). Only
 * whole pages inside compressed sections are dropped, never one that
 * holds headers or another section's bytes. The file must still be the
 * one mapped: same size and same ELF header, and libelf's bytes must be a
 * mapping of that file (/proc/self/maps: its inode at offset 0), never
 * memory libelf read the file into (it does when mmap fails). */
#define TRIM_MAX_SECTIONS 4096

static size_t trim_ranges(char *base, size_t size, int fd) {
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || memcmp(base, &eh, sizeof eh) != 0 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum > TRIM_MAX_SECTIONS ||
        eh.e_shoff > size || size - eh.e_shoff < (size_t)eh.e_shnum * sizeof(Elf64_Shdr))
        return 0;
    Elf64_Shdr *sh = malloc((size_t)eh.e_shnum * sizeof *sh);
    if (!sh)
        return 0;
    size_t dropped = 0;
    size_t want = (size_t)eh.e_shnum * sizeof *sh;
    if (pread(fd, sh, want, (off_t)eh.e_shoff) == (ssize_t)want) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        for (unsigned i = 0; i < eh.e_shnum; i++) {
            if (!(sh[i].sh_flags & SHF_COMPRESSED) || sh[i].sh_type == SHT_NOBITS ||
                sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset)
                continue;
            uintptr_t lo = ((uintptr_t)base + sh[i].sh_offset + page - 1) & ~(page - 1);
            uintptr_t hi = ((uintptr_t)base + sh[i].sh_offset + sh[i].sh_size) & ~(page - 1);
            if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0)
                dropped += hi - lo;
        }
    }
    free(sh);
    return dropped;
}

/* [base, base + size) is one mapping of st's file from offset 0. */
static bool maps_file(const char *base, size_t size, const struct stat *st) {
    ss_map_files m;
    if (ss_map_files_read(&m) != 0)
        return false;
    bool ok = false;
    uint64_t lo = (uint64_t)(uintptr_t)base;
    for (size_t i = 0; i < m.n; i++) {
        const ss_map_file *f = &m.v[i];
        if (f->lo == lo) {
            ok = f->hi - f->lo >= size && f->offset == 0 && f->inode == (uint64_t)st->st_ino &&
                 f->dev_major == major(st->st_dev) && f->dev_minor == minor(st->st_dev);
            break;
        }
    }
    ss_map_files_free(&m);
    return ok;
}

size_t ss_debuginfo_trim(Dwfl_Module *mod) {
    const char *mainfile = NULL, *debugfile = NULL;
    dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &mainfile, &debugfile);
    Dwarf_Addr bias;
    Dwarf *dw = dwfl_module_getdwarf(mod, &bias);
    Elf *elf = dw ? dwarf_getelf(dw) : NULL;
    size_t size = 0;
    char *base = elf ? elf_rawfile(elf, &size) : NULL;
    const char *path = debugfile ? debugfile : mainfile;
    if (!base || !path || size < sizeof(Elf64_Ehdr))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    size_t dropped = 0;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == size && maps_file(base, size, &st))
        dropped = trim_ranges(base, size, fd);
    close(fd);
    return dropped;
}
