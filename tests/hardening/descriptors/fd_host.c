/* fd_host.c: a host that takes its whole descriptor table back, as daemons
 * do, while the agent runs inside it (docs/safety/descriptors.md).
 *
 *   fd_host <mode> <dir> <seconds>
 *
 * mode: before   closes every descriptor >= 3 at once, before the agent's
 *                first round (at 20 ms)
 *       between  after 150 ms (several rounds at 20 ms) and, with
 *                SS_WAIT_SOCKET=1 in the environment, once the process
 *                has a TCP socket (the agent's connection to its backend),
 *                with SS_WAIT_FILE=<suffix>, once a file of that suffix is
 *                in $STACKSHOT_OUTPUT_DIR (the agent's file is open)
 *       repeat   after 150 ms, then again every 400 ms (its own files too,
 *                opened again and written on) but for the last second
 *       takeaway after 150 ms (once the agent's output directory,
 *                $STACKSHOT_OUTPUT_DIR, exists, and the file SS_WAIT_FILE
 *                names in it) moves that directory to
 *                <it>.gone, puts a regular file at its name, then closes:
 *                the agent cannot open its file again, and every later
 *                round of a file exporter is lost
 *
 * After the close it opens 4 socket pairs and 32 files of its own in <dir>
 * (the lowest numbers: those the agent's descriptors had) and writes known
 * lines to them for <seconds> while three threads keep the sampler busy.
 * A socket pair carries lines both ways: what arrives at either end must
 * be exactly what the host sent from the other (an agent's send through
 * an old number adds bytes, its recv steals some); checked before every
 * close and at the end. At the end it reads every file back and exits 0
 * only when each file and socket holds exactly its own bytes (3
 * otherwise, naming it and what it found). It
 * prints "fd_host: closed at <realtime ms>" for each close, so the test can
 * tell rounds written after it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NFILES 32

static atomic_bool stop;
static char paths[NFILES][512];
static int fds[NFILES];
static unsigned long lines[NFILES]; /* lines written to each file */

#define NPAIRS 4
static int pairs[NPAIRS][2];
static unsigned long sent[NPAIRS][2]; /* lines sent from end k since the pair was made */
static int pairs_bad;
static unsigned long verified[NPAIRS][2]; /* lines that arrived as sent */
static char rest[NPAIRS][2][128];         /* the start of a line still arriving */
static size_t rest_len[NPAIRS][2];
static bool broken[NPAIRS][2];

static uint64_t now_ms(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *worker(void *arg) {
    volatile unsigned long x = (unsigned long)(uintptr_t)arg;
    while (!atomic_load(&stop)) {
        for (int i = 0; i < 200000; i++)
            x = x * 6364136223846793005ul + 1;
        sleep_ms(2);
    }
    return NULL;
}

/* Every descriptor >= 3, whoever opened it (listed first on stderr, for
 * whoever reads a failure). */
static void close_everything(void) {
    fprintf(stderr, "fd_host: closing");
    for (int fd = 3; fd < 256; fd++) {
        char path[64], link[128];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n > 0)
            fprintf(stderr, " %d=%.*s", fd, (int)n, link);
    }
    fprintf(stderr, "\n");
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
        goto told;
#endif
    {
        struct rlimit rl;
        long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
        for (long fd = 3; fd < max; fd++)
            close((int)fd);
    }
told:
    printf("fd_host: closed at %llu\n", (unsigned long long)now_ms(CLOCK_REALTIME));
    fflush(stdout);
}

/* Whether this process has a TCP socket open (the agent's connection to
 * its backend): a socket descriptor whose inode /proc/net/tcp{,6} lists. */
static bool has_tcp_socket(void) {
    unsigned long inodes[64];
    int n = 0;
    for (int fd = 3; fd < 1024 && n < 64; fd++) {
        char path[64], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len > 0) {
            link[len] = '\0';
            if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1)
                n++;
        }
    }
    const char *tables[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            unsigned long ino = 0;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %lu", &ino) == 1)
                for (int i = 0; i < n; i++)
                    if (ino && inodes[i] == ino) {
                        fclose(f);
                        return true;
                    }
        }
        if (f)
            fclose(f);
    }
    return false;
}

/* Whether $STACKSHOT_OUTPUT_DIR holds a file whose name ends in suffix. */
static bool has_output_file(const char *suffix) {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    DIR *d = dir ? opendir(dir) : NULL;
    bool found = false;
    struct dirent *e;
    size_t n = strlen(suffix);
    while (d && !found && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        found = len > n && strcmp(e->d_name + len - n, suffix) == 0;
    }
    if (d)
        closedir(d);
    return found;
}

static void take_output_dir_away(void) {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    char gone[600];
    snprintf(gone, sizeof gone, "%s.gone", dir ? dir : "");
    int fd = -1;
    /* the agent creates it at its first write: its file, then */
    const char *wf = getenv("SS_WAIT_FILE");
    for (int i = 0; dir && i < 1000 && (wf && *wf ? !has_output_file(wf) : access(dir, F_OK) != 0);
         i++)
        sleep_ms(10);
    if (!dir || rename(dir, gone) != 0 ||
        (fd = open(dir, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        fprintf(stderr, "fd_host: cannot take %s away: %s\n", dir ? dir : "(unset)",
                strerror(errno));
        exit(2);
    }
    close(fd);
}

static int pair_line(int i, int from, unsigned long j, char *buf, size_t n) {
    return snprintf(buf, n, "host %d pair %d from %d line %06lu\n", (int)getpid(), i, from, j);
}

static void open_pairs(void) {
    for (int i = 0; i < NPAIRS; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[i]) != 0) {
            fprintf(stderr, "fd_host: socketpair: %s\n", strerror(errno));
            exit(2);
        }
        for (int k = 0; k < 2; k++) {
            sent[i][k] = verified[i][k] = 0;
            rest_len[i][k] = 0;
            broken[i][k] = false;
        }
    }
}

static void write_pairs(void) {
    for (int i = 0; i < NPAIRS; i++)
        for (int k = 0; k < 2; k++) {
            char line[96];
            int n = pair_line(i, k, sent[i][k], line, sizeof line);
            if (send(pairs[i][k], line, (size_t)n, MSG_NOSIGNAL) != n) {
                fprintf(stderr, "fd_host: FOREIGN: send on pair %d end %d: %s\n", i, k,
                        strerror(errno));
                pairs_bad++;
                continue;
            }
            sent[i][k]++;
        }
}

/* What arrived at each end is exactly what the other end sent, line by
 * line as it comes (drained often: a full socket would block the host);
 * `final`: and nothing is missing. */

static void pair_bad(int i, int k, const char *what, const char *got, size_t n) {
    char shown[121];
    size_t m = n < sizeof shown - 1 ? n : sizeof shown - 1;
    for (size_t q = 0; q < m; q++)
        shown[q] = (unsigned char)got[q] < 32 ? '|' : got[q];
    shown[m] = '\0';
    fprintf(stderr, "fd_host: FOREIGN BYTES on socket pair %d (sent from end %d: %lu lines, "
            "%lu arrived as sent): %s: %s\n", i, k, sent[i][k], verified[i][k], what, shown);
    broken[i][k] = true;
    pairs_bad++;
}

static void check_pairs(bool final) {
    static char got[1 << 16];
    for (int i = 0; i < NPAIRS; i++)
        for (int k = 0; k < 2; k++) {
            for (;;) {
                size_t len = rest_len[i][k];
                memcpy(got, rest[i][k], len);
                ssize_t r = recv(pairs[i][1 - k], got + len, sizeof got - len, MSG_DONTWAIT);
                if (r <= 0)
                    break;
                len += (size_t)r;
                size_t off = 0;
                char *nl;
                while (!broken[i][k] && (nl = memchr(got + off, '\n', len - off)) != NULL) {
                    char want[96];
                    int n = pair_line(i, k, verified[i][k], want, sizeof want);
                    size_t have = (size_t)(nl - (got + off)) + 1;
                    if (have != (size_t)n || memcmp(got + off, want, have) != 0) {
                        pair_bad(i, k, "unexpected line", got + off, len - off);
                        break;
                    }
                    verified[i][k]++;
                    off += have;
                }
                rest_len[i][k] = len - off < sizeof rest[i][k] ? len - off : 0;
                if (!broken[i][k] && len - off >= sizeof rest[i][k])
                    pair_bad(i, k, "a line too long", got + off, len - off);
                memcpy(rest[i][k], got + off, rest_len[i][k]);
            }
            if (final && !broken[i][k] && (verified[i][k] != sent[i][k] || rest_len[i][k]))
                pair_bad(i, k, "bytes missing (read by someone else?)", rest[i][k],
                         rest_len[i][k]);
        }
}

static void open_files(bool first) {
    for (int i = 0; i < NFILES; i++) {
        fds[i] = open(paths[i], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (first ? O_TRUNC : 0),
                      0600);
        if (fds[i] < 0) {
            fprintf(stderr, "fd_host: open %s: %s\n", paths[i], strerror(errno));
            exit(2);
        }
    }
}

static int line_of(int i, unsigned long j, char *buf, size_t n) {
    return snprintf(buf, n, "host %d file %02d line %06lu: 0123456789abcdefghijklmnop\n",
                    (int)getpid(), i, j);
}

static void write_round(void) {
    for (int i = 0; i < NFILES; i++) {
        char line[128];
        int n = line_of(i, lines[i], line, sizeof line);
        if (write(fds[i], line, (size_t)n) != n) {
            fprintf(stderr, "fd_host: write to file %d: %s\n", i, strerror(errno));
            exit(2);
        }
        lines[i]++;
    }
}

/* 0 when file i holds exactly the lines written, else 1 (told). */
static int check_file(int i) {
    FILE *f = fopen(paths[i], "rb");
    if (!f) {
        fprintf(stderr, "fd_host: reopen %s: %s\n", paths[i], strerror(errno));
        return 1;
    }
    size_t off = 0;
    int bad = 0;
    for (unsigned long j = 0; j < lines[i] && !bad; j++) {
        char want[128], got[128];
        int n = line_of(i, j, want, sizeof want);
        size_t r = fread(got, 1, (size_t)n, f);
        if (r != (size_t)n || memcmp(got, want, (size_t)n) != 0)
            bad = 1;
        else
            off += (size_t)n;
    }
    if (!bad && fgetc(f) != EOF)
        bad = 1;
    if (bad) {
        char found[121];
        fseek(f, (long)off, SEEK_SET);
        size_t r = fread(found, 1, sizeof found - 1, f);
        found[r] = '\0';
        for (size_t k = 0; k < r; k++)
            if (found[k] == '\n' || found[k] == '\t' || (unsigned char)found[k] < 32)
                found[k] = '|';
        fseek(f, 0, SEEK_END);
        fprintf(stderr,
                "fd_host: FOREIGN BYTES in %s (%ld bytes, expected %lu lines) at offset %zu: %s\n",
                paths[i], ftell(f), lines[i], off, found);
    }
    fclose(f);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: fd_host before|between|repeat|takeaway <dir> <seconds>\n");
        return 2;
    }
    const char *mode = argv[1];
    double secs = atof(argv[3]);
    for (int i = 0; i < NFILES; i++)
        snprintf(paths[i], sizeof paths[i], "%s/host-file-%02d", argv[2], i);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));

    bool repeat = strcmp(mode, "repeat") == 0;
    if (strcmp(mode, "before") != 0)
        sleep_ms(150);
    const char *ws = getenv("SS_WAIT_SOCKET");
    if (strcmp(mode, "between") == 0 && ws && *ws == '1')
        for (int i = 0; i < 1000 && !has_tcp_socket(); i++)
            sleep_ms(10);
    const char *wf = getenv("SS_WAIT_FILE");
    if (strcmp(mode, "between") == 0 && wf && *wf)
        for (int i = 0; i < 1000 && !has_output_file(wf); i++)
            sleep_ms(10);
    if (strcmp(mode, "takeaway") == 0)
        take_output_dir_away(); /* the agent's file stays open: until the close */
    close_everything();
    open_pairs();
    open_files(true);
    uint64_t t0 = now_ms(CLOCK_MONOTONIC), last_close = t0;
    unsigned long rounds = 0;
    while (now_ms(CLOCK_MONOTONIC) - t0 < (uint64_t)(secs * 1000)) {
        write_round();
        write_pairs();
        if (++rounds % 10 == 0)
            check_pairs(false);
        sleep_ms(5);
        uint64_t now = now_ms(CLOCK_MONOTONIC);
        if (repeat && now - last_close >= 400 && now - t0 + 1000 < (uint64_t)(secs * 1000)) {
            check_pairs(true);
            close_everything(); /* its own files too */
            open_pairs();
            open_files(false);
            last_close = now_ms(CLOCK_MONOTONIC);
        }
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NFILES; i++)
        close(fds[i]);
    check_pairs(true);
    int bad = 0;
    for (int i = 0; i < NFILES; i++)
        bad += check_file(i);
    printf("fd_host: %d of %d files hold foreign bytes; %lu lines each; %d socket checks "
           "failed\n", bad, NFILES, lines[0], pairs_bad);
    fflush(stdout);
    return bad || pairs_bad ? 3 : 0;
}
