/* test_profiles_agg.c: the aggregator's tables and the collapsed/flame
 * graph encoders on the known synthetic scenario (synth.h). */
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
#include "agent/mem.h"
#include "agent/round.h"
#include "exporters/common/aggregate.h"
#include "exporters/profiles/encode.h"
#include "tests/profiles/synth.h"

static ss_agg *agg_of(uint32_t rounds) {
    ss_agg *a = ss_agg_create(64u << 20);
    assert_non_null(a);
    for (uint32_t i = 0; i < rounds; i++) {
        ss_round *r = ss_synth_known(i);
        assert_non_null(r);
        assert_int_equal(ss_agg_add_round(a, r), 0);
        ss_round_unref(r);
    }
    return a;
}

static uint32_t find_str(const ss_agg *a, const char *s) {
    for (uint32_t i = 1; i < a->n_strings; i++)
        if (strcmp(ss_agg_str(a, i), s) == 0)
            return i;
    return 0;
}

static void test_tables(void **st) {
    (void)st;
    ss_agg *a = agg_of(3);
    /* Zero elements. */
    assert_int_equal(ss_agg_strlen(a, 0), 0);
    assert_int_equal(a->functions[0].name, 0);
    assert_int_equal(a->locations[0].n_lines, 0);
    assert_int_equal(a->stacks[0].n, 0);
    assert_int_equal(a->mappings[0].file, 0);
    /* No duplicate strings, functions, locations. */
    for (uint32_t i = 0; i < a->n_strings; i++)
        for (uint32_t j = i + 1; j < a->n_strings; j++)
            assert_false(ss_agg_strlen(a, i) == ss_agg_strlen(a, j) &&
                         strcmp(ss_agg_str(a, i), ss_agg_str(a, j)) == 0);
    for (uint32_t i = 1; i < a->n_functions; i++)
        for (uint32_t j = i + 1; j < a->n_functions; j++)
            assert_false(a->functions[i].name == a->functions[j].name &&
                         a->functions[i].file == a->functions[j].file);
    /* compute_primes, is_prime, worker, main, inner+outer, start, 3 Java. */
    assert_int_equal(a->n_locations, 1 + 9);
    assert_int_equal(a->n_functions, 1 + 10);
    assert_int_equal(a->n_stacks, 1 + 4);
    assert_int_equal(a->n_samples, 1 + 4);
    assert_int_equal(a->n_links, 1 + 1);
    assert_int_equal(a->n_mappings, 1 + 2);
    assert_int_equal(a->rounds, 3);
    assert_int_equal(a->n_obs, 9);
    assert_int_equal(a->start_ns, SS_SYNTH_T0);
    assert_int_equal(a->end_ns, SS_SYNTH_T0 + 30000000ull);
    /* The inlined pair is one location, innermost line first. */
    uint32_t inner = 0, outer = 0;
    for (uint32_t i = 1; i < a->n_functions; i++) {
        if (strcmp(ss_agg_str(a, a->functions[i].name), "inner") == 0)
            inner = i;
        if (strcmp(ss_agg_str(a, a->functions[i].name), "outer") == 0)
            outer = i;
    }
    bool found = false;
    for (uint32_t i = 1; i < a->n_locations; i++) {
        const agg_location *l = &a->locations[i];
        if (l->n_lines == 2) {
            assert_int_equal(a->lines[l->line_start].function, inner);
            assert_int_equal(a->lines[l->line_start].line, 5);
            assert_int_equal(a->lines[l->line_start + 1].function, outer);
            assert_int_equal(a->lines[l->line_start + 1].line, 50);
            assert_int_equal(l->address, 0x401400);
            assert_int_equal(l->kind, SS_FRAME_NATIVE);
            found = true;
        }
    }
    assert_true(found);
    /* Counts per sample: main's two stacks 2 + 1 on CPU, idle 3 off CPU. */
    uint32_t main_name = find_str(a, "main"), idle_name = find_str(a, "idle");
    uint32_t wall_main = 0, cpu_main = 0, wall_idle = 0, cpu_idle = 0;
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        if (a->attrsets[s->attrset].name == main_name) {
            wall_main += s->wall;
            cpu_main += s->cpu;
            assert_int_equal(s->cpu_ns, (uint64_t)s->cpu * 9000000ull);
        }
        if (a->attrsets[s->attrset].name == idle_name) {
            wall_idle += s->wall;
            cpu_idle += s->cpu;
        }
    }
    assert_int_equal(wall_main, 3);
    assert_int_equal(cpu_main, 3);
    assert_int_equal(wall_idle, 3);
    assert_int_equal(cpu_idle, 0);
    /* Observations grouped by sample, in round order. */
    agg_obs *obs;
    uint32_t *first;
    assert_int_equal(ss_agg_group_obs(a, &obs, &first), 0);
    assert_int_equal(first[a->n_samples], 9);
    for (uint32_t i = 1; i < a->n_samples; i++)
        for (uint32_t k = first[i]; k < first[i + 1]; k++) {
            assert_int_equal(obs[k].sample, i);
            if (k > first[i])
                assert_true((obs[k].round & ~AGG_OBS_CPU) > (obs[k - 1].round & ~AGG_OBS_CPU));
        }
    free(obs);
    free(first);
    ss_agg_destroy(a);
}

static void test_steady_state_reuses_memory(void **st) {
    (void)st;
    ss_agg *a = agg_of(6);
    size_t bytes = a->bytes;
    size_t used = ss_mem_used();
    for (int period = 0; period < 3; period++) {
        ss_agg_reset(a);
        for (uint32_t i = 0; i < 6; i++) {
            ss_round *r = ss_synth_known(i);
            assert_int_equal(ss_agg_add_round(a, r), 0);
            ss_round_unref(r);
        }
        assert_int_equal(a->bytes, bytes);
    }
    assert_int_equal(ss_mem_used(), used);
    ss_agg_destroy(a);
}

static void test_limit_refuses(void **st) {
    (void)st;
    ss_agg *a = ss_agg_create(1);
    ss_round *r = ss_synth_known(0);
    assert_int_equal(ss_agg_add_round(a, r), -ENOSPC);
    assert_int_equal(a->rounds_refused, 1);
    ss_round_unref(r);
    ss_agg_destroy(a);
}

static const char golden_wall[] =
    "idle;start;outer;inner 3\n"
    "java-worker;java.lang.Thread.run;com.example.Demo.run;java.lang.Thread.sleep 3\n"
    "main;main;worker;compute_primes 2\n"
    "main;main;worker;is_prime 1\n";

static const char golden_cpu[] =
    "main;main;worker;compute_primes 2\n"
    "main;main;worker;is_prime 1\n";

static void test_collapsed_golden(void **st) {
    (void)st;
    ss_agg *a = agg_of(3);
    ss_buf b;
    ss_buf_init(&b);
    assert_int_equal(ss_collapsed_encode(a, false, &b), 0);
    assert_int_equal(b.len, strlen(golden_wall));
    assert_memory_equal(b.data, golden_wall, b.len);
    ss_buf_reset(&b);
    assert_int_equal(ss_collapsed_encode(a, true, &b), 0);
    assert_int_equal(b.len, strlen(golden_cpu));
    assert_memory_equal(b.data, golden_cpu, b.len);
    ss_buf_free(&b);
    ss_agg_destroy(a);
}

static void test_collapsed_empty_cpu(void **st) {
    (void)st;
    ss_agg *a = ss_agg_create(1u << 20);
    ss_round_builder *rb = ss_round_builder_create();
    ss_round_builder_begin(rb, SS_SYNTH_T0, 10, SS_RUNTIME_NATIVE);
    ss_thread_sample *t = ss_round_builder_add_thread(rb, "a;b\nc");
    t->nid = 5;
    ss_frame f = {.fn = ss_funcinfo_intern("global", "x;y", "f.c", NULL, SS_FRAME_NATIVE)};
    ss_round_builder_add_frame(rb, &f);
    ss_round *r = ss_round_builder_finish(rb, 0, 0);
    ss_round_builder_destroy(rb);
    assert_int_equal(ss_agg_add_round(a, r), 0);
    ss_round_unref(r);
    ss_buf b;
    ss_buf_init(&b);
    assert_int_equal(ss_collapsed_encode(a, true, &b), -ENODATA);
    assert_int_equal(ss_collapsed_encode(a, false, &b), 0);
    /* Separators inside names are neutralised. */
    assert_string_equal(b.data, "a_b_c;x_y 1\n");
    /* No CPU sample: the flame graph page still comes (it opens on wall);
     * an empty period has none. */
    ss_buf_reset(&b);
    assert_int_equal(ss_flamegraph_html(a, true, "idle", &b), 0);
    ss_buf_reset(&b);
    ss_agg_reset(a);
    assert_int_equal(ss_flamegraph_html(a, true, "empty", &b), -ENODATA);
    assert_int_equal(b.len, 0);
    ss_buf_free(&b);
    ss_agg_destroy(a);
}

static void test_flamegraph_page(void **st) {
    (void)st;
    ss_agg *a = agg_of(3);
    ss_buf b;
    ss_buf_init(&b);
    assert_int_equal(ss_flamegraph_html(a, false, "demo <1>", &b), 0);
    ss_buf_putc(&b, '\0');
    assert_non_null(strstr(b.data, "<title>demo &lt;1&gt;</title>"));
    /* Names as JSON strings, kinds by function, samples with wall and
     * CPU counts: main's compute_primes sample, 2 wall and 2 CPU. */
    assert_non_null(strstr(b.data, "\"compute_primes\""));
    assert_non_null(strstr(b.data, "\"com.example.Demo.run\""));
    assert_non_null(strstr(b.data, "\"view\":\"wall\""));
    bool main_sample = false;
    for (uint32_t i = 1; i < a->n_samples; i++) {
        char want[32];
        snprintf(want, sizeof want, "[%u,2,2,", a->samples[i].attrset);
        if (strcmp(ss_agg_str(a, a->attrsets[a->samples[i].attrset].name), "main") == 0 &&
            a->samples[i].wall == 2)
            main_sample = strstr(b.data, want) != NULL;
    }
    assert_true(main_sample);
    /* Self-contained: no external reference. */
    assert_null(strstr(b.data, "src="));
    assert_null(strstr(b.data, "href="));
    /* One script element. */
    const char *s1 = strstr(b.data, "</script>");
    assert_non_null(s1);
    assert_null(strstr(s1 + 1, "</script>"));
    ss_buf_free(&b);
    ss_agg_destroy(a);
}

/* Names in profiles: plain native names, C++ scopes joined by "::", Java
 * "pkg.Class.method", and native frames without a symbol named by module
 * and offset (distinct functions, the module's mapping and build id on
 * the location), "[unknown]+0x<address>" outside every module. */
static uint32_t leaf_fn(const ss_agg *a, uint32_t sample) {
    const agg_stack *s = &a->stacks[a->samples[sample].stack];
    const agg_location *l = &a->locations[a->stack_locs[s->start]];
    return a->lines[l->line_start].function;
}

static void test_profile_names(void **st) {
    (void)st;
    const ss_mapping *lib = ss_mapping_intern("/tmp/x/libx.so", "0badc0de", 0x7f5000000000,
                                              0x7f5000010000, 0x1000);
    const ss_mapping *vdso = ss_mapping_intern("[vdso]", "", 0x7fff0000, 0x7fff2000, 0);
    const ss_funcinfo *unk = ss_funcinfo_intern("unknown", "unknown", "libx.so", NULL,
                                                SS_FRAME_NATIVE);
    struct {
        const char *ns, *name;
        ss_frame_kind kind;
        const ss_mapping *map;
        uint64_t addr;
        const char *want;
        uint8_t want_kind;
    } cases[] = {
        {"global", "compute_primes", SS_FRAME_NATIVE, lib, 0x7f5000000100, "compute_primes",
         AGG_KIND_NATIVE},
        {"ns::Klass<int>", "push", SS_FRAME_NATIVE, lib, 0x7f5000000200, "ns::Klass<int>::push",
         AGG_KIND_NATIVE},
        {"com.example.Demo", "run", SS_FRAME_JAVA, NULL, 3, "com.example.Demo.run",
         AGG_KIND_JAVA},
        {"jit", "LazyCompile:*fib /app.js:3", SS_FRAME_NATIVE, NULL, 0x3000,
         "LazyCompile:*fib /app.js:3", AGG_KIND_JIT},
        {"global", "__vdso_clock_gettime", SS_FRAME_NATIVE, vdso, 0x7fff0900,
         "__vdso_clock_gettime", AGG_KIND_KERNEL},
        {NULL, NULL, SS_FRAME_NATIVE, lib, 0x7f5000001234, "libx.so+0x2234", AGG_KIND_NATIVE},
        {NULL, NULL, SS_FRAME_NATIVE, lib, 0x7f5000004567, "libx.so+0x5567", AGG_KIND_NATIVE},
        {NULL, NULL, SS_FRAME_NATIVE, NULL, 0x9abc, "[unknown]+0x9abc", AGG_KIND_NATIVE},
    };
    size_t n = sizeof cases / sizeof *cases;
    ss_agg *a = ss_agg_create(1u << 20);
    ss_round_builder *rb = ss_round_builder_create();
    ss_round_builder_begin(rb, SS_SYNTH_T0, 10, SS_RUNTIME_NATIVE);
    for (size_t i = 0; i < n; i++) {
        char tname[16];
        snprintf(tname, sizeof tname, "t%zu", i);
        ss_thread_sample *t = ss_round_builder_add_thread(rb, tname);
        t->nid = (int32_t)(10 + i);
        ss_frame f = {.map = cases[i].map, .addr = cases[i].addr};
        f.fn = cases[i].ns ? ss_funcinfo_intern(cases[i].ns, cases[i].name, "f.c", NULL,
                                                cases[i].kind)
                           : unk;
        ss_round_builder_add_frame(rb, &f);
    }
    ss_round *r = ss_round_builder_finish(rb, 0, 0);
    ss_round_builder_destroy(rb);
    assert_int_equal(ss_agg_add_round(a, r), 0);
    ss_round_unref(r);
    assert_int_equal(a->n_samples, 1 + n);
    for (size_t i = 0; i < n; i++) {
        /* samples are in thread order */
        uint32_t fn = leaf_fn(a, (uint32_t)(i + 1));
        assert_string_equal(ss_agg_str(a, a->functions[fn].name), cases[i].want);
        assert_int_equal(a->functions[fn].kind, cases[i].want_kind);
    }
    /* The unknown frames of libx.so: two functions, the module's build id
     * on their locations' mapping. */
    for (uint32_t s = 6; s <= 7; s++) {
        const agg_stack *stk = &a->stacks[a->samples[s].stack];
        const agg_location *l = &a->locations[a->stack_locs[stk->start]];
        assert_string_equal(ss_agg_str(a, a->mappings[l->mapping].build_id), "0badc0de");
    }
    assert_int_not_equal(leaf_fn(a, 6), leaf_fn(a, 7));
    for (uint32_t i = 1; i < a->n_strings; i++)
        assert_null(strstr(ss_agg_str(a, i), "global."));
    ss_agg_destroy(a);
}

int main(void) {
    ss_mem_set_limit(256u << 20);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_profile_names),
        cmocka_unit_test(test_steady_state_reuses_memory),
        cmocka_unit_test(test_limit_refuses),
        cmocka_unit_test(test_collapsed_golden),
        cmocka_unit_test(test_collapsed_empty_cpu),
        cmocka_unit_test(test_flamegraph_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
