/* http_client.c: the HTTP client of http_client.h over libcurl's multi
 * interface. This file is the only one that includes curl.
 *
 * A client is one easy handle inside its own multi handle, whose connection
 * cache holds one connection: between calls the connection stays open and
 * the next call to the same origin reuses it. A call adds the easy handle
 * to the multi handle and drives it with curl_multi_perform and
 * curl_multi_wait, never waiting past the call's deadline; another thread
 * interrupts the wait through a pipe of ours (the kick). A call cut short
 * removes the handle mid-transfer, which makes libcurl close that
 * connection.
 *
 * Why not curl_multi_poll and curl_multi_wakeup: curl_multi_poll reads
 * libcurl's own wakeup pair whenever the wait sees it readable, with no
 * check of ours in between. A host that closed every descriptor while the
 * wait ran (up to POLL_SLICE_MS) and reopened the pair's number as a
 * socket of its own had bytes taken from that socket
 * (descriptors_otlp_http_between, once under load). curl_multi_wait never
 * touches the pair; the kick is checked as ours before each wait and
 * before it is read or written.
 *
 * Descriptors the host may take back. The multi handle keeps descriptors
 * across calls: its wakeup pair (libcurl's socketpair or pipe, made by
 * curl_multi_init, now never read or written, closed by
 * curl_multi_cleanup), the kick and the kept
 * connection. A host that closes every descriptor >= 3 and opens its own
 * files or sockets gets those numbers back, and libcurl would read from
 * them, write requests (or a TLS close_notify) into them and close them.
 * So: the connection sockets are opened and closed by our callbacks
 * (CURLOPT_OPENSOCKETFUNCTION, _CLOSESOCKETFUNCTION), each remembered
 * with its identity (ss_kept_fd) and closed only while still ours; the
 * wakeup pair is found as the descriptors curl_multi_init opened; and all
 * of them are checked before every call and while it runs. When one is
 * found taken over, the whole multi handle (with its connection and its
 * wakeup pair) and the easy handle are abandoned, never cleaned up (that
 * would close, and with TLS write to, the host's numbers), and fresh ones
 * made: the call fails as on a reset connection and its data is counted
 * by the caller like any failed export. An abandoned pair costs some
 * memory (tens of KiB, more with TLS), so at most SS_HTTP_ABANDON_MAX are
 * abandoned over the process's life; then the client refuses calls. */
#include "agent/module_abi.h"
#include "exporters/common/http_client.h"
#include "exporters/common/http_redact.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CONNECT_MS 10000u
#define POLL_SLICE_MS 1000 /* a poll without deadline still wakes this often */

#define WAKE_FDS 4    /* libcurl's wakeup: a socketpair, a pipe or an eventfd */
#define KEPT_SOCKS 8  /* connection sockets open at once: one kept, a few connecting */
#define SS_HTTP_ABANDON_MAX 64

struct ss_http_client {
    CURLM *multi;
    CURL *easy;
    pthread_mutex_t wake_mu;       /* the multi and its wakeup pair vs a cancel */
    ss_kept_fd wake[WAKE_FDS];     /* the multi's wakeup descriptors */
    ss_kept_fd kick[2];            /* our wakeup pipe: [0] waited on by a call, [1] written by a cancel */
    ss_kept_fd socks[KEPT_SOCKS];  /* sockets our callback opened, not closed yet */
    bool lost;                     /* a socket was found taken over (by a callback) */
    bool refused;                  /* too many abandoned: no more calls */
    _Atomic bool cancelled;
    bool insecure;
    char *ca_file, *cert_file, *key_file;
    char errbuf[CURL_ERROR_SIZE];
};

/* What one call's callbacks share. */
typedef struct call {
    const ss_http_request *req;
    ss_http_response *resp;
    size_t body_off;     /* in-memory body: bytes handed to libcurl */
    bool headers_done;   /* the last response's header block ended */
    int64_t streamed;    /* streamed body: bytes read from body_fn */
    int body_err;        /* body_fn's -errno */
} call;

/* ---- libcurl's global state: once per process, never undone ------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void) {
    /* OpenSSL cleans itself up in an atexit handler, and those run before
     * the destructors of shared libraries: before the agent's own (the
     * core's destructor flushes the exporters at exit), and while an
     * exporter thread may still be inside a handshake. Asked first, it
     * registers none (when the host initialised it before us, this is a
     * no-op and its cleanup stays as it was). Memory it holds at exit is
     * the process's to give back. */
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
    /* Not undone at exit: the host may use libcurl too, and cleanup would
     * pull OpenSSL from under it. A forked child inherits the result. */
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- client --------------------------------------------------------------- */

static char *dup_or_null(const char *s, bool *failed) {
    if (!s || !*s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *failed = true;
    return d;
}

/* ---- descriptors the host may take back --------------------------------- */

static _Atomic uint64_t abandoned; /* multi handles abandoned, all clients */
/* kept reachable: left alone on purpose, not leaked */
static CURLM *_Atomic abandoned_multi[SS_HTTP_ABANDON_MAX];
static CURL *_Atomic abandoned_easy[SS_HTTP_ABANDON_MAX];

struct dirent64_rec {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* A descriptor open now, as /proc/self/fd names it ("socket:[1234]",
 * "pipe:[99]", "anon_inode:[eventfd]"): read with readlink, without
 * touching the descriptor itself, which another thread may be opening or
 * closing this instant. */
typedef struct open_fd {
    int fd;
    uint64_t link_hash;
} open_fd;

static uint64_t hash_str(const char *p, size_t n) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a (a module: not agent/hmap.h) */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* The descriptors open now that are not files or directories (sockets,
 * pipes, anonymous inodes: what libcurl's wakeup may be); how many. The
 * listing's own descriptor is closed only while still ours (no closedir:
 * the host may close everything between our open and close). */
static int open_descriptors(open_fd *out, int max) {
    ss_kept_fd dir;
    if (ss_kept_fd_adopt(&dir, open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) != 0)
        return 0;
    int n = 0;
    char buf[4096];
    long got;
    while (n < max && ss_kept_fd_get(&dir) >= 0 &&
           (got = syscall(SYS_getdents64, dir.fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < got && n < max;) {
            const struct dirent64_rec *e = (const struct dirent64_rec *)(buf + off);
            off += e->d_reclen;
            char *end, path[64], link[256];
            long fd = strtol(e->d_name, &end, 10);
            if (*end || end == e->d_name || fd < 3 || fd == dir.fd)
                continue;
            snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
            ssize_t len = readlink(path, link, sizeof link);
            if (len <= 0 || link[0] == '/')
                continue; /* gone, or a file or directory */
            out[n++] = (open_fd){(int)fd, hash_str(link, (size_t)len)};
        }
    }
    ss_kept_fd_close(&dir);
    return n;
}

/* The kick: a pipe of ours, high in the table (kept_fd.h). A pipe, not an
 * eventfd: every eventfd has the same inode, so a host's eventfd at the
 * same number would pass for ours. Without one (no descriptor left), a
 * call waits with curl_multi_poll as before and a cancel is noticed within
 * POLL_SLICE_MS. */
static void kick_new(ss_http_client *c) {
    int p[2];
    c->kick[0].fd = c->kick[1].fd = -1;
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        return;
    if (ss_kept_fd_adopt(&c->kick[0], ss_fd_move_high(p[0])) != 0) {
        close(p[1]);
        return;
    }
    /* both ends or neither: a call waiting on a kick that a cancel cannot
     * write would notice the cancel only within POLL_SLICE_MS */
    if (ss_kept_fd_adopt(&c->kick[1], ss_fd_move_high(p[1])) != 0)
        ss_kept_fd_close(&c->kick[0]);
}

static void kick_close(ss_http_client *c) {
    for (int i = 0; i < 2; i++)
        if (c->kick[i].fd >= 0)
            ss_kept_fd_close(&c->kick[i]); /* only while still ours */
}

/* curl_multi_init, and the descriptors it opened (its wakeup pair):
 * those open after it that were not before (by number and name: a number
 * the host closed and libcurl got is new too), kept with their identity.
 * A host thread opening a socket at the same instant may be taken for
 * one: then it is only ever checked, never used or closed by us. */
static CURLM *multi_new(ss_http_client *c) {
    enum { MAX_SEEN = 4096 }; /* a host with more open leaves the wakeup pair unchecked */
    open_fd *before = malloc(2 * MAX_SEEN * sizeof *before);
    open_fd *after = before ? before + MAX_SEEN : NULL;
    int nb = before ? open_descriptors(before, MAX_SEEN) : 0;
    CURLM *m = curl_multi_init();
    int na = before && m ? open_descriptors(after, MAX_SEEN) : 0;
    int w = 0;
    for (int i = 0; i < WAKE_FDS; i++)
        c->wake[i].fd = -1;
    for (int i = 0; i < na && w < WAKE_FDS; i++) {
        bool old = false;
        for (int j = 0; j < nb && !old; j++)
            old = before[j].fd == after[i].fd && before[j].link_hash == after[i].link_hash;
        struct stat st;
        if (!old && fstat(after[i].fd, &st) == 0)
            c->wake[w++] = (ss_kept_fd){after[i].fd, st.st_dev, st.st_ino};
    }
    free(before);
    kick_new(c);
    return m;
}

static void multi_setup(CURLM *m) {
    /* one connection kept, one per origin at a time */
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, 1L);
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
}

/* CURLOPT_OPENSOCKETFUNCTION: the socket, remembered with its identity. */
static curl_socket_t on_open_socket(void *arg, curlsocktype purpose,
                                    struct curl_sockaddr *addr) {
    ss_http_client *c = arg;
    (void)purpose;
    int slot = -1;
    for (int i = 0; i < KEPT_SOCKS && slot < 0; i++)
        if (c->socks[i].fd < 0)
            slot = i;
    if (slot < 0)
        return CURL_SOCKET_BAD; /* never more than a few: refused, the call fails */
    int fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    if (fd < 0 || ss_kept_fd_adopt(&c->socks[slot], fd) != 0)
        return CURL_SOCKET_BAD;
    return fd;
}

/* CURLOPT_CLOSESOCKETFUNCTION: closed only while it is still ours. */
static int on_close_socket(void *arg, curl_socket_t fd) {
    ss_http_client *c = arg;
    for (int i = 0; i < KEPT_SOCKS; i++)
        if (c->socks[i].fd == fd) {
            if (!ss_kept_fd_is_ours(&c->socks[i]))
                c->lost = true;
            ss_kept_fd_close(&c->socks[i]);
            return 0;
        }
    return 0; /* not one of ours (cannot happen): never close a stranger */
}

/* Whether every descriptor the multi handle keeps is still ours. */
/* Whether each of the n kept descriptors in use is still ours. */
static bool all_ours(const ss_kept_fd *k, int n) {
    for (int i = 0; i < n; i++)
        if (k[i].fd >= 0 && !ss_kept_fd_is_ours(&k[i]))
            return false;
    return true;
}

static bool descriptors_ours(ss_http_client *c) {
    return !c->lost && all_ours(c->wake, WAKE_FDS) && all_ours(c->kick, 2) &&
           all_ours(c->socks, KEPT_SOCKS);
}

/* Leave the multi and easy handles as they are, for ever (cleaning them
 * up would close, and with TLS write to, numbers that are the host's
 * now): kept reachable, forgotten by c. How many were left so far. */
static uint64_t leave(ss_http_client *c) {
    uint64_t n = atomic_fetch_add(&abandoned, 1) + 1;
    if (n <= SS_HTTP_ABANDON_MAX) {
        atomic_store(&abandoned_multi[n - 1], c->multi);
        atomic_store(&abandoned_easy[n - 1], c->easy);
    }
    for (int i = 0; i < WAKE_FDS; i++)
        ss_kept_fd_forget(&c->wake[i]);
    kick_close(c);
    for (int i = 0; i < KEPT_SOCKS; i++)
        ss_kept_fd_forget(&c->socks[i]);
    c->lost = false;
    c->multi = NULL;
    c->easy = NULL;
    return n;
}

/* The handles left (leave), and fresh ones made. 0, or -EMFILE when too
 * many were left already, or -ENOMEM. */
static int abandon(ss_http_client *c) {
    pthread_mutex_lock(&c->wake_mu);
    uint64_t n = leave(c);
    int rc = 0;
    if (n > SS_HTTP_ABANDON_MAX) {
        c->refused = true;
        rc = -EMFILE;
    } else {
        c->multi = multi_new(c);
        c->easy = curl_easy_init();
        if (c->multi)
            multi_setup(c->multi);
        if (!c->multi || !c->easy)
            rc = -ENOMEM;
    }
    pthread_mutex_unlock(&c->wake_mu);
    ss_log(n == 1 ? SS_LOG_WARN : SS_LOG_DEBUG,
           "http: the host closed descriptors of an HTTP connection (their numbers may name "
           "files of the host's now: not touched); connecting afresh (%llu times so far, "
           "at most %d)",
           (unsigned long long)n, SS_HTTP_ABANDON_MAX);
    if (n == SS_HTTP_ABANDON_MAX + 1)
        ss_error("http: the host took the agent's HTTP descriptors over %d times; this "
                 "exporter's HTTP calls stop (each would fail)",
                 SS_HTTP_ABANDON_MAX);
    return rc;
}

ss_http_client *ss_http_client_new(const ss_http_tls *tls) {
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return NULL;
    ss_http_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->wake_mu, NULL);
    for (int i = 0; i < KEPT_SOCKS; i++)
        c->socks[i].fd = -1;
    c->kick[0].fd = c->kick[1].fd = -1;
    bool failed = false;
    if (tls) {
        c->insecure = tls->insecure;
        c->ca_file = dup_or_null(tls->ca_file, &failed);
        c->cert_file = dup_or_null(tls->cert_file, &failed);
        c->key_file = dup_or_null(tls->key_file, &failed);
    }
    c->multi = multi_new(c);
    c->easy = curl_easy_init();
    if (failed || !c->multi || !c->easy) {
        ss_http_client_free(c);
        return NULL;
    }
    multi_setup(c->multi);
    return c;
}

void ss_http_client_free(ss_http_client *c) {
    if (!c)
        return;
    if (c->multi && !descriptors_ours(c))
        leave(c); /* cleanup would close the host's numbers: left as they are */
    if (c->easy)
        curl_easy_cleanup(c->easy);
    if (c->multi)
        curl_multi_cleanup(c->multi); /* closes the kept connection (on_close_socket) */
    kick_close(c);
    pthread_mutex_destroy(&c->wake_mu);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
}

void ss_http_client_cancel(ss_http_client *c) {
    atomic_store(&c->cancelled, true);
    /* a byte on the kick, unless the host took it over (or there is none:
     * the call waits in curl_multi_poll, woken by libcurl's own pair while
     * that is ours); else the call notices the cancel within
     * POLL_SLICE_MS */
    pthread_mutex_lock(&c->wake_mu);
    if (c->multi && c->kick[1].fd >= 0) {
        if (ss_kept_fd_is_ours(&c->kick[1])) {
            char b = 1;
            ssize_t w = write(c->kick[1].fd, &b, 1); /* full: a wakeup is pending anyway */
            (void)w;
        }
    } else if (c->multi && all_ours(c->wake, WAKE_FDS)) {
        curl_multi_wakeup(c->multi);
    }
    pthread_mutex_unlock(&c->wake_mu);
}

void ss_http_client_uncancel(ss_http_client *c) { atomic_store(&c->cancelled, false); }

/* ---- callbacks ------------------------------------------------------------ */

static size_t on_body_read(char *buf, size_t size, size_t nitems, void *arg) {
    call *k = arg;
    const ss_http_request *req = k->req;
    size_t room = size * nitems;
    if (req->body || !req->body_fn) {
        size_t left = req->body ? req->body_len - k->body_off : 0; /* no body: empty */
        size_t n = left < room ? left : room;
        if (n)
            memcpy(buf, (const char *)req->body + k->body_off, n);
        k->body_off += n;
        return n;
    }
    if (req->body_size >= 0) {
        /* never more than announced: libcurl would send it as garbage */
        int64_t left = req->body_size - k->streamed;
        if ((int64_t)room > left)
            room = (size_t)left;
        if (room == 0)
            return 0;
    }
    ssize_t n = req->body_fn(req->body_arg, buf, room);
    if (n < 0) {
        k->body_err = (int)n;
        return CURL_READFUNC_ABORT;
    }
    if ((size_t)n > room)
        n = (ssize_t)room;
    k->streamed += n;
    return (size_t)n;
}

/* Rewinding: an in-memory body can start again (a reused connection found
 * closed, or an authentication round); a streamed one cannot. */
static int on_body_seek(void *arg, curl_off_t offset, int origin) {
    call *k = arg;
    const ss_http_request *req = k->req;
    if (!(req->body || !req->body_fn) || origin != SEEK_SET || offset < 0 ||
        (uint64_t)offset > req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    k->body_off = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static size_t on_response_body(char *data, size_t size, size_t nmemb, void *arg) {
    call *k = arg;
    size_t n = size * nmemb;
    ss_buf *b = &k->resp->body;
    if (b->len < k->req->max_response) {
        size_t keep = k->req->max_response - b->len;
        if (keep > n)
            keep = n;
        ss_buf_append(b, data, keep); /* on failure b->failed says so */
    }
    return n; /* the rest is read and discarded, so the connection stays usable */
}

/* Retry-After: delta seconds, or an HTTP date (RFC 9110 §10.2.3). */
static int64_t parse_retry_after(const char *v, size_t len) {
    char s[128];
    while (len && (*v == ' ' || *v == '\t'))
        v++, len--;
    while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    if (len == 0 || len >= sizeof s)
        return -1;
    memcpy(s, v, len);
    s[len] = '\0';
    if (strspn(s, "0123456789") == len) {
        if (len > 9)
            return (int64_t)999999999 * 1000; /* ~31 years: "never" for any caller */
        return (int64_t)strtoll(s, NULL, 10) * 1000;
    }
    time_t when = curl_getdate(s, NULL);
    if (when == (time_t)-1)
        return -1;
    int64_t ms = ((int64_t)when - (int64_t)time(NULL)) * 1000;
    return ms < 0 ? 0 : ms;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *arg) {
    call *k = arg;
    size_t n = size * nitems;
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        k->resp->retry_after_ms = -1; /* a new response (after a 1xx) */
        k->headers_done = false;
    } else if ((n == 2 && data[0] == '\r' && data[1] == '\n') || (n == 1 && data[0] == '\n')) {
        k->headers_done = true;
    } else if (n > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        k->resp->retry_after_ms = parse_retry_after(data + 12, n - 12);
    }
    return n;
}

/* ---- one call ------------------------------------------------------------- */

/* The caller's headers, plus "Expect:" (no 100-continue round trip: it
 * costs a second against a server that ignores it) and, for a streamed
 * body of unknown length sent by POST, the chunked transfer coding. */
static struct curl_slist *build_headers(const ss_http_request *req, bool chunked, int *err) {
    struct curl_slist *list = NULL, *next;
    bool has_expect = false;
    for (const char *const *h = req->headers; h && *h; h++) {
        if (strncasecmp(*h, "Expect:", 7) == 0)
            has_expect = true;
        if (!(next = curl_slist_append(list, *h)))
            goto oom;
        list = next;
    }
    if (!has_expect) {
        if (!(next = curl_slist_append(list, "Expect:")))
            goto oom;
        list = next;
    }
    if (chunked) {
        if (!(next = curl_slist_append(list, "Transfer-Encoding: chunked")))
            goto oom;
        list = next;
    }
    return list;
oom:
    curl_slist_free_all(list);
    *err = -ENOMEM;
    return NULL;
}

static void set_tls(ss_http_client *c) {
    CURL *e = c->easy;
    curl_easy_setopt(e, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
    if (c->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file);
    if (c->cert_file) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert_file);
        curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (c->key_file) {
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->key_file);
        curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
}

/* Set the easy handle up for req. 0 or -errno. */
static int setup(ss_http_client *c, const ss_http_request *req, call *k,
                 struct curl_slist **headers) {
    CURL *e = c->easy;
    curl_easy_reset(e); /* options only: the connection cache is the multi's */
    c->errbuf[0] = '\0';
    bool streamed = !req->body && req->body_fn;
    int64_t size = streamed ? req->body_size : req->body ? (int64_t)req->body_len : 0;
    bool chunked = streamed && req->body_size < 0;
    bool is_get = strcmp(req->method, "GET") == 0;
    bool is_post = strcmp(req->method, "POST") == 0;
    int err = 0;
    *headers = build_headers(req, chunked && is_post, &err);
    if (err)
        return err;

    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, req->url);
    if (rc != CURLE_OK)
        return rc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM, no process-wide SIGPIPE change */
#if LIBCURL_VERSION_NUM >= 0x075700
    curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L); /* a cut call never joins a resolver thread */
#endif
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* no proxy from the environment */
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_USERAGENT, SS_NAME "/" SS_VERSION);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(req->connect_timeout_ms ? req->connect_timeout_ms : DEFAULT_CONNECT_MS));
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, k);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_response_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, k);
    /* every connection socket ours to check, and closed only while ours */
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
    set_tls(c);

    if (is_get) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        return 0;
    }
    curl_easy_setopt(e, CURLOPT_READFUNCTION, on_body_read);
    curl_easy_setopt(e, CURLOPT_READDATA, k);
    curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_body_seek);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, k);
    if (is_post) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(chunked ? -1 : size));
        /* An in-memory body as POSTFIELDS (not copied: it outlives the
         * call): libcurl then writes a small one (< 64 KiB) with the
         * headers in one send(). Through the read callback the headers go
         * alone first, and a relay that waits to coalesce (Nagle's
         * algorithm: many proxies, node's sockets by default) holds the
         * body back until the next hop's delayed ACK, about 40 ms: a cap
         * of ~25 calls a second for a sender that makes one call at a
         * time, below the traces a JVM's 40 threads give it. */
        if (req->body)
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body_len ? req->body : "");
    } else {
        /* PUT and anything else with a body: an upload, chunked on HTTP/1.1
         * when the size is unknown */
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)(chunked ? -1 : size));
        if (strcmp(req->method, "PUT") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    }
    return 0;
}

/* libcurl's result as the errno the API promises. */
static int map_error(ss_http_client *c, CURLcode rc, const call *k) {
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_COULDNT_CONNECT: {
        long os = 0;
        curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &os);
        return os > 0 ? -(int)os : -ECONNREFUSED;
    }
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
        return -EPROTO;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SEND_FAIL_REWIND:
        return -ECONNRESET;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
        return -EBADMSG;
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_READ_ERROR:
        return k->body_err ? k->body_err : -EIO;
    case CURLE_UNSUPPORTED_PROTOCOL: {
        /* also what an answer that is not HTTP at all gives ("HTTP/0.9") */
        char *ip = NULL;
        curl_easy_getinfo(c->easy, CURLINFO_PRIMARY_IP, &ip);
        return ip && *ip ? -EBADMSG : -EINVAL;
    }
    case CURLE_URL_MALFORMAT:
    case CURLE_BAD_FUNCTION_ARGUMENT:
        return -EINVAL;
    default:
        return -EIO;
    }
}

/* Scrubbed before it is cut to size: a secret cut in half would not be
 * found any more. */
static void set_error(ss_http_response *resp, const ss_http_request *req, const char *fmt,
                      const char *what) {
    char full[CURL_ERROR_SIZE + 256];
    snprintf(full, sizeof full, fmt, what);
    full[strcspn(full, "\r\n")] = '\0';
    ss_http_scrub(full, sizeof full, req->url, req->headers);
    size_t n = strlen(full);
    if (n >= sizeof resp->error)
        n = sizeof resp->error - 1;
    memcpy(resp->error, full, n);
    resp->error[n] = '\0';
}

/* The phrase for a failed call: libcurl's detailed message when it has
 * one (it names the host, the TLS problem, the system error), else its
 * generic words for the code. */
static void describe(ss_http_client *c, CURLcode rc, int err, const call *k,
                     ss_http_response *resp) {
    if (k->body_err) {
        set_error(resp, k->req, "the body could not be read: %s", strerror(-k->body_err));
        return;
    }
    if (rc == CURLE_READ_ERROR && err == -EIO) {
        set_error(resp, k->req, "%s", "the streamed body ended before its announced size");
        return;
    }
    set_error(resp, k->req, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
}

/* Drive the transfer until it is done, the deadline or a cancel. Returns
 * 0 with *done set to libcurl's result, or -ETIMEDOUT / -ECANCELED /
 * -ENOMEM (the multi handle failed) / -EBADF (the host took one of its
 * descriptors over: the handles must be abandoned, not touched). */
static int drive(ss_http_client *c, uint64_t deadline_ns, CURLcode *done) {
    for (;;) {
        if (atomic_load(&c->cancelled))
            return -ECANCELED;
        if (!descriptors_ours(c)) /* before libcurl reads, writes or closes them */
            return -EBADF;
        int running = 0;
        CURLMcode mc = curl_multi_perform(c->multi, &running);
        if (mc != CURLM_OK)
            return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        int left;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(c->multi, &left)) != NULL) {
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == c->easy) {
                *done = msg->data.result;
                return 0;
            }
        }
        int timeout_ms = POLL_SLICE_MS;
        if (deadline_ns) {
            uint64_t now = ss_mono_ns();
            if (now >= deadline_ns)
                return -ETIMEDOUT;
            uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
            if (left_ms < (uint64_t)timeout_ms)
                timeout_ms = (int)left_ms;
        }
        /* returns early on socket activity, libcurl's own timers and the
         * kick (a cancel); checked ours just before (descriptors_ours) */
        if (c->kick[0].fd >= 0) {
            struct curl_waitfd kick = {.fd = c->kick[0].fd, .events = CURL_WAIT_POLLIN};
            mc = curl_multi_wait(c->multi, &kick, 1, timeout_ms, NULL);
            if (mc == CURLM_OK && (kick.revents & CURL_WAIT_POLLIN) &&
                ss_kept_fd_is_ours(&c->kick[0])) {
                char buf[64];
                while (read(c->kick[0].fd, buf, sizeof buf) > 0)
                    ;
            }
        } else {
            mc = curl_multi_poll(c->multi, NULL, 0, timeout_ms, NULL);
        }
        if (mc != CURLM_OK)
            return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
}

int ss_http_perform(ss_http_client *c, const ss_http_request *req, ss_http_response *resp) {
    memset(resp, 0, sizeof *resp);
    resp->retry_after_ms = -1;
    ss_buf_init(&resp->body);
    if (!req->method || !req->url) {
        snprintf(resp->error, sizeof resp->error, "no method or URL");
        return -EINVAL;
    }
    if (atomic_load(&c->cancelled)) {
        snprintf(resp->error, sizeof resp->error, "cancelled");
        return -ECANCELED;
    }
    if (req->deadline_ns && ss_mono_ns() >= req->deadline_ns) {
        snprintf(resp->error, sizeof resp->error, "deadline passed before the call");
        return -ETIMEDOUT;
    }
    /* the kept connection or the wakeup pair taken over by the host since
     * the last call: fresh handles, and this call goes on with them */
    int lost_rc = c->refused ? -EMFILE : !descriptors_ours(c) ? abandon(c) : 0;
    if (lost_rc) {
        snprintf(resp->error, sizeof resp->error,
                 "the host took the agent's HTTP descriptors over too often; calls stopped");
        return lost_rc;
    }
    call k = {.req = req, .resp = resp};
    struct curl_slist *headers = NULL;
    int err = setup(c, req, &k, &headers);
    if (err) {
        curl_slist_free_all(headers);
        set_error(resp, req, "%s", err == -ENOMEM ? "out of memory" : "malformed URL");
        return err;
    }
    CURLMcode mc = curl_multi_add_handle(c->multi, c->easy);
    if (mc != CURLM_OK) {
        curl_slist_free_all(headers);
        snprintf(resp->error, sizeof resp->error, "%s", curl_multi_strerror(mc));
        return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    CURLcode rc = CURLE_OK;
    err = drive(c, req->deadline_ns, &rc);
    if (err == 0 && rc == CURLE_OK && !k.headers_done) {
        /* libcurl takes a status line followed by the end of the
         * connection for a whole answer; the headers were cut short, and
         * nothing says the server finished with the request */
        err = -ECONNRESET;
        snprintf(resp->error, sizeof resp->error,
                 "the connection closed in the middle of the answer's headers");
    } else if (err == 0 && rc == CURLE_OK) {
        long status = 0;
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        resp->status = (int)status;
    } else if (err == 0) {
        err = map_error(c, rc, &k);
        describe(c, rc, err, &k, resp);
    } else if (err == -ETIMEDOUT) {
        snprintf(resp->error, sizeof resp->error, "no answer before the deadline");
    } else if (err == -ECANCELED) {
        snprintf(resp->error, sizeof resp->error, "cancelled");
    } else if (err == -EBADF) {
        snprintf(resp->error, sizeof resp->error,
                 "the host closed the connection's descriptor during the call");
        err = -ECONNRESET; /* as a connection reset: the caller retries or counts it */
        curl_slist_free_all(headers); /* the abandoned handle never reads it again */
        abandon(c);
        resp->status = 0;
        return err;
    } else {
        snprintf(resp->error, sizeof resp->error, "libcurl's multi interface failed");
    }
    /* mid-transfer (cut, cancelled) this closes the connection */
    curl_multi_remove_handle(c->multi, c->easy);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(headers);
    if (resp->body.failed && err == 0) {
        snprintf(resp->error, sizeof resp->error, "out of memory for the answer's body");
        err = -ENOMEM;
    }
    if (err != 0)
        resp->status = 0;
    return err;
}
