/* heap.c: heap dumps in NC_DIAGNOSTIC_LOGS_FOLDER, zipped and uploaded as
 * diagtools' scan does (specs/qubership-dumps.md §1.5, §2.1, §3.3, §4).
 *
 * Each scan:
 *   1. every finished "*.hprof" (not written to for SETTLE seconds, or
 *      known complete: the JVM said so) is zipped to "<ts>.hprof.zip", ts
 *      being the UTC time in its name ("20260807T090659.hprof") or else
 *      now ("java_pid123.hprof", the name an OutOfMemoryError gives), the
 *      entry keeping the dump's own name; the .hprof is then deleted;
 *   2. every "*.hprof.zip" is PUT, chunked, and deleted after a 2xx only.
 *      The first failure ends the scan and starts a backoff: the next
 *      scan waits the scan interval times 2, 4, ... up to 32, and a
 *      success resets it. A dump is never dropped: it waits on disk (for
 *      this process, or the next agent or diagtools that scans the folder).
 * One line per dump when it is zipped and when it is uploaded; a failing
 * upload is told the first time and then every tenth time, and the exit
 * line counts the dumps still waiting.
 *
 * The folder may be shared with diagtools (or another agent): a scan runs
 * only while it holds diagtools' lock file (.diagnostic.exclusivelock in
 * NC_DIAGNOSTIC_FOLDER, else in the logs folder), taken without waiting. */
#include "agent/config.h"
#include "agent/log.h"
#include "agent/time.h"
#include "exporters/qubership/dumps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SETTLE_S 5          /* a dump untouched this long is complete */
#define MAX_BACKOFF 32
#define MAX_NAMES 64

struct qb_heap {
    uint32_t backoff;       /* 0: none; else the multiplier of the scan interval */
    uint64_t not_before_ns; /* no upload before this (monotonic) */
    uint32_t fails;         /* failed attempts in a row */
    char complete[8][256];  /* dumps the JVM reported written */
    uint32_t n_complete;
};

qb_heap *qb_heap_create(void) { return calloc(1, sizeof(qb_heap)); }

void qb_heap_destroy(qb_heap *h) { free(h); }

void qb_heap_complete(qb_heap *h, const char *name) {
    snprintf(h->complete[h->n_complete % 8], sizeof h->complete[0], "%s", name);
    h->n_complete++;
}

static bool known_complete(const qb_heap *h, const char *name) {
    for (uint32_t i = 0; i < 8 && i < h->n_complete; i++)
        if (strcmp(h->complete[i], name) == 0)
            return true;
    return false;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "<digits>T<digits>.hprof": the timestamp part, as diagtools' pattern
 * ([0-9]+T[0-9]+).hprof$ finds it (at the end of the name). */
static bool stamped(const char *name, char *ts, size_t n) {
    size_t len = strlen(name) - strlen(".hprof");
    size_t i = len;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == len || i == 0 || name[i - 1] != 'T')
        return false;
    size_t t = i - 1, j = t;
    while (j > 0 && name[j - 1] >= '0' && name[j - 1] <= '9')
        j--;
    if (j == t)
        return false;
    snprintf(ts, n, "%.*s", (int)(len - j), name + j);
    return true;
}

static int lock_folder(const qb_diag_cfg *cfg) {
    const char *diag = ss_config_str("NC_DIAGNOSTIC_FOLDER", "");
    char path[1200];
    snprintf(path, sizeof path, "%s/.diagnostic.exclusivelock", *diag ? diag : cfg->logs_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* A zip left half-written by an agent that died ("x.hprof.zip.tmp<pid>"). */
static void remove_stale_tmp(const char *dir, const char *name) {
    const char *t = strstr(name, ".hprof.zip.tmp");
    if (!t)
        return;
    pid_t pid = (pid_t)atoi(t + strlen(".hprof.zip.tmp"));
    if (pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH))
        return;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void zip_one(qb_heap *h, const qb_heap_env *env, const char *name) {
    const char *dir = env->cfg->logs_dir;
    char src[1400], dst[1400], ts[64], zname[300];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    struct stat st;
    if (lstat(src, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    if (!known_complete(h, name) && time(NULL) - st.st_mtime < SETTLE_S)
        return; /* the JVM may still be writing it: next time */
    time_t now = time(NULL);
    if (stamped(name, ts, sizeof ts)) {
        snprintf(zname, sizeof zname, "%s.hprof.zip", ts);
    } else {
        /* diagtools names it after the time it zips it; one name per second */
        for (int k = 0;; k++) {
            qb_dump_name(now + k, ".hprof.zip", zname, sizeof zname);
            snprintf(dst, sizeof dst, "%s/%s", dir, zname);
            if (access(dst, F_OK) != 0 || k == 60)
                break;
        }
    }
    snprintf(dst, sizeof dst, "%s/%s", dir, zname);
    uint64_t in = 0, out = 0;
    atomic_fetch_add(&env->ust->heap_found, 1);
    int rc = qb_zip_file(src, name, dst, env->cfg->zip_level, env->stop, &in, &out);
    if (rc == -ECANCELED) {
        atomic_fetch_sub(&env->ust->heap_found, 1); /* found again next time */
        return;
    }
    if (rc != 0) {
        ss_warn("qubership_dumps: heap dump %s: cannot zip it to %s: %s; it stays there",
                src, zname, strerror(-rc));
        return;
    }
    unlink(src);
    ss_info("qubership_dumps: heap dump %s (%.1f MB) zipped to %s (%.1f MB); uploading it",
            src, (double)in / 1e6, zname, (double)out / 1e6);
}

/* 0 uploaded, 1 failed (the scan stops there). */
static int upload_one(qb_heap *h, const qb_heap_env *env, const char *name) {
    char path[1400], why[200] = "";
    snprintf(path, sizeof path, "%s/%s", env->cfg->logs_dir, name);
    int status = env->put_file(env->arg, path, name, why, sizeof why);
    if (status == 200 || status == 201 || status == 204) {
        unlink(path);
        atomic_fetch_add(&env->ust->heap_sent, 1);
        ss_info("qubership_dumps: heap dump %s uploaded (HTTP %d)%s", name, status,
                h->fails ? " after failed attempts" : "");
        h->fails = 0;
        h->backoff = 0;
        return 0;
    }
    if (status == -ECANCELED)
        return 1; /* shutting down: it stays for the next scan */
    atomic_fetch_add(&env->ust->heap_failed, 1);
    h->backoff = h->backoff ? (h->backoff * 2 > MAX_BACKOFF ? MAX_BACKOFF : h->backoff * 2) : 2;
    uint64_t wait_ms = env->cfg->scan_ms * h->backoff;
    h->not_before_ns = ss_mono_ns() + wait_ms * 1000000ull;
    if (h->fails++ % 10 == 0) {
        if (status > 0)
            snprintf(why, sizeof why, "HTTP %d", status);
        ss_warn("qubership_dumps: heap dump %s: upload failed (%s); it stays in %s, next "
                "attempt in %llu s",
                name, why, env->cfg->logs_dir, (unsigned long long)wait_ms / 1000);
    }
    return 1;
}

typedef struct names {
    char v[MAX_NAMES][256];
    int n;
} names;

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

static void list_dir(const char *dir, names *hprof, names *zips) {
    hprof->n = zips->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= 256)
            continue;
        remove_stale_tmp(dir, e->d_name);
        if (ends_with(e->d_name, ".hprof") && hprof->n < MAX_NAMES)
            snprintf(hprof->v[hprof->n++], 256, "%s", e->d_name);
        else if (ends_with(e->d_name, ".hprof.zip") && zips->n < MAX_NAMES)
            snprintf(zips->v[zips->n++], 256, "%s", e->d_name);
    }
    closedir(d);
    qsort(hprof->v, (size_t)hprof->n, 256, by_name);
    qsort(zips->v, (size_t)zips->n, 256, by_name);
}

void qb_heap_scan(qb_heap *h, const qb_heap_env *env) {
    int lock = lock_folder(env->cfg);
    if (lock < 0)
        return; /* diagtools (or another agent) scans it now */
    names *hprof = malloc(sizeof *hprof), *zips = malloc(sizeof *zips);
    if (hprof && zips) {
        list_dir(env->cfg->logs_dir, hprof, zips);
        for (int i = 0; i < hprof->n && !atomic_load(env->stop); i++)
            zip_one(h, env, hprof->v[i]);
        if (ss_mono_ns() >= h->not_before_ns) {
            list_dir(env->cfg->logs_dir, hprof, zips);
            for (int i = 0; i < zips->n && !atomic_load(env->stop); i++)
                if (upload_one(h, env, zips->v[i]) != 0)
                    break;
        }
    }
    free(hprof);
    free(zips);
    close(lock);
}

uint32_t qb_heap_pending(qb_heap *h, const qb_heap_env *env) {
    (void)h;
    names *hprof = malloc(sizeof *hprof), *zips = malloc(sizeof *zips);
    uint32_t n = 0;
    if (hprof && zips) {
        list_dir(env->cfg->logs_dir, hprof, zips);
        n = (uint32_t)(hprof->n + zips->n);
    }
    free(hprof);
    free(zips);
    return n;
}
