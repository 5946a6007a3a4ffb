/* upload.c: the dumps exporter's uploader thread ("stackshot-qbup").
 *
 * Uploads can take long (a heap zip of gigabytes, a slow collector, the
 * five minutes of DIAGNOSTIC_UPLOAD_TIMEOUT), so they run here and not on
 * the exporter thread, which must keep taking rounds: its queue would
 * otherwise fill and push other exporters' rounds out of the shared memory
 * budget. The exporter hands over finished texts (a td or top dump, with
 * the command that asked for it, if any) and asks for heap scans; this
 * thread PUTs them with the shared HTTP client (exporters/common), one at
 * a time, each within the upload timeout, and marks the commands done.
 *
 * Nothing waits behind a stale dump: a periodic td (or top) still waiting
 * when the next one comes is replaced by it and counted as dropped (the
 * collector would not index a late one anyway, spec §2.4). A failed td or
 * top is not retried (diagtools does not either); heap dumps stay on disk
 * until an upload succeeds (heap.c). At stop the call in flight is
 * cancelled and what still waits is counted as dropped, in one line. The
 * thread starts with the first dump (a process that lives less than one
 * interval has none) and runs at nice +10: zipping a heap dump is
 * background work. Its creator, the exporter thread, waits (1 s at most)
 * until it is named and niced: a thread starts with its creator's name and
 * nice, and a top dump made meanwhile would list it as a second
 * "stackshot-qbd" at nice 0 (one such top, made right after the first td,
 * once differed from a real top taken a moment later). */
#include "agent/buf.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "exporters/qubership/dumps.h"

#include "exporters/common/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct text_job {
    struct text_job *next;
    int kind;          /* QB_CMD_TD or QB_CMD_TOP */
    ss_buf body;
    time_t made;
    bool has_cmd;
    uint8_t cmd[16];
} text_job;

struct qb_uploader {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t made_cv; /* monotonic: `made` was set */
    bool made;              /* the thread is named and niced (under mu) */
    _Atomic bool stop;
    qb_diag_cfg cfg;
    char pod[400];
    qb_upload_stats ust_own;
    qb_upload_stats *ust;  /* &ust_own */
    ss_http_client *client; /* made and freed on the thread; cancelled under mu */
    ss_http_tls tls;
    char ca[1100], cert[1100], key[1100];
    text_job *head;
    size_t charged;
    bool scan_wanted;
    bool heap_wanted;
    uint8_t heap_cmd[16];
    uint64_t exhausted_seen;
    uint32_t text_fails;
    qb_heap *heap;
    bool started; /* the thread runs (started with the first work) */
};

static const char *kind_suffix(int kind) { return kind == QB_CMD_TD ? ".td.txt" : ".top.txt"; }
static const char *kind_name(int kind) { return kind == QB_CMD_TD ? "thread dump" : "top dump"; }

static void count(qb_uploader *u, int kind, int what) {
    /* what: 0 taken, 1 sent, 2 failed, 3 dropped */
    _Atomic uint64_t *td[] = {&u->ust->td_taken, &u->ust->td_sent, &u->ust->td_failed,
                              &u->ust->td_dropped};
    _Atomic uint64_t *top[] = {&u->ust->top_taken, &u->ust->top_sent, &u->ust->top_failed,
                               &u->ust->top_dropped};
    atomic_fetch_add(kind == QB_CMD_TD ? td[what] : top[what], 1);
}

static void free_job(qb_uploader *u, text_job *j) {
    ss_mem_release(j->body.cap);
    u->charged -= j->body.cap;
    ss_buf_free(&j->body);
    free(j);
}

/* ---- HTTP ---------------------------------------------------------- */

static ss_http_client *client(qb_uploader *u) {
    if (!u->client) {
        ss_http_client *c = ss_http_client_new(u->cfg.tls ? &u->tls : NULL);
        pthread_mutex_lock(&u->mu);
        u->client = c;
        if (c && atomic_load(&u->stop))
            ss_http_client_cancel(c);
        pthread_mutex_unlock(&u->mu);
    }
    return u->client;
}

typedef struct file_body {
    int fd;
} file_body;

static ssize_t read_body(void *arg, void *buf, size_t n) {
    file_body *f = arg;
    for (;;) {
        ssize_t r = read(f->fd, buf, n);
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : r;
    }
}

/* PUT to the URL of `name` (the directory time is now). The HTTP status,
 * or -errno with `why` filled. */
static int put(qb_uploader *u, const char *name, const void *body, size_t len, int fd,
               char *why, size_t why_n) {
    ss_http_client *c = client(u);
    if (!c) {
        snprintf(why, why_n, "no HTTP client (libcurl unusable or out of memory)");
        return -ENOMEM;
    }
    char url[2048];
    qb_diag_url(u->cfg.base, u->cfg.ns, time(NULL), u->pod, name, url, sizeof url);
    static const char *const headers[] = {"Content-Type: application/octet-stream", NULL};
    file_body fb = {fd};
    ss_http_request req = {
        .method = "PUT",
        .url = url,
        .headers = headers,
        .body = fd >= 0 ? NULL : body,
        .body_len = len,
        .body_fn = fd >= 0 ? read_body : NULL,
        .body_arg = &fb,
        .body_size = -1, /* a file goes chunked, as diagtools sends it */
        .deadline_ns = ss_mono_ns() + u->cfg.upload_ms * 1000000ull,
        .max_response = 1024,
    };
    ss_http_response resp;
    int rc = ss_http_perform(c, &req, &resp);
    int status = rc == 0 ? resp.status : rc;
    if (rc != 0)
        snprintf(why, why_n, "%s", resp.error[0] ? resp.error : strerror(-rc));
    else
        snprintf(why, why_n, "HTTP %d", resp.status);
    ss_buf_free(&resp.body);
    if (rc == 0)
        atomic_fetch_add(&u->ust->bytes, len);
    return status;
}

static int put_file(void *arg, const char *path, const char *name, char *why, size_t n) {
    qb_uploader *u = arg;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return -errno;
    }
    int status = put(u, name, NULL, 0, fd, why, n);
    struct stat st;
    if (fstat(fd, &st) == 0 && status > 0)
        atomic_fetch_add(&u->ust->bytes, (uint64_t)st.st_size);
    close(fd);
    return status;
}

static void send_text(qb_uploader *u, text_job *j) {
    char name[64], why[200];
    qb_dump_name(j->made, kind_suffix(j->kind), name, sizeof name);
    int status = put(u, name, j->body.data, j->body.len, -1, why, sizeof why);
    bool ok = status == 200 || status == 201 || status == 204;
    if (ok) {
        count(u, j->kind, 1);
        ss_debug("qubership_dumps: %s %s uploaded (%s)", kind_name(j->kind), name, why);
    } else if (status == -ECANCELED) {
        count(u, j->kind, 3);
    } else {
        count(u, j->kind, 2);
        if (u->text_fails++ % 10 == 0) /* the first, then one in ten */
            ss_warn("qubership_dumps: %s %s not uploaded to %s (%s); dropped (%u failed so far)",
                    kind_name(j->kind), name, u->cfg.base, why, u->text_fails);
    }
    if (ok && u->text_fails) {
        ss_info("qubership_dumps: uploading to %s again", u->cfg.base);
        u->text_fails = 0;
    }
    if (j->has_cmd)
        qb_commands_done(j->cmd, ok);
}

/* ---- heap dumps ---------------------------------------------------- */

static void scan(qb_uploader *u) {
    const ss_jvm_services *jvm = ss_process()->jvm;
    if (jvm && jvm->exhausted) {
        uint64_t n = jvm->exhausted();
        if (n != u->exhausted_seen) {
            /* HotSpot has written the OutOfMemoryError's dump by now */
            char name[64];
            snprintf(name, sizeof name, "java_pid%d.hprof", (int)getpid());
            qb_heap_complete(u->heap, name);
            u->exhausted_seen = n;
        }
    }
    qb_heap_env env = {.cfg = &u->cfg, .pod = u->pod, .stop = &u->stop, .ust = u->ust,
                       .put_file = put_file, .arg = u};
    qb_heap_scan(u->heap, &env);
}

static void heap_dump(qb_uploader *u, const uint8_t cmd[16]) {
    const ss_jvm_services *jvm = ss_process()->jvm;
    char name[64], path[1200], why[256] = "not a JVM";
    qb_dump_name(time(NULL), ".hprof", name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", u->cfg.logs_dir, name);
    int rc = -ENOTSUP;
    if (jvm && jvm->dump_heap) {
        mkdir(u->cfg.logs_dir, 0700);
        rc = jvm->dump_heap(path, why, sizeof why);
    }
    if (rc == 0) {
        ss_info("qubership_dumps: heap dump %s written on the collector's request", path);
        qb_heap_complete(u->heap, name);
        u->scan_wanted = true;
    } else {
        ss_warn("qubership_dumps: the collector asked for a heap dump: %s", why);
    }
    qb_commands_done(cmd, rc == 0);
}

/* ---- the thread ---------------------------------------------------- */

static void *uploader_main(void *arg) {
    qb_uploader *u = arg;
    setpriority(PRIO_PROCESS, (id_t)ss_gettid(), 10);
    pthread_mutex_lock(&u->mu); /* named already: the trampoline did it */
    u->made = true;
    pthread_cond_signal(&u->made_cv);
    pthread_mutex_unlock(&u->mu);
    for (;;) {
        pthread_mutex_lock(&u->mu);
        while (!atomic_load(&u->stop) && !u->head && !u->scan_wanted && !u->heap_wanted)
            pthread_cond_wait(&u->cv, &u->mu);
        if (atomic_load(&u->stop)) {
            pthread_mutex_unlock(&u->mu);
            break;
        }
        text_job *j = u->head;
        if (j)
            u->head = j->next;
        bool heap = u->heap_wanted, do_scan = !j && !heap && u->scan_wanted;
        uint8_t cmd[16];
        memcpy(cmd, u->heap_cmd, 16);
        if (heap && !j)
            u->heap_wanted = false;
        if (do_scan)
            u->scan_wanted = false;
        pthread_mutex_unlock(&u->mu);
        if (j) {
            send_text(u, j);
            pthread_mutex_lock(&u->mu);
            free_job(u, j);
            pthread_mutex_unlock(&u->mu);
        } else if (heap) {
            heap_dump(u, cmd);
        } else if (do_scan) {
            scan(u);
        }
    }
    pthread_mutex_lock(&u->mu);
    ss_http_client *c = u->client;
    u->client = NULL;
    pthread_mutex_unlock(&u->mu);
    ss_http_client_free(c);
    return NULL;
}

static void tls_files(qb_uploader *u) {
    /* diagtools: TLS_CERT_DIR holds ca.crt (trusted roots) and tls.crt /
     * tls.key (a client certificate); otherwise the system's roots */
    if (!u->cfg.cert_dir[0])
        return;
    snprintf(u->ca, sizeof u->ca, "%s/ca.crt", u->cfg.cert_dir);
    snprintf(u->cert, sizeof u->cert, "%s/tls.crt", u->cfg.cert_dir);
    snprintf(u->key, sizeof u->key, "%s/tls.key", u->cfg.cert_dir);
    if (access(u->ca, R_OK) == 0)
        u->tls.ca_file = u->ca;
    if (access(u->cert, R_OK) == 0 && access(u->key, R_OK) == 0) {
        u->tls.cert_file = u->cert;
        u->tls.key_file = u->key;
    }
}

qb_uploader *qb_uploader_start(const qb_diag_cfg *cfg, const char *pod) {
    qb_uploader *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->cfg = *cfg;
    snprintf(u->pod, sizeof u->pod, "%s", pod);
    u->ust = &u->ust_own;
    tls_files(u);
    const ss_jvm_services *jvm = ss_process()->jvm;
    u->exhausted_seen = jvm && jvm->exhausted ? jvm->exhausted() : 0;
    u->heap = qb_heap_create();
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    ss_cond_init_mono(&u->made_cv);
    if (!u->heap) {
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->cv);
        pthread_cond_destroy(&u->made_cv);
        free(u);
        return NULL;
    }
    return u;
}

/* The thread starts with the first work (a process that lives less than
 * one dump interval never starts it). Exporter thread only: it waits until
 * the new thread has its name and nice, so that no later top dump of this
 * thread (the next interval's, or a collector's top command right after a
 * td command) shows it half-made; the periodic top of the same tick is
 * made before the td (dumps_exporter.c). The wait is bounded (a loaded
 * machine, or the trampoline's wait_after under an RLIMIT_AS, may hold a
 * new thread back) and holds no host thread. */
#define MADE_WAIT_NS 1000000000ull

static bool started(qb_uploader *u) {
    if (u->started)
        return true;
    if (ss_thread_start(&u->thread, "qbup", uploader_main, u) != 0)
        return false;
    u->started = true;
    uint64_t deadline = ss_mono_ns() + MADE_WAIT_NS;
    pthread_mutex_lock(&u->mu);
    while (!u->made && ss_cond_wait_until(&u->made_cv, &u->mu, deadline) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&u->mu);
    return true;
}

void qb_uploader_text(qb_uploader *u, int kind, ss_buf *body, time_t made,
                      const uint8_t *cmd_id) {
    text_job *j = calloc(1, sizeof *j);
    count(u, kind, 0);
    if (!j || body->failed || !started(u)) {
        count(u, kind, 3);
        if (cmd_id)
            qb_commands_done(cmd_id, false);
        free(j);
        ss_buf_reset(body);
        return;
    }
    j->kind = kind;
    j->body = *body;
    ss_buf_init(body);
    j->made = made;
    if (cmd_id) {
        j->has_cmd = true;
        memcpy(j->cmd, cmd_id, 16);
    }
    pthread_mutex_lock(&u->mu);
    ss_mem_charge(j->body.cap);
    u->charged += j->body.cap;
    /* a periodic dump of this kind still waiting is replaced */
    text_job **pp = &u->head;
    while (*pp) {
        text_job *w = *pp;
        if (!cmd_id && !w->has_cmd && w->kind == kind) {
            *pp = w->next;
            count(u, kind, 3);
            free_job(u, w);
            continue;
        }
        pp = &w->next;
    }
    *pp = j;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

void qb_uploader_scan(qb_uploader *u) {
    if (!started(u))
        return; /* the next scan tries again */
    pthread_mutex_lock(&u->mu);
    u->scan_wanted = true;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

void qb_uploader_heap_dump(qb_uploader *u, const uint8_t cmd_id[16]) {
    if (!started(u)) {
        qb_commands_done(cmd_id, false);
        return;
    }
    pthread_mutex_lock(&u->mu);
    if (u->heap_wanted) /* one at a time: the earlier request fails */
        qb_commands_done(u->heap_cmd, false);
    u->heap_wanted = true;
    memcpy(u->heap_cmd, cmd_id, 16);
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

static void copy_stats(const qb_upload_stats *from, qb_upload_stats *to) {
    _Atomic uint64_t *f = (_Atomic uint64_t *)from, *t = (_Atomic uint64_t *)to;
    for (size_t i = 0; i < sizeof *from / sizeof *f; i++)
        atomic_store(&t[i], atomic_load(&f[i]));
}

void qb_uploader_stats(qb_uploader *u, qb_upload_stats *out) { copy_stats(u->ust, out); }

void qb_uploader_stop(qb_uploader *u, uint64_t deadline_ns, qb_upload_stats *last) {
    pthread_mutex_lock(&u->mu);
    atomic_store(&u->stop, true);
    if (u->client)
        ss_http_client_cancel(u->client);
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
    if (u->started && ss_thread_join(u->thread, deadline_ns) != 0) {
        copy_stats(u->ust, last);
        ss_warn("qubership_dumps: the uploader did not stop in time (a heap dump being "
                "written?); left running detached");
        return; /* its memory stays with it */
    }
    unsigned dropped = 0;
    while (u->head) {
        text_job *j = u->head;
        u->head = j->next;
        count(u, j->kind, 3);
        if (j->has_cmd)
            qb_commands_done(j->cmd, false);
        free_job(u, j);
        dropped++;
    }
    if (u->heap_wanted)
        qb_commands_done(u->heap_cmd, false);
    if (dropped)
        ss_warn("qubership_dumps: %u dumps not uploaded before the exit (dropped)", dropped);
    qb_heap_env env = {.cfg = &u->cfg, .stop = &u->stop, .ust = u->ust};
    uint32_t waiting = ss_process()->jvm ? qb_heap_pending(u->heap, &env) : 0;
    if (waiting)
        ss_info("qubership_dumps: %u heap dumps wait in %s for the next upload", waiting,
                u->cfg.logs_dir);
    copy_stats(u->ust, last);
    qb_heap_destroy(u->heap);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    pthread_cond_destroy(&u->made_cv);
    free(u);
}
