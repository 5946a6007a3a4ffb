/* Unit tests of the JVM-free parts of jvmti/: class names as jstack prints
 * them, modified UTF-8, the state mapping, the kernel-tid matcher, and the
 * per-thread memo (stack identities, threads forgotten when they end). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "agent/mem.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "jvmti/jvmti_internal.h"

static void name_is(const char *sig, const char *want) {
    char out[256];
    ss_jclass_name(sig, out, sizeof out);
    assert_string_equal(out, want);
}

static void test_class_names(void **state) {
    (void)state;
    name_is("Ljava/util/HashMap;", "java.util.HashMap");
    name_is("Ljava/lang/ref/Reference$ReferenceHandler;", "java.lang.ref.Reference$ReferenceHandler");
    name_is("LDemo;", "Demo");
    name_is("LDemo$Inner;", "Demo$Inner");
    /* hidden classes: JVMTI spells the suffix with '.', jstack with '/' */
    name_is("LDemo$$Lambda$14.0x0000000800c03000;", "Demo$$Lambda$14/0x0000000800c03000");
    name_is("LDemo$$Lambda.0x0000000054040210;", "Demo$$Lambda/0x0000000054040210");
    name_is("Ljava/lang/invoke/LambdaForm$MH.0x00000008000c4000;",
            "java.lang.invoke.LambdaForm$MH/0x00000008000c4000");
    name_is(NULL, "unknown");
    char small[5];
    ss_jclass_name("Ljava/util/HashMap;", small, sizeof small);
    assert_string_equal(small, "java");
}

static void test_modified_utf8(void **state) {
    (void)state;
    char out[64];
    ss_mutf8_to_utf8("w\xc3\xb6rker-\xe7\xba\xbf\xe7\xa8\x8b", out, sizeof out);
    assert_string_equal(out, "w\xc3\xb6rker-\xe7\xba\xbf\xe7\xa8\x8b");
    ss_mutf8_to_utf8("a\xc0\x80z", out, sizeof out);
    assert_string_equal(out, "a?z");
    /* U+1F600 as two surrogates (D83D DE00) becomes one 4-byte character */
    ss_mutf8_to_utf8("x\xed\xa0\xbd\xed\xb8\x80y", out, sizeof out);
    assert_string_equal(out, "x\xf0\x9f\x98\x80y");
    /* never split a character when the output is short */
    char tiny[4];
    ss_mutf8_to_utf8("ab\xe7\xba\xbf", tiny, sizeof tiny);
    assert_string_equal(tiny, "ab");
}

static void state_is(jint st, ss_thread_state want, const char *detail, const char *status) {
    ss_thread_sample t;
    memset(&t, 0, sizeof t);
    ss_jthreads_state(st, &t);
    assert_int_equal(t.state, want);
    if (detail)
        assert_string_equal(t.state_detail, detail);
    else
        assert_null(t.state_detail);
    assert_string_equal(t.status, status);
}

static void test_states(void **state) {
    (void)state;
    const jint A = JVMTI_THREAD_STATE_ALIVE;
    const jint W = JVMTI_THREAD_STATE_WAITING;
    state_is(A | JVMTI_THREAD_STATE_RUNNABLE, SS_STATE_RUNNABLE, NULL, "runnable");
    state_is(A | W | JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT | JVMTI_THREAD_STATE_SLEEPING,
             SS_STATE_TIMED_WAITING, "sleeping", "waiting on condition");
    state_is(A | W | JVMTI_THREAD_STATE_WAITING_INDEFINITELY | JVMTI_THREAD_STATE_PARKED,
             SS_STATE_WAITING, "parking", "waiting on condition");
    state_is(A | W | JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT | JVMTI_THREAD_STATE_PARKED,
             SS_STATE_TIMED_WAITING, "parking", "waiting on condition");
    state_is(A | W | JVMTI_THREAD_STATE_WAITING_INDEFINITELY | JVMTI_THREAD_STATE_IN_OBJECT_WAIT,
             SS_STATE_WAITING, "on object monitor", "in Object.wait()");
    state_is(A | W | JVMTI_THREAD_STATE_WAITING_WITH_TIMEOUT | JVMTI_THREAD_STATE_IN_OBJECT_WAIT,
             SS_STATE_TIMED_WAITING, "on object monitor", "in Object.wait()");
    state_is(A | JVMTI_THREAD_STATE_BLOCKED_ON_MONITOR_ENTER, SS_STATE_BLOCKED,
             "on object monitor", "waiting for monitor entry");
    state_is(JVMTI_THREAD_STATE_TERMINATED, SS_STATE_TERMINATED, NULL, "terminated");
    state_is(0, SS_STATE_NEW, NULL, "allocated");
}

/* ---- nid matching on real threads ----------------------------------- */

typedef struct probe {
    pthread_t th;
    pid_t tid;
    uint64_t burn_ns;
    _Atomic int ready;
    _Atomic int quit;
} probe;

static uint64_t cpu_of(pthread_t th) {
    clockid_t c;
    struct timespec ts;
    pthread_getcpuclockid(th, &c);
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *probe_main(void *arg) {
    probe *p = arg;
    p->tid = ss_gettid();
    pthread_setname_np(pthread_self(), "ss-nid-probe");
    volatile uint64_t x = 0;
    while (cpu_of(pthread_self()) < p->burn_ns)
        x++;
    atomic_store(&p->ready, 1);
    while (!atomic_load(&p->quit))
        ss_sleep_ns(1000000);
    return NULL;
}

static void test_nid_match(void **state) {
    (void)state;
    probe a = {.burn_ns = 5000000}, b = {.burn_ns = 60000000};
    pthread_create(&a.th, NULL, probe_main, &a);
    pthread_create(&b.th, NULL, probe_main, &b);
    while (!atomic_load(&a.ready) || !atomic_load(&b.ready))
        ss_sleep_ns(1000000);
    ss_nid_matcher *m = ss_nid_matcher_create();
    ss_nid_matcher_begin(m);
    /* two threads, same name: the CPU clock decides */
    assert_int_equal(ss_nid_match(m, "ss-nid-probe", cpu_of(b.th)), b.tid);
    assert_int_equal(ss_nid_match(m, "ss-nid-probe", cpu_of(a.th)), a.tid);
    /* both taken now */
    assert_int_equal(ss_nid_match(m, "ss-nid-probe", cpu_of(a.th)), 0);
    /* a fresh round forgets what was taken; equal unknown CPU times tie */
    ss_nid_matcher_begin(m);
    assert_int_equal(ss_nid_match(m, "ss-nid-probe", SS_UNKNOWN_U64), 0);
    assert_int_equal(ss_nid_match(m, "no-such-thread", 0), 0);
    ss_nid_matcher_destroy(m);
    /* start time: this process started within the last minute */
    uint64_t now_ms = ss_wall_ns() / 1000000ull;
    uint64_t start = ss_task_start_wall_ms(a.tid);
    assert_true(start <= now_ms && start + 60000 > now_ms);
    assert_int_equal(ss_thread_start_wall_ms(a.tid, 42), ss_thread_start_wall_ms(a.tid, 42));
    atomic_store(&a.quit, 1);
    atomic_store(&b.quit, 1);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
}

/* A stack of n frames whose first frame's line is `line`. */
static void stack_of(ss_frame *f, uint32_t n, int32_t line) {
    static const ss_funcinfo *fn;
    if (!fn)
        fn = ss_funcinfo_intern("Memo", "run", "Memo.java", NULL, SS_FRAME_JAVA);
    memset(f, 0, n * sizeof *f);
    for (uint32_t i = 0; i < n; i++) {
        f[i].fn = fn;
        f[i].addr = i;
        f[i].line = i ? (int32_t)i : line;
    }
}

static void test_memo(void **state) {
    (void)state;
    ss_stack_reuse_set(true);
    size_t mem0 = ss_mem_used();
    ss_jmemo *m = ss_jmemo_create();
    assert_non_null(m);
    ss_frame f[8];
    ss_thread_sample t;
    /* round 1: 600 threads (the table grows from 256 on the way) */
    uint64_t ids[600];
    for (int64_t id = 1; id <= 600; id++) {
        ss_jthread_memo *e = ss_jmemo_get(m, id);
        assert_non_null(e);
        assert_int_equal(e->id, id);
        assert_true(e->cpu_prev == SS_UNKNOWN_U64);
        e->cpu_prev = (uint64_t)id * 10;
        stack_of(f, 8, 100);
        memset(&t, 0, sizeof t);
        ss_jmemo_keep(m, e, f, 8, false, &t);
        assert_true(t.stack_id != 0);
        assert_false(t.same_stack);
        ids[id - 1] = t.stack_id;
    }
    assert_true(ss_mem_used() > mem0);
    ss_jmemo_end(m);
    /* round 2: the odd ids only; thread 1 moved, thread 3 truncated */
    for (int64_t id = 1; id <= 600; id += 2) {
        ss_jthread_memo *e = ss_jmemo_get(m, id);
        assert_non_null(e);
        assert_int_equal(e->cpu_prev, (uint64_t)id * 10); /* kept across rounds */
        stack_of(f, 8, id == 1 ? 101 : 100);
        memset(&t, 0, sizeof t);
        ss_jmemo_keep(m, e, f, 8, id == 3, &t);
        if (id == 1 || id == 3) {
            assert_true(t.stack_id != ids[id - 1]);
            assert_false(t.same_stack);
        } else {
            assert_int_equal(t.stack_id, ids[id - 1]);
            assert_true(t.same_stack);
            /* the kept frames, used again as they are */
            memset(&t, 0, sizeof t);
            ss_jmemo_keep(m, e, e->frames, e->n_frames, e->truncated, &t);
            assert_int_equal(t.stack_id, ids[id - 1]);
        }
    }
    ss_jmemo_end(m);
    /* round 3: an even id was forgotten (its thread ended): a new entry */
    ss_jthread_memo *e = ss_jmemo_get(m, 2);
    assert_non_null(e);
    assert_false(e->have_stack);
    assert_true(e->cpu_prev == SS_UNKNOWN_U64);
    assert_null(ss_jmemo_get(m, 0));
    e = ss_jmemo_get(m, 5);
    assert_non_null(e);
    assert_true(e->have_stack);
    ss_jmemo_end(m);
    /* with reuse off, no identity is given out */
    ss_stack_reuse_set(false);
    e = ss_jmemo_get(m, 5);
    memset(&t, 0, sizeof t);
    stack_of(f, 8, 100);
    ss_jmemo_keep(m, e, f, 8, false, &t);
    assert_int_equal(t.stack_id, 0);
    ss_stack_reuse_set(true);
    ss_jmemo_end(m);
    ss_jmemo_end(m); /* nothing got: everything forgotten */
    assert_int_equal(ss_mem_used(), mem0);
    ss_jmemo_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_names),
        cmocka_unit_test(test_modified_utf8),
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_nid_match),
        cmocka_unit_test(test_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
