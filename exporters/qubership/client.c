/* client.c: the collector TCP client (spec §3), byte for byte what the
 * Java agent's DefaultCollectorClient sends.
 *
 * It runs on the exporter thread only. The socket is non-blocking and
 * every wait is a poll() bounded by min(now + timeout, the caller's
 * deadline), so a stalled or hostile collector costs at most that long and
 * never reaches the sampler; once the exit has begun, no longer than the
 * exit gives the collector (c->backend: nothing when it was refusing,
 * failing or stalled, the unproven budget when never heard from), looked
 * at every WAIT_SLICE_MS. One difference from the Java agent: an EOF
 * from the collector is a failure at once (the agent polls for 30 s).
 *
 * The host may close every descriptor >= 3 and get our socket's number
 * back for a file of its own: the socket is checked (ss_kept_fd, its
 * identity) before every send, recv and close, and one found taken over
 * is forgotten without being touched and the call fails as on a dropped
 * connection (-EPIPE): the exporter's reconnect path takes over, and what
 * was in flight is counted lost as after any dropped connection. */
#include "agent/buf.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"
#include "exporters/qubership/dumps.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define QB_MAX_FIELD 1024 /* DATA_BUFFER_SIZE: the readers' field cap */

void qb_client_init(qb_client *c, uint32_t timeout_ms, ss_exporter_stats *stats) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->kept.fd = -1;
    c->timeout_ms = timeout_ms;
    c->stats = stats;
    ss_buf_init(&c->out);
    ss_backend_init(&c->backend);
}

static int fail(qb_client *c, int rc, const char *what) {
    snprintf(c->err, sizeof c->err, "%s: %s", what,
             rc == -EPROTO    ? "protocol error"
             : rc == -ETIMEDOUT ? "timed out"
             : rc == -EPIPE   ? "connection closed"
                              : strerror(-rc));
    return rc;
}

static uint64_t op_deadline(const qb_client *c, uint64_t deadline_ns) {
    uint64_t d = ss_mono_ns() + (uint64_t)c->timeout_ms * 1000000u;
    return d < deadline_ns ? d : deadline_ns;
}

#define WAIT_SLICE_MS 50

/* Wait for `events` until the deadline (or what the exit allows); 0,
 * -ETIMEDOUT or -errno. */
static int wait_fd(const qb_client *c, int fd, short events, uint64_t deadline_ns) {
    for (;;) {
        uint64_t now = ss_mono_ns();
        uint64_t d = ss_backend_bound(&c->backend, deadline_ns);
        if (now >= d)
            return -ETIMEDOUT;
        uint64_t ms = (d - now + 999999) / 1000000;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms > WAIT_SLICE_MS ? WAIT_SLICE_MS : (int)ms);
        if (n > 0)
            return 0; /* errors show up in the following send/recv */
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Whether the socket is still ours; when the host took the number over:
 * forgotten (never closed: it is the host's now), the TLS state dropped
 * without a word on the wire, and false. */
static bool still_ours(qb_client *c) {
    if (c->fd < 0)
        return false;
    if (ss_kept_fd_get(&c->kept) >= 0)
        return true;
    ss_log(SS_LOG_WARN, "qubership: the host closed the collector connection's descriptor "
                        "(its number may name a file of the host's now: not touched); "
                        "reconnecting");
    c->fd = -1;
    qb_tls_free(c->tls, false); /* SSL_free only: nothing is written */
    c->tls = NULL;
    return false;
}

/* One send: bytes sent, -EAGAIN (then *want says what to poll for), or
 * -errno. Through TLS when the connection has it. */
static ssize_t send_some(qb_client *c, const void *p, size_t n, short *want) {
    *want = POLLOUT;
    if (!still_ours(c))
        return -EPIPE;
    if (c->tls) {
        ssize_t r = qb_tls_send(c->tls, p, n);
        *want = qb_tls_want(c->tls);
        return r;
    }
    ssize_t r = send(c->fd, p, n, MSG_NOSIGNAL);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return r;
}

static ssize_t recv_some(qb_client *c, void *p, size_t n, short *want) {
    *want = POLLIN;
    if (!still_ours(c))
        return -EPIPE;
    if (c->tls) {
        ssize_t r = qb_tls_recv(c->tls, p, n);
        *want = qb_tls_want(c->tls);
        return r == -EPIPE ? 0 : r;
    }
    ssize_t r = recv(c->fd, p, n, 0);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return r;
}

/* Write c->out completely. */
static int write_out(qb_client *c, uint64_t deadline_ns) {
    size_t off = 0;
    int rc = 0;
    while (off < c->out.len) {
        short want;
        ssize_t n = send_some(c, c->out.data + off, c->out.len - off, &want);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == -EINTR)
            continue;
        if (n == -EAGAIN) {
            rc = wait_fd(c, c->fd, want, deadline_ns);
            if (rc)
                break;
            continue;
        }
        rc = n < 0 ? (int)n : -EPIPE;
        break;
    }
    if (rc == 0)
        atomic_fetch_add(&c->stats->bytes_sent, c->out.len);
    ss_buf_reset(&c->out);
    return rc;
}

/* Read what is there (wait until the deadline for at least one byte when
 * `block`). 0, -EAGAIN (nothing, not blocking), -EPIPE at EOF, -errno. */
static int read_some(qb_client *c, bool block, uint64_t deadline_ns) {
    if (c->in_len == sizeof c->in)
        return -EPROTO; /* a reply we cannot parse fills the buffer */
    for (;;) {
        short want;
        ssize_t n = recv_some(c, c->in + c->in_len, sizeof c->in - c->in_len, &want);
        if (n > 0) {
            c->in_len += (size_t)n;
            return 0;
        }
        if (n == 0)
            return -EPIPE;
        if (n == -EINTR)
            continue;
        if (n != -EAGAIN)
            return (int)n;
        if (!block)
            return -EAGAIN;
        int rc = wait_fd(c, c->fd, want, deadline_ns);
        if (rc)
            return rc;
    }
}

static void consume(qb_client *c, size_t n) {
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

static int read_exact(qb_client *c, size_t n, uint64_t deadline_ns) {
    while (c->in_len < n) {
        int rc = read_some(c, true, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

static void put_string(ss_buf *b, const char *s) {
    size_t n = strlen(s);
    if (n > QB_MAX_FIELD)
        n = QB_MAX_FIELD; /* both Java readers reject longer fields */
    ss_qb_put_field(b, s, (uint32_t)n);
}

static void report(qb_client *c, const uint8_t id[16], bool ok) {
    ss_qb_put_u8(&c->out, QB_CMD_REPORT_COMMAND_RESULT);
    ss_buf_append(&c->out, id, 16);
    ss_qb_put_u8(&c->out, ok ? 0x4B : 0xFF); /* 'K' success, 0xFF failure */
}

/* Parse the acks read so far. Diagnostic commands go to the dumps
 * exporter (commands.c); one it cannot run fails at once, as the Java
 * agent answers a command it cannot start. Results of commands run since
 * are sent with them (spec §3.4.5: between any two commands). */
static int process_acks(qb_client *c, uint64_t deadline_ns) {
    qb_reply_cmd cmds[8];
    size_t used, n_cmds;
    int acks = qb_reply_acks(c->in, c->in_len, &used, cmds, 8, &n_cmds);
    if (acks < 0)
        return -EPROTO;
    consume(c, used);
    if ((uint32_t)acks > c->pending_acks)
        return -EPROTO; /* more acks than commands: out of step */
    c->pending_acks -= (uint32_t)acks;
    for (size_t i = 0; i < n_cmds && i < 8; i++) {
        c->commands++;
        if (!qb_commands_post(cmds[i].id, cmds[i].what, c->conn))
            report(c, cmds[i].id, false);
    }
    qb_command done[16];
    size_t n = qb_commands_results(c->conn, done, 16);
    for (size_t i = 0; i < n; i++)
        report(c, done[i].id, done[i].ok);
    return c->out.len ? write_out(c, deadline_ns) : 0;
}

int qb_client_drain(qb_client *c, uint64_t deadline_ns) {
    uint64_t d = op_deadline(c, deadline_ns);
    int rc = process_acks(c, d);
    while (rc == 0 && c->pending_acks > 0) {
        rc = read_some(c, true, d);
        if (rc == 0)
            rc = process_acks(c, d);
    }
    return rc ? fail(c, rc, "waiting for acks") : 0;
}

static int try_connect(qb_client *c, const struct addrinfo *ai, uint64_t deadline_ns) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0)
        return -errno;
    int one = 1, buf = 8192;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = errno == EINPROGRESS ? wait_fd(c, fd, POLLOUT, deadline_ns) : -errno;
        if (rc == 0) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = -err;
        }
    }
    if (rc) {
        close(fd);
        return rc;
    }
    rc = ss_kept_fd_adopt(&c->kept, fd); /* closes fd on failure */
    if (rc)
        return rc;
    c->fd = fd;
    return 0;
}

/* TLS over the connected socket: the handshake, within the deadline. */
static int start_tls(qb_client *c, const char *host, uint64_t deadline_ns) {
    c->tls = qb_tls_new(c->tls_ctx, c->fd, host);
    if (!c->tls) {
        snprintf(c->err, sizeof c->err, "TLS: out of memory");
        return -ENOMEM;
    }
    for (;;) {
        if (!still_ours(c)) {
            snprintf(c->err, sizeof c->err, "TLS handshake: the host closed the socket");
            return -EPIPE;
        }
        int rc = qb_tls_handshake(c->tls, c->err, sizeof c->err);
        if (rc != -EAGAIN)
            return rc;
        rc = wait_fd(c, c->fd, qb_tls_want(c->tls), deadline_ns);
        if (rc) {
            snprintf(c->err, sizeof c->err, "TLS handshake: %s",
                     rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
            return rc;
        }
    }
}

static int resolve_and_connect(qb_client *c, const char *host, int port, uint64_t deadline_ns) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0) {
        snprintf(c->err, sizeof c->err, "%s: %s", host, gai_strerror(g));
        return -EHOSTUNREACH;
    }
    int rc = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        rc = try_connect(c, ai, deadline_ns);
        if (rc == 0)
            break;
    }
    freeaddrinfo(res);
    return rc;
}

int qb_client_connect(qb_client *c, const char *host, int port, const char *pod,
                      const char *service, const char *ns, uint64_t deadline_ns) {
    uint64_t d = op_deadline(c, deadline_ns);
    c->in_len = 0;
    c->pending_acks = 0;
    c->conn++;
    ss_buf_reset(&c->out);
    c->err[0] = '\0';
    int rc = resolve_and_connect(c, host, port, d);
    /* The agent retries once with esc-static-service replaced by
     * esc-collector-service when the connection is refused. */
    const char *old = "esc-static-service";
    const char *at = strstr(host, old);
    char alt[512];
    const char *peer = host;
    if (rc == -ECONNREFUSED && at) {
        snprintf(alt, sizeof alt, "%.*sesc-collector-service%s", (int)(at - host), host,
                 at + strlen(old));
        peer = alt;
        rc = resolve_and_connect(c, alt, port, d);
    }
    if (rc)
        return c->err[0] && rc == -EHOSTUNREACH ? rc : fail(c, rc, "connect");
    if (c->tls_ctx) {
        rc = start_tls(c, peer, d);
        if (rc)
            return rc;
    }
    ss_qb_put_u8(&c->out, QB_CMD_GET_PROTOCOL_VERSION_V2);
    ss_qb_put_be64(&c->out, (uint64_t)QB_PROTOCOL_V3);
    put_string(&c->out, pod && *pod ? pod : "unknown");
    put_string(&c->out, service && *service ? service : "unknown");
    put_string(&c->out, ns && *ns ? ns : "unknown");
    rc = write_out(c, d);
    if (rc == 0)
        rc = read_exact(c, 8, d);
    if (rc)
        return fail(c, rc, "handshake");
    int64_t version;
    rc = qb_reply_handshake(c->in, 8, &version);
    consume(c, 8);
    if (rc == -EACCES) {
        snprintf(c->err, sizeof c->err, "the collector blacklisted this namespace");
        return rc;
    }
    if (rc) {
        snprintf(c->err, sizeof c->err, "handshake: unexpected protocol version %lld",
                 (long long)version);
        return rc;
    }
    return 0;
}

int qb_client_init_stream(qb_client *c, const char *name, int32_t seq, bool reset,
                          qb_init_reply *r, uint64_t deadline_ns) {
    int rc = qb_client_drain(c, deadline_ns); /* the agent drains before INIT */
    if (rc)
        return rc;
    uint64_t d = op_deadline(c, deadline_ns);
    ss_qb_put_u8(&c->out, QB_CMD_INIT_STREAM_V2);
    put_string(&c->out, name);
    ss_qb_put_be32(&c->out, (uint32_t)seq);
    ss_qb_put_be32(&c->out, reset ? 1 : 0);
    rc = write_out(c, d);
    size_t need = 16;
    while (rc == 0) {
        rc = read_exact(c, need, d);
        if (rc)
            break;
        rc = qb_reply_init(c->in, c->in_len, r, &need);
        if (rc == -EAGAIN) {
            rc = 0;
            continue;
        }
        if (rc == 0)
            consume(c, 36);
        break;
    }
    if (rc == -EPROTO) {
        snprintf(c->err, sizeof c->err, "failed to open stream %s", name);
        return rc;
    }
    return rc ? fail(c, rc, name) : 0;
}

int qb_client_send(qb_client *c, const uint8_t handle[16], const void *p, size_t n,
                   uint64_t deadline_ns) {
    const uint8_t *b = p;
    uint64_t d = op_deadline(c, deadline_ns);
    while (n > 0) {
        /* acks already there are taken without waiting */
        int rc = read_some(c, false, d);
        if (rc == 0)
            rc = process_acks(c, d);
        if (rc && rc != -EAGAIN)
            return fail(c, rc, "reading acks");
        size_t piece = n < QB_MAX_FIELD ? n : QB_MAX_FIELD;
        ss_qb_put_u8(&c->out, QB_CMD_RCV_DATA);
        ss_buf_append(&c->out, handle, 16);
        ss_qb_put_field(&c->out, b, (uint32_t)piece);
        c->pending_acks++;
        rc = write_out(c, d);
        if (rc)
            return fail(c, rc, "sending data");
        b += piece;
        n -= piece;
    }
    return 0;
}

int qb_client_flush(qb_client *c, uint64_t deadline_ns) {
    ss_qb_put_u8(&c->out, QB_CMD_REQUEST_ACK_FLUSH);
    c->pending_acks++;
    int rc = write_out(c, op_deadline(c, deadline_ns));
    if (rc)
        return fail(c, rc, "flush");
    return qb_client_drain(c, deadline_ns);
}

void qb_client_close(qb_client *c, bool graceful, uint64_t deadline_ns) {
    if (c->fd >= 0 && still_ours(c)) {
        if (graceful) {
            ss_buf_reset(&c->out);
            ss_qb_put_u8(&c->out, QB_CMD_CLOSE);
            write_out(c, op_deadline(c, deadline_ns));
        }
        /* checked again: the CLOSE above may have found it lost, or the
         * host closed it since (close_notify and close() would reach the
         * host's file) */
        bool ours = still_ours(c);
        qb_tls_free(c->tls, graceful && ours);
        c->tls = NULL;
        if (ours)
            ss_kept_fd_close(&c->kept);
        c->fd = -1;
    }
    ss_buf_reset(&c->out);
    c->in_len = 0;
    c->pending_acks = 0;
}
