/* test_qb_vectors.c: decode every real agent stream of
 * shared/vectors/qubership (spec §6.1), check the spec's figures (§4, §7),
 * the cross-references, and that re-encoding gives each file back byte
 * for byte (phrase boundaries included). Skips when the vectors are absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/buf.h"
#include "tools/stackshot-dump/qbdump.h"

#ifndef QB_VECTORS
#define QB_VECTORS "../shared/vectors/qubership"
#endif

static bool have_vectors(void) {
    struct stat st;
    if (stat(QB_VECTORS "/u5min-service.calls.0.bin", &st) != 0) {
        fprintf(stderr, "vectors not found under %s: skipped\n", QB_VECTORS);
        return false;
    }
    return true;
}

/* Load, decode, assert a clean decode and a byte-identical re-encode. */
static void load(ss_qbd_input *in, const char *file) {
    static char paths[32][512];
    static int k;
    char *path = paths[k++ % 32];
    snprintf(path, 512, "%s/%s", QB_VECTORS, file);
    memset(in, 0, sizeof *in);
    in->name = path;
    in->file_index = ss_qbd_index_from_name(file);
    ss_buf data;
    ss_buf_init(&data);
    assert_int_equal(ss_qbd_read(path, &data), 0);
    in->raw_len = data.len;
    ss_qb_stream type = ss_qb_stream_guess(file);
    assert_int_not_equal(type, SS_QB_UNKNOWN);
    assert_int_equal(ss_qb_decode(&in->f, type, (const uint8_t *)data.data, data.len, -1), 0);
    assert_int_equal(in->f.framed, ss_qb_stream_phrased(type));
    ss_buf back;
    ss_buf_init(&back);
    assert_int_equal(ss_qb_encode(&in->f, &back), 0);
    assert_int_equal(back.len, data.len);
    assert_memory_equal(back.data, data.data, data.len);
    ss_buf_free(&back);
    ss_buf_free(&data);
}

static bool str_is(ss_qb_str s, const char *utf8) { return ss_qb_str_eq(s, utf8); }

static void u5min(void **st) {
    (void)st;
    if (!have_vectors())
        skip();
    ss_qbd_input in[7];
    load(&in[0], "u5min-service.calls.0.bin");
    load(&in[1], "u5min-service.dictionary.bin");
    load(&in[2], "u5min-service.params.bin");
    load(&in[3], "u5min-service.suspend.bin");
    load(&in[4], "u5min-service.traces.0.bin");
    load(&in[5], "u5min-service.sql.0.bin");
    load(&in[6], "u5min-service.xml.0.bin");

    const ss_qb_file *calls = &in[0].f;
    assert_int_equal(calls->calls_format, 4);
    assert_int_equal(calls->calls_start, 1691167328395LL);
    assert_int_equal(calls->n_calls, 422);
    size_t with = 0;
    for (size_t i = 0; i < calls->n_calls; i++)
        with += calls->calls[i].n_params > 0;
    assert_int_equal(with, 247);
    const ss_qb_call *c = &calls->calls[0];
    assert_int_equal(c->time, -679);
    assert_int_equal(c->start_ms, 1691167327716LL);
    assert_int_equal(c->method, 9);
    assert_int_equal(c->duration, 415);
    assert_int_equal(c->calls, 4);
    assert_true(c->has_name);
    assert_true(str_is(c->thread_name, "main"));
    assert_int_equal(c->trace_file_index, 1);
    assert_int_equal(c->buffer_offset, 8);
    assert_int_equal(c->record_index, 0);
    assert_int_equal(c->cpu, 1184);

    const ss_qb_file *dict = &in[1].f;
    assert_int_equal(dict->n_words, 976);
    assert_int_equal(dict->n_phrases, 41);
    assert_true(str_is(dict->words[0].word, "call.info"));
    assert_true(str_is(dict->words[94].word, "job.url"));
    /* the spec counts offsets on the wire, phrase headers included:
     * id 94 in phrase 1 at 5641, ids 155 and 156 open phrase 2 */
    assert_int_equal(dict->words[94].offset + 4, 5641);
    assert_int_equal(dict->words[155].offset + 8, 10137);
    assert_int_equal(dict->words[156].offset + 8, 10493);
    assert_int_equal(dict->phrases[0], dict->words[155].offset);
    for (size_t i = 0; i < dict->n_phrases; i++)
        assert_true(dict->phrases[i] <= 10239);

    assert_int_equal(in[2].f.params_version, 1);
    assert_int_equal(in[2].f.n_params, 122);

    assert_int_equal(in[3].f.suspend_base, 1691167326615LL);
    assert_int_equal(in[3].f.n_suspends, 532);
    assert_int_equal(in[3].f.n_phrases, 55);

    const ss_qb_file *tr = &in[4].f;
    assert_int_equal(tr->trace_start, 1691167326615LL);
    assert_int_equal(tr->n_chunks, 512);
    size_t cnt[3] = {0};
    int32_t max_ext = 0;
    for (size_t i = 0; i < tr->n_events; i++) {
        cnt[tr->events[i].type]++;
        if (tr->events[i].extended && (tr->events[i].delta >> 5) > max_ext)
            max_ext = tr->events[i].delta >> 5;
    }
    assert_int_equal(cnt[SS_QB_ENTER], 9825);
    assert_int_equal(cnt[SS_QB_EXIT], 9825);
    assert_int_equal(cnt[SS_QB_TAG], 8547);
    assert_int_equal(max_ext, 11053);
    /* §4.5 table: offset 24 ENTER 9 at 1101 ms, offset 34 ENTER 148 */
    const ss_qb_event *e = ss_qb_trace_event_at(tr, 8, 0);
    assert_non_null(e);
    assert_int_equal(e->delta, 1101);
    assert_int_equal(e->time_ms, 1691167327716LL);
    assert_int_equal(tr->events[5].id, 148);
    assert_int_equal(tr->chunks[1].offset, 997);
    assert_int_equal(calls->calls[1].buffer_offset, 997);
    size_t threads = 0;
    for (size_t i = 0; i < tr->n_chunks; i++) {
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = tr->chunks[k].thread_id == tr->chunks[i].thread_id;
        threads += !seen;
    }
    assert_int_equal(threads, 90);

    assert_int_equal(in[5].f.n_values, 17);
    assert_int_equal(in[5].f.values[1].offset, 274);
    assert_int_equal(in[5].f.values[4].offset, 904);
    assert_int_equal(in[6].f.n_values, 1881);

    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(ss_qbd_check(devnull, in, 7), 0);
    fclose(devnull);
    for (int i = 0; i < 7; i++)
        ss_qb_file_free(&in[i].f);
}

static void test_service(void **st) {
    (void)st;
    if (!have_vectors())
        skip();
    ss_qbd_input in[7];
    load(&in[0], "test-service.calls.0.bin");
    load(&in[1], "test-service.dictionary.bin");
    load(&in[2], "test-service.params.bin");
    load(&in[3], "test-service.suspend.bin");
    load(&in[4], "test-service.traces.0.bin");
    load(&in[5], "test-service.sql.0.bin");
    load(&in[6], "test-service.xml.0.bin");
    assert_int_equal(in[0].f.n_calls, 45);
    assert_int_equal(in[0].f.calls_start, 1690201585956LL);
    assert_int_equal(in[1].f.n_words, 942);
    assert_int_equal(in[1].f.n_phrases, 44);
    assert_int_equal(in[1].f.phrases[0], 10129);
    assert_int_equal(in[1].f.phrases[1], 10063);
    assert_int_equal(in[1].f.phrases[2], 6621);
    assert_int_equal(in[2].f.n_params, 122);
    /* §4.3: base, (86, 67), (100, 64), 504 records in 19 phrases */
    const ss_qb_file *su = &in[3].f;
    assert_int_equal(su->suspend_base, 1690201577657LL);
    assert_int_equal(su->n_suspends, 504);
    assert_int_equal(su->n_phrases, 19);
    assert_int_equal(su->phrases[0], 205);
    assert_int_equal(su->suspends[0].delta, 86);
    assert_int_equal(su->suspends[0].duration, 67);
    assert_int_equal(su->suspends[0].end_ms, 1690201577743LL);
    assert_int_equal(su->suspends[1].end_ms, 1690201577843LL);
    assert_int_equal(in[4].f.n_chunks, 69);
    size_t cnt[3] = {0};
    for (size_t i = 0; i < in[4].f.n_events; i++)
        cnt[in[4].f.events[i].type]++;
    assert_int_equal(cnt[0], 1456);
    assert_int_equal(cnt[1], 1456);
    assert_int_equal(cnt[2], 609);
    assert_int_equal(in[5].f.n_values, 9);
    assert_int_equal(in[6].f.n_values, 36);
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(ss_qbd_check(devnull, in, 7), 0);
    fclose(devnull);
    for (int i = 0; i < 7; i++)
        ss_qb_file_free(&in[i].f);
}

/* The collector's gzip chunk storage: sync-flushed, no trailer. */
static void gzip_calls(void **st) {
    (void)st;
    if (!have_vectors())
        skip();
    ss_qbd_input in;
    load(&in, "test14.calls.bin");
    assert_int_equal(in.raw_len, 1798);
    assert_int_equal(in.f.calls_format, 4);
    assert_int_equal(in.f.n_calls, 14);
    ss_qb_file_free(&in.f);
}

/* Truncating a real stream anywhere never crashes and always errs or
 * decodes a prefix cleanly; flipping bytes never crashes either. */
static void truncated_and_garbled(void **st) {
    (void)st;
    if (!have_vectors())
        skip();
    ss_buf data;
    ss_buf_init(&data);
    assert_int_equal(ss_qbd_read(QB_VECTORS "/test-service.calls.0.bin", &data), 0);
    size_t errs = 0;
    for (size_t cut = 0; cut < data.len; cut += 97) {
        ss_qb_file f;
        errs += ss_qb_decode(&f, SS_QB_CALLS, (const uint8_t *)data.data, cut, 0) != 0;
        ss_qb_file_free(&f);
    }
    assert_true(errs > 0);
    srand(7);
    for (int i = 0; i < 200; i++) {
        ss_buf g;
        ss_buf_init(&g);
        ss_buf_append(&g, data.data, data.len);
        for (int k = 0; k < 8; k++)
            g.data[rand() % (int)g.len] = (char)rand();
        ss_qb_file f;
        ss_qb_decode(&f, (ss_qb_stream)(1 + i % 8), (const uint8_t *)g.data, g.len, -1);
        ss_qb_file_free(&f);
        ss_buf_free(&g);
    }
    ss_buf_free(&data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(u5min),
        cmocka_unit_test(test_service),
        cmocka_unit_test(gzip_calls),
        cmocka_unit_test(truncated_and_garbled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
