/* dir.c: the names in a directory, without opendir.
 *
 * glibc's opendir allocates a 32 KiB buffer with its own malloc, on the
 * calling thread: on an agent thread that is a malloc arena of its own
 * (64 MiB of address space reserved, which a host under an RLIMIT_AS
 * cannot spare). getdents64 into a buffer on the stack needs nothing. */
#include "agent/dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

struct dirent64_raw {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

int ss_dir_each(int dirfd, const char *path, int (*fn)(const char *name, void *arg), void *arg) {
    int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[4096] __attribute__((aligned(8)));
    int rc = 0;
    while (rc == 0) {
        long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = -errno;
        if (got <= 0)
            break;
        for (long off = 0; off < got && rc == 0;) {
            struct dirent64_raw *d = (struct dirent64_raw *)(buf + off);
            off += d->d_reclen;
            if (d->d_name[0] == '.' && (!d->d_name[1] || (d->d_name[1] == '.' && !d->d_name[2])))
                continue;
            rc = fn(d->d_name, arg);
        }
    }
    close(fd);
    return rc < 0 ? rc : 0;
}
