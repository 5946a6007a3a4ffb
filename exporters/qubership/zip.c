/* zip.c: a one-entry zip of one file, as diagtools makes of a heap dump
 * (specs/qubership-dumps.md §3.3): the entry is named after the .hprof,
 * deflated, Zip64 when the dump is 4 GiB or more.
 *
 * minizip (zlib's contrib, Debian's libminizip1) writes it: it needs
 * nothing but zlib, which the agent maps already (libzip would bring
 * libbz2 and libcrypto), and it takes the data in pieces, so the file is
 * read through one 64 KiB buffer and the memory stays bounded whatever the
 * heap's size; the loop checks `stop` between pieces, so a shutdown never
 * waits for a large dump. The archive is written under a temporary name,
 * created 0600 without following symlinks, and renamed when complete: a
 * half-written zip never looks like one to upload. This file is in the
 * module libstackshot-qubership.so (qb_module.h): minizip is mapped only
 * when a heap dump is zipped (or TLS is used, tls.c). */
#include "agent/module_abi.h"
#include "exporters/qubership/qb_module.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#define CHUNK (64u << 10)

/* minizip's file functions with our own open: exclusive, 0600, no symlink. */
static voidpf open_exclusive(voidpf opaque, const void *filename, int mode) {
    (void)opaque;
    if (!(mode & ZLIB_FILEFUNC_MODE_CREATE))
        return NULL;
    int fd = open(filename, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w+b");
    if (!f)
        close(fd);
    return f;
}

static void entry_time(const struct stat *st, zip_fileinfo *zi) {
    memset(zi, 0, sizeof *zi);
    struct tm tm;
    time_t t = st->st_mtime;
    localtime_r(&t, &tm);
    zi->tmz_date.tm_sec = (uInt)tm.tm_sec;
    zi->tmz_date.tm_min = (uInt)tm.tm_min;
    zi->tmz_date.tm_hour = (uInt)tm.tm_hour;
    zi->tmz_date.tm_mday = (uInt)tm.tm_mday;
    zi->tmz_date.tm_mon = (uInt)tm.tm_mon;
    zi->tmz_date.tm_year = (uInt)tm.tm_year + 1900;
    zi->external_fa = (uLong)(st->st_mode & 0777) << 16;
}

int qbm_zip_file(const char *src, const char *entry, const char *dst, int level,
                _Atomic bool *stop, uint64_t *in_bytes, uint64_t *out_bytes) {
    *in_bytes = *out_bytes = 0;
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (in < 0)
        return -errno;
    struct stat st;
    if (fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(in);
        return -EINVAL;
    }
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", dst, (int)getpid());
    zlib_filefunc64_def io;
    fill_fopen64_filefunc(&io);
    io.zopen64_file = open_exclusive;
    unlink(tmp); /* one left by a process of this pid that died zipping */
    zipFile zf = zipOpen2_64(tmp, APPEND_STATUS_CREATE, NULL, &io);
    if (!zf) {
        int e = errno ? errno : EIO;
        close(in);
        return -e;
    }
    zip_fileinfo zi;
    entry_time(&st, &zi);
    int zip64 = (uint64_t)st.st_size >= 0xffffffffull;
    int rc = zipOpenNewFileInZip64(zf, entry, &zi, NULL, 0, NULL, 0, NULL, Z_DEFLATED, level,
                                   zip64) == ZIP_OK
                 ? 0
                 : -EIO;
    char *buf = rc == 0 ? malloc(CHUNK) : NULL;
    if (rc == 0 && !buf)
        rc = -ENOMEM;
    while (rc == 0) {
        if (stop && atomic_load(stop)) {
            rc = -ECANCELED;
            break;
        }
        ssize_t n = read(in, buf, CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = -errno;
        if (n <= 0)
            break;
        if (zipWriteInFileInZip(zf, buf, (unsigned)n) != ZIP_OK)
            rc = -EIO;
        *in_bytes += (uint64_t)n;
    }
    free(buf);
    close(in);
    if (zipCloseFileInZip(zf) != ZIP_OK && rc == 0)
        rc = -EIO;
    if (zipClose(zf, NULL) != ZIP_OK && rc == 0)
        rc = -EIO;
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    if (stat(dst, &st) == 0)
        *out_bytes = (uint64_t)st.st_size;
    return 0;
}
