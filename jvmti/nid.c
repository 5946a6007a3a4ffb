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
#include "agent/grow.h"
#include "agent/round.h"
#include "jvmti/jvmti_internal.h"
#include "proc/threads.h"

#include <stdlib.h>
#include <string.h>

typedef struct task {
    pid_t tid;
    char comm[16];
} task;

struct ss_nid_matcher {
    task *tasks;
    uint32_t n, cap;
    pid_t *taken;
    uint32_t n_taken, cap_taken;
    pid_t *tids;
    size_t cap_tids;
    bool scanned;
};

ss_nid_matcher *ss_nid_matcher_create(void) { return calloc(1, sizeof(ss_nid_matcher)); }

void ss_nid_matcher_destroy(ss_nid_matcher *m) {
    if (!m)
        return;
    free(m->tasks);
    free(m->taken);
    free(m->tids);
    free(m);
}

void ss_nid_matcher_begin(ss_nid_matcher *m) {
    m->scanned = false;
    m->n = 0;
    m->n_taken = 0;
}

void ss_nid_matcher_take(ss_nid_matcher *m, pid_t tid) {
    if (ss_grow32((void **)&m->taken, &m->cap_taken, m->n_taken + 1, sizeof *m->taken, 256) != 0)
        return;
    m->taken[m->n_taken++] = tid;
}

static bool is_taken(const ss_nid_matcher *m, pid_t tid) {
    for (uint32_t i = 0; i < m->n_taken; i++)
        if (m->taken[i] == tid)
            return true;
    return false;
}

/* The threads of the process and their names, with the samplers' /proc
 * helpers (samplers/ss_samplers.h). */
static void scan(ss_nid_matcher *m) {
    m->scanned = true;
    int n = ss_proc_list_tids(&m->tids, &m->cap_tids);
    if (n < 0)
        return;
    if ((uint32_t)n > m->cap) {
        task *t = realloc(m->tasks, (size_t)n * sizeof *t);
        if (!t)
            return;
        m->tasks = t;
        m->cap = (uint32_t)n;
    }
    for (int i = 0; i < n; i++) {
        char comm[32];
        if (ss_proc_read_comm(m->tids[i], comm, sizeof comm) != 0)
            continue;
        task *t = &m->tasks[m->n++];
        t->tid = m->tids[i];
        size_t len = strnlen(comm, sizeof t->comm - 1);
        memcpy(t->comm, comm, len);
        t->comm[len] = '\0';
    }
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
        uint64_t c = cpu_ns == SS_UNKNOWN_U64 ? SS_UNKNOWN_U64 : ss_thread_cpu_ns(t->tid);
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

uint64_t ss_task_start_wall_ms(pid_t tid) { return ss_proc_start_wall_ms(tid); }

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
