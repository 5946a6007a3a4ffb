/* test_stack_reuse.c: outputs made from reused stacks are right (cmocka).
 *
 * The exporters keep what they made of a stack (its frame lines, its
 * profile stack) by its identity, ss_thread_sample.stack_id, and reuse it
 * while the stack does not change. This takes real rounds of this process
 * (ss_native_sample_once) over two threads that sleep where the test puts
 * them:
 *
 *   t-mover   sleeps in one of two functions, one frame deep: moved from
 *             wait_here_a to wait_here_b between rounds (and back), every
 *             other frame the same (the call goes through one pointer);
 *   t-burner  sleeps in the same place every round, but is woken between
 *             rounds to burn some CPU: same frames, new CPU time.
 *
 * Every output must show each change in the round it happened: the text
 * exporter's file, the otlp_logs request (decoded with protobuf-c), and
 * the profile aggregate of the period (its pprof decoded here, and its
 * pprof and OTLP profiles bytes against an aggregate of the same rounds
 * made with no reuse at all). Plus the memo itself (ss_stack_memo). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/mem.h"
#include "agent/round.h"
#include "agent/stack_memo.h"
#include "agent/thread.h"
#include "exporters/common/aggregate.h"
#include "exporters/common/pprof.h"
#include "exporters/otlp_logs/logs.h"
#include "exporters/profiles/encode.h"
#include "exporters/ss_exporters.h"

extern const ss_exporter_ops ss_text_exporter; /* exporters/text */
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb-c.h"
#include "proc/threads.h"
#include "samplers/ss_samplers.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the memo ----------------------------------------------------- */

static void test_memo(void **state) {
    (void)state;
    size_t used0 = ss_mem_used();
    ss_stack_memo *m = ss_stack_memo_create(1u << 20);
    assert_non_null(m);
    assert_null(ss_stack_memo_get(m, 0));
    assert_int_equal(ss_stack_memo_put(m, 0, 1, "x", 1), -EINVAL);
    /* many ids (the index grows), each with its own bytes and value */
    char text[32];
    for (uint64_t id = 1; id <= 1000; id++) {
        snprintf(text, sizeof text, "frames of %llu", (unsigned long long)id);
        assert_int_equal(ss_stack_memo_put(m, id * 7, id, text, strlen(text)), 0);
    }
    for (uint64_t id = 1; id <= 1000; id++) {
        const ss_memo_entry *e = ss_stack_memo_get(m, id * 7);
        assert_non_null(e);
        snprintf(text, sizeof text, "frames of %llu", (unsigned long long)id);
        assert_int_equal(e->len, strlen(text));
        assert_memory_equal(e->data, text, e->len);
        assert_int_equal(e->value, id);
    }
    assert_null(ss_stack_memo_get(m, 3)); /* never put */
    ss_memo_stats st;
    ss_stack_memo_stats(m, &st);
    assert_int_equal(st.entries, 1000);
    assert_int_equal(st.hits, 1000);
    assert_int_equal(ss_mem_used() - used0, st.bytes); /* all of it charged */
    /* a round that used only some: the others are forgotten at the sweep */
    ss_stack_memo_sweep(m);
    for (uint64_t id = 1; id <= 1000; id += 2)
        assert_non_null(ss_stack_memo_get(m, id * 7));
    ss_stack_memo_sweep(m);
    for (uint64_t id = 1; id <= 1000; id++) {
        const ss_memo_entry *e = ss_stack_memo_get(m, id * 7);
        if (id % 2)
            assert_true(e && e->value == id);
        else
            assert_null(e);
    }
    /* a put over an id replaces its content */
    assert_int_equal(ss_stack_memo_put(m, 7, 99, "new", 3), 0);
    const ss_memo_entry *e = ss_stack_memo_get(m, 7);
    assert_true(e && e->value == 99 && e->len == 3 && memcmp(e->data, "new", 3) == 0);
    ss_stack_memo_stats(m, &st);
    assert_int_equal(st.entries, 500);
    assert_int_equal(ss_mem_used() - used0, st.bytes);
    ss_stack_memo_clear(m);
    assert_null(ss_stack_memo_get(m, 7));
    ss_stack_memo_destroy(m);
    assert_int_equal(ss_mem_used(), used0);

    /* the cap: a put that would pass it keeps nothing */
    m = ss_stack_memo_create(16384);
    char big[4096];
    memset(big, 'f', sizeof big);
    int kept = 0, refused = 0;
    for (uint64_t id = 1; id <= 8; id++) {
        int rc = ss_stack_memo_put(m, id, 0, big, sizeof big);
        assert_true(rc == 0 || rc == -ENOSPC);
        kept += rc == 0;
        refused += rc == -ENOSPC;
    }
    assert_true(kept >= 1 && kept <= 3);
    assert_int_equal(kept + refused, 8);
    ss_stack_memo_stats(m, &st);
    assert_true(st.bytes <= 16384);
    assert_int_equal(st.refused, (uint64_t)refused);
    ss_stack_memo_destroy(m);
    assert_int_equal(ss_mem_used(), used0);
}

/* ---- the host threads --------------------------------------------- */

static atomic_int stop, where, burn_req, burn_done, mover_at;
static atomic_int tid_mover, tid_burner;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* one each: waking one thread must not make the other run */
static pthread_cond_t cv_mover = PTHREAD_COND_INITIALIZER, cv_burner = PTHREAD_COND_INITIALIZER;
static volatile int side_a, side_b;

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Sleeps until told to go elsewhere (or to burn, or to stop). */
__attribute__((noinline)) static void block_until(atomic_int *v, int seen) {
    pthread_cond_t *cv = v == &where ? &cv_mover : &cv_burner;
    pthread_mutex_lock(&mu);
    while (atomic_load(v) == seen && !atomic_load(&stop))
        pthread_cond_wait(cv, &mu);
    pthread_mutex_unlock(&mu);
}

__attribute__((noinline, noclone)) static void wait_here_a(int seen) {
    side_a++;
    atomic_store(&mover_at, 1);
    block_until(&where, seen);
    side_a++;
}

__attribute__((noinline, noclone)) static void wait_here_b(int seen) {
    side_b += 2;
    atomic_store(&mover_at, 2);
    block_until(&where, seen);
    side_b += 2;
}

static void *mover(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-mover");
    atomic_store(&tid_mover, ss_gettid());
    while (!atomic_load(&stop)) {
        int w = atomic_load(&where);
        /* one call site for both: only the frame of wait_here_* differs */
        void (*volatile fn)(int) = w ? wait_here_b : wait_here_a;
        fn(w);
    }
    return NULL;
}

__attribute__((noinline)) static void burner_sleeps(int seen) { block_until(&burn_req, seen); }

static void *burner(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "t-burner");
    atomic_store(&tid_burner, ss_gettid());
    while (!atomic_load(&stop)) {
        int seen = atomic_load(&burn_req);
        burner_sleeps(seen); /* the same call site every time */
        struct timespec t0, t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        do { /* 5 ms of CPU */
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 5000000L);
        atomic_fetch_add(&burn_done, 1);
    }
    return NULL;
}

static void wake(pthread_cond_t *cv) {
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(&mu);
}

/* Asleep again: /proc says S and its CPU clock stands for a while. */
static void settle(int tid) {
    for (int i = 0; i < 400; i++) {
        uint64_t c0 = ss_thread_cpu_ns(tid);
        nap_ms(20);
        ss_proc_stat st;
        if (ss_proc_read_stat(tid, &st) == 0 && st.state == 'S' && ss_thread_cpu_ns(tid) == c0)
            return;
    }
    fail_msg("thread %d never went back to sleep", tid);
}

static void move_to(int w) {
    atomic_store(&where, w);
    wake(&cv_mover);
    while (atomic_load(&mover_at) != w + 1)
        nap_ms(1);
    settle(tid_mover);
}

static void burn(void) {
    int done = atomic_load(&burn_done);
    atomic_fetch_add(&burn_req, 1);
    wake(&cv_burner);
    while (atomic_load(&burn_done) == done)
        nap_ms(1);
    settle(tid_burner);
}

/* ---- the outputs -------------------------------------------------- */

#define ROUNDS 5
static ss_round *rounds[ROUNDS];
/* Where the mover was in each round (0: wait_here_a, 1: wait_here_b),
 * and whether the burner burned just before it. */
static const int mover_where[ROUNDS] = {0, 1, 1, 0, 0};
static const int burned[ROUNDS] = {0, 0, 1, 1, 0};

static const ss_thread_sample *thread_of(const ss_round *r, int tid) {
    for (uint32_t i = 0; i < r->n_threads; i++)
        if (r->threads[i].nid == tid)
            return &r->threads[i];
    return NULL;
}

static bool has_frame(const ss_round *r, const ss_thread_sample *t, const char *name) {
    const ss_frame *f = ss_thread_frames(r, t);
    for (uint32_t i = 0; i < t->frame_count; i++)
        if (f[i].fn && f[i].fn->name && strcmp(f[i].fn->name, name) == 0)
            return true;
    return false;
}

static char dir[256];

static int setup(void **state) {
    (void)state;
    static pthread_t th[2];
    pthread_create(&th[0], NULL, mover, NULL);
    pthread_create(&th[1], NULL, burner, NULL);
    while (!atomic_load(&tid_mover) || !atomic_load(&tid_burner) || !atomic_load(&mover_at))
        nap_ms(1);
    settle(tid_mover);
    settle(tid_burner);
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    ss_round *warm;
    assert_int_equal(ss_native_sample_once(&cfg, &warm), 0); /* caches, first sight */
    ss_round_unref(warm);
    for (int i = 0; i < ROUNDS; i++) {
        if (i > 0 && mover_where[i] != mover_where[i - 1])
            move_to(mover_where[i]);
        if (burned[i])
            burn();
        assert_int_equal(ss_native_sample_once(&cfg, &rounds[i]), 0);
    }
    atomic_store(&stop, 1);
    wake(&cv_mover);
    wake(&cv_burner);
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    snprintf(dir, sizeof dir, "/tmp/ss_stack_reuse.%d", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < ROUNDS; i++)
        ss_round_unref(rounds[i]);
    ss_native_release();
    return 0;
}

/* The rounds themselves: identities and marks as the threads moved. */
static void test_rounds(void **state) {
    (void)state;
    uint64_t prev_mover = 0, prev_burner = 0, prev_cpu = 0;
    for (int i = 0; i < ROUNDS; i++) {
        const ss_thread_sample *m = thread_of(rounds[i], tid_mover);
        const ss_thread_sample *b = thread_of(rounds[i], tid_burner);
        assert_non_null(m);
        assert_non_null(b);
        assert_true(has_frame(rounds[i], m, mover_where[i] ? "wait_here_b" : "wait_here_a"));
        assert_false(has_frame(rounds[i], m, mover_where[i] ? "wait_here_a" : "wait_here_b"));
        assert_true(m->stack_id != 0 && b->stack_id != 0);
        if (i > 0) {
            bool moved = mover_where[i] != mover_where[i - 1];
            assert_int_equal(m->same_stack, !moved);
            assert_int_equal(m->stack_id == prev_mover, !moved);
            /* the burner ran, and came back to the very same frames */
            assert_true(b->same_stack);
            assert_int_equal(b->stack_id, prev_burner);
            if (burned[i])
                assert_true(b->cpu_ns >= prev_cpu + 4000000);
            else
                assert_int_equal(b->cpu_ns, prev_cpu);
        }
        prev_mover = m->stack_id;
        prev_burner = b->stack_id;
        prev_cpu = b->cpu_ns;
    }
}

/* Every thread of every round formatted from scratch (no memo). */
static void text_from_scratch(ss_buf *out) {
    for (int i = 0; i < ROUNDS; i++) {
        ss_text_format_round_header(rounds[i], out);
        for (uint32_t k = 0; k < rounds[i]->n_threads; k++) {
            ss_text_format_thread(rounds[i], &rounds[i]->threads[k], out);
            ss_buf_putc(out, '\n');
        }
    }
}

/* The block of thread `name` in round `i` of a text file (NUL-ended copy). */
static char *block_of(const char *text, int i, const char *name, char *out, size_t n) {
    const char *p = text;
    for (int k = 0; k <= i; k++) {
        p = strstr(p, "Full thread dump stackshot round ");
        assert_non_null(p);
        p++;
    }
    const char *next = strstr(p, "Full thread dump stackshot round ");
    char key[64];
    snprintf(key, sizeof key, "\"%s\"", name);
    const char *b = strstr(p, key);
    assert_true(b && (!next || b < next));
    const char *e = strstr(b, "\n\n");
    assert_non_null(e);
    size_t len = (size_t)(e - b) < n - 1 ? (size_t)(e - b) : n - 1;
    memcpy(out, b, len);
    out[len] = '\0';
    return out;
}

static void check_blocks(const char *text, const char *what) {
    char blk[16384], prev[16384] = "";
    for (int i = 0; i < ROUNDS; i++) {
        block_of(text, i, "t-mover", blk, sizeof blk);
        if (!strstr(blk, mover_where[i] ? "wait_here_b" : "wait_here_a") ||
            strstr(blk, mover_where[i] ? "wait_here_a" : "wait_here_b"))
            fail_msg("%s, round %d: t-mover shows the wrong frame:\n%s", what, i, blk);
        block_of(text, i, "t-burner", blk, sizeof blk);
        /* the frame lines are the same, the metadata line is not */
        const char *frames = strstr(blk, "\tat ");
        assert_non_null(frames);
        if (i > 0) {
            const char *pf = strstr(prev, "\tat ");
            assert_string_equal(frames, pf);
            double cpu = strtod(strstr(blk, "cpu=") + 4, NULL);
            double was = strtod(strstr(prev, "cpu=") + 4, NULL);
            if (burned[i] ? cpu < was + 4.0 : cpu != was)
                fail_msg("%s, round %d: t-burner's cpu= %s:\n%s\n--- before:\n%s", what, i,
                         burned[i] ? "did not grow" : "changed", blk, prev);
        }
        strcpy(prev, blk);
    }
}

static char *read_text_file(const char *d) {
    DIR *dd = opendir(d);
    assert_non_null(dd);
    struct dirent *de;
    char path[600] = "";
    while ((de = readdir(dd)))
        if (strstr(de->d_name, ".txt"))
            snprintf(path, sizeof path, "%s/%s", d, de->d_name);
    closedir(dd);
    assert_true(path[0]);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char data[4 << 20];
    size_t n = fread(data, 1, sizeof data - 1, f);
    data[n] = '\0';
    fclose(f);
    unlink(path);
    return data;
}

static void test_text(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", dir);
    ss_exporter_stats stats;
    memset(&stats, 0, sizeof stats);
    void *st;
    assert_int_equal(ss_text_exporter.open(&st, &cfg, &stats), 0);
    for (int i = 0; i < ROUNDS; i++)
        ss_text_exporter.consume(st, rounds[i]);
    ss_text_exporter.close(st, 0);
    char *text = read_text_file(dir);
    rmdir(dir);
    check_blocks(text, "text file");
    /* byte for byte what formatting every stack again gives */
    ss_buf want;
    ss_buf_init(&want);
    text_from_scratch(&want);
    assert_int_equal(strlen(text), want.len);
    assert_memory_equal(text, want.data, want.len);
    ss_buf_free(&want);
}

/* The text bodies of an otlp_logs request, decoded, appended to out in
 * the text file's shape (a round header line, then each body and "\n"). */
static void decode_logs(const ss_buf *req, const ss_round *r, ss_buf *out) {
    Opentelemetry__Proto__Collector__Logs__V1__ExportLogsServiceRequest *q =
        opentelemetry__proto__collector__logs__v1__export_logs_service_request__unpack(
            NULL, req->len, (const uint8_t *)req->data);
    assert_non_null(q);
    assert_int_equal(q->n_resource_logs, 1);
    assert_int_equal(q->resource_logs[0]->n_scope_logs, 1);
    const Opentelemetry__Proto__Logs__V1__ScopeLogs *sl = q->resource_logs[0]->scope_logs[0];
    assert_int_equal(sl->n_log_records, r->n_threads);
    ss_text_format_round_header(r, out);
    for (size_t i = 0; i < sl->n_log_records; i++) {
        const Opentelemetry__Proto__Common__V1__AnyValue *b = sl->log_records[i]->body;
        assert_true(b && b->value_case ==
                             OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE);
        ss_buf_puts(out, b->string_value);
        ss_buf_putc(out, '\n');
    }
    opentelemetry__proto__collector__logs__v1__export_logs_service_request__free_unpacked(q,
                                                                                          NULL);
}

static void test_otlp_logs(void **state) {
    (void)state;
    ss_otlp_resource res;
    assert_int_equal(ss_otlp_resource_build(&res), 0);
    ss_logs_encoder enc, fresh;
    ss_logs_encoder_init(&enc);
    ss_buf req, again, text;
    ss_buf_init(&req);
    ss_buf_init(&again);
    ss_buf_init(&text);
    uint64_t hits = 0;
    for (int i = 0; i < ROUNDS; i++) {
        uint32_t recs, dropped;
        int used = ss_logs_encode(&enc, &res, rounds[i], 0, 100000, SS_LOGS_MAX_REQUEST, 42,
                                  &req, &recs, &dropped);
        assert_int_equal(used, (int)rounds[i]->n_threads);
        decode_logs(&req, rounds[i], &text);
        /* a new encoder formats everything: the same request */
        ss_logs_encoder_init(&fresh);
        ss_logs_encode(&fresh, &res, rounds[i], 0, 100000, SS_LOGS_MAX_REQUEST, 42, &again,
                       &recs, &dropped);
        ss_logs_encoder_free(&fresh);
        assert_int_equal(req.len, again.len);
        assert_memory_equal(req.data, again.data, req.len);
    }
    ss_memo_stats ms;
    ss_stack_memo_stats(enc.memo, &ms);
    hits = ms.hits;
    assert_true(hits > 0); /* the reuse did happen */
    assert_false(text.failed);
    ss_buf_putc(&text, '\0');
    check_blocks(text.data, "otlp_logs bodies");
    ss_logs_encoder_free(&enc);
    ss_otlp_resource_free(&res);
    ss_buf_free(&req);
    ss_buf_free(&again);
    ss_buf_free(&text);
}

/* ---- pprof, decoded ----------------------------------------------- */

typedef struct pbr {
    const uint8_t *p, *end;
} pbr;

static uint64_t tp_varint(pbr *r) {
    uint64_t v = 0;
    for (int s = 0; r->p < r->end && s < 64; s += 7) {
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            break;
    }
    return v;
}

/* The next field: its number, wire type, and (length-delimited) bytes or
 * (varint) value. false at the end. */
static bool tp_next(pbr *r, uint32_t *field, uint32_t *wt, pbr *sub, uint64_t *v) {
    if (r->p >= r->end)
        return false;
    uint64_t key = tp_varint(r);
    *field = (uint32_t)(key >> 3);
    *wt = key & 7;
    if (*wt == 0) {
        *v = tp_varint(r);
    } else if (*wt == 2) {
        uint64_t n = tp_varint(r);
        assert_true(n <= (uint64_t)(r->end - r->p));
        sub->p = r->p;
        sub->end = r->p + n;
        r->p += n;
    } else if (*wt == 1) {
        r->p += 8;
    } else if (*wt == 5) {
        r->p += 4;
    } else {
        fail_msg("pprof: wire type %u", *wt);
    }
    return true;
}

#define PMAX 4096
typedef struct pprof_view {
    char *strings[PMAX];
    uint32_t n_strings;
    uint64_t fn_id[PMAX], fn_name[PMAX];
    uint32_t n_fn;
    uint64_t loc_id[PMAX], loc_fn[PMAX][8];
    uint32_t loc_nfn[PMAX], n_loc;
} pprof_view;

/* How many observations pprof gives thread `tid` with a frame of `fname`. */
static int64_t pprof_count(const ss_buf *b, int tid, const char *fname) {
    static pprof_view v;
    memset(&v, 0, sizeof v);
    pbr r = {(const uint8_t *)b->data, (const uint8_t *)b->data + b->len}, sub, s2;
    uint32_t f, wt;
    uint64_t x;
    while (tp_next(&r, &f, &wt, &sub, &x)) { /* tables first */
        if (f == 6 && wt == 2 && v.n_strings < PMAX)
            v.strings[v.n_strings++] = strndup((const char *)sub.p, (size_t)(sub.end - sub.p));
        if (f == 5 && wt == 2 && v.n_fn < PMAX) {
            while (tp_next(&sub, &f, &wt, &s2, &x)) {
                if (f == 1 && wt == 0)
                    v.fn_id[v.n_fn] = x;
                if (f == 2 && wt == 0)
                    v.fn_name[v.n_fn] = x;
            }
            v.n_fn++;
        }
        if (f == 4 && wt == 2 && v.n_loc < PMAX) {
            uint32_t k = v.n_loc++;
            while (tp_next(&sub, &f, &wt, &s2, &x)) {
                if (f == 1 && wt == 0)
                    v.loc_id[k] = x;
                if (f == 4 && wt == 2) {
                    pbr line = s2, s3;
                    while (tp_next(&line, &f, &wt, &s3, &x))
                        if (f == 1 && wt == 0 && v.loc_nfn[k] < 8)
                            v.loc_fn[k][v.loc_nfn[k]++] = x;
                }
            }
        }
    }
    int64_t total = 0;
    r.p = (const uint8_t *)b->data;
    while (tp_next(&r, &f, &wt, &sub, &x)) {
        if (f != 2 || wt != 2)
            continue;
        bool frame = false, thread = false;
        int64_t count = 0;
        int nvalue = 0;
        while (tp_next(&sub, &f, &wt, &s2, &x)) {
            if (f == 1) { /* location ids, packed or not */
                pbr ids = s2;
                uint64_t one = x;
                do {
                    uint64_t id = wt == 2 ? tp_varint(&ids) : one;
                    for (uint32_t l = 0; l < v.n_loc; l++)
                        if (v.loc_id[l] == id)
                            for (uint32_t q = 0; q < v.loc_nfn[l]; q++)
                                for (uint32_t fn = 0; fn < v.n_fn; fn++)
                                    if (v.fn_id[fn] == v.loc_fn[l][q] &&
                                        v.fn_name[fn] < v.n_strings &&
                                        strstr(v.strings[v.fn_name[fn]], fname))
                                        frame = true;
                } while (wt == 2 && ids.p < ids.end);
            } else if (f == 2) { /* values: the first is samples/count */
                pbr vals = s2;
                if (wt == 2)
                    count = (int64_t)tp_varint(&vals);
                else if (nvalue == 0)
                    count = (int64_t)x;
                nvalue++;
            } else if (f == 3 && wt == 2) { /* label {key, str, num} */
                pbr lab = s2, s3;
                uint64_t key = 0, num = 0;
                while (tp_next(&lab, &f, &wt, &s3, &x)) {
                    if (f == 1)
                        key = x;
                    if (f == 3)
                        num = x;
                }
                if (key < v.n_strings && strcmp(v.strings[key], "thread.id") == 0 &&
                    num == (uint64_t)tid)
                    thread = true;
            }
        }
        if (frame && thread)
            total += count;
    }
    for (uint32_t i = 0; i < v.n_strings; i++)
        free(v.strings[i]);
    return total;
}

static void test_profiles(void **state) {
    (void)state;
    /* one period over every round (memo), and the same rounds with their
     * identities hidden (nothing reused) */
    ss_agg *a = ss_agg_create(64u << 20), *base = ss_agg_create(64u << 20);
    assert_non_null(a);
    assert_non_null(base);
    for (int i = 0; i < ROUNDS; i++) {
        assert_int_equal(ss_agg_add_round(a, rounds[i]), 0);
        ss_round *r = rounds[i];
        uint64_t ids[4096];
        assert_true(r->n_threads <= 4096);
        for (uint32_t k = 0; k < r->n_threads; k++) {
            ids[k] = r->threads[k].stack_id;
            r->threads[k].stack_id = 0;
        }
        assert_int_equal(ss_agg_add_round(base, r), 0);
        for (uint32_t k = 0; k < r->n_threads; k++)
            r->threads[k].stack_id = ids[k];
    }
    ss_memo_stats ms;
    ss_stack_memo_stats(a->stack_memo, &ms);
    assert_true(ms.hits > 0);
    ss_buf p1, p2;
    ss_buf_init(&p1);
    ss_buf_init(&p2);
    assert_int_equal(ss_pprof_encode_agg(a, SS_PPROF_ALL, &p1), 0);
    assert_int_equal(ss_pprof_encode_agg(base, SS_PPROF_ALL, &p2), 0);
    assert_int_equal(p1.len, p2.len);
    assert_memory_equal(p1.data, p2.data, p1.len);
    /* decoded: each place of the mover counted in the rounds it was there */
    int at_a = 0, at_b = 0;
    for (int i = 0; i < ROUNDS; i++) {
        at_a += mover_where[i] == 0;
        at_b += mover_where[i] == 1;
    }
    assert_int_equal(pprof_count(&p1, tid_mover, "wait_here_a"), at_a);
    assert_int_equal(pprof_count(&p1, tid_mover, "wait_here_b"), at_b);
    assert_int_equal(pprof_count(&p1, tid_burner, "burner_sleeps"), ROUNDS);
    /* the tables every encoder reads (OTLP profiles, flame graph...): the
     * same as with no reuse */
    assert_int_equal(a->n_stacks, base->n_stacks);
    assert_int_equal(a->n_stack_locs, base->n_stack_locs);
    assert_int_equal(a->n_samples, base->n_samples);
    assert_int_equal(a->n_obs, base->n_obs);
    assert_memory_equal(a->stacks, base->stacks, a->n_stacks * sizeof *a->stacks);
    assert_memory_equal(a->stack_locs, base->stack_locs, a->n_stack_locs * sizeof(uint32_t));
    assert_memory_equal(a->samples, base->samples, a->n_samples * sizeof *a->samples);
    assert_memory_equal(a->obs, base->obs, a->n_obs * sizeof *a->obs);
    /* OTLP profiles: the same request as with no reuse, but for the
     * profile's random id */
    ss_prof_request_opts o = {.version = SS_OTLP_PROF_V1DEVELOPMENT,
                              .scope_name = "s",
                              .scope_version = "1",
                              .timestamps = true};
    ss_buf_reset(&p1);
    ss_buf_reset(&p2);
    assert_int_equal(ss_otlp_profiles_encode(a, &o, &p1), 0);
    assert_int_equal(ss_otlp_profiles_encode(base, &o, &p2), 0);
    assert_int_equal(p1.len, p2.len);
    size_t differ = 0;
    for (size_t i = 0; i < p1.len; i++)
        differ += p1.data[i] != p2.data[i];
    assert_true(differ <= 16);
    ss_buf_free(&p1);
    ss_buf_free(&p2);
    ss_agg_destroy(a);
    ss_agg_destroy(base);
}

/* STACKSHOT_STACK_REUSE=false: no identities, nothing reused. */
static void test_switch_off(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    ss_stack_reuse_set(false);
    ss_round *r;
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    for (uint32_t i = 0; i < r->n_threads; i++) {
        assert_int_equal(r->threads[i].stack_id, 0);
        assert_false(r->threads[i].same_stack);
    }
    ss_round_unref(r);
    ss_stack_reuse_set(true);
}

/* The metadata line (written by hand, not printf) as printf wrote it:
 * numbers of every size, times near the rounding ties. */
static void test_header_format(void **state) {
    (void)state;
    ss_thread_sample t;
    ss_round r;
    memset(&r, 0, sizeof r);
    ss_buf got;
    ss_buf_init(&got);
    char want[600];
    uint64_t seed = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        memset(&t, 0, sizeof t);
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        uint64_t x = seed;
        t.name = i % 3 ? "worker 1" : "main";
        t.number = (int64_t)(x % 100000) - (i % 7 == 0 ? 50000 : 0);
        t.nid = (int32_t)(x >> 20) & 0x7fffffff;
        t.os_prio = (int32_t)(x % 40) - 20;
        t.prio = i % 5;
        t.daemon = i & 1;
        t.tid = i % 11 ? x * 2654435761u : 0;
        /* times: random, and near the ties (x.xx5) of either unit */
        uint64_t scale = 1ull << (x % 62);
        t.cpu_ns = (x >> 3) % scale;
        t.elapsed_ns = (x >> 5) % (scale * 3 + 1);
        if (i % 4 == 1)
            t.cpu_ns = (x % 1000000) * 10000 + 5000 + (int64_t)(x % 2001) - 1000;
        if (i % 4 == 2)
            t.elapsed_ns = (x % 1000000) * 10000000 + 5000000 + (int64_t)(x % 2001) - 1000;
        if (i % 97 == 0)
            t.cpu_ns = SS_UNKNOWN_U64;
        if (i % 89 == 0)
            t.elapsed_ns = SS_UNKNOWN_U64;
        t.status = i % 13 ? "waiting on condition" : NULL;
        t.state = SS_STATE_WAITING;
        t.state_detail = i % 2 ? "on condition" : NULL;
        double cpu_ms = t.cpu_ns == SS_UNKNOWN_U64 ? 0.0 : (double)t.cpu_ns / 1e6;
        double el_s = t.elapsed_ns == SS_UNKNOWN_U64 ? 0.0 : (double)t.elapsed_ns / 1e9;
        int n = snprintf(want, sizeof want,
                         "\"%s\" #%lld %sprio=%d os_prio=%d cpu=%.2fms elapsed=%.2fs "
                         "tid=0x%016llx nid=0x%x %s\n   native.Thread.State: WAITING%s%s%s\n",
                         t.name, (long long)t.number, t.daemon ? "daemon " : "", t.prio,
                         t.os_prio, cpu_ms, el_s, (unsigned long long)t.tid, (unsigned)t.nid,
                         t.status ? t.status : "runnable", t.state_detail ? " (" : "",
                         t.state_detail ? t.state_detail : "", t.state_detail ? ")" : "");
        ss_buf_reset(&got);
        ss_text_format_thread_head(&r, &t, &got);
        ss_buf_putc(&got, '\0');
        if ((size_t)n != got.len - 1 || strcmp(got.data, want) != 0)
            fail_msg("case %d:\n got  %s\n want %s", i, got.data, want);
    }
    ss_buf_free(&got);
}

/* The thread list is kept while the process has as many threads as were
 * listed and none of them is gone: a new thread is in the next round, a
 * thread that replaced one that ended (same count) at the latest in the
 * round after. */
static atomic_int churn_stop;
static void *churner(void *arg) {
    atomic_store((atomic_int *)arg, ss_gettid());
    while (!atomic_load(&churn_stop))
        nap_ms(5);
    return NULL;
}

static bool in_round(const ss_round *r, int tid) { return thread_of(r, tid) != NULL; }

static void test_listing(void **state) {
    (void)state;
    ss_config cfg;
    ss_config_load(&cfg);
    cfg.enabled = true;
    ss_round *r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
        ss_round_unref(r);
    }
    ss_native_counts c0, c1;
    ss_native_sample_counts(&c0);
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    ss_round_unref(r);
    ss_native_sample_counts(&c1);
    assert_int_equal(c1.lists_saved, c0.lists_saved + 1); /* nothing changed: not listed */

    /* a new thread: in the very next round */
    atomic_int tid_x = 0, tid_y = 0;
    pthread_t x, y;
    pthread_create(&x, NULL, churner, &tid_x);
    while (!atomic_load(&tid_x))
        nap_ms(1);
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    assert_true(in_round(r, tid_x));
    ss_round_unref(r);
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    ss_round_unref(r);

    /* x ends and y starts between two rounds: as many threads as before */
    atomic_store(&churn_stop, 1);
    pthread_join(x, NULL);
    atomic_store(&churn_stop, 0);
    pthread_create(&y, NULL, churner, &tid_y);
    while (!atomic_load(&tid_y))
        nap_ms(1);
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    assert_false(in_round(r, tid_x));
    bool seen = in_round(r, tid_y);
    ss_round_unref(r);
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    seen = seen || in_round(r, tid_y);
    assert_true(in_round(r, tid_y));
    ss_round_unref(r);
    assert_true(seen);
    atomic_store(&churn_stop, 1);
    pthread_join(y, NULL);
    /* gone: no longer in the round, and listed again */
    assert_int_equal(ss_native_sample_once(&cfg, &r), 0);
    assert_false(in_round(r, tid_y));
    ss_round_unref(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memo),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_otlp_logs),
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_switch_off),
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_header_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
