/* test_http_client.c: the shared HTTP client (exporters/common/
 * http_client.h) against a real local server (tests/http/http_server.py:
 * plain HTTP, HTTPS with a CA made by openssl at test time, HTTPS that
 * requires a client certificate). The server reports, for every request,
 * which connection carried it and how many requests that connection had
 * carried, so keep-alive is checked where it happens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_in (glibc's lacks it) */

#include "agent/buf.h"
#include "agent/time.h"
#include "exporters/common/http_client.h"
#include "exporters/common/http_redact.h"

extern char **environ;

static char dir[256];
static pid_t server_pid;
static int port_plain, port_tls, port_mtls;
static char ca_file[512], client_crt[512], client_key[512];

/* ---- the server ------------------------------------------------------- */

static bool read_ready(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/ready", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[600];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *v = strchr(line, '=');
        if (!v)
            continue;
        *v++ = '\0';
        if (!strcmp(line, "plain"))
            port_plain = atoi(v);
        else if (!strcmp(line, "tls"))
            port_tls = atoi(v);
        else if (!strcmp(line, "mtls"))
            port_mtls = atoi(v);
        else if (!strcmp(line, "ca.crt"))
            snprintf(ca_file, sizeof ca_file, "%s", v);
        else if (!strcmp(line, "client.crt"))
            snprintf(client_crt, sizeof client_crt, "%s", v);
        else if (!strcmp(line, "client.key"))
            snprintf(client_key, sizeof client_key, "%s", v);
    }
    fclose(f);
    return port_plain && port_tls && port_mtls;
}

static int start_server(void **state) {
    (void)state;
    /* the client runs on agent threads, which block every signal */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    snprintf(dir, sizeof dir, "/tmp/ss-http-test-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char *argv[] = {"/usr/bin/python3", HTTP_SERVER_PY, "--dir", dir, NULL};
    if (posix_spawn(&server_pid, argv[0], NULL, NULL, argv, environ) != 0)
        return -1;
    for (int i = 0; i < 400; i++) { /* 20 s: the certificates are made first */
        if (read_ready())
            return 0;
        usleep(50000);
    }
    fprintf(stderr, "test server did not start\n");
    return -1;
}

static int stop_server(void **state) {
    (void)state;
    if (server_pid > 0) {
        kill(server_pid, SIGTERM);
        waitpid(server_pid, NULL, 0);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ------------------------------------------------------------ */

static void url(char *out, size_t n, const char *scheme, int port, const char *path) {
    snprintf(out, n, "%s://127.0.0.1:%d%s", scheme, port, path);
}

/* The integer after "\"key\": " in a JSON answer, or -1. */
static long json_int(const ss_buf *b, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = b->data ? strstr(b->data, pat) : NULL;
    return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

static bool json_has(const ss_buf *b, const char *text) {
    return b->data && strstr(b->data, text) != NULL;
}

static int post(ss_http_client *c, const char *method, const char *u, const void *body,
                size_t len, ss_http_response *r) {
    const char *headers[] = {"Content-Type: application/octet-stream", "X-Test: 1", NULL};
    ss_http_request req = {.method = method, .url = u, .headers = headers, .body = body,
                           .body_len = len, .deadline_ns = ss_mono_ns() + 10000000000ull,
                           .max_response = 65536};
    return ss_http_perform(c, &req, r);
}

/* A deterministic body: byte i is (i * 31 + 7) & 0xff. */
static void fill(uint8_t *p, size_t n, size_t from) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(((from + i) * 31 + 7) & 0xff);
}

typedef struct stream {
    size_t total, off, piece;
    int fail_at_errno;
} stream;

static ssize_t stream_fn(void *arg, void *buf, size_t n) {
    stream *s = arg;
    if (s->fail_at_errno && s->off > s->total / 2)
        return -s->fail_at_errno;
    size_t left = s->total - s->off;
    if (n > left)
        n = left;
    if (n > s->piece)
        n = s->piece;
    fill(buf, n, s->off);
    s->off += n;
    return (ssize_t)n;
}

/* sha256 of the deterministic body, by the sha256sum tool (no crypto
 * library in the test). */
static void body_sha(size_t n, char out[65]) {
    char path[300];
    snprintf(path, sizeof path, "%s/body.bin", dir);
    FILE *f = fopen(path, "wb");
    uint8_t buf[4096];
    for (size_t off = 0; off < n; off += sizeof buf) {
        size_t k = n - off < sizeof buf ? n - off : sizeof buf;
        fill(buf, k, off);
        fwrite(buf, 1, k, f);
    }
    fclose(f);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(out, 65, p));
    out[64] = '\0';
    pclose(p);
}

/* ---- tests -------------------------------------------------------------- */

/* POST and PUT with bodies in memory, four requests on one connection. */
static void test_keepalive_post_put(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    assert_non_null(c);
    char u[128];
    url(u, sizeof u, "http", port_plain, "/echo");
    long conn = -1;
    const char *methods[] = {"POST", "PUT", "POST", "PUT"};
    for (int i = 0; i < 4; i++) {
        ss_http_response r;
        char body[32];
        int n = snprintf(body, sizeof body, "hello %d", i);
        assert_int_equal(post(c, methods[i], u, body, (size_t)n, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.retry_after_ms, -1);
        char m[64];
        snprintf(m, sizeof m, "\"method\": \"%s\"", methods[i]);
        assert_true(json_has(&r.body, m));
        assert_int_equal(json_int(&r.body, "len"), n);
        assert_true(json_has(&r.body, "\"chunked\": false"));
        assert_true(json_has(&r.body, "\"X-Test\": \"1\""));
        assert_false(json_has(&r.body, "\"Expect\""));
        if (i == 0)
            conn = json_int(&r.body, "conn");
        /* the same connection, its (i+1)th request */
        assert_int_equal(json_int(&r.body, "conn"), conn);
        assert_int_equal(json_int(&r.body, "nth"), i + 1);
        ss_buf_free(&r.body);
    }
    ss_http_client_free(c);
}

/* A streamed body of known length goes with Content-Length; one of
 * unknown length (body_size -1) with the chunked coding, by POST and PUT. */
static void test_streamed_bodies(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    url(u, sizeof u, "http", port_plain, "/echo");
    char sha[65];
    size_t total = 300007;
    body_sha(total, sha);
    const char *methods[] = {"POST", "PUT"};
    for (int chunked = 0; chunked < 2; chunked++) {
        for (int m = 0; m < 2; m++) {
            stream s = {.total = total, .piece = 1000 + 7 * (size_t)m};
            ss_http_request req = {.method = methods[m], .url = u, .body_fn = stream_fn,
                                   .body_arg = &s, .body_size = chunked ? -1 : (int64_t)total,
                                   .deadline_ns = ss_mono_ns() + 10000000000ull,
                                   .max_response = 65536};
            ss_http_response r;
            assert_int_equal(ss_http_perform(c, &req, &r), 0);
            assert_int_equal(r.status, 200);
            assert_int_equal(json_int(&r.body, "len"), (long)total);
            assert_true(json_has(&r.body, sha));
            assert_true(json_has(&r.body, chunked ? "\"chunked\": true" : "\"chunked\": false"));
            ss_buf_free(&r.body);
        }
    }
    ss_http_client_free(c);
}

/* A body_fn error ends the call with that error; the client goes on. */
static void test_stream_error(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    url(u, sizeof u, "http", port_plain, "/echo");
    stream s = {.total = 100000, .piece = 1000, .fail_at_errno = ENOSPC};
    ss_http_request req = {.method = "PUT", .url = u, .body_fn = stream_fn, .body_arg = &s,
                           .body_size = 100000, .deadline_ns = ss_mono_ns() + 5000000000ull};
    ss_http_response r;
    assert_int_equal(ss_http_perform(c, &req, &r), -ENOSPC);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.error, "body"));
    ss_buf_free(&r.body);
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 200);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* Retry-After as delta seconds and as an HTTP date; absent is -1. */
static void test_retry_after(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    ss_http_response r;
    url(u, sizeof u, "http", port_plain, "/status/429?ra=7");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 429);
    assert_int_equal(r.retry_after_ms, 7000);
    assert_string_equal(r.body.data, "status");
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/status/503?ra=date30");
    assert_int_equal(post(c, "PUT", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 503);
    assert_in_range(r.retry_after_ms, 28000, 31000);
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/status/503?ra=soon");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.retry_after_ms, -1); /* not a number, not a date */
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/status/500");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 500);
    assert_int_equal(r.retry_after_ms, -1);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* A server that reads the request and never answers: the call ends at its
 * deadline, and the client works again afterwards on a new connection. */
static void test_deadline_silent(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    url(u, sizeof u, "http", port_plain, "/silent");
    uint64_t t0 = ss_mono_ns();
    ss_http_request req = {.method = "POST", .url = u, .body = "x", .body_len = 1,
                           .deadline_ns = t0 + 300000000ull};
    ss_http_response r;
    assert_int_equal(ss_http_perform(c, &req, &r), -ETIMEDOUT);
    uint64_t took = ss_mono_ns() - t0;
    assert_in_range(took, 290000000ull, 1500000000ull);
    assert_int_equal(r.status, 0);
    assert_true(r.error[0] != '\0');
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/echo");
    assert_int_equal(post(c, "POST", u, "y", 1, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_int(&r.body, "nth"), 1); /* a new connection */
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

typedef struct canceller {
    ss_http_client *c;
    uint64_t at;
} canceller;

static void *cancel_main(void *arg) {
    canceller *k = arg;
    usleep(200000);
    k->at = ss_mono_ns();
    ss_http_client_cancel(k->c);
    return NULL;
}

/* Cancel from another thread: the call without deadline returns at once;
 * the cancel sticks until uncancelled. */
static void test_cancel_from_thread(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    url(u, sizeof u, "http", port_plain, "/silent");
    canceller k = {.c = c};
    pthread_t t;
    pthread_create(&t, NULL, cancel_main, &k);
    ss_http_request req = {.method = "POST", .url = u, .body = "x", .body_len = 1};
    ss_http_response r;
    assert_int_equal(ss_http_perform(c, &req, &r), -ECANCELED);
    uint64_t back = ss_mono_ns();
    pthread_join(t, NULL);
    assert_true(back >= k.at);
    assert_true(back - k.at < 100000000ull); /* promptly: within 100 ms of the cancel */
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/echo");
    assert_int_equal(post(c, "POST", u, "y", 1, &r), -ECANCELED);
    ss_buf_free(&r.body);
    ss_http_client_uncancel(c);
    assert_int_equal(post(c, "POST", u, "y", 1, &r), 0);
    assert_int_equal(r.status, 200);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* The descriptors open now (below 512, where libcurl's land; the
 * client's own pipe is moved higher): a bitmap. */
static void open_fds(unsigned char open_now[512]) {
    memset(open_now, 0, 512);
    for (int fd = 3; fd < 512; fd++)
        open_now[fd] = fcntl(fd, F_GETFD) != -1;
}

typedef struct silent_call {
    ss_http_client *c;
    int rc;
} silent_call;

static void *silent_call_main(void *arg) {
    silent_call *k = arg;
    char u[128];
    url(u, sizeof u, "http", port_plain, "/silent");
    ss_http_request req = {.method = "POST", .url = u, .body = "x", .body_len = 1,
                           .deadline_ns = ss_mono_ns() + 1500000000ull};
    ss_http_response r;
    k->rc = ss_http_perform(k->c, &req, &r);
    ss_buf_free(&r.body);
    return NULL;
}

/* A host that takes back the numbers of libcurl's wakeup pair while a call
 * waits (it closed every descriptor and opened a socket pair of its own
 * there) keeps the bytes waiting on it: the client never reads that pair
 * (curl_multi_poll did, whenever its wait saw it readable), nor closes it
 * (the handles are abandoned, not cleaned up). */
static void test_wakeup_pair_left_alone(void **state) {
    (void)state;
    unsigned char before[512], after[512];
    open_fds(before);
    ss_http_client *c = ss_http_client_new(NULL);
    assert_non_null(c);
    open_fds(after);
    int wake[4], nw = 0;
    for (int fd = 3; fd < 512 && nw < 4; fd++)
        if (after[fd] && !before[fd])
            wake[nw++] = fd;
    assert_true(nw >= 1); /* libcurl's pair (a socketpair in 7.88) */
    silent_call k = {.c = c};
    pthread_t t;
    pthread_create(&t, NULL, silent_call_main, &k);
    usleep(300000); /* the call waits for the silent server */
    int peer[4];
    static const char bytes[] = "host bytes";
    /* non-blocking, so that a client that reads them (as curl_multi_poll
     * did) fails this test at once; a blocking socket of the host's hung
     * that client's thread in recv for good */
    for (int i = 0; i < nw; i++) {
        int sp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp), 0);
        assert_int_equal(write(sp[1], bytes, sizeof bytes), (ssize_t)sizeof bytes);
        assert_int_equal(dup2(sp[0], wake[i]), wake[i]);
        close(sp[0]);
        peer[i] = sp[1];
    }
    pthread_join(t, NULL);
    assert_true(k.rc < 0); /* the silent server never answered */
    ss_http_client_free(c);
    for (int i = 0; i < nw; i++) {
        char got[64];
        ssize_t n = recv(wake[i], got, sizeof got, MSG_DONTWAIT);
        assert_int_equal(n, (ssize_t)sizeof bytes); /* still open, and nothing taken */
        assert_memory_equal(got, bytes, sizeof bytes);
        close(wake[i]);
        close(peer[i]);
    }
}

static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* Connection refused; the message keeps the URL's credentials, its query
 * and the header values out. */
static void test_refused_and_secrets(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[256];
    snprintf(u, sizeof u, "http://alice:s3cretpass@127.0.0.1:%d/v1?token=qwerty123", closed_port());
    const char *headers[] = {"Authorization: Bearer tok-abcdef", NULL};
    ss_http_request req = {.method = "POST", .url = u, .headers = headers, .body = "x",
                           .body_len = 1, .deadline_ns = ss_mono_ns() + 5000000000ull};
    ss_http_response r;
    assert_int_equal(ss_http_perform(c, &req, &r), -ECONNREFUSED);
    assert_int_equal(r.status, 0);
    assert_true(r.error[0] != '\0');
    assert_null(strstr(r.error, "s3cretpass"));
    assert_null(strstr(r.error, "qwerty123"));
    assert_null(strstr(r.error, "tok-abcdef"));
    ss_buf_free(&r.body);
    ss_http_client_free(c);

    /* the scrubber itself, on a message that quotes them all */
    char msg[400];
    snprintf(msg, sizeof msg, "GET %s failed; sent Bearer tok-abcdef as alice", u);
    ss_http_scrub(msg, sizeof msg, u, headers);
    assert_null(strstr(msg, "s3cretpass"));
    assert_null(strstr(msg, "qwerty123"));
    assert_null(strstr(msg, "tok-abcdef"));
    assert_null(strstr(msg, "alice"));
    assert_non_null(strstr(msg, "127.0.0.1"));

    char shown[256];
    ss_http_url_for_messages(u, shown, sizeof shown);
    char want[128];
    snprintf(want, sizeof want, "http://***@127.0.0.1:%d/v1", atoi(strrchr(u, ':') + 1));
    assert_string_equal(shown, want);
}

/* Not HTTP, no answer at all, an answer cut in its headers. */
static void test_garbage_and_close(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    ss_http_response r;
    url(u, sizeof u, "http", port_plain, "/garbage");
    int rc = post(c, "POST", u, "x", 1, &r);
    assert_int_equal(rc, -EBADMSG);
    assert_int_equal(r.status, 0);
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/close");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), -ECONNRESET);
    ss_buf_free(&r.body);
    /* libcurl alone would take this for a whole 202 */
    url(u, sizeof u, "http", port_plain, "/halfheaders");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), -ECONNRESET);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.error, "headers"));
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* The response body is kept up to max_response; the rest is read and
 * discarded, so the connection is reused. A server that closes its side
 * after an answer (with or without saying so) costs a new connection, not
 * a failed call. */
static void test_max_response_and_reconnect(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    char u[128];
    ss_http_response r;
    url(u, sizeof u, "http", port_plain, "/big");
    ss_http_request req = {.method = "POST", .url = u, .body = "x", .body_len = 1,
                           .deadline_ns = ss_mono_ns() + 5000000000ull, .max_response = 1000};
    assert_int_equal(ss_http_perform(c, &req, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 1000);
    ss_buf_free(&r.body);
    url(u, sizeof u, "http", port_plain, "/echo");
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(json_int(&r.body, "nth"), 2);
    long conn = json_int(&r.body, "conn");
    ss_buf_free(&r.body);
    const char *paths[] = {"/echo?close=1", "/echo?drop=1"};
    for (int i = 0; i < 2; i++) {
        url(u, sizeof u, "http", port_plain, paths[i]);
        assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
        ss_buf_free(&r.body);
        usleep(50000); /* the close reaches us */
        url(u, sizeof u, "http", port_plain, "/echo");
        assert_int_equal(post(c, "PUT", u, "abc", 3, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(json_int(&r.body, "len"), 3);
        assert_true(json_int(&r.body, "conn") != conn);
        assert_int_equal(json_int(&r.body, "nth"), 1);
        conn = json_int(&r.body, "conn");
        ss_buf_free(&r.body);
    }
    ss_http_client_free(c);
}

/* https: verified against the test CA; without it verification fails;
 * insecure skips it. Keep-alive holds over TLS too. */
static void test_tls(void **state) {
    (void)state;
    char u[128];
    url(u, sizeof u, "https", port_tls, "/echo");
    ss_http_response r;

    ss_http_tls tls = {.ca_file = ca_file};
    ss_http_client *c = ss_http_client_new(&tls);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(post(c, "POST", u, "secure", 6, &r), 0);
        assert_int_equal(r.status, 200);
        assert_int_equal(json_int(&r.body, "len"), 6);
        assert_int_equal(json_int(&r.body, "nth"), i);
        ss_buf_free(&r.body);
    }
    ss_http_client_free(c);

    c = ss_http_client_new(NULL); /* the system's roots do not know the test CA */
    assert_int_equal(post(c, "POST", u, "x", 1, &r), -EPROTO);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.error, "certificate"));
    ss_buf_free(&r.body);
    ss_http_client_free(c);

    ss_http_tls insecure = {.insecure = true};
    c = ss_http_client_new(&insecure);
    assert_int_equal(post(c, "PUT", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 200);
    ss_buf_free(&r.body);
    ss_http_client_free(c);

    /* a host name the certificate does not name */
    char bad[128];
    snprintf(bad, sizeof bad, "https://stackshot-test.invalid:%d/echo", port_tls);
    c = ss_http_client_new(&tls);
    int rc = post(c, "POST", bad, "x", 1, &r);
    assert_true(rc == -EHOSTUNREACH); /* not resolvable: never sent in the clear */
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* A server that requires a client certificate: refused without one,
 * accepted with the test client's (the server names it). */
static void test_client_certificate(void **state) {
    (void)state;
    char u[128];
    url(u, sizeof u, "https", port_mtls, "/echo");
    ss_http_response r;
    ss_http_tls tls = {.ca_file = ca_file};
    ss_http_client *c = ss_http_client_new(&tls);
    int rc = post(c, "POST", u, "x", 1, &r);
    assert_true(rc == -EPROTO || rc == -ECONNRESET);
    assert_int_equal(r.status, 0);
    ss_buf_free(&r.body);
    ss_http_client_free(c);

    ss_http_tls mtls = {.ca_file = ca_file, .cert_file = client_crt, .key_file = client_key};
    c = ss_http_client_new(&mtls);
    assert_int_equal(post(c, "POST", u, "x", 1, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(json_has(&r.body, "\"client_cn\": \"stackshot-test-client\""));
    ss_buf_free(&r.body);
    ss_http_client_free(c);

    ss_http_tls missing = {.ca_file = ca_file, .cert_file = "/nonexistent.crt",
                           .key_file = "/nonexistent.key"};
    c = ss_http_client_new(&missing);
    assert_int_equal(post(c, "POST", u, "x", 1, &r), -EPROTO);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* A client made in a forked child works; the parent's, left alone there,
 * still works in the parent. */
static void test_fork_child(void **state) {
    (void)state;
    char u[128];
    url(u, sizeof u, "https", port_tls, "/echo");
    ss_http_tls tls = {.ca_file = ca_file};
    ss_http_client *c = ss_http_client_new(&tls);
    ss_http_response r;
    assert_int_equal(post(c, "POST", u, "parent", 6, &r), 0);
    long conn = json_int(&r.body, "conn");
    ss_buf_free(&r.body);
    pid_t pid = fork();
    if (pid == 0) {
        ss_http_client *cc = ss_http_client_new(&tls);
        int ok = cc && post(cc, "PUT", u, "child!!", 7, &r) == 0 && r.status == 200 &&
                 json_int(&r.body, "len") == 7 && json_int(&r.body, "conn") != conn;
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(post(c, "POST", u, "parent", 6, &r), 0);
    assert_int_equal(json_int(&r.body, "conn"), conn);
    assert_int_equal(json_int(&r.body, "nth"), 2);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* The agent flushes its exporters from the core's destructor, and the
 * destructors of shared objects run after the atexit handlers: OpenSSL's
 * own exit-time cleanup must not have run by then. A forked child exits
 * normally; its destructor (below) makes an https call. */
static char at_exit_url[128], at_exit_result[300];

__attribute__((destructor)) static void call_after_exit_handlers(void) {
    if (!at_exit_url[0])
        return;
    ss_http_tls tls = {.ca_file = ca_file};
    ss_http_client *c = ss_http_client_new(&tls);
    ss_http_response r;
    int rc = c ? post(c, "POST", at_exit_url, "late", 4, &r) : -ENOMEM;
    FILE *f = fopen(at_exit_result, "w");
    if (f) {
        fprintf(f, "%d %d %s\n", rc, rc == 0 ? r.status : 0, rc == 0 ? "" : r.error);
        fclose(f);
    }
    if (c) {
        ss_buf_free(&r.body);
        ss_http_client_free(c);
    }
}

static void test_tls_after_exit_handlers(void **state) {
    (void)state;
    ss_http_tls tls = {.ca_file = ca_file};
    ss_http_client_free(ss_http_client_new(&tls)); /* libcurl and OpenSSL initialised here */
    snprintf(at_exit_result, sizeof at_exit_result, "%s/at_exit", dir);
    pid_t pid = fork();
    if (pid == 0) {
        url(at_exit_url, sizeof at_exit_url, "https", port_tls, "/echo");
        exit(0); /* atexit handlers, then destructors */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    FILE *f = fopen(at_exit_result, "r");
    assert_non_null(f);
    char line[300] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    if (strncmp(line, "0 200", 5) != 0)
        fail_msg("https from a destructor at exit: %s", line);
}

/* Bad requests: no method, malformed URL, another scheme. */
static void test_bad_requests(void **state) {
    (void)state;
    ss_http_client *c = ss_http_client_new(NULL);
    ss_http_response r;
    ss_http_request req = {.url = "http://127.0.0.1:1/"};
    assert_int_equal(ss_http_perform(c, &req, &r), -EINVAL);
    ss_buf_free(&r.body);
    assert_int_equal(post(c, "POST", "file:///etc/passwd", "x", 1, &r), -EINVAL);
    ss_buf_free(&r.body);
    assert_int_equal(post(c, "POST", "http://[::1", "x", 1, &r), -EINVAL);
    ss_buf_free(&r.body);
    ss_http_request late = {.method = "POST", .url = "http://127.0.0.1:1/", .deadline_ns = 1};
    assert_int_equal(ss_http_perform(c, &late, &r), -ETIMEDOUT);
    ss_buf_free(&r.body);
    ss_http_client_free(c);
}

/* ---- one segment per small request --------------------------------------- */

#define SEG_REQUESTS 3

typedef struct seg_server {
    int lfd;
    int requests;             /* answered */
    uint32_t data_segs;       /* TCP segments with data the requests came in */
    bool no_counter;          /* the kernel's tcp_info has no tcpi_data_segs_in */
} seg_server;

/* Read one request (headers, then Content-Length bytes): 0, or -1. */
static int read_request(int fd) {
    char buf[8192];
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strstr(buf, "\r\nContent-Length:"); /* as libcurl spells it */
    size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
    while (have < want) {
        char sink[8192];
        ssize_t n = recv(fd, sink, sizeof sink, 0);
        if (n <= 0)
            return -1;
        have += (size_t)n;
    }
    return 0;
}

static void *seg_server_main(void *arg) {
    seg_server *sv = arg;
    int fd = accept(sv->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    static const char ok[] = "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n";
    for (int i = 0; i < SEG_REQUESTS && read_request(fd) == 0; i++) {
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        memset(&ti, 0, sizeof ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
            len < offsetof(struct tcp_info, tcpi_data_segs_in) + sizeof ti.tcpi_data_segs_in)
            sv->no_counter = true;
        sv->data_segs = ti.tcpi_data_segs_in;
        if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ok - 1))
            break;
        sv->requests++;
    }
    close(fd);
    return NULL;
}

/* A POST whose body is in memory and small leaves in one TCP segment with
 * its headers, whatever the relays between the client and the server do
 * with it: sent in two (the headers, then the body), a relay with Nagle's
 * algorithm holds the body until the next hop's delayed ACK, ~40 ms a
 * request (a JVM host's Zorka backlog did not drain through one: see
 * docs/java.md). Counted by the server's kernel (tcpi_data_segs_in). */
static void test_small_post_one_segment(void **state) {
    (void)state;
    seg_server sv = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    assert_true(sv.lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(sv.lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(sv.lfd, 4), 0);
    assert_int_equal(getsockname(sv.lfd, (struct sockaddr *)&a, &alen), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, seg_server_main, &sv), 0);

    ss_http_client *c = ss_http_client_new(NULL);
    assert_non_null(c);
    char u[128];
    url(u, sizeof u, "http", ntohs(a.sin_port), "/agent/submit/trc");
    static uint8_t body[1500]; /* a Zorka trace's size */
    fill(body, sizeof body, 0);
    for (int i = 0; i < SEG_REQUESTS; i++) {
        ss_http_response r;
        assert_int_equal(post(c, "POST", u, body, sizeof body, &r), 0);
        assert_int_equal(r.status, 202);
        ss_buf_free(&r.body);
    }
    ss_http_client_free(c);
    pthread_join(t, NULL);
    close(sv.lfd);
    assert_int_equal(sv.requests, SEG_REQUESTS);
    if (sv.no_counter)
        skip();
    /* one keep-alive connection: one data segment per request */
    assert_int_equal(sv.data_segs, SEG_REQUESTS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keepalive_post_put),
        cmocka_unit_test(test_streamed_bodies),
        cmocka_unit_test(test_stream_error),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_deadline_silent),
        cmocka_unit_test(test_cancel_from_thread),
        cmocka_unit_test(test_wakeup_pair_left_alone),
        cmocka_unit_test(test_refused_and_secrets),
        cmocka_unit_test(test_garbage_and_close),
        cmocka_unit_test(test_max_response_and_reconnect),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_client_certificate),
        cmocka_unit_test(test_fork_child),
        cmocka_unit_test(test_tls_after_exit_handlers),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_small_post_one_segment),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
