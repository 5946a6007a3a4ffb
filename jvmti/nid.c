/* nid.c: kernel tids of Java threads the agent did not see start.
 *
 * ThreadStart runs on the new thread and records its tid directly. Threads
 * that existed before the agent's events were on (JVM system threads
 * started before VMInit, every thread on late attach) need another way.
 * HotSpot names each Java thread's native thread after the Java name, cut
 * to the kernel's 15 bytes (os::set_native_thread_name), so the thread's
 * name is matched against /proc/self/task/<tid>/comm. The launcher's main
 * thread keeps the name "java". When several tids carry the same name
 * ("pool-1-thread-1" cut to "pool-1-thread-1" for 10 pools, ...) the one
 * whose CPU clock is nearest the thread's JVMTI CPU time wins: both read
 * the same per-thread clock (CLOCK_THREAD_CPUTIME of that tid), so a
 * sleeping thread matches exactly and a running one within the time
 * between the two reads. What stays unknown (nid=0): a thread renamed
 * from another thread after it started (HotSpot renames the native thread
 * only when a thread renames itself), and ties between idle threads with
 * equal names and equal CPU times, which are left unassigned rather than
 * guessed. */
#include "jvmti_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct task {
    pid_t tid;
    char comm[16];
} task;

struct ss_nid_matcher {
    task *tasks;
    uint32_t n, cap;
    pid_t *taken;
    uint32_t n_taken, cap_taken;
    bool scanned;
};

ss_nid_matcher *ss_nid_matcher_create(void) { return calloc(1, sizeof(ss_nid_matcher)); }

void ss_nid_matcher_destroy(ss_nid_matcher *m) {
    if (!m)
        return;
    free(m->tasks);
    free(m->taken);
    free(m);
}

void ss_nid_matcher_begin(ss_nid_matcher *m) {
    m->scanned = false;
    m->n = 0;
    m->n_taken = 0;
}

void ss_nid_matcher_take(ss_nid_matcher *m, pid_t tid) {
    if (m->n_taken == m->cap_taken) {
        uint32_t cap = m->cap_taken ? m->cap_taken * 2 : 256;
        pid_t *p = realloc(m->taken, cap * sizeof *p);
        if (!p)
            return;
        m->taken = p;
        m->cap_taken = cap;
    }
    m->taken[m->n_taken++] = tid;
}

static bool is_taken(const ss_nid_matcher *m, pid_t tid) {
    for (uint32_t i = 0; i < m->n_taken; i++)
        if (m->taken[i] == tid)
            return true;
    return false;
}

static ssize_t read_small(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t r = read(fd, buf, n - 1);
    close(fd);
    if (r < 0)
        return -1;
    buf[r] = '\0';
    return r;
}

static void scan(ss_nid_matcher *m) {
    m->scanned = true;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0)
            continue;
        if (m->n == m->cap) {
            uint32_t cap = m->cap ? m->cap * 2 : 256;
            task *t = realloc(m->tasks, cap * sizeof *t);
            if (!t)
                break;
            m->tasks = t;
            m->cap = cap;
        }
        char path[64], comm[32];
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
        ssize_t r = read_small(path, comm, sizeof comm);
        if (r <= 0)
            continue;
        if (comm[r - 1] == '\n')
            comm[r - 1] = '\0';
        task *t = &m->tasks[m->n++];
        t->tid = tid;
        size_t len = strnlen(comm, sizeof t->comm - 1);
        memcpy(t->comm, comm, len);
        t->comm[len] = '\0';
    }
    closedir(d);
}

static uint64_t tid_cpu_ns(pid_t tid) {
    /* the kernel's per-thread CPU clock of any thread of this process:
     * MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) */
    clockid_t clk = (clockid_t)((~(unsigned)tid << 3) | 6);
    struct timespec ts;
    if (clock_gettime(clk, &ts) != 0)
        return SS_UNKNOWN_U64;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool name_matches(const char *comm, const char *name) {
    if (strncmp(comm, name, 15) == 0 && (strlen(name) >= 15 || strcmp(comm, name) == 0))
        return true;
    return strcmp(name, "main") == 0 && strcmp(comm, "java") == 0;
}

pid_t ss_nid_match(ss_nid_matcher *m, const char *name, uint64_t cpu_ns) {
    if (!m)
        return 0;
    if (!m->scanned)
        scan(m);
    pid_t best = 0;
    uint64_t best_diff = UINT64_MAX;
    int n_best = 0, n_cand = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        const task *t = &m->tasks[i];
        if (!name_matches(t->comm, name) || is_taken(m, t->tid))
            continue;
        n_cand++;
        uint64_t c = cpu_ns == SS_UNKNOWN_U64 ? SS_UNKNOWN_U64 : tid_cpu_ns(t->tid);
        uint64_t diff = c == SS_UNKNOWN_U64 ? UINT64_MAX - 1
                                            : (c > cpu_ns ? c - cpu_ns : cpu_ns - c);
        if (diff < best_diff) {
            best_diff = diff;
            best = t->tid;
            n_best = 1;
        } else if (diff == best_diff) {
            n_best++;
        }
    }
    if (n_cand == 0 || n_best != 1)
        return 0;
    ss_nid_matcher_take(m, best);
    return best;
}

uint64_t ss_task_start_wall_ms(pid_t tid) {
    static long hz;
    if (!hz)
        hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    if (read_small(path, buf, sizeof buf) <= 0)
        return 0;
    /* the name field may hold spaces and parentheses: fields count from
     * the last ')'; starttime is field 22, the 20th after it */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22 && p; field++) /* p: space before `field` */
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    unsigned long long ticks = strtoull(p + 1, NULL, 10);
    struct timespec boot;
    clock_gettime(CLOCK_BOOTTIME, &boot);
    uint64_t boot_ms = (uint64_t)boot.tv_sec * 1000ull + (uint64_t)boot.tv_nsec / 1000000ull;
    uint64_t start_ms = (uint64_t)ticks * 1000ull / (uint64_t)hz;
    uint64_t now_ms = ss_wall_ns() / 1000000ull;
    if (start_ms > boot_ms)
        return now_ms;
    return now_ms - (boot_ms - start_ms);
}

/* ---- start times, cached ------------------------------------------- */

/* Reading /proc/self/task/<tid>/stat for every thread of every round would
 * cost a file open per thread (measured: the larger part of a round's
 * per-thread cost). A thread's start time never changes, so it is cached
 * under (tid, Java thread id): Java ids are never reused in a JVM's life,
 * so a recycled tid can not pick up a dead thread's start time. The cache
 * is emptied when full. */
#define START_CACHE 4096 /* slots; emptied at half full */

typedef struct start_entry {
    int64_t java_id; /* 0: free */
    pid_t tid;
    uint64_t start_ms;
} start_entry;

static start_entry start_cache[START_CACHE];
static uint32_t start_used;

uint64_t ss_thread_start_wall_ms(pid_t tid, int64_t java_id) {
    if (java_id <= 0)
        return ss_task_start_wall_ms(tid);
    uint32_t h = (uint32_t)(((uint64_t)java_id * 0x9E3779B97F4A7C15ull) >> 40) ^ (uint32_t)tid;
    for (uint32_t i = h % START_CACHE;; i = (i + 1) % START_CACHE) {
        start_entry *e = &start_cache[i];
        if (e->java_id == java_id && e->tid == tid)
            return e->start_ms;
        if (e->java_id == 0) {
            uint64_t ms = ss_task_start_wall_ms(tid);
            if (ms == 0)
                return 0;
            if (start_used >= START_CACHE / 2) {
                memset(start_cache, 0, sizeof start_cache);
                start_used = 0;
                return ms;
            }
            e->java_id = java_id;
            e->tid = tid;
            e->start_ms = ms;
            start_used++;
            return ms;
        }
    }
}
