/* output.c: local files, created safely.
 *
 * The agent writes into someone else's process's environment: its files
 * are created mode 0600 in a directory it creates 0700, and it never
 * follows a symlink at the last component (O_NOFOLLOW) nor writes into a
 * directory that is not a directory owned by this user. */
#include "ss_exporters.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int make_dirs(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int ss_output_open(const char *dir, const char *name, bool append) {
    int rc = make_dirs(dir);
    if (rc != 0) {
        ss_error("cannot create output directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        rc = -errno;
        ss_error("cannot open output directory %s: %s", dir, strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(dfd, &st) != 0 || st.st_uid != geteuid()) {
        close(dfd);
        ss_error("output directory %s is not owned by this user; not writing there", dir);
        return -EPERM;
    }
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
    int fd = openat(dfd, name, flags, 0600);
    rc = fd < 0 ? -errno : fd;
    close(dfd);
    if (fd < 0)
        ss_error("cannot open %s/%s: %s", dir, name, strerror(-rc));
    return rc;
}

int ss_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}
