/* grpc_wire.c: the frames between the core and its gRPC helper process
 * (the format is in grpc_wire.h). */
#include "agent/time.h"
#include "exporters/otlp/grpc_wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NULL_LEN 0xffffffffu

/* ---- writing ---------------------------------------------------------- */

void ss_gw_begin(ss_buf *b, int type) {
    uint8_t h[SS_GW_HEADER] = {0, 0, 0, 0, (uint8_t)type, 0, 0, 0};
    ss_buf_append(b, h, sizeof h);
}

void ss_gw_u32(ss_buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ss_buf_append(b, x, sizeof x);
}

void ss_gw_u64(ss_buf *b, uint64_t v) {
    ss_gw_u32(b, (uint32_t)v);
    ss_gw_u32(b, (uint32_t)(v >> 32));
}

void ss_gw_bytes(ss_buf *b, const void *p, size_t n) {
    ss_gw_u32(b, (uint32_t)n);
    if (n)
        ss_buf_append(b, p, n);
}

void ss_gw_str(ss_buf *b, const char *s) {
    if (!s)
        ss_gw_u32(b, NULL_LEN);
    else
        ss_gw_bytes(b, s, strlen(s));
}

int ss_gw_end(ss_buf *b, size_t begin) {
    size_t n = b->len - begin - SS_GW_HEADER;
    if (b->failed || n > SS_GW_MAX_PAYLOAD)
        return -ENOMEM;
    uint8_t *h = (uint8_t *)b->data + begin;
    h[0] = (uint8_t)n;
    h[1] = (uint8_t)(n >> 8);
    h[2] = (uint8_t)(n >> 16);
    h[3] = (uint8_t)(n >> 24);
    return 0;
}

/* ---- reading ---------------------------------------------------------- */

void ss_gw_reader_init(ss_gw_reader *r, const void *payload, size_t n) {
    r->p = payload;
    r->end = r->p + n;
    r->bad = false;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t ss_gw_get_u32(ss_gw_reader *r) {
    if (r->bad || r->end - r->p < 4) {
        r->bad = true;
        return 0;
    }
    uint32_t v = le32(r->p);
    r->p += 4;
    return v;
}

uint64_t ss_gw_get_u64(ss_gw_reader *r) {
    uint64_t lo = ss_gw_get_u32(r);
    return lo | (uint64_t)ss_gw_get_u32(r) << 32;
}

const void *ss_gw_get_bytes(ss_gw_reader *r, size_t *n) {
    *n = 0;
    uint32_t len = ss_gw_get_u32(r);
    if (r->bad || len == NULL_LEN)
        return NULL;
    if ((size_t)(r->end - r->p) < len) {
        r->bad = true;
        return NULL;
    }
    const void *p = r->p;
    r->p += len;
    *n = len;
    return p;
}

char *ss_gw_get_str(ss_gw_reader *r) {
    size_t n;
    const char *p = ss_gw_get_bytes(r, &n);
    if (!p)
        return NULL;
    char *s = malloc(n + 1);
    if (!s) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

void ss_gw_get_str_into(ss_gw_reader *r, char *out, size_t cap) {
    size_t n;
    const char *p = ss_gw_get_bytes(r, &n);
    if (n >= cap)
        n = cap - 1;
    if (p)
        memcpy(out, p, n);
    out[p ? n : 0] = '\0';
}

/* ---- the endpoint and the result -------------------------------------- */

void ss_gw_put_endpoint(ss_buf *b, const ss_otlp_endpoint *ep) {
    ss_gw_str(b, ep->signal);
    ss_gw_u32(b, (uint32_t)ep->protocol);
    ss_gw_str(b, ep->url);
    ss_gw_str(b, ep->url_key);
    ss_gw_str(b, ep->target);
    ss_gw_str(b, ep->http_url);
    ss_gw_str(b, ep->ca_file);
    ss_gw_str(b, ep->cert_file);
    ss_gw_str(b, ep->key_file);
    ss_gw_u32(b, (uint32_t)ep->tls | (uint32_t)ep->skip_verify << 1);
    ss_gw_str(b, ep->root_certs_pem);
    ss_gw_str(b, ep->client_key_pem);
    ss_gw_str(b, ep->client_cert_pem);
    ss_gw_u32(b, (uint32_t)ep->n_headers);
    for (size_t i = 0; i < ep->n_headers; i++) {
        ss_gw_str(b, ep->headers[i].key);
        ss_gw_str(b, ep->headers[i].value);
    }
    ss_gw_u32(b, (uint32_t)ep->compression);
    ss_gw_u32(b, ep->timeout_ms);
}

int ss_gw_get_endpoint(ss_gw_reader *r, ss_otlp_endpoint *ep) {
    memset(ep, 0, sizeof *ep);
    ss_gw_get_str_into(r, ep->signal, sizeof ep->signal);
    ep->protocol = (ss_otlp_protocol)ss_gw_get_u32(r);
    ss_gw_get_str_into(r, ep->url, sizeof ep->url);
    ss_gw_get_str_into(r, ep->url_key, sizeof ep->url_key);
    ss_gw_get_str_into(r, ep->target, sizeof ep->target);
    ss_gw_get_str_into(r, ep->http_url, sizeof ep->http_url);
    ep->ca_file = ss_gw_get_str(r);
    ep->cert_file = ss_gw_get_str(r);
    ep->key_file = ss_gw_get_str(r);
    uint32_t flags = ss_gw_get_u32(r);
    ep->tls = flags & 1;
    ep->skip_verify = flags & 2;
    ep->root_certs_pem = ss_gw_get_str(r);
    ep->client_key_pem = ss_gw_get_str(r);
    ep->client_cert_pem = ss_gw_get_str(r);
    uint32_t n = ss_gw_get_u32(r);
    if (!r->bad && n > 0 && n <= (uint32_t)(r->end - r->p) / 8) {
        ep->headers = calloc(n, sizeof *ep->headers);
        if (!ep->headers)
            return -ENOMEM;
        ep->n_headers = n;
        for (uint32_t i = 0; i < n; i++) {
            ep->headers[i].key = ss_gw_get_str(r);
            ep->headers[i].value = ss_gw_get_str(r);
            if (!ep->headers[i].key || !ep->headers[i].value)
                r->bad = true;
        }
    } else if (n) {
        r->bad = true;
    }
    ep->compression = (ss_otlp_compression)ss_gw_get_u32(r);
    ep->timeout_ms = ss_gw_get_u32(r);
    return r->bad ? -EPROTO : 0;
}

void ss_gw_put_result(ss_buf *b, const ss_grpc_result *res) {
    ss_gw_u32(b, (uint32_t)res->status);
    ss_gw_str(b, res->message);
    ss_gw_bytes(b, res->response.data, res->response.len);
    ss_gw_bytes(b, res->details.data, res->details.len);
}

int ss_gw_get_result(ss_gw_reader *r, ss_grpc_result *res) {
    res->status = (int)ss_gw_get_u32(r);
    ss_gw_get_str_into(r, res->message, sizeof res->message);
    size_t n;
    const void *p = ss_gw_get_bytes(r, &n);
    if (n)
        ss_buf_append(&res->response, p, n);
    p = ss_gw_get_bytes(r, &n);
    if (n)
        ss_buf_append(&res->details, p, n);
    if (res->response.failed || res->details.failed)
        return -ENOMEM;
    return r->bad ? -EPROTO : 0;
}

/* ---- the socket ------------------------------------------------------- */

/* Milliseconds to wait for poll, from a deadline. */
static int wait_ms(uint64_t deadline_ns) {
    if (deadline_ns == UINT64_MAX)
        return -1;
    uint64_t now = ss_mono_ns();
    if (deadline_ns <= now)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

int ss_gw_send(int fd, const void *p, size_t n, uint64_t deadline_ns) {
    const char *c = p;
    if (deadline_ns == 0)
        deadline_ns = UINT64_MAX;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            c += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int ms = wait_ms(deadline_ns);
        if (ms == 0)
            return -ETIMEDOUT;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (poll(&pf, 1, ms) < 0 && errno != EINTR)
            return -errno;
        if (pf.revents & (POLLERR | POLLHUP | POLLNVAL))
            return -EPIPE;
    }
    return 0;
}

/* The first frame of in, if whole: 1; 0 not yet; -EPROTO too large. */
static int frame_whole(const ss_buf *in, int *type, size_t *payload_len) {
    if (in->len < SS_GW_HEADER)
        return 0;
    uint32_t n = le32((const uint8_t *)in->data);
    if (n > SS_GW_MAX_PAYLOAD)
        return -EPROTO;
    if (in->len < SS_GW_HEADER + (size_t)n)
        return 0;
    *type = (uint8_t)in->data[4];
    *payload_len = n;
    return 1;
}

int ss_gw_recv(int fd, ss_buf *in, uint64_t deadline_ns, int *type, size_t *payload_len) {
    for (;;) {
        int w = frame_whole(in, type, payload_len);
        if (w != 0)
            return w;
        if (ss_buf_reserve(in, 64 * 1024) != 0)
            return -ENOMEM;
        ssize_t k = recv(fd, in->data + in->len, in->cap - in->len, MSG_DONTWAIT);
        if (k > 0) {
            in->len += (size_t)k;
            continue;
        }
        if (k == 0)
            return -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int ms = wait_ms(deadline_ns);
        if (ms == 0)
            return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, ms) < 0 && errno != EINTR)
            return -errno;
    }
}

void ss_gw_consume(ss_buf *in, size_t payload_len) {
    size_t n = SS_GW_HEADER + payload_len;
    memmove(in->data, in->data + n, in->len - n);
    in->len -= n;
}

bool ss_gw_peer_is_us(int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid() &&
           cred.gid == getegid();
}
