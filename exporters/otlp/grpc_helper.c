/* grpc_helper.c: stackshot-grpc-helper, the process that makes a host's
 * OTLP/gRPC calls (grpc_remote.c starts it; the frames are grpc_wire.h).
 *
 * gRPC C core brings about 60 libraries (abseil, libstdc++, OpenSSL,
 * c-ares, re2, upb) and its own threads into whatever process uses it,
 * and each of them is paid by the host at every fork (its mappings,
 * its malloc arenas, its threads' stacks and TLB flushes), in resident
 * memory and at its start. Here they live in a process of their own:
 * the host keeps one socket. The helper runs the same client as the
 * module (grpc_client.c, linked in), one call at a time per client.
 *
 * Its clients: the process that started it (the owner, on descriptor 3)
 * and the owner's forked children, which join through the door
 * (descriptor 4, a SOCK_SEQPACKET socket whose other end the owner's
 * process tree inherits): a child sends one end of a new socket pair
 * over it and talks on the other, as the owner does on its own. A
 * forking server's children thus share one helper instead of one each
 * (or none: gRPC cannot be used in a forked child of a process that ran
 * it). A socket passed by a process of another user or group is closed
 * unanswered: the helper acts with the owner's rights. Each client gets
 * a gRPC client of its own (its endpoint frame): the calls of one never
 * wait for another's.
 *
 * It ends when it has no client left and nobody holds the door any more
 * (the whole tree exited, exec'd or stopped its agent), or at once when
 * its owner quits while it has no other client and the door is closed.
 * An owner that quits while others remain is told so ('K') and does not
 * wait for it.
 *
 * It leads a session of its own (setsid): signals meant for the host's
 * process group or terminal do not reach it.
 *
 * Its descriptors: 3 the owner's socket, 4 the door, 0-2 /dev/null
 * (gRPC writes nothing to the host's stderr; the client's own lines go
 * to the client being served as 'L' frames, and its log writes them). */
#include "agent/log.h"
#include "agent/time.h"
#include "exporters/otlp/grpc_module.h"
#include "exporters/otlp/grpc_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define OWNER_FD 3
#define DOOR_FD 4
#define MAX_CLIENTS 256
/* How long the calls in flight are given, together, between two looks at
 * the sockets (a cancel from a client, a new client at the door). */
#define POLL_NS 20000000ull

const void *ss_module_grpc_entry(void);

typedef struct client {
    int fd;              /* -1: a free slot */
    ss_grpc_client *grpc; /* made at its 'E' frame */
    ss_grpc_call *call;  /* in flight, or NULL */
    char method[256];    /* the call's method: gRPC keeps a pointer to it */
    ss_buf in;
} client;

static const ss_grpc_module *m;
static client clients[MAX_CLIENTS];
static int n_slots;      /* clients[0 .. n_slots) in use or free */
static int door = DOOR_FD; /* -1 once nobody holds its other end */
static int serving = -1; /* the client whose frame or call is handled */
static ss_buf out;       /* a frame being sent (one thread: no lock) */

/* End the frame begun in b, send it to fd, and empty b for the next (also
 * after a frame that could not be made: no memory). */
static void send_frame(int fd, ss_buf *b) {
    if (ss_gw_end(b, 0) == 0 && fd >= 0)
        (void)ss_gw_send(fd, b->data, b->len, 0);
    ss_buf_reset(b);
    b->failed = false;
}

/* The client the helper's own lines go to: the one being served, else
 * the first there is. */
static int line_fd(void) {
    if (serving >= 0 && clients[serving].fd >= 0)
        return clients[serving].fd;
    for (int i = 0; i < n_slots; i++)
        if (clients[i].fd >= 0)
            return clients[i].fd;
    return -1;
}

/* A line of the client's, in a buffer of its own: it may come while a
 * frame is being made in `out`. */
static void send_line(ss_log_level level, const char *msg) {
    ss_buf line;
    ss_buf_init(&line);
    ss_gw_begin(&line, SS_GW_LOG);
    ss_gw_u32(&line, (uint32_t)level);
    ss_gw_str(&line, msg);
    send_frame(line_fd(), &line);
    ss_buf_free(&line);
}

static void send_done(client *c, const ss_grpc_result *res) {
    ss_gw_begin(&out, SS_GW_DONE);
    ss_gw_put_result(&out, res);
    send_frame(c->fd, &out);
}

static void send_u32(client *c, int type, uint32_t v) {
    ss_gw_begin(&out, type);
    ss_gw_u32(&out, v);
    send_frame(c->fd, &out);
}

static int clients_left(void) {
    int n = 0;
    for (int i = 0; i < n_slots; i++)
        n += clients[i].fd >= 0;
    return n;
}

static void drop_client(client *c) {
    if (c->call) {
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        m->call_cancel(c->grpc, c->call, &res);
        ss_grpc_result_free(&res);
        c->call = NULL;
    }
    if (c->grpc)
        m->client_destroy(c->grpc);
    c->grpc = NULL;
    close(c->fd);
    c->fd = -1;
    ss_buf_free(&c->in);
}

static void add_client(int fd) {
    int i = 0;
    while (i < n_slots && clients[i].fd >= 0)
        i++;
    if (i == MAX_CLIENTS) {
        close(fd); /* it hears its socket close and does without */
        return;
    }
    if (i == n_slots)
        n_slots++;
    clients[i] = (client){.fd = fd};
    ss_buf_init(&clients[i].in);
}

/* Sockets passed at the door: each a new client, if its creator is of
 * the helper's user and group. */
static void open_door(void) {
    for (;;) {
        char byte;
        struct iovec iov = {.iov_base = &byte, .iov_len = 1};
        union {
            struct cmsghdr h;
            char space[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                             .msg_controllen = sizeof ctl.space};
        ssize_t k = recvmsg(door, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                close(door); /* nobody holds its other end any more */
                door = -1;
            }
            return;
        }
        struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
        if (!h || h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS ||
            h->cmsg_len != CMSG_LEN(sizeof(int)))
            continue;
        int fd;
        memcpy(&fd, CMSG_DATA(h), sizeof fd);
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            cred.uid != geteuid() || cred.gid != getegid())
            close(fd);
        else
            add_client(fd);
    }
}

/* Whether anybody may still come through the door: what it holds is
 * taken first (a closed door still delivers what was passed before). */
static bool door_held(void) {
    if (door >= 0)
        open_door();
    return door >= 0;
}

/* One frame from client c. false: the client is done with (it quit, or
 * sent what this build does not know). */
static bool on_frame(client *c, int type, const void *payload, size_t len) {
    ss_gw_reader r;
    ss_gw_reader_init(&r, payload, len);
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    bool go_on = true;
    switch (type) {
    case SS_GW_ENDPOINT: {
        if (c->grpc)
            break;
        ss_otlp_endpoint ep;
        int rc = ss_gw_get_endpoint(&r, &ep);
        if (rc == 0) {
            c->grpc = m->client_create(&ep);
            rc = c->grpc ? 0 : -EIO;
        }
        ss_otlp_endpoint_free(&ep);
        send_u32(c, SS_GW_CREATED, (uint32_t)-rc);
        go_on = rc == 0;
        break;
    }
    case SS_GW_START: {
        uint64_t deadline = ss_gw_get_u64(&r);
        if (c->call)
            r.bad = true; /* one call at a time: its method stays as it is */
        else
            ss_gw_get_str_into(&r, c->method, sizeof c->method);
        size_t n;
        const void *bytes = ss_gw_get_bytes(&r, &n);
        if (!c->grpc || c->call || r.bad || !c->method[0]) {
            res.status = SS_GRPC_INTERNAL;
            snprintf(res.message, sizeof res.message, "the gRPC helper got a call it cannot make");
            send_done(c, &res);
        } else {
            c->call = m->call_start(c->grpc, c->method, bytes, n, deadline, &res);
            if (!c->call)
                send_done(c, &res);
        }
        break;
    }
    case SS_GW_CANCEL:
        if (c->call) {
            m->call_cancel(c->grpc, c->call, &res);
            c->call = NULL;
            send_done(c, &res);
        }
        break;
    case SS_GW_QUIT:
        /* the owner leaves; others (or a door still held) keep us */
        if (door_held() || clients_left() > 1)
            send_u32(c, SS_GW_KEEPING, 0);
        go_on = false;
        break;
    default:
        go_on = false; /* not a frame of this build's */
    }
    ss_grpc_result_free(&res);
    return go_on;
}

/* What client c sent: every whole frame. */
static void read_client(client *c) {
    for (;;) {
        int type;
        size_t len;
        int got = ss_gw_recv(c->fd, &c->in, 0, &type, &len);
        if (got == 0)
            return;
        if (got < 0) {
            drop_client(c); /* its end closed: it exited, exec'd or stopped */
            return;
        }
        bool go_on = on_frame(c, type, c->in.data + SS_GW_HEADER, len);
        ss_gw_consume(&c->in, len);
        if (!go_on) {
            drop_client(c);
            return;
        }
    }
}

/* Let gRPC run the calls in flight for about POLL_NS in all. */
static void run_calls(int in_flight) {
    uint64_t each = POLL_NS / (uint64_t)in_flight;
    for (int i = 0; i < n_slots; i++) {
        client *c = &clients[i];
        if (c->fd < 0 || !c->call)
            continue;
        serving = i;
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        if (m->call_poll(c->grpc, c->call, each, &res)) {
            c->call = NULL;
            send_done(c, &res);
        }
        ss_grpc_result_free(&res);
    }
    serving = -1;
}

static void serve(void) {
    struct pollfd p[MAX_CLIENTS + 1];
    int who[MAX_CLIENTS + 1];
    for (;;) {
        int n = 0, in_flight = 0;
        for (int i = 0; i < n_slots; i++)
            if (clients[i].fd >= 0) {
                p[n] = (struct pollfd){.fd = clients[i].fd, .events = POLLIN};
                who[n++] = i;
                in_flight += clients[i].call != NULL;
            }
        if (n == 0 && door < 0)
            return; /* nobody left to serve, nobody to come */
        if (door >= 0) {
            p[n] = (struct pollfd){.fd = door, .events = POLLIN};
            who[n++] = -1;
        }
        /* idle: wait for a frame or a client; calls in flight: look only */
        if (poll(p, (nfds_t)n, in_flight ? 0 : -1) < 0 && errno != EINTR)
            return;
        for (int k = 0; k < n; k++) {
            if (!p[k].revents)
                continue;
            if (who[k] < 0) {
                open_door();
                continue;
            }
            serving = who[k];
            read_client(&clients[who[k]]);
            serving = -1;
        }
        if (in_flight)
            run_calls(in_flight);
    }
}

int main(void) {
    /* a session of its own: the host's terminal (^C, ^Z, a hangup) and a
     * kill of the host's process group are the host's; the helper ends
     * with its sockets */
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent's thread blocked them all */
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "stackshot-grpc", 0, 0, 0);
    ss_log_set_level(SS_LOG_DEBUG); /* the host's log chooses */
    ss_log_set_sink(send_line);
    ss_buf_init(&out);
    m = ss_module_grpc_entry();
    if (!m)
        return 1;
    if (fcntl(DOOR_FD, F_GETFD) < 0)
        door = -1; /* started by a build without one */
    add_client(OWNER_FD);
    serve();
    for (int i = 0; i < n_slots; i++)
        if (clients[i].fd >= 0)
            drop_client(&clients[i]);
    /* no grpc_shutdown: it can wait on gRPC's threads; the process ends */
    _exit(0);
}
