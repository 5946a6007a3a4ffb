/* test_qb_exporter.c: the exporter's pieces without the fan-out: the TCP
 * client's bytes against the spec's transcript (§3.6), the reply parser
 * (§3.4, §3.8), the stream writers' headers (§4, §5) and the mapping of
 * samples to trace chunks and calls records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/buf.h"
#include "agent/exporter_stats.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"
#include "tools/stackshot-dump/decode.h"

static size_t unhex(const char *hex, uint8_t *out) {
    size_t n = 0;
    for (const char *p = hex; *p;) {
        if (*p == ' ' || *p == '\n') {
            p++;
            continue;
        }
        unsigned v;
        sscanf(p, "%2x", &v);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

/* ---- the client against a scripted collector ---------------------------- */

/* Replies in stages: stage i is sent once `after[i]` bytes have come. */
typedef struct script {
    int listen_fd;
    uint8_t got[4096];
    size_t got_len;
    const uint8_t *reply[4];
    size_t reply_len[4], after[4];
    int stages;
} script;

static void *collector_main(void *arg) {
    script *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    int stage = 0;
    for (;;) {
        ssize_t n = recv(fd, s->got + s->got_len, sizeof s->got - s->got_len, 0);
        if (n <= 0)
            break;
        s->got_len += (size_t)n;
        while (stage < s->stages && s->got_len >= s->after[stage]) {
            if (write(fd, s->reply[stage], s->reply_len[stage]) < 0)
                break;
            stage++;
        }
    }
    close(fd);
    return NULL;
}

static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
}

/* §3.6: the handshake and the INIT of "trace", byte for byte; then one
 * RCV_DATA with its ack and a REQUEST_ACK_FLUSH with its ack. */
static void client_transcript(void **st) {
    (void)st;
    uint8_t want[512], reply[128];
    size_t nw = unhex("14 00 00 00 00 00 01 89 61"
                      " 00 00 00 15 70 6F 64 2D 61 62 63 5F 31 37 30 30 30 30 30 30 30 30 30 30 30"
                      " 00 00 00 04 73 76 63 31 00 00 00 03 6E 73 31"
                      " 15 00 00 00 05 74 72 61 63 65 00 00 00 00 00 00 00 00"
                      " 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 03 41 42 43"
                      " 11",
                      want);
    size_t nr = unhex("00 00 00 00 00 01 88 FD"
                      " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
                      " 00 00 00 00 00 04 93 E0 00 00 00 00 00 20 00 00 00 00 00 00"
                      " 00 00",
                      reply);
    /* handshake 49 bytes, INIT 18, RCV_DATA 24, 0x11 1 */
    script s = {.reply = {reply, reply + 8, reply + 44, reply + 45},
                .reply_len = {8, 36, 1, 1},
                .after = {49, 67, 91, 92},
                .stages = 4};
    assert_int_equal(nr, 46);
    int port;
    s.listen_fd = listen_any(&port);
    pthread_t t;
    pthread_create(&t, NULL, collector_main, &s);
    ss_exporter_stats stats = {0};
    qb_client c;
    qb_client_init(&c, 2000, &stats);
    uint64_t dl = ss_mono_ns() + 5000000000ull;
    assert_int_equal(qb_client_connect(&c, "127.0.0.1", port, "pod-abc_1700000000000", "svc1",
                                       "ns1", dl), 0);
    qb_init_reply r;
    assert_int_equal(qb_client_init_stream(&c, "trace", 0, false, &r, dl), 0);
    assert_int_equal(r.rotation_period_ms, 300000);
    assert_int_equal(r.required_size, 2097152);
    assert_int_equal(r.seq, 0);
    assert_int_equal(r.handle[15], 1);
    assert_int_equal(qb_client_send(&c, r.handle, "ABC", 3, dl), 0);
    assert_int_equal(qb_client_flush(&c, dl), 0);
    assert_int_equal(c.pending_acks, 0);
    qb_client_close(&c, false, dl);
    pthread_join(t, NULL);
    close(s.listen_fd);
    assert_int_equal(s.got_len, nw);
    assert_memory_equal(s.got, want, nw);
    ss_buf_free(&c.out);
}

/* RCV_DATA payloads are cut at 1024 bytes, one ack each. */
static void client_chunks_and_blacklist(void **st) {
    (void)st;
    uint8_t reply[64];
    size_t nr = unhex("00 00 00 00 05 4C 56 38", reply); /* 88888888 */
    script s = {.reply = {reply}, .reply_len = {nr}, .after = {1}, .stages = 1};
    int port;
    s.listen_fd = listen_any(&port);
    pthread_t t;
    pthread_create(&t, NULL, collector_main, &s);
    ss_exporter_stats stats = {0};
    qb_client c;
    qb_client_init(&c, 2000, &stats);
    assert_int_equal(qb_client_connect(&c, "127.0.0.1", port, "", "", "",
                                       ss_mono_ns() + 5000000000ull), -EACCES);
    qb_client_close(&c, false, 0);
    pthread_join(t, NULL);
    close(s.listen_fd);
    /* empty names go out as "unknown" */
    assert_non_null(memmem(s.got, s.got_len, "\0\0\0\x07unknown", 11));
    ss_buf_free(&c.out);
}

/* A collector that never answers: the client gives up at its timeout. */
static void client_timeout(void **st) {
    (void)st;
    script s = {.stages = 0};
    int port;
    s.listen_fd = listen_any(&port);
    pthread_t t;
    pthread_create(&t, NULL, collector_main, &s);
    ss_exporter_stats stats = {0};
    qb_client c;
    qb_client_init(&c, 300, &stats);
    uint64_t t0 = ss_mono_ns();
    assert_int_equal(qb_client_connect(&c, "127.0.0.1", port, "p", "s", "n",
                                       ss_mono_ns() + 5000000000ull), -ETIMEDOUT);
    uint64_t took = ss_mono_ns() - t0;
    assert_true(took >= 250000000ull && took < 2000000000ull);
    qb_client_close(&c, false, 0);
    pthread_join(t, NULL);
    close(s.listen_fd);
    ss_buf_free(&c.out);
}

/* ---- replies ---------------------------------------------------------- */

static void replies(void **st) {
    (void)st;
    uint8_t b[128];
    int64_t v;
    unhex("00 00 00 00 00 01 88 FD", b);
    assert_int_equal(qb_reply_handshake(b, 8, &v), 0);
    assert_int_equal(v, 100605);
    unhex("00 00 00 00 00 01 89 61", b);
    assert_int_equal(qb_reply_handshake(b, 8, &v), 0);
    unhex("00 00 00 00 05 4C 56 38", b);
    assert_int_equal(qb_reply_handshake(b, 8, &v), -EACCES);
    unhex("00 00 00 00 00 01 88 99", b); /* the legacy 100505 */
    assert_int_equal(qb_reply_handshake(b, 8, &v), -EPROTO);
    assert_int_equal(qb_reply_handshake(b, 7, &v), -EAGAIN);

    qb_init_reply r;
    size_t need;
    memset(b, 0, 36);
    assert_int_equal(qb_reply_init(b, 16, &r, &need), -EPROTO); /* null UUID */
    b[3] = 7;
    assert_int_equal(qb_reply_init(b, 16, &r, &need), -EAGAIN);
    assert_int_equal(need, 36);
    b[35] = 5;
    assert_int_equal(qb_reply_init(b, 36, &r, &need), 0);
    assert_int_equal(r.seq, 5);

    size_t used, n_cmds;
    qb_reply_cmd ids[4];
    unhex("00 00 00", b);
    assert_int_equal(qb_reply_acks(b, 3, &used, ids, 4, &n_cmds), 3);
    assert_int_equal(used, 3);
    /* one ack announcing one command: UUID + [S] "td" */
    size_t n = unhex("00 01 AA AA AA AA AA AA AA AA AA AA AA AA AA AA AA AA 00 00 00 02 74 64 00", b);
    assert_int_equal(qb_reply_acks(b, n, &used, ids, 4, &n_cmds), 3);
    assert_int_equal(used, n);
    assert_int_equal(n_cmds, 1);
    assert_int_equal(ids[0].id[0], 0xAA);
    assert_string_equal(ids[0].what, "td");
    /* the same, cut short: only the first ack is whole */
    assert_int_equal(qb_reply_acks(b, n - 3, &used, ids, 4, &n_cmds), 1);
    assert_int_equal(used, 1);
    assert_int_equal(n_cmds, 0);
    unhex("00 FF", b);
    assert_int_equal(qb_reply_acks(b, 2, &used, ids, 4, &n_cmds), -EPROTO);
    unhex("80", b);
    assert_int_equal(qb_reply_acks(b, 1, &used, ids, 4, &n_cmds), -EPROTO);
    unhex("4B", b); /* 'K' would announce 75 commands: incomplete, not an ack */
    assert_int_equal(qb_reply_acks(b, 1, &used, ids, 4, &n_cmds), 0);
}

/* ---- session ------------------------------------------------------------ */

static void decode_into(ss_qb_file *f, ss_qb_stream type, const ss_buf *b) {
    assert_int_equal(ss_qb_decode(f, type, (const uint8_t *)b->data, b->len, -1), 0);
}

static void session_headers(void **st) {
    (void)st;
    qb_session q;
    uint8_t h[16] = {1};
    qb_session_init(&q, 1700000000000LL);
    for (int i = 0; i < QB_NSTREAMS; i++)
        qb_session_opened(&q, i, h, 0, 0, 0, 1700000001780ull);
    assert_int_equal(q.s[QB_TRACE].file_index, 1);
    /* calls: magic + format 4 + the open time (§4.4 example header) */
    uint8_t want[32];
    size_t n = unhex("FF FE FD FC 00 00 00 04 00 00 01 8B CF E5 6E F4", want);
    assert_int_equal(q.s[QB_CALLS].pending.len, n);
    assert_memory_equal(q.s[QB_CALLS].pending.data, want, n);
    /* trace: the agent start */
    n = unhex("00 00 01 8B CF E5 68 00", want);
    assert_memory_equal(q.s[QB_TRACE].pending.data, want, n);
    /* suspend (§4.3 example): base inside the first phrase with the records */
    qb_session_write_suspend(&q, 1700000000086LL, 67);
    qb_session_write_suspend(&q, 1700000000186LL, 64);
    assert_int_equal(q.s[QB_SUSPEND].pending.len, 0); /* not before a flush */
    qb_session_dict_sync(&q);
    qb_session_flush_phrases(&q);
    n = unhex("00 00 00 0C 00 00 01 8B CF E5 68 00 56 43 64 40", want);
    assert_int_equal(q.s[QB_SUSPEND].pending.len, n);
    assert_memory_equal(q.s[QB_SUSPEND].pending.data, want, n);
    /* params: one phrase, version 1, decodable */
    ss_qb_file f;
    decode_into(&f, SS_QB_PARAMS, &q.s[QB_PARAMS].pending);
    assert_int_equal(f.n_phrases, 1);
    assert_int_equal(f.n_params, 8);
    assert_true(ss_qb_str_eq(f.params[0].name, "common.started"));
    ss_qb_file_free(&f);
    /* dictionary: call.info first; after a reconnect, all again from id 0 */
    decode_into(&f, SS_QB_DICTIONARY, &q.s[QB_DICT].pending);
    assert_int_equal(f.n_words, q.dict.n);
    assert_true(ss_qb_str_eq(f.words[0].word, "call.info"));
    ss_qb_file_free(&f);
    uint32_t id = qb_dict_id(&q.dict, "x.y");
    assert_int_equal(qb_dict_id(&q.dict, "x.y"), id);
    qb_session_reset(&q);
    qb_session_opened(&q, QB_DICT, h, 0, 0, 0, 0);
    qb_session_dict_sync(&q);
    qb_session_flush_phrases(&q);
    decode_into(&f, SS_QB_DICTIONARY, &q.s[QB_DICT].pending);
    assert_int_equal(f.n_words, id + 1);
    assert_true(ss_qb_str_eq(f.words[id].word, "x.y"));
    ss_qb_file_free(&f);
    /* rotation: the server's size limit; the new file index = seq + 1 */
    qb_session_opened(&q, QB_TRACE, h, 0, 100, 0, 0);
    assert_false(qb_session_rotation_due(&q, QB_TRACE, 0));
    char junk[200] = {0};
    qb_session_write(&q, QB_TRACE, junk, sizeof junk);
    assert_true(qb_session_rotation_due(&q, QB_TRACE, 0));
    qb_session_opened(&q, QB_TRACE, h, 0, 100, 4, 0);
    assert_int_equal(q.s[QB_TRACE].file_index, 5);
    assert_int_equal(q.s[QB_TRACE].file_bytes, 8);
    qb_session_free(&q);
}

/* ---- mapping ------------------------------------------------------------- */

static const ss_funcinfo *fi(const char *name) {
    return ss_funcinfo_intern("app", name, "App.java", "app.jar", SS_FRAME_JAVA);
}

static ss_round *round_at(ss_round_builder *b, uint64_t ms, const char *const *stack, int depth,
                          uint64_t cpu_total) {
    ss_round_builder_begin(b, ms * 1000000ull, 100, SS_RUNTIME_JVM);
    ss_thread_sample *t = ss_round_builder_add_thread(b, "worker-1");
    t->number = 7;
    t->cpu_ns = cpu_total; /* cumulative, as JVMTI gives it */
    for (int i = depth - 1; i >= 0; i--) {
        ss_frame f = {.fn = fi(stack[i])};
        ss_round_builder_add_frame(b, &f);
    }
    return ss_round_builder_finish(b, 0, 0);
}

static void mapping_events(void **st) {
    (void)st;
    ss_mem_set_limit(64u << 20);
    qb_session q;
    uint8_t h[16] = {1};
    int64_t start = 1700000000000LL;
    qb_session_init(&q, start);
    qb_session_opened(&q, QB_TRACE, h, 0, 0, 0, 0);
    qb_session_opened(&q, QB_CALLS, h, 0, 0, 0, (uint64_t)start);
    qb_map *m = qb_map_create("node-1");
    ss_round_builder *b = ss_round_builder_create();
    static const char *const s1[] = {"run", "a"};
    static const char *const s2[] = {"run", "b", "c"};
    static const char *const s3[] = {"other"};
    struct { const char *const *s; int d; } seq[] = {{s1, 2}, {s2, 3}, {s2, 3}, {s3, 1}};
    for (int i = 0; i < 4; i++) {
        ss_round *r = round_at(b, (uint64_t)start + 1000 + 100 * (uint64_t)i, seq[i].s, seq[i].d,
                               2000000 * (uint64_t)(i + 1));
        qb_map_add_round(m, &q, r);
        ss_round_unref(r);
    }
    qb_map_stats ms = {0};
    qb_map_close_window(m, &q, &ms);
    assert_int_equal(ms.chunks, 1);
    assert_int_equal(ms.calls, 2);
    ss_qb_file tr, ca;
    decode_into(&tr, SS_QB_TRACE, &q.s[QB_TRACE].pending);
    decode_into(&ca, SS_QB_CALLS, &q.s[QB_CALLS].pending);
    assert_int_equal(tr.n_chunks, 1);
    assert_int_equal(tr.chunks[0].offset, 8);
    assert_int_equal(tr.chunks[0].thread_id, 7);
    /* ENTER run, ENTER a @1000; EXIT a, ENTER b, ENTER c @1100; @1300: EXIT c,
     * EXIT b, call.info + 3 tags + time.cpu, EXIT run; ENTER other; then its
     * close at 1300 + interval 100. */
    const ss_qb_event *e = tr.events;
    assert_int_equal(e[0].type, SS_QB_ENTER);
    assert_int_equal(e[0].time_ms, start + 1000);
    assert_int_equal(e[0].delta, 1000); /* first delta = the agent's timer */
    assert_int_equal(e[1].type, SS_QB_ENTER);
    assert_int_equal(e[2].type, SS_QB_EXIT);
    assert_int_equal(e[2].time_ms, start + 1100);
    assert_int_equal(e[3].type, SS_QB_ENTER);
    assert_int_equal(e[4].type, SS_QB_ENTER);
    assert_int_equal(e[5].type, SS_QB_EXIT);
    assert_int_equal(e[5].time_ms, start + 1300);
    assert_int_equal(e[6].type, SS_QB_EXIT);
    assert_int_equal(e[7].type, SS_QB_TAG);
    assert_int_equal(e[7].id, 0); /* call.info */
    assert_int_equal(e[7].value.units, 0);
    assert_int_equal(e[12].type, SS_QB_EXIT); /* the root, after 4 tags */
    assert_int_equal(e[13].type, SS_QB_ENTER);
    assert_int_equal(ca.n_calls, 2);
    const ss_qb_call *c = &ca.calls[0];
    assert_int_equal(c->start_ms, start + 1000);
    assert_int_equal(c->duration, 300);
    assert_int_equal(c->calls, 4); /* run, a, b, c */
    assert_int_equal(c->cpu, 4);   /* growth over its 3 samples: 0 (first), 2, 2 ms */
    assert_int_equal(c->buffer_offset, 8);
    assert_int_equal(c->record_index, 0);
    assert_true(ss_qb_str_eq(c->thread_name, "worker-1"));
    assert_int_equal(ca.calls[1].record_index, 13);
    assert_int_equal(ca.calls[1].duration, 100);
    assert_false(ca.calls[1].has_name); /* the thread table holds it */
    char word[256];
    ss_frame f = {.fn = fi("run")};
    qb_method_word(&f, word, sizeof word);
    assert_string_equal(word, "void app.run() (App.java) [app.jar]");
    ss_qb_file_free(&tr);
    ss_qb_file_free(&ca);

    /* idle: the same stack and no CPU for a whole window writes nothing */
    ss_buf_reset(&q.s[QB_TRACE].pending);
    for (int w = 0; w < 2; w++) {
        for (int i = 0; i < 3; i++) {
            ss_round *r = round_at(b, (uint64_t)start + 5000 + 1000 * (uint64_t)w + 100 * (uint64_t)i,
                                   s3, 1, 8000000);
            qb_map_add_round(m, &q, r);
            ss_round_unref(r);
        }
        memset(&ms, 0, sizeof ms);
        qb_map_close_window(m, &q, &ms);
    }
    assert_int_equal(ms.idle, 1);
    assert_int_equal(ms.chunks, 0);
    ss_round_builder_destroy(b);
    qb_map_destroy(m);
    qb_session_free(&q);
}

/* The dictionary: a word keeps its id, a method's id is cached by its
 * funcinfo, and freeing it gives back every byte it charged (its indexes
 * included). */
static void dictionary_ids_and_bytes(void **state) {
    (void)state;
    size_t before = ss_mem_used();
    qb_dict d;
    qb_dict_init(&d);
    char w[32];
    for (uint32_t i = 0; i < 3000; i++) {
        snprintf(w, sizeof w, "word-%u", i);
        assert_int_equal(qb_dict_id(&d, w), i);
    }
    for (uint32_t i = 0; i < 3000; i += 7) {
        snprintf(w, sizeof w, "word-%u", i);
        assert_int_equal(qb_dict_id(&d, w), i); /* the same id again */
    }
    assert_int_equal(d.n, 3000);
    uint32_t ids[600];
    for (uint32_t i = 0; i < 600; i++) {
        snprintf(w, sizeof w, "m%u", i);
        ss_frame f = {.fn = ss_funcinfo_intern("com.example.C", w, "C.java", NULL, SS_FRAME_JAVA)};
        ids[i] = qb_dict_method(&d, &f);
        assert_int_not_equal(ids[i], QB_NO_ID);
        char want[64];
        snprintf(want, sizeof want, "void com.example.C.m%u() (C.java)", i);
        assert_string_equal(d.words[ids[i]], want);
    }
    uint32_t n = d.n;
    for (uint32_t i = 0; i < 600; i++) {
        snprintf(w, sizeof w, "m%u", i);
        ss_frame f = {.fn = ss_funcinfo_intern("com.example.C", w, "C.java", NULL, SS_FRAME_JAVA)};
        assert_int_equal(qb_dict_method(&d, &f), ids[i]);
    }
    assert_int_equal(d.n, n); /* nothing new */
    assert_int_equal(d.n_fn, 600);
    assert_true(ss_mem_used() > before);
    qb_dict_free(&d);
    assert_int_equal(ss_mem_used(), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(client_transcript), cmocka_unit_test(client_chunks_and_blacklist),
        cmocka_unit_test(client_timeout),    cmocka_unit_test(replies),
        cmocka_unit_test(session_headers),   cmocka_unit_test(mapping_events),
        cmocka_unit_test(dictionary_ids_and_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
