/* disabled_check.c: run with libstackshot.so preloaded. "off": no
 * stackshot- thread exists and no handler is installed for the sampling
 * signal (SIGRTMAX-3 unless argv[2] says otherwise); "on": both exist
 * (so the check itself is known to see them). Exit 0 when as expected. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int agent_threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f) && strncmp(comm, "stackshot-", 10) == 0 &&
            strcmp(e->d_name, "") != 0 && atoi(e->d_name) != getpid())
            n++;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static int caught(int sig) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long mask = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "SigCgt:", 7) == 0)
            mask = strtoull(line + 7, NULL, 16);
    if (f)
        fclose(f);
    return (int)((mask >> (sig - 1)) & 1);
}

int main(int argc, char **argv) {
    int on = argc > 1 && strcmp(argv[1], "on") == 0;
    int sig = argc > 2 ? atoi(argv[2]) : SIGRTMAX - 3;
    /* "on": the agent starts when its first round is due (tests set a
     * 50 ms interval) and opens its core then, which takes longer under a
     * sanitizer on a loaded machine: look for up to 10 s. "off": 200 ms,
     * four first rounds' worth. */
    int threads = 0, handler = 0;
    for (int waited = 0; waited < (on ? 10000 : 200); waited += 50) {
        usleep(50000);
        threads = agent_threads();
        handler = caught(sig);
        if (on && threads > 0 && handler)
            break;
    }
    printf("disabled_check: %d agent threads, handler %s for signal %d\n", threads,
           handler ? "installed" : "not installed", sig);
    return on ? !(threads > 0 && handler) : !(threads == 0 && !handler);
}
