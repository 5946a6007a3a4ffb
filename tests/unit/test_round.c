/* test_round.c: the round builder, interning and reference counting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/buf.h"
#include "agent/mem.h"
#include "agent/round.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_build_two_threads(void **state) {
    (void)state;
    size_t before = ss_mem_used();
    ss_round_builder *b = ss_round_builder_create();
    assert_non_null(b);
    ss_round_builder_begin(b, 1700000000123456789ull, 250, SS_RUNTIME_NATIVE);
    const ss_funcinfo *f1 = ss_funcinfo_intern("global", "leaf", "a.c", NULL, SS_FRAME_NATIVE);
    const ss_funcinfo *f2 = ss_funcinfo_intern("global", "main", "a.c", NULL, SS_FRAME_NATIVE);
    char name[32] = "worker";
    ss_thread_sample *t = ss_round_builder_add_thread(b, name);
    t->nid = 42;
    ss_frame fr = {.fn = f1, .line = 10};
    assert_int_equal(ss_round_builder_add_frame(b, &fr), 0);
    fr.fn = f2;
    fr.line = 20;
    assert_int_equal(ss_round_builder_add_frame(b, &fr), 0);
    strcpy(name, "changed"); /* the builder copied the name */
    t = ss_round_builder_add_thread(b, "main");
    t->nid = 7;
    fr.fn = f2;
    fr.line = 30;
    ss_round_builder_add_frame(b, &fr);
    ss_round *r = ss_round_builder_finish(b, 3, 1);
    assert_non_null(r);
    assert_int_equal(r->seq, 1);
    assert_int_equal(r->time_ns, 1700000000123456789ull);
    assert_int_equal(r->interval_ms, 250);
    assert_int_equal(r->n_threads, 2);
    assert_int_equal(r->n_frames, 3);
    assert_int_equal(r->threads_skipped, 3);
    assert_int_equal(r->threads_blocked, 1);
    assert_string_equal(r->threads[0].name, "worker");
    assert_string_equal(r->threads[1].name, "main");
    assert_int_equal(r->threads[0].frame_count, 2);
    assert_int_equal(r->threads[1].frame_start, 2);
    const ss_frame *fs = ss_thread_frames(r, &r->threads[0]);
    assert_string_equal(fs[0].fn->name, "leaf");
    assert_int_equal(fs[1].line, 20);
    assert_int_equal(r->threads[0].cpu_ns, SS_UNKNOWN_U64);
    assert_int_equal(ss_mem_used(), before + r->bytes);
    ss_round_ref(r);
    ss_round_unref(r);
    assert_int_equal(ss_mem_used(), before + r->bytes);
    ss_round_unref(r);
    assert_int_equal(ss_mem_used(), before);

    /* the builder is reusable, sequence numbers continue */
    ss_round_builder_begin(b, 1, 250, SS_RUNTIME_JVM);
    ss_round_builder_add_thread(b, "dropped");
    ss_round_builder_add_frame(b, &fr);
    ss_round_builder_drop_thread(b);
    ss_round_builder_add_thread(b, "kept");
    r = ss_round_builder_finish(b, 0, 0);
    assert_int_equal(r->seq, 2);
    assert_int_equal(r->n_threads, 1);
    assert_int_equal(r->n_frames, 0);
    assert_string_equal(r->threads[0].name, "kept");
    ss_round_unref(r);
    ss_round_builder_destroy(b);
}

static void test_intern_dedups(void **state) {
    (void)state;
    const ss_funcinfo *a = ss_funcinfo_intern("java.util.HashMap", "get", "HashMap.java",
                                              "java.base@17.0.15", SS_FRAME_JAVA);
    char ns[] = "java.util.HashMap";
    const ss_funcinfo *b = ss_funcinfo_intern(ns, "get", "HashMap.java", "java.base@17.0.15",
                                              SS_FRAME_JAVA);
    assert_ptr_equal(a, b);
    assert_ptr_not_equal(a->ns, ns);
    const ss_funcinfo *c = ss_funcinfo_intern("java.util.HashMap", "get", "HashMap.java", NULL,
                                              SS_FRAME_JAVA);
    assert_ptr_not_equal(a, c);
    assert_null(c->module);
    const ss_funcinfo *d = ss_funcinfo_intern(NULL, NULL, NULL, NULL, SS_FRAME_NATIVE);
    assert_string_equal(d->ns, "unknown");
    assert_string_equal(d->file, "unknown");
    const ss_mapping *m1 = ss_mapping_intern("/lib/x.so", "abcd", 0x1000, 0x2000, 0);
    const ss_mapping *m2 = ss_mapping_intern("/lib/x.so", "abcd", 0x1000, 0x2000, 0);
    const ss_mapping *m3 = ss_mapping_intern("/lib/x.so", "abcd", 0x3000, 0x4000, 0);
    assert_ptr_equal(m1, m2);
    assert_ptr_not_equal(m1, m3);
    assert_ptr_equal(ss_intern("hello"), ss_intern("hello"));
    /* many distinct entries: the table grows and stays consistent */
    const ss_funcinfo *first = NULL;
    for (int i = 0; i < 5000; i++) {
        char n[32];
        snprintf(n, sizeof n, "f%d", i);
        const ss_funcinfo *f = ss_funcinfo_intern("global", n, "g.c", NULL, SS_FRAME_NATIVE);
        if (i == 0)
            first = f;
        assert_string_equal(f->name, n);
    }
    assert_ptr_equal(first, ss_funcinfo_intern("global", "f0", "g.c", NULL, SS_FRAME_NATIVE));
}

static void test_state_names(void **state) {
    (void)state;
    assert_string_equal(ss_thread_state_name(SS_STATE_TIMED_WAITING), "TIMED_WAITING");
    assert_string_equal(ss_thread_state_name(SS_STATE_BLOCKED), "BLOCKED");
    assert_string_equal(ss_thread_state_name((ss_thread_state)99), "UNKNOWN");
}

/* The rows exporters read instead of testing the runtime: what each kind
 * and runtime says, and an unknown value reading as native. */
static void test_kind_and_runtime_rows(void **state) {
    (void)state;
    const ss_frame_kind_info *n = ss_frame_kind_about(SS_FRAME_NATIVE);
    const ss_frame_kind_info *j = ss_frame_kind_about(SS_FRAME_JAVA);
    assert_string_equal(n->type, "native");
    assert_null(n->qualify);
    assert_true(n->addressed);
    assert_string_equal(j->type, "jvm");
    assert_string_equal(j->qualify, ".");
    assert_false(j->addressed);
    assert_ptr_equal(ss_frame_kind_about(SS_FRAME_KINDS), n);
    assert_ptr_equal(ss_frame_kind_about(255), n);
    const ss_runtime_info *rn = ss_runtime_about(SS_RUNTIME_NATIVE);
    const ss_runtime_info *rj = ss_runtime_about(SS_RUNTIME_JVM);
    assert_string_equal(rn->name, "native");
    assert_false(rn->numbers_threads);
    assert_null(rn->state_label);
    assert_string_equal(rj->name, "jvm");
    assert_true(rj->numbers_threads);
    assert_string_equal(rj->state_label, "java.lang.Thread.State");
    assert_ptr_equal(ss_runtime_about(99), rn);
}

static void test_buf(void **state) {
    (void)state;
    ss_buf b;
    ss_buf_init(&b);
    for (int i = 0; i < 1000; i++)
        ss_buf_printf(&b, "%04d,", i);
    assert_int_equal(b.len, 5000);
    assert_memory_equal(b.data + 4995, "0999,", 5);
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ss_buf_reset(&b);
    ss_buf_printf(&b, "<%s>", big);
    assert_int_equal(b.len, 601);
    assert_int_equal(b.data[600], '>');
    assert_false(b.failed);
    ss_buf_free(&b);
}

/* Interned records keep their address while the table grows past its
 * first 1,024 slots many times over, and the table stays out of the
 * memory account. */
static void test_intern_grows(void **state) {
    (void)state;
    enum { N = 6000 };
    static const char *strs[N];
    static const ss_funcinfo *fns[N];
    static const ss_mapping *maps[N];
    size_t used = ss_mem_used();
    char buf[64];
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "grows-%d", i);
        strs[i] = ss_intern(buf);
        fns[i] = ss_funcinfo_intern("grows", buf, "g.c", NULL, SS_FRAME_NATIVE);
        maps[i] = ss_mapping_intern("/lib/grows.so", buf, 0x1000u * (uint64_t)i, 0x1000u * (uint64_t)i + 0x800, 0);
        assert_non_null(strs[i]);
        assert_non_null(fns[i]);
        assert_non_null(maps[i]);
    }
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "grows-%d", i);
        assert_ptr_equal(ss_intern(buf), strs[i]);
        assert_string_equal(strs[i], buf);
        assert_ptr_equal(ss_funcinfo_intern("grows", buf, "g.c", NULL, SS_FRAME_NATIVE), fns[i]);
        assert_string_equal(fns[i]->name, buf);
        assert_ptr_equal(ss_mapping_intern("/lib/grows.so", buf, 0x1000u * (uint64_t)i,
                                           0x1000u * (uint64_t)i + 0x800, 0),
                         maps[i]);
        assert_string_equal(maps[i]->build_id, buf);
    }
    /* the same name in another kind or namespace is another record */
    assert_ptr_not_equal(ss_funcinfo_intern("grows", "grows-1", "g.c", NULL, SS_FRAME_JAVA), fns[1]);
    assert_ptr_not_equal(ss_funcinfo_intern("other", "grows-1", "g.c", NULL, SS_FRAME_NATIVE), fns[1]);
    assert_int_equal(ss_mem_used(), used);
}


/* A fork while an agent thread holds the intern table's lock (inside an
 * insert) neither waits for it (the host's forking thread never waits for
 * the agent) nor leaves the child a lock nobody will release: the child
 * interns with a table of its own, the records it had stay valid, and the
 * parent's table is intact. With the lock taken around fork, the fork
 * waited for the holder, which here releases only after the fork: the
 * alarm ends the test. */
static atomic_int hold_state; /* 1 held, 2 release it */

static void *hold_intern(void *arg) {
    (void)arg;
    ss_intern_hold(true);
    atomic_store(&hold_state, 1);
    while (atomic_load(&hold_state) != 2)
        sched_yield();
    ss_intern_hold(false);
    return NULL;
}

static void test_intern_fork_while_held(void **state) {
    (void)state;
    const ss_funcinfo *f = ss_funcinfo_intern("ns", "forked", "f.c", NULL, SS_FRAME_NATIVE);
    assert_non_null(f);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, hold_intern, NULL), 0);
    while (atomic_load(&hold_state) != 1)
        sched_yield();
    alarm(20); /* a fork that waits for the holder never returns */
    pid_t pid = fork();
    if (pid == 0) {
        const ss_funcinfo *g = ss_funcinfo_intern("ns", "forked", "f.c", NULL, SS_FRAME_NATIVE);
        const char *s = ss_intern("only in the child");
        bool ok = g && strcmp(g->name, "forked") == 0 && strcmp(f->name, "forked") == 0 && s &&
                  strcmp(s, "only in the child") == 0 && ss_intern("only in the child") == s;
        _exit(ok ? 0 : 1);
    }
    alarm(0);
    assert_true(pid > 0);
    atomic_store(&hold_state, 2);
    assert_int_equal(pthread_join(t, NULL), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the parent's table: the same record for the same content */
    assert_ptr_equal(ss_funcinfo_intern("ns", "forked", "f.c", NULL, SS_FRAME_NATIVE), f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_two_threads),
        cmocka_unit_test(test_intern_dedups),
        cmocka_unit_test(test_intern_grows),
        cmocka_unit_test(test_intern_fork_while_held),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_kind_and_runtime_rows),
        cmocka_unit_test(test_buf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
