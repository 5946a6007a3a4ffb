/* test_zorka.c: the zorka exporter's pieces without the fan-out or HTTP:
 * rounds -> record trees (traces.c), the session's definitions and resets
 * (session.c), and the encoded bodies (encode.c) read back by the
 * decoder of stackshot-dump zorka (zkdump.h), which reads them as the
 * Java reader does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/buf.h"
#include "agent/round.h"
#include "exporters/zorka/zorka.h"
#include "tools/stackshot-dump/zkdump.h"

#define T0 1700000000000000000ull
#define IV_MS 100u

/* ---- building rounds -------------------------------------------------------- */

typedef struct th_spec {
    const char *name;
    int32_t nid;
    const char *const *root_first; /* NULL-terminated */
    const int32_t *lines;          /* root first, or NULL */
    bool truncated, span;
    uint8_t span_byte;
    ss_thread_state state;
    const char *detail;
} th_spec;

static const ss_funcinfo *fn(const char *name) {
    return ss_funcinfo_intern("global", name, "t.c", NULL, SS_FRAME_NATIVE);
}

static ss_round *make_round(uint64_t seq, const th_spec *th, int n) {
    ss_round_builder *b = ss_round_builder_create();
    ss_round_builder_begin(b, T0 + seq * IV_MS * 1000000ull, IV_MS, SS_RUNTIME_NATIVE);
    for (int i = 0; i < n; i++) {
        ss_thread_sample *t = ss_round_builder_add_thread(b, th[i].name);
        t->nid = th[i].nid;
        t->number = th[i].nid;
        t->state = th[i].state ? th[i].state : SS_STATE_RUNNABLE;
        t->state_detail = th[i].detail;
        t->truncated = th[i].truncated;
        if (th[i].span) {
            t->has_span = true;
            memset(t->trace_id, 0xab, 16);
            memset(t->span_id, th[i].span_byte, 8);
        }
        int d = 0;
        while (th[i].root_first[d])
            d++;
        for (int k = d - 1; k >= 0; k--) {
            ss_frame f = {.fn = fn(th[i].root_first[k]), .line = th[i].lines ? th[i].lines[k] : 0};
            ss_round_builder_add_frame(b, &f);
        }
    }
    ss_round *r = ss_round_builder_finish(b, 0, 0);
    r->seq = seq; /* the builder numbers rounds per process; tests choose */
    ss_round_builder_destroy(b);
    return r;
}

/* Traces emitted, in order. */
typedef struct sink {
    zk_trace *t[64];
    int n;
} sink;

static void collect(void *owner, zk_trace *t) {
    sink *s = owner;
    assert_true(s->n < 64);
    s->t[s->n++] = t;
}

static void sink_free(sink *s) {
    for (int i = 0; i < s->n; i++)
        zk_trace_free(s->t[i]);
    s->n = 0;
}

static void feed(zk_builder *b, uint64_t seq, const th_spec *th, int n) {
    ss_round *r = make_round(seq, th, n);
    zk_builder_add_round(b, r, seq);
    ss_round_unref(r);
}

static void expect_rec(const zk_rec *r, const char *name, uint32_t depth, uint32_t first,
                       uint32_t samples) {
    assert_string_equal(r->fn->name, name);
    assert_int_equal(r->depth, depth);
    assert_int_equal(r->first, first);
    assert_int_equal(r->samples, samples);
}

/* ---- traces ------------------------------------------------------------------ */

/* A>B>C, A>B>D, A>B>D, A>E: one trace, records per frame and run. */
static void test_tree(void **state) {
    (void)state;
    sink s = {0};
    zk_builder *b = zk_builder_new(collect, &s);
    static const char *const abc[] = {"A", "B", "C", NULL}, *const abd[] = {"A", "B", "D", NULL},
                             *const ae[] = {"A", "E", NULL};
    static const int32_t l1[] = {10, 20, 30}, l2[] = {10, 21, 31};
    th_spec t = {.name = "w", .nid = 7, .root_first = abc, .lines = l1};
    feed(b, 1, &t, 1);
    t.root_first = abd;
    t.lines = l2;
    feed(b, 2, &t, 1);
    feed(b, 3, &t, 1);
    t.root_first = ae;
    t.lines = NULL;
    feed(b, 4, &t, 1);
    assert_int_equal(s.n, 0); /* still open */
    zk_builder_close_all(b);
    assert_int_equal(s.n, 1);
    zk_trace *tr = s.t[0];
    assert_int_equal(tr->n_samples, 4);
    assert_int_equal(tr->round_lo, 1); /* the rounds its samples came from */
    assert_int_equal(tr->round_hi, 4);
    assert_int_equal(tr->n_recs, 5);
    expect_rec(&tr->recs[0], "A", 0, 0, 4);
    expect_rec(&tr->recs[1], "B", 1, 0, 3);
    expect_rec(&tr->recs[2], "C", 2, 0, 1);
    expect_rec(&tr->recs[3], "D", 2, 1, 2);
    expect_rec(&tr->recs[4], "E", 1, 3, 1);
    /* B was seen at lines 20 and 21 */
    assert_int_equal(tr->recs[1].n_lines, 2);
    assert_int_equal(tr->recs[1].lines[0], 20);
    assert_int_equal(tr->recs[1].lines[1], 21);
    assert_int_equal(tr->start_ns, T0 + IV_MS * 1000000ull);
    assert_int_equal(tr->interval_ns, IV_MS * 1000000ull);
    assert_string_equal(tr->thread_name, "w");
    assert_int_equal(tr->thread_id, 7);
    assert_string_equal(tr->state, "RUNNABLE");
    assert_false(tr->has_span);
    assert_int_equal(zk_builder_samples(b), 4);
    sink_free(&s);
    zk_builder_free(b);
}

/* A new trace when the root changes, the thread missed a round, or its
 * span changed; a thread gone for a period is forgotten. */
static void test_breaks(void **state) {
    (void)state;
    sink s = {0};
    zk_builder *b = zk_builder_new(collect, &s);
    static const char *const ab[] = {"A", "B", NULL}, *const xb[] = {"X", "B", NULL};
    th_spec t = {.name = "w", .nid = 1, .root_first = ab};
    feed(b, 1, &t, 1);
    feed(b, 2, &t, 1);
    t.root_first = xb; /* root change */
    feed(b, 3, &t, 1);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.t[0]->n_samples, 2);
    feed(b, 5, &t, 1); /* round 4 missed */
    assert_int_equal(s.n, 2);
    assert_int_equal(s.t[1]->n_samples, 1);
    assert_int_equal(s.t[0]->round_hi, 2);
    assert_int_equal(s.t[1]->round_lo, 3);
    assert_int_equal(s.t[1]->round_hi, 3);
    t.span = true;
    t.span_byte = 1;
    feed(b, 6, &t, 1); /* a span appears */
    assert_int_equal(s.n, 3);
    feed(b, 7, &t, 1);
    t.span_byte = 2; /* another span */
    feed(b, 8, &t, 1);
    assert_int_equal(s.n, 4);
    assert_true(s.t[3]->has_span);
    assert_int_equal(s.t[3]->n_samples, 2);
    assert_int_equal(s.t[3]->span_id[0], 1);
    /* the trace id header is the span's trace id; the span id is random */
    assert_memory_equal(s.t[3]->header_id, s.t[3]->trace_id, 16);
    assert_true(s.t[3]->zorka_span != 0);
    zk_builder_close_all(b);
    assert_int_equal(s.n, 5);
    zk_builder_close_all(b); /* the thread had no sample since: gone */
    assert_int_equal(s.n, 5);
    feed(b, 9, &t, 1);
    zk_builder_close_all(b);
    assert_int_equal(s.n, 6);
    /* random trace ids differ and have both halves non-zero */
    assert_memory_not_equal(s.t[0]->header_id, s.t[1]->header_id, 16);
    sink_free(&s);
    zk_builder_free(b);
}

/* A cut stack gets the synthetic root stackshot.truncated, an empty one
 * stackshot.no_frames; the state is the one seen most. */
static void test_synthetic_roots_and_state(void **state) {
    (void)state;
    sink s = {0};
    zk_builder *b = zk_builder_new(collect, &s);
    static const char *const cut[] = {"L1", "L2", NULL}, *const none[] = {NULL};
    th_spec th[2] = {{.name = "cut", .nid = 1, .root_first = cut, .truncated = true},
                     {.name = "empty", .nid = 2, .root_first = none,
                      .state = SS_STATE_TIMED_WAITING, .detail = "sleeping"}};
    feed(b, 1, th, 2);
    th[1].state = SS_STATE_RUNNABLE;
    th[1].detail = NULL;
    feed(b, 2, th, 2);
    th[1].state = SS_STATE_TIMED_WAITING;
    th[1].detail = "sleeping";
    feed(b, 3, th, 2);
    zk_builder_close_all(b);
    assert_int_equal(s.n, 2);
    zk_trace *cut_t = !strcmp(s.t[0]->thread_name, "cut") ? s.t[0] : s.t[1];
    zk_trace *empty_t = cut_t == s.t[0] ? s.t[1] : s.t[0];
    assert_int_equal(cut_t->n_recs, 3);
    assert_string_equal(cut_t->recs[0].fn->ns, "stackshot");
    assert_string_equal(cut_t->recs[0].fn->name, "truncated");
    assert_string_equal(cut_t->recs[1].fn->name, "L1");
    assert_int_equal(empty_t->n_recs, 1);
    assert_string_equal(empty_t->recs[0].fn->name, "no_frames");
    assert_int_equal(empty_t->recs[0].samples, 3);
    assert_string_equal(empty_t->state, "TIMED_WAITING (sleeping)");
    sink_free(&s);
    zk_builder_free(b);
}

/* ---- names ------------------------------------------------------------------ */

static void test_names(void **state) {
    (void)state;
    const ss_mapping *m = ss_mapping_intern("/usr/lib/libfoo.so.1", "", 0, 1, 0);
    zk_rec r = {.fn = ss_funcinfo_intern("global", "foo", "foo.c", NULL, SS_FRAME_NATIVE), .map = m};
    zk_method_names n;
    zk_names_of(&r, &n);
    assert_string_equal(n.cls, "libfoo.so.1");
    assert_string_equal(n.method, "foo");
    assert_string_equal(n.signature, "()");
    assert_string_equal(n.file, "foo.c");
    r.fn = ss_funcinfo_intern("std::vector<int>", "push_back", "libfoo.so.1", NULL, SS_FRAME_NATIVE);
    zk_names_of(&r, &n);
    assert_string_equal(n.cls, "std::vector<int>");
    assert_null(n.file); /* the module's name is no source file */
    r.map = NULL;
    r.fn = ss_funcinfo_intern_sig("java.util.HashMap", "get", "HashMap.java", "java.base@17",
                                  SS_FRAME_JAVA, "(Ljava/lang/Object;)Ljava/lang/Object;");
    zk_names_of(&r, &n);
    assert_string_equal(n.cls, "java.util.HashMap");
    assert_string_equal(n.signature, "(Ljava/lang/Object;)Ljava/lang/Object;");
    assert_string_equal(n.file, "HashMap.java");
    r.fn = ss_funcinfo_intern("java.lang.Thread", "sleep", "Native Method", NULL, SS_FRAME_JAVA);
    zk_names_of(&r, &n);
    assert_string_equal(n.signature, "()");
    assert_null(n.file);
    /* overloads are distinct functions once their descriptors are known */
    assert_ptr_not_equal(ss_funcinfo_intern_sig("C", "m", "C.java", NULL, SS_FRAME_JAVA, "(I)V"),
                         ss_funcinfo_intern_sig("C", "m", "C.java", NULL, SS_FRAME_JAVA, "(J)V"));
    assert_ptr_equal(ss_funcinfo_intern("C", "m", "C.java", NULL, SS_FRAME_JAVA),
                     ss_funcinfo_intern_sig("C", "m", "C.java", NULL, SS_FRAME_JAVA, NULL));
}

static void test_utf8(void **state) {
    (void)state;
    ss_buf b;
    ss_buf_init(&b);
    zk_utf8_clean("ok \xC3\xA9 \xFF bad \xE7\xBA\xBF\xE7", 100, &b);
    assert_string_equal(b.data, "ok \xC3\xA9 \xEF\xBF\xBD bad \xE7\xBA\xBF\xEF\xBF\xBD");
    ss_buf_reset(&b);
    zk_utf8_clean("\xE7\xBA\xBF\xE7\xBA\xBF", 4, &b); /* never cut inside a character */
    assert_string_equal(b.data, "\xE7\xBA\xBF");
    ss_buf_reset(&b);
    zk_utf8_clean("\xED\xA0\x80\xC0\xAF", 100, &b); /* a surrogate, an overlong form */
    assert_string_equal(b.data, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    ss_buf_free(&b);
}

/* ---- encoding, read back by the Java reader's rules ---------------------------- */

static const zk_process proc = {.host = "box", .service = "svc", .pid = "4242"};

static zk_trace *one_trace(const char *const *a, const char *const *b_stack) {
    sink s = {0};
    zk_builder *b = zk_builder_new(collect, &s);
    th_spec t = {.name = "w\xC3\xB6rker", .nid = 9, .root_first = a, .lines = (const int32_t[]){1, 2, 3}};
    feed(b, 1, &t, 1);
    t.root_first = b_stack;
    feed(b, 2, &t, 1);
    zk_builder_close_all(b);
    zk_builder_free(b);
    assert_int_equal(s.n, 1);
    return s.t[0];
}

/* Decode agd then trc as one session; returns the printed text. */
static char *decode(zkd *d, const ss_buf *agd, const ss_buf *trc, const char *reset) {
    ss_buf out;
    ss_buf_init(&out);
    zkd_request ra = {.uri = "/agent/submit/agd", .sid = "s1", .reset = reset, .trace_id = "-",
                      .body = (const uint8_t *)agd->data, .len = agd->len};
    zkd_request rt = {.uri = "/agent/submit/trc", .sid = "s1", .reset = "false",
                      .trace_id = "0123456789abcdef0123456789abcdef",
                      .body = (const uint8_t *)trc->data, .len = trc->len};
    if (agd->len)
        assert_int_equal(zkd_request_print(d, &ra, &out), 0);
    assert_int_equal(zkd_request_print(d, &rt, &out), 0);
    return out.data;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void test_encode_session(void **state) {
    (void)state;
    static const char *const abc[] = {"A", "B", "C", NULL}, *const abd[] = {"A", "B", "D", NULL};
    zk_trace *t = one_trace(abc, abd);
    zk_session *s = zk_session_new();
    assert_true(zk_session_reset_pending(s));
    zkd *d = zkd_new();
    ss_buf agd, trc;
    ss_buf_init(&agd);
    ss_buf_init(&trc);
    assert_int_equal(zk_encode_trace(s, &proc, t, &agd, &trc), 0);
    char *text = decode(d, &agd, &trc, "true");
    /* the definitions: class (the function's namespace here), names, "()";
     * four methods, numbered from 1; attribute names and the trace type */
    assert_int_equal(count(text, "methodRef id="), 4);
    assert_non_null(strstr(text, "methodRef id=1 c=1 m=2 s=3\n"));
    assert_non_null(strstr(text, "stringRef id=1 s=global\n"));
    assert_non_null(strstr(text, "stringRef id=3 s=()\n"));
    assert_non_null(strstr(text, "s=stackshot\n"));
    assert_non_null(strstr(text, "s=thread.name\n"));
    /* the records: A > B > C then D; durations from the sample clock */
    assert_int_equal(count(text, "traceStart pos="), 4);
    assert_int_equal(count(text, "traceEnd pos="), 4);
    assert_non_null(strstr(text, "tstop=1700000000300000000 calls=2 flags=0x2000\n"));
    assert_non_null(strstr(text, "tstart=1700000000200000000 mid=4\n"));
    assert_non_null(strstr(text, "traceAttr 5=w\xC3\xB6rker (String)\n"));
    assert_non_null(strstr(text, "=box (String)\n"));
    assert_non_null(strstr(text, "=4242 (String)\n"));
    assert_non_null(strstr(text, "=svc (String)\n"));
    /* the collector's span: a root of 2 samples, 4 records */
    assert_non_null(strstr(text, "RES 200 OK\nCHUNK ChunkMetadata(A tid=0123456789abcdef0123456789abcdef"));
    assert_non_null(strstr(text, "class=global method=A "));
    assert_non_null(strstr(text, " dur=200000000 tstamp=1700000000100 calls=3 recs=4 errors=0 flags=0x2000 "));
    assert_non_null(strstr(text, "thread.name=w\xC3\xB6rker"));
    assert_null(strstr(text, "RES 500"));
    free(text);
    zk_session_reset_done(s);

    /* the same trace again in the session: nothing to define */
    ss_buf_reset(&agd);
    ss_buf_reset(&trc);
    assert_int_equal(zk_encode_trace(s, &proc, t, &agd, &trc), 0);
    assert_int_equal(agd.len, 0);
    text = decode(d, &agd, &trc, "false");
    assert_non_null(strstr(text, "RES 200 OK\nCHUNK "));
    free(text);

    /* after a reset everything again, methods from 1, with Reset: true */
    zk_session_reset(s);
    assert_true(zk_session_reset_pending(s));
    ss_buf_reset(&agd);
    ss_buf_reset(&trc);
    assert_int_equal(zk_encode_trace(s, &proc, t, &agd, &trc), 0);
    text = decode(d, &agd, &trc, "true");
    assert_int_equal(count(text, "methodRef id="), 4);
    assert_non_null(strstr(text, "methodRef id=1 c=1 m=2 s=3\n")); /* same symbols, same ids */
    free(text);

    ss_buf_free(&agd);
    ss_buf_free(&trc);
    zkd_free(d);
    zk_session_free(s);
    zk_trace_free(t);
}

/* A session about to run out of 21-bit symbol ids starts again from 1,
 * with a reset, and the trace is encoded with the new ids. */
static void test_symbol_limit(void **state) {
    (void)state;
    static const char *const a1[] = {"P", "Q", NULL};
    zk_trace *t = one_trace(a1, a1);
    zk_session *s = zk_session_new();
    zk_session_set_max_symbol(s, 20);
    bool def;
    for (int i = 0; i < 15; i++) {
        char name[16];
        snprintf(name, sizeof name, "filler%d", i);
        assert_int_equal(zk_session_symbol(s, name, &def), (uint32_t)i + 1);
    }
    zk_session_reset_done(s);
    ss_buf agd, trc;
    ss_buf_init(&agd);
    ss_buf_init(&trc);
    assert_int_equal(zk_encode_trace(s, &proc, t, &agd, &trc), 0);
    assert_true(zk_session_reset_pending(s)); /* the new numbering needs a reset */
    zkd *d = zkd_new();
    char *text = decode(d, &agd, &trc, "true");
    assert_null(strstr(text, "filler"));
    for (const char *p = text; (p = strstr(p, "stringRef id=")) != NULL; p++)
        assert_in_range(strtoul(p + 13, NULL, 10), 1, 20);
    assert_non_null(strstr(text, "RES 200 OK\nCHUNK "));
    assert_non_null(strstr(text, "class=global method=P "));
    assert_null(strstr(text, "<?>")); /* every attribute name defined */
    free(text);
    /* one trace needing more symbols than there are: refused */
    zk_session_free(s);
    s = zk_session_new();
    zk_session_set_max_symbol(s, 5);
    ss_buf_reset(&agd);
    ss_buf_reset(&trc);
    assert_int_equal(zk_encode_trace(s, &proc, t, &agd, &trc), -E2BIG);
    zkd_free(d);
    ss_buf_free(&agd);
    ss_buf_free(&trc);
    zk_session_free(s);
    zk_trace_free(t);
}

/* The decoder refuses what the Java reader refuses, in one line. */
static void test_decoder_refusals(void **state) {
    (void)state;
    static const struct {
        const char *uri, *hex, *why;
    } cases[] = {
        {"/agent/submit/agd", "c39f0001c4820001ff", "not allowed in agent state data"},
        {"/agent/submit/agd", "d801820163616263", "Invalid tag: 24"},
        {"/agent/submit/agd", "c1821b000000000000000163616263", "8-byte integer in a 32-bit field"},
        {"/agent/submit/trc", "c39f0001c4820001", "TraceEnd not followed by BREAK"},
        {"/agent/submit/trc", "c39f0001c6821b000000000000000a6161c4820001ff", "8-byte integer"},
        {"/agent/submit/trc", "c39f0001c6820af93c00c4820001ff", "floating point"},
        {"/agent/submit/trc", "c9a0", "Invalid tag: 9"},
        {"/agent/submit/agd", "c182017f6161ff", "indefinite-length text"},
        {"/agent/submit/trc", "c39f1b00", "truncated item"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t body[64];
        size_t n = strlen(cases[i].hex) / 2;
        for (size_t k = 0; k < n; k++)
            sscanf(cases[i].hex + 2 * k, "%2hhx", &body[k]);
        zkd *d = zkd_new();
        ss_buf out;
        ss_buf_init(&out);
        zkd_request rq = {.uri = cases[i].uri, .sid = "x", .reset = "true", .trace_id = "-",
                          .body = body, .len = n};
        assert_int_equal(zkd_request_print(d, &rq, &out), -1);
        if (!strstr(out.data, cases[i].why))
            fail_msg("case %zu: '%s' not in:\n%s", i, cases[i].why, out.data);
        assert_non_null(strstr(out.data, "RES 500"));
        ss_buf_free(&out);
        zkd_free(d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),
        cmocka_unit_test(test_breaks),
        cmocka_unit_test(test_synthetic_roots_and_state),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_encode_session),
        cmocka_unit_test(test_symbol_limit),
        cmocka_unit_test(test_decoder_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
