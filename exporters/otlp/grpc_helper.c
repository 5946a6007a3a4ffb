/* grpc_helper.c: stackshot-grpc-helper, the process that makes a host's
 * OTLP/gRPC calls (grpc_remote.c starts it; the frames are grpc_wire.h).
 *
 * gRPC C core brings about 60 libraries (abseil, libstdc++, OpenSSL,
 * c-ares, re2, upb) and its own threads into whatever process uses it,
 * and each of them is paid by the host at every fork (its mappings,
 * its malloc arenas, its threads' stacks and TLB flushes), in resident
 * memory and at its start. Here they live in a process of their own:
 * the host keeps one socket. The helper runs the same client as the
 * module (grpc_client.c, linked in), one client and one call at a time,
 * and ends when the host's end of the socket closes (the host exits,
 * execs, or the agent stops).
 *
 * It leads a session of its own (setsid): signals meant for the host's
 * process group or terminal do not reach it.
 *
 * Its descriptors: 3 the socket, 0-2 /dev/null (gRPC writes nothing to
 * the host's stderr; the client's own lines go to the host as 'L' frames
 * and the host's log writes them). */
#include "agent/log.h"
#include "agent/time.h"
#include "exporters/otlp/grpc_module.h"
#include "exporters/otlp/grpc_wire.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define SOCK 3
/* How often a call in flight looks for a cancel from the host. */
#define POLL_NS 20000000ull

const void *ss_module_grpc_entry(void);

static ss_buf out; /* a frame being sent (one thread: no lock) */

/* End the frame begun in b, send it, and empty b for the next (also
 * after a frame that could not be made: no memory). */
static void send_frame(ss_buf *b) {
    if (ss_gw_end(b, 0) == 0)
        (void)ss_gw_send(SOCK, b->data, b->len, 0);
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
    send_frame(&line);
    ss_buf_free(&line);
}

static void send_done(const ss_grpc_result *res) {
    ss_gw_begin(&out, SS_GW_DONE);
    ss_gw_put_result(&out, res);
    send_frame(&out);
}

static void send_created(int rc) {
    ss_gw_begin(&out, SS_GW_CREATED);
    ss_gw_u32(&out, (uint32_t)-rc);
    send_frame(&out);
}

typedef struct helper {
    const ss_grpc_module *m;
    ss_grpc_client *client;
    ss_grpc_call *call; /* in flight, or NULL */
    char method[256];   /* its method: gRPC keeps a pointer to it */
    ss_buf in;
} helper;

/* One frame from the host. false: the helper ends. */
static bool on_frame(helper *h, int type, const void *payload, size_t len) {
    ss_gw_reader r;
    ss_gw_reader_init(&r, payload, len);
    ss_grpc_result res;
    ss_grpc_result_init(&res);
    bool go_on = true;
    switch (type) {
    case SS_GW_ENDPOINT: {
        if (h->client)
            break;
        ss_otlp_endpoint ep;
        int rc = ss_gw_get_endpoint(&r, &ep);
        if (rc == 0) {
            h->client = h->m->client_create(&ep);
            rc = h->client ? 0 : -EIO;
        }
        ss_otlp_endpoint_free(&ep);
        send_created(rc);
        go_on = rc == 0;
        break;
    }
    case SS_GW_START: {
        uint64_t deadline = ss_gw_get_u64(&r);
        if (h->call)
            r.bad = true; /* one call at a time: its method stays as it is */
        else
            ss_gw_get_str_into(&r, h->method, sizeof h->method);
        size_t n;
        const void *bytes = ss_gw_get_bytes(&r, &n);
        if (!h->client || h->call || r.bad || !h->method[0]) {
            res.status = SS_GRPC_INTERNAL;
            snprintf(res.message, sizeof res.message, "the gRPC helper got a call it cannot make");
            send_done(&res);
        } else {
            h->call = h->m->call_start(h->client, h->method, bytes, n, deadline, &res);
            if (!h->call)
                send_done(&res);
        }
        break;
    }
    case SS_GW_CANCEL:
        if (h->call) {
            h->m->call_cancel(h->client, h->call, &res);
            h->call = NULL;
            send_done(&res);
        }
        break;
    default:
        go_on = false; /* not a frame of this build's */
    }
    ss_grpc_result_free(&res);
    return go_on;
}

static int serve(helper *h) {
    for (;;) {
        int type;
        size_t len;
        /* idle: wait for the host; a call in flight: look, then let gRPC
         * run it a little */
        int got = ss_gw_recv(SOCK, &h->in, h->call ? 0 : UINT64_MAX, &type, &len);
        if (got < 0)
            return 0; /* the host's end closed: the host is gone or done */
        if (got == 1) {
            bool go_on = on_frame(h, type, h->in.data + SS_GW_HEADER, len);
            ss_gw_consume(&h->in, len);
            if (!go_on)
                return 1;
            continue;
        }
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        if (h->call && h->m->call_poll(h->client, h->call, POLL_NS, &res)) {
            h->call = NULL;
            send_done(&res);
        }
        ss_grpc_result_free(&res);
    }
}

int main(void) {
    /* a session of its own: the host's terminal (^C, ^Z, a hangup) and a
     * kill of the host's process group are the host's; the helper ends
     * with its socket */
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent's thread blocked them all */
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_NAME, "stackshot-grpc", 0, 0, 0);
    ss_log_set_level(SS_LOG_DEBUG); /* the host's log chooses */
    ss_log_set_sink(send_line);
    ss_buf_init(&out);
    helper h = {.m = ss_module_grpc_entry()};
    ss_buf_init(&h.in);
    if (!h.m)
        return 1;
    int rc = serve(&h);
    if (h.call) {
        ss_grpc_result res;
        ss_grpc_result_init(&res);
        h.m->call_cancel(h.client, h.call, &res);
        ss_grpc_result_free(&res);
    }
    if (h.client)
        h.m->client_destroy(h.client);
    /* no grpc_shutdown: it can wait on gRPC's threads; the process ends */
    _exit(rc);
}
