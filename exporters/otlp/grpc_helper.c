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
 * and the other processes configured as the owner is, its forked children
 * first, which connect to the socket listening on descriptor 4 (bound by
 * the owner to the helper's name: grpc_remote.c). A forking server's
 * children thus share one helper instead of one each (or none: gRPC
 * cannot be used in a forked child of a process that ran it). A client
 * of another user or group is closed unanswered: the helper acts with
 * the owner's rights. Each client gets a thread and a gRPC client of its
 * own (its endpoint frame): the calls of one never wait for another's,
 * nor for a client that stops reading or leaves (gRPC's cancels and
 * queue drains can take their time).
 *
 * It ends when it has no client left (its name goes with it: the next
 * process to look starts another). An owner that quits while others
 * remain is told so ('K') and does not wait for it.
 *
 * It leads a session of its own (setsid): signals meant for the host's
 * process group or terminal do not reach it.
 *
 * Its descriptors: 3 the owner's socket, 4 the listening one, 0-2 /dev/null
 * (gRPC writes nothing to the host's stderr; the client's own lines go
 * to the client being served as 'L' frames, and its log writes them). */
#include "agent/log.h"
#include "agent/time.h"
#include "exporters/otlp/grpc_module.h"
#include "exporters/otlp/grpc_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define OWNER_FD 3
#define LISTEN_FD 4
/* How often a call in flight looks for a cancel from its client. */
#define POLL_NS 20000000ull
/* How long a frame may wait for a client to make room for it. */
#define SEND_WAIT_NS 2000000000ull

const void *ss_module_grpc_entry(void);

typedef struct client {
    int fd;
    pthread_mutex_t send_lock; /* its frames and the helper's lines */
    ss_grpc_client *grpc;      /* made at its 'E' frame */
    ss_grpc_call *call;        /* in flight, or NULL */
    char method[256];          /* the call's method: gRPC keeps a pointer to it */
    ss_buf in, out;
    struct client *next;
} client;

static const ss_grpc_module *m;
/* The clients, under `lock`: the helper ends with the last. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static client *clients;
static int n_clients;
/* The client a thread serves: its lines go there (gRPC's own threads'
 * lines to the first client). */
static __thread client *serving;

/* End the frame begun in b and send it to c (also after a frame that
 * could not be made: no memory; b is emptied either way). A client that
 * does not take it within SEND_WAIT_NS (a stopped process whose socket is
 * full) is shut out: its end reads as closed on both sides and its
 * thread ends. */
static void send_frame(client *c, ss_buf *b) {
    if (ss_gw_end(b, 0) == 0 && c) {
        pthread_mutex_lock(&c->send_lock);
        if (ss_gw_send(c->fd, b->data, b->len, ss_mono_ns() + SEND_WAIT_NS) != 0)
            shutdown(c->fd, SHUT_RDWR);
        pthread_mutex_unlock(&c->send_lock);
    }
    ss_buf_reset(b);
    b->failed = false;
}

/* A line of the client's, in a buffer of its own: it may come while a
 * frame is being made in `out`. */
static void send_line(ss_log_level level, const char *msg) {
    ss_buf line;
    ss_buf_init(&line);
    ss_gw_begin(&line, SS_GW_LOG);
    ss_gw_u32(&line, (uint32_t)level);
    ss_gw_str(&line, msg);
    if (serving) {
        send_frame(serving, &line);
    } else {
        pthread_mutex_lock(&lock); /* a client leaves only under it */
        send_frame(clients, &line);
        pthread_mutex_unlock(&lock);
    }
    ss_buf_free(&line);
}

static void send_done(client *c, const ss_grpc_result *res) {
    ss_gw_begin(&c->out, SS_GW_DONE);
    ss_gw_put_result(&c->out, res);
    send_frame(c, &c->out);
}

/* A client that leaves: the last one ends the helper (its listening
 * socket, and so its name, go with it). */
static void leave(client *c) {
    if (c->call) {
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        m->call_cancel(c->grpc, c->call, &res);
        ss_grpc_result_free(&res);
        c->call = NULL;
    }
    if (c->grpc)
        m->client_destroy(c->grpc);
    serving = NULL;
    pthread_mutex_lock(&lock);
    for (client **p = &clients; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    close(c->fd);
    ss_buf_free(&c->in);
    ss_buf_free(&c->out);
    pthread_mutex_destroy(&c->send_lock);
    free(c);
    if (--n_clients == 0)
        _exit(0); /* no grpc_shutdown: it can wait on gRPC's threads */
    pthread_mutex_unlock(&lock);
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
        ss_gw_begin(&c->out, SS_GW_CREATED);
        ss_gw_u32(&c->out, (uint32_t)-rc);
        ss_gw_u32(&c->out, (uint32_t)getpid());
        send_frame(c, &c->out);
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
    case SS_GW_QUIT: {
        /* the owner leaves; other clients keep the helper */
        pthread_mutex_lock(&lock);
        bool others = n_clients > 1;
        pthread_mutex_unlock(&lock);
        if (others) {
            ss_gw_begin(&c->out, SS_GW_KEEPING);
            send_frame(c, &c->out);
        }
        go_on = false;
        break;
    }
    default:
        go_on = false; /* not a frame of this build's */
    }
    ss_grpc_result_free(&res);
    return go_on;
}

/* A client's thread: its frames, and gRPC's run of its call in flight
 * between two looks at its socket. */
static void *serve(void *arg) {
    client *c = arg;
    serving = c;
    for (;;) {
        int type;
        size_t len;
        int got = ss_gw_recv(c->fd, &c->in, c->call ? 0 : UINT64_MAX, &type, &len);
        if (got < 0)
            break; /* its end closed: it exited, exec'd or stopped */
        if (got == 1) {
            bool go_on = on_frame(c, type, c->in.data + SS_GW_HEADER, len);
            ss_gw_consume(&c->in, len);
            if (!go_on)
                break;
            continue;
        }
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        if (c->call && m->call_poll(c->grpc, c->call, POLL_NS, &res)) {
            c->call = NULL;
            send_done(c, &res);
        }
        ss_grpc_result_free(&res);
    }
    leave(c);
    return NULL;
}

/* A new client and its thread (detached). false: none could be made
 * (its socket is closed: it hears so and does without). */
static bool add_client(int fd) {
    client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return false;
    }
    c->fd = fd;
    pthread_mutex_init(&c->send_lock, NULL);
    ss_buf_init(&c->in);
    ss_buf_init(&c->out);
    pthread_mutex_lock(&lock);
    c->next = clients;
    clients = c;
    n_clients++;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, serve, c) == 0;
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&lock);
    if (!ok)
        leave(c); /* the owner's failure ends the helper */
    return ok;
}

/* The clients that connect to the listening socket, each taken if it is
 * of the helper's user and group. Returns when the socket cannot be
 * used (a helper started unnamed); the helper goes on with its clients. */
static void take_clients(void) {
    for (;;) {
        int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return;
        }
        if (!ss_gw_peer_is_us(fd))
            close(fd);
        else
            add_client(fd);
    }
}

int main(void) {
    /* a session of its own: the host's terminal (^C, ^Z, a hangup) and a
     * kill of the host's process group are the host's; the helper ends
     * with its last client */
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent's thread blocked them all */
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "stackshot-grpc", 0, 0, 0);
    ss_log_set_level(SS_LOG_DEBUG); /* the host's log chooses */
    ss_log_set_sink(send_line);
    m = ss_module_grpc_entry();
    if (!m || !add_client(OWNER_FD))
        return 1;
    take_clients();
    close(LISTEN_FD); /* unnamed: nobody else can come */
    for (;;)
        pause(); /* the last client's thread ends the process */
}
