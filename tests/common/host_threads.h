/* host_threads.h: what a test host or benchmark asks about its own
 * threads (header-only, like host_clock.h). */
#ifndef SS_TESTS_HOST_THREADS_H
#define SS_TESTS_HOST_THREADS_H

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Does a thread whose name starts with `name` exist in this process? (The
 * agent's start thread, "stackshot-start", exists from the load until
 * sampling starts.) */
static inline bool thread_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    bool found = false;
    struct dirent *e;
    while (d && !found && (e = readdir(d)) != NULL) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, comm, sizeof comm - 1);
        close(fd);
        found = n > 0 && strncmp(comm, name, strlen(name)) == 0;
    }
    if (d)
        closedir(d);
    return found;
}

#endif
