/* bench_otlp_logs.c: what the otlp_logs exporter costs.
 *
 *   bench_otlp_logs [rounds]      (default 200)
 *
 * Synthetic rounds of 100 threads, 50 frames each (Java-like names), built
 * with ss_round_builder. Prints, each against a baseline measured in the
 * same run:
 *   1. encoding: records/s and bytes per record of the OTLP request, plain
 *      and gzip-compressed, against formatting the same bodies as text only;
 *   2. export on loopback through each transport of the OTLP sender (gRPC
 *      to an in-process gRPC C-core server, http/protobuf to an in-process
 *      HTTP/1.1 server, both answering OK), without and with gzip:
 *      records/s against encoding alone, and the bytes on the wire per
 *      record (counted by a relay between the two, both directions);
 *   3. resident memory the gRPC client adds (gRPC initialised, channel,
 *      one request), measured before the servers exist;
 *   4. cost on a host workload while the agent runs with the receiver down
 *      (otlp_logs to a closed port over each transport, a round every
 *      20 ms) against the agent running with no exporter at all: the ratio
 *      of the workload's time.
 * Timings are never asserted; they vary with the machine. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/lifecycle.h"
#include "agent/log.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "exporters/otlp_logs/logs.h"
#include "exporters/otlp/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define THREADS 100
#define DEPTH 50

static ss_round *make_round(uint64_t seq) {
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, ss_wall_ns(), 1000, SS_RUNTIME_JVM);
    const ss_funcinfo *fns[DEPTH];
    for (int d = 0; d < DEPTH; d++) {
        char ns[64], name[64], file[64];
        snprintf(ns, sizeof ns, "com.example.service.layer%d.Component%d", d % 7, d);
        snprintf(name, sizeof name, "handleRequest%d", d);
        snprintf(file, sizeof file, "Component%d.java", d);
        fns[d] = ss_funcinfo_intern(ns, name, file, d < 5 ? "java.base@17.0.15" : NULL,
                                    SS_FRAME_JAVA);
    }
    for (int i = 0; i < THREADS; i++) {
        char name[32];
        snprintf(name, sizeof name, "http-nio-8080-exec-%d", i);
        ss_thread_sample *t = ss_round_builder_add_thread(b, name);
        t->number = 30 + i;
        t->nid = 10000 + i;
        t->tid = 0x7f0000001000ull + (uint64_t)i * 0x1000;
        t->prio = 5;
        t->state = i % 3 ? SS_STATE_WAITING : SS_STATE_RUNNABLE;
        t->status = i % 3 ? "waiting on condition" : "runnable";
        t->state_detail = i % 3 ? "parking" : NULL;
        t->cpu_ns = 1000000ull * (uint64_t)(i + seq);
        t->elapsed_ns = 5000000000ull;
        t->has_span = i % 4 == 0;
        for (int d = 0; d < DEPTH; d++) {
            ss_frame f = {.fn = fns[(d + i) % DEPTH], .line = 100 + d, .addr = (uint64_t)d};
            ss_round_builder_add_frame(b, &f);
        }
    }
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    ss_round_builder_destroy(b);
    return r;
}

static double secs(uint64_t ns) { return (double)ns / 1e9; }

static size_t rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE) / 1024;
}

static size_t gzip_len(const void *p, size_t n) {
    uLongf out = compressBound(n);
    Bytef *buf = malloc(out);
    /* gRPC's gzip uses zlib's default level */
    z_stream z = {0};
    deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = buf;
    z.avail_out = (uInt)out;
    deflate(&z, Z_FINISH);
    size_t len = z.total_out;
    deflateEnd(&z);
    free(buf);
    return len;
}

/* ---- an OK-answering gRPC server on its own thread ------------------ */

static grpc_server *server;
static grpc_completion_queue *server_cq;

static void wait_tag(grpc_completion_queue *cq, void *tag) {
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE || ev.tag == tag)
            return;
    }
}

static void *server_main(void *arg) {
    (void)arg;
    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details details;
        grpc_metadata_array md;
        grpc_call_details_init(&details);
        grpc_metadata_array_init(&md);
        if (grpc_server_request_call(server, &call, &details, &md, server_cq, server_cq,
                                     (void *)1) != GRPC_CALL_OK)
            return NULL;
        wait_tag(server_cq, (void *)1);
        grpc_byte_buffer *in = NULL;
        grpc_op ops[2];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_RECV_MESSAGE;
        ops[1].data.recv_message.recv_message = &in;
        grpc_call_start_batch(call, ops, 2, (void *)2, NULL);
        wait_tag(server_cq, (void *)2);
        grpc_slice empty = grpc_empty_slice();
        grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&empty, 0);
        int cancelled = 0;
        grpc_op ops2[3];
        memset(ops2, 0, sizeof ops2);
        ops2[0].op = GRPC_OP_SEND_MESSAGE;
        ops2[0].data.send_message.send_message = out;
        ops2[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops2[1].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops2[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops2[2].data.recv_close_on_server.cancelled = &cancelled;
        grpc_call_start_batch(call, ops2, 3, (void *)3, NULL);
        wait_tag(server_cq, (void *)3);
        grpc_byte_buffer_destroy(out);
        if (in)
            grpc_byte_buffer_destroy(in);
        grpc_call_unref(call);
        grpc_call_details_destroy(&details);
        grpc_metadata_array_destroy(&md);
    }
}

static int start_server(void) {
    server = grpc_server_create(NULL, NULL);
    server_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, server_cq, NULL);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(server, "127.0.0.1:0", creds);
    grpc_server_credentials_release(creds);
    grpc_server_start(server);
    pthread_t t;
    pthread_create(&t, NULL, server_main, NULL);
    pthread_detach(t);
    return port;
}

/* ---- an OK-answering HTTP/1.1 server, keep-alive, on its own thread -- */

static int listen_loopback(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    return fd;
}

static int port_of(int fd) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    return ntohs(a.sin_port);
}

/* One connection: requests with Content-Length bodies, each answered 200. */
static void *http_conn(void *arg) {
    int c = (int)(intptr_t)arg;
    static __thread char buf[1 << 16];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t r = read(c, buf + have, sizeof buf - have);
            if (r <= 0)
                goto out;
            have += (size_t)r;
        }
        size_t head = (size_t)(end - buf) + 4, body = 0;
        char *cl = memmem(buf, head, "ontent-Length:", 14);
        if (!cl)
            cl = memmem(buf, head, "ontent-length:", 14);
        if (cl)
            body = strtoul(cl + 14, NULL, 10);
        size_t in_buf = have - head < body ? have - head : body;
        size_t left = body - in_buf;
        while (left) {
            ssize_t r = read(c, buf, left < sizeof buf ? left : sizeof buf);
            if (r <= 0)
                goto out;
            left -= (size_t)r;
        }
        memmove(buf, buf + head + in_buf, have - head - in_buf);
        have -= head + in_buf;
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                                 "Content-Length: 0\r\n\r\n";
        if (write(c, ok, sizeof ok - 1) < 0)
            break;
    }
out:
    close(c);
    return NULL;
}

static void *http_main(void *arg) {
    int l = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        pthread_create(&t, NULL, http_conn, (void *)(intptr_t)c);
        pthread_detach(t);
    }
    return NULL;
}

static int start_http_server(void) {
    int l = listen_loopback();
    pthread_t t;
    pthread_create(&t, NULL, http_main, (void *)(intptr_t)l);
    pthread_detach(t);
    return port_of(l);
}

/* ---- a relay that counts the bytes on the wire ------------------------ */

static _Atomic uint64_t wire_bytes;

typedef struct relay {
    int listen_fd, upstream;
} relay;

static void *relay_main(void *arg) {
    relay *r = arg;
    for (;;) {
        int c = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->upstream),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
            close(c);
            close(u);
            continue;
        }
        /* no Nagle: a relay that held a small write back for the peer's
         * delayed ACK would add 40 ms to calls the direct path has not */
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* one connection at a time: the exporter keeps one */
        struct pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
        char buf[1 << 16];
        for (bool open = true; open;) {
            if (poll(p, 2, -1) <= 0)
                continue;
            for (int i = 0; i < 2 && open; i++) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                ssize_t n = read(p[i].fd, buf, sizeof buf);
                if (n <= 0) {
                    open = false;
                    break;
                }
                atomic_fetch_add(&wire_bytes, (uint64_t)n);
                for (ssize_t off = 0; off < n;) {
                    ssize_t w = write(p[1 - i].fd, buf + off, (size_t)(n - off));
                    if (w <= 0) {
                        open = false;
                        break;
                    }
                    off += w;
                }
            }
        }
        close(c);
        close(u);
    }
    return NULL;
}

/* A relay on a port of its own to 127.0.0.1:upstream; returns its port. */
static int start_relay(int upstream) {
    relay *r = malloc(sizeof *r);
    r->listen_fd = listen_loopback();
    r->upstream = upstream;
    pthread_t t;
    pthread_create(&t, NULL, relay_main, r);
    pthread_detach(t);
    return port_of(r->listen_fd);
}

/* ---- export through a transport -------------------------------------- */

/* Send `rounds` requests of one round each through the transport the
 * environment selects; returns the time, *ok the calls answered OK. */
static uint64_t export_rounds(ss_logs_encoder *enc, ss_otlp_resource *res, ss_round *r,
                              int rounds, ss_buf *out, int *ok) {
    ss_otlp_endpoint ep;
    ss_otlp_endpoint_load(&ep, "LOGS");
    const ss_otlp_transport *tr = ep.protocol == SS_OTLP_HTTP_PROTOBUF
                                      ? &ss_otlp_transport_http
                                      : &ss_otlp_transport_grpc;
    ss_otlp_signal sig = {.who = "bench", .signal = "LOGS", .grpc_method = SS_LOGS_METHOD,
                          .http_path = SS_LOGS_HTTP_PATH, .items = "records"};
    void *t = NULL;
    *ok = 0;
    if (tr->open(&t, &ep, &sig) != 0) {
        ss_otlp_endpoint_free(&ep);
        return 1;
    }
    uint32_t n, dropped;
    uint64_t t0 = ss_mono_ns();
    for (int k = 0; k < rounds; k++) {
        ss_logs_encode(enc, res, r, 0, 512, SS_LOGS_MAX_REQUEST, ss_wall_ns(), out, &n,
                       &dropped);
        ss_otlp_outcome o;
        ss_otlp_outcome_init(&o);
        if (tr->start(t, out->data, out->len, ss_mono_ns() + 10000000000ull, &o))
            while (!tr->poll(t, 1000000000ull, &o))
                ;
        *ok += o.ok;
        ss_otlp_outcome_free(&o);
    }
    uint64_t took = ss_mono_ns() - t0;
    tr->close(t);
    ss_otlp_endpoint_free(&ep);
    return took;
}

/* ---- the host workload ---------------------------------------------- */

static uint64_t workload(void) {
    uint64_t t0 = ss_mono_ns();
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < 600000000ull; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return ss_mono_ns() - t0;
}

static _Atomic bool source_stop;
static pthread_t source_thread;

static void *source_main(void *arg) {
    (void)arg;
    uint64_t seq = 0;
    while (!atomic_load(&source_stop)) {
        ss_exporters_publish(make_round(++seq));
        ss_sleep_ns(20000000);
    }
    return NULL;
}

static int source_start(const ss_config *cfg) {
    (void)cfg;
    atomic_store(&source_stop, false);
    return ss_thread_start(&source_thread, "bench", source_main, NULL);
}

static void source_stop_fn(uint64_t deadline) {
    atomic_store(&source_stop, true);
    ss_thread_join(source_thread, deadline);
}

static const ss_source_ops bench_source = {
    .name = "bench", .start = source_start, .stop = source_stop_fn};

static uint64_t host_run(uint32_t exporters, const char *endpoint) {
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, 1);
    setenv("STACKSHOT_LOG_LEVEL", "error", 1);
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    cfg.exporters = exporters;
    cfg.interval_ms = 20;
    cfg.shutdown_ms = 500;
    ss_agent_start(&bench_source, &cfg);
    uint64_t t = workload();
    ss_agent_stop();
    return t;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    ss_process_refresh();
    ss_log_set_level(SS_LOG_ERROR);
    ss_otlp_resource res;
    ss_otlp_resource_build(&res);
    ss_round *r = make_round(1);
    ss_logs_encoder enc;
    ss_logs_encoder_init(&enc);
    ss_buf out, text;
    ss_buf_init(&out);
    ss_buf_init(&text);
    printf("otlp_logs benchmark: rounds of %d threads x %d frames, %d rounds\n", THREADS, DEPTH,
           rounds);

    /* 1. encoding vs text formatting */
    uint64_t t0 = ss_mono_ns();
    for (int k = 0; k < rounds; k++) {
        ss_buf_reset(&text);
        for (uint32_t i = 0; i < r->n_threads; i++)
            ss_text_format_thread(r, &r->threads[i], &text);
    }
    uint64_t t_text = ss_mono_ns() - t0;
    uint32_t n, dropped;
    t0 = ss_mono_ns();
    for (int k = 0; k < rounds; k++)
        ss_logs_encode(&enc, &res, r, 0, 512, SS_LOGS_MAX_REQUEST, ss_wall_ns(), &out, &n,
                       &dropped);
    uint64_t t_enc = ss_mono_ns() - t0;
    double recs = (double)rounds * THREADS;
    size_t gz = gzip_len(out.data, out.len);
    printf("text bodies only:  %10.0f records/s (baseline), %6.0f bytes/record\n",
           recs / secs(t_text), (double)text.len / THREADS);
    printf("OTLP encode:       %10.0f records/s (%.2fx the text baseline's time), "
           "%6.0f bytes/record, %5.0f gzip'd (%.1f%%)\n",
           recs / secs(t_enc), (double)t_enc / (double)t_text, (double)out.len / THREADS,
           (double)gz / THREADS, 100.0 * (double)gz / (double)out.len);

    /* 1b. the pprof body format: one record per round */
    {
    t0 = ss_mono_ns();
    for (int k = 0; k < rounds; k++)
        ss_logs_encode_pprof(&enc, &res, r, ss_wall_ns(), &out);
    uint64_t t_pp = ss_mono_ns() - t0;
    printf("pprof body format: %10.0f threads/s (%.2fx the text baseline's time), "
           "%6.0f bytes/thread in the request\n",
           recs / secs(t_pp), (double)t_pp / (double)t_text, (double)out.len / THREADS);
    }
    ss_logs_encode(&enc, &res, r, 0, 512, SS_LOGS_MAX_REQUEST, ss_wall_ns(), &out, &n,
                   &dropped); /* the text request again, for what follows */

    /* 3. memory the gRPC client adds (before the servers exist) */
    size_t rss0 = rss_kib();
    ss_otlp_endpoint ep;
    int create_err = 0;
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", 1);
    ss_otlp_endpoint_load(&ep, "LOGS");
    ss_grpc_client *dead = ss_grpc_client_create(&ep, "bench_otlp_logs", &create_err);
    ss_grpc_result gr;
    ss_grpc_result_init(&gr);
    ss_grpc_unary(dead, SS_LOGS_METHOD, out.data, out.len, ss_mono_ns() + 1000000000ull, &gr);
    ss_grpc_result_free(&gr);
    sleep(1);
    size_t rss1 = rss_kib();
    ss_grpc_client_destroy(dead);
    ss_otlp_endpoint_free(&ep);
    printf("resident memory:   +%zu KiB for gRPC + channel + one %zu-byte request "
           "(process baseline %zu KiB)\n",
           rss1 - rss0, out.len, rss0);

    /* 2. export on loopback, each transport, gzip off and on, through a
     * relay that counts the bytes on the wire (both directions) */
    int grpc_port = start_relay(start_server());
    int http_port = start_relay(start_http_server());
    uint64_t t_first = 0;
    for (int proto = 0; proto < 2; proto++)
        for (int gzip = 0; gzip < 2; gzip++) {
            char url[64];
            snprintf(url, sizeof url, "http://127.0.0.1:%d", proto ? http_port : grpc_port);
            setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
            setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto ? "http/protobuf" : "grpc", 1);
            setenv("OTEL_EXPORTER_OTLP_COMPRESSION", gzip ? "gzip" : "none", 1);
            int ok;
            atomic_store(&wire_bytes, 0);
            uint64_t t_exp = export_rounds(&enc, &res, r, rounds, &out, &ok);
            uint64_t wire = atomic_load(&wire_bytes);
            if (!t_first)
                t_first = t_exp;
            printf("export %-13s %s %9.0f records/s (%.2fx encoding alone, %.2fx gRPC plain), "
                   "%6.0f bytes/record on the wire, %d/%d calls OK\n",
                   proto ? "http/protobuf" : "grpc", gzip ? "gzip" : "    ",
                   recs / secs(t_exp), (double)t_exp / (double)t_enc,
                   (double)t_exp / (double)t_first, (double)wire / recs, ok, rounds);
        }
    unsetenv("OTEL_EXPORTER_OTLP_COMPRESSION");
    unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL");

    /* 4. host cost with the receiver down: alternate runs, best of three
     * each (the machine is shared; the minimum is the least disturbed). */
    uint64_t b = UINT64_MAX, dg = UINT64_MAX, dh = UINT64_MAX;
    for (int k = 0; k < 3; k++) {
        uint64_t x = host_run(0, "http://127.0.0.1:1");
        setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", 1);
        uint64_t y = host_run(ss_exporter_bit("otlp_logs"), "http://127.0.0.1:1");
        setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", 1);
        uint64_t z = host_run(ss_exporter_bit("otlp_logs"), "http://127.0.0.1:1");
        unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL");
        b = x < b ? x : b;
        dg = y < dg ? y : dg;
        dh = z < dh ? z : dh;
    }
    printf("host workload:     %.3f s with no exporter (baseline); otlp_logs with the receiver "
           "down: %.3f s over grpc (ratio %.3f), %.3f s over http/protobuf (ratio %.3f)\n",
           secs(b), secs(dg), (double)dg / (double)b, secs(dh), (double)dh / (double)b);
    printf("                   (a round of %d threads every 20 ms in both: 50x the default "
           "rate)\n",
           THREADS);

    ss_round_unref(r);
    ss_buf_free(&out);
    ss_buf_free(&text);
    ss_logs_encoder_free(&enc);
    ss_otlp_resource_free(&res);
    fflush(stdout);
    _exit(0); /* the server thread never returns */
}
