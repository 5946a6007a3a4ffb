// shapes.cc: a host whose threads park in many kinds of stacks, for the
// native sampler's unwinders to be compared with gdb and with each other
// (tests/native/check_shapes.py). Built twice, with and without frame
// pointers, at -O2 (so with inlining), as C++ (exception tables, a thread
// blocked in a catch block, another in a destructor run by unwinding).
//
//   sh-nanosleep sh-clocknano sh-poll sh-epoll sh-select sh-mutex sh-cond
//   sh-read sh-accept sh-waitpid sh-sigwait: one blocking call each
//   sh-recurse    500 levels of recursion, then asleep
//   sh-inline     asleep under two always-inlined functions
//   sh-catch      asleep inside a catch block
//   sh-dtor       asleep in a destructor run while an exception unwinds
//   sh-busy       spinning (the signal path)
//   main          asleep until the end
//
// usage: shapes ROUNDS: runs until the agent (text exporter) wrote ROUNDS
// rounds after every thread was in place. Prints "shapes: ready" once every thread is in place and
// "shapes: done" at the end. "marker: <name>" comments tag the
// lines the test expects (keep them on those lines).
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define KEEP() __asm__ volatile("" ::: "memory") /* no tail call, a frame per level */

static std::atomic<int> ready{0};
static std::atomic<bool> done{false};
static int pipe_fd[2];     // never written until the end: readers block
static int listen_fd = -1; // nobody connects
static pid_t child = -1;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static volatile unsigned long spins;

static void arrive() { ready.fetch_add(1); }

extern "C" {

NOINLINE void park_nanosleep() {
    arrive();
    while (!done.load()) {
        struct timespec ts = {30, 0};
        nanosleep(&ts, nullptr); /* marker: nanosleep */
        KEEP();
    }
}

NOINLINE void park_clock_nanosleep() {
    arrive();
    while (!done.load()) {
        struct timespec ts = {30, 0};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr); /* marker: clocknano */
        KEEP();
    }
}

NOINLINE void park_poll() {
    arrive();
    struct pollfd p = {pipe_fd[0], POLLIN, 0};
    while (!done.load()) {
        poll(&p, 1, 30000); /* marker: poll */
        KEEP();
    }
}

NOINLINE void park_epoll() {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = pipe_fd[0];
    epoll_ctl(ep, EPOLL_CTL_ADD, pipe_fd[0], &ev);
    arrive();
    while (!done.load()) {
        struct epoll_event out;
        epoll_wait(ep, &out, 1, 30000); /* marker: epoll */
        KEEP();
    }
    close(ep);
}

NOINLINE void park_select() {
    arrive();
    while (!done.load()) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(pipe_fd[0], &r);
        struct timeval tv = {30, 0};
        select(pipe_fd[0] + 1, &r, nullptr, nullptr, &tv); /* marker: select */
        KEEP();
    }
}

NOINLINE void park_mutex() {
    arrive();
    pthread_mutex_lock(&held); /* marker: mutex */
    pthread_mutex_unlock(&held);
    KEEP();
}

NOINLINE void park_cond() {
    pthread_mutex_lock(&cond_lock);
    arrive();
    while (!done.load())
        pthread_cond_wait(&never, &cond_lock); /* marker: cond */
    pthread_mutex_unlock(&cond_lock);
    KEEP();
}

NOINLINE void park_read() {
    arrive();
    char c;
    while (read(pipe_fd[0], &c, 1) < 0 && errno == EINTR) /* marker: read */
        ;
    KEEP();
}

NOINLINE void park_accept() {
    arrive();
    while (!done.load()) {
        int fd = accept(listen_fd, nullptr, nullptr); /* marker: accept */
        if (fd >= 0)
            close(fd);
        KEEP();
    }
}

NOINLINE void park_waitpid() {
    arrive();
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) /* marker: waitpid */
        ;
    KEEP();
}

NOINLINE void park_sigwait() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
    arrive();
    int sig;
    sigwait(&s, &sig); /* marker: sigwait */
    KEEP();
}

NOINLINE int recurse(int n) {
    if (n == 0) {
        park_nanosleep(); /* marker: recurse_bottom */
        return 0;
    }
    int r = recurse(n - 1); /* marker: recurse */
    KEEP();
    return r + 1;
}

} // extern "C"

/* -O2 and always_inline: one physical frame, three in the stack */
static inline __attribute__((always_inline)) void inner_inline() {
    park_clock_nanosleep(); /* marker: inner_inline */
}

static inline __attribute__((always_inline)) void outer_inline() {
    inner_inline(); /* marker: outer_inline */
}

extern "C" NOINLINE void park_inline() {
    outer_inline(); /* marker: park_inline */
    KEEP();
}

extern "C" NOINLINE void thrower(int n) {
    if (n >= 0)
        throw std::runtime_error("to the catch block");
}

extern "C" NOINLINE void park_catch() {
    try {
        thrower(1);
    } catch (const std::exception &) {
        park_nanosleep(); /* marker: catch */
    }
    KEEP();
}

struct Blocker {
    NOINLINE ~Blocker() {
        park_nanosleep(); /* marker: dtor */
        KEEP();
    }
};

extern "C" NOINLINE void unwinds_through(int n) {
    Blocker b;
    thrower(n); /* its destructor runs while this throws */
    KEEP();
}

extern "C" NOINLINE void park_dtor() {
    try {
        unwinds_through(1); /* marker: unwinds_through */
    } catch (const std::exception &) {
    }
    KEEP();
}

extern "C" NOINLINE void spin_here() {
    arrive();
    while (!done.load())
        spins = spins + 1; /* marker: busy */
    KEEP();
}

struct shape {
    const char *name;
    void (*fn)();
};

static void recurse500() { recurse(500); }

static const shape shapes[] = {
    {"sh-nanosleep", park_nanosleep}, {"sh-clocknano", park_clock_nanosleep},
    {"sh-poll", park_poll},           {"sh-epoll", park_epoll},
    {"sh-select", park_select},       {"sh-mutex", park_mutex},
    {"sh-cond", park_cond},           {"sh-read", park_read},
    {"sh-accept", park_accept},       {"sh-waitpid", park_waitpid},
    {"sh-sigwait", park_sigwait},     {"sh-recurse", recurse500},
    {"sh-inline", park_inline},       {"sh-catch", park_catch},
    {"sh-dtor", park_dtor},           {"sh-busy", spin_here},
};
enum { N = sizeof shapes / sizeof shapes[0] };

extern "C" NOINLINE void *thread_main(void *arg) {
    const shape *s = static_cast<const shape *>(arg);
    pthread_setname_np(pthread_self(), s->name);
    s->fn(); /* marker: thread_main */
    KEEP();
    return nullptr;
}

/* Rounds the text exporter wrote so far ($STACKSHOT_OUTPUT_DIR/<name>.<pid>.txt). */
static int rounds_written() {
    const char *dir = getenv("STACKSHOT_OUTPUT_DIR");
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".%d.txt", (int)getpid());
    DIR *d = opendir(dir ? dir : ".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != nullptr;) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        if (len <= sl || strcmp(e->d_name + len - sl, suffix) != 0)
            continue;
        char path[4096], line[512];
        snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f))
            n += strncmp(line, "Full thread dump", 16) == 0;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

/* Until the agent wrote `rounds` more rounds, at most a minute. */
extern "C" NOINLINE void main_wait(int rounds) {
    rounds += rounds_written();
    for (int i = 0; i < 600 && rounds_written() < rounds; i++) {
        struct timespec ts = {0, 100000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) /* marker: main */
            ;
    }
    KEEP();
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (pipe(pipe_fd) != 0)
        return 1;
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(listen_fd, 1) != 0)
        return 1;
    /* a child to wait for, without the agent (its environment has no
     * LD_PRELOAD) */
    char *cargv[] = {(char *)"sleep", (char *)"600", nullptr};
    char *cenv[] = {nullptr};
    if (posix_spawnp(&child, "sleep", nullptr, nullptr, cargv, cenv) != 0)
        return 1;
    pthread_mutex_lock(&held);
    pthread_t th[N];
    for (int i = 0; i < N; i++)
        pthread_create(&th[i], nullptr, thread_main, const_cast<shape *>(&shapes[i]));
    while (ready.load() < N) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, nullptr);
    }
    struct timespec settle = {0, 200000000}; /* from arrive() into the call */
    nanosleep(&settle, nullptr);
    printf("shapes: ready pid %d\n", (int)getpid());
    fflush(stdout);
    main_wait(rounds);
    done.store(true);
    pthread_mutex_unlock(&held);
    pthread_mutex_lock(&cond_lock);
    pthread_cond_broadcast(&never);
    pthread_mutex_unlock(&cond_lock);
    if (write(pipe_fd[1], "xxxxxxxxxxxxxxxx", 16) < 0)
        return 1;
    kill(child, SIGTERM);
    for (int i = 0; i < N; i++)
        if (strcmp(shapes[i].name, "sh-sigwait") == 0)
            pthread_kill(th[i], SIGUSR1);
    shutdown(listen_fd, SHUT_RDWR);
    /* sleepers of 30 s are woken by nothing: exit without joining them
     * (exit() still runs the agent's destructor, which flushes) */
    printf("shapes: done\n");
    fflush(stdout);
    exit(0);
}
