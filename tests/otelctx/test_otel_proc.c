/* test_otel_proc.c: the process context's update protocol (OTEP 4719), in
 * process: a second publication with another resource keeps the mapping,
 * changes published_at_ns and the payload; the same resource again changes
 * nothing; the mapping is MADV_DONTFORK (a child's maps lack it); a
 * process with a context of another publisher gets no second one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent/span.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct header {
    char sig[8];
    uint32_t version;
    uint32_t payload_size;
    uint64_t published_at_ns;
    uint64_t payload;
} header;

/* The start of this process's OTEL_CTX mapping, 0 if none. */
static uint64_t find_mapping(int *count) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uint64_t at = 0;
    *count = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "OTEL_CTX")) {
            (*count)++;
            at = strtoull(line, NULL, 16);
        }
    if (f)
        fclose(f);
    return at;
}

static bool payload_has(const header *h, const char *s) {
    return memmem((const void *)(uintptr_t)h->payload, h->payload_size, s, strlen(s)) != NULL;
}

static void test_publish_update(void **state) {
    (void)state;
    int n;
    setenv("OTEL_SERVICE_NAME", "svc-one", 1);
    assert_int_equal(ss_otel_proc_publish(), 0);
    uint64_t at = find_mapping(&n);
    assert_int_equal(n, 1);
    assert_int_not_equal(at, 0);
    const volatile header *h = (const volatile header *)(uintptr_t)at;
    assert_memory_equal((const void *)h->sig, "OTEL_CTX", 8);
    assert_int_equal(h->version, 2);
    assert_int_not_equal(h->published_at_ns, 0);
    assert_true(payload_has((const header *)h, "svc-one"));
    uint64_t t1 = h->published_at_ns;

    /* the same resource: nothing changes */
    assert_int_equal(ss_otel_proc_publish(), 0);
    assert_int_equal(h->published_at_ns, t1);

    /* another one: same mapping, new timestamp and payload */
    setenv("OTEL_SERVICE_NAME", "svc-two", 1);
    assert_int_equal(ss_otel_proc_publish(), 0);
    assert_int_equal(find_mapping(&n), at);
    assert_int_equal(n, 1);
    assert_int_not_equal(h->published_at_ns, 0);
    assert_int_not_equal(h->published_at_ns, t1);
    assert_true(payload_has((const header *)h, "svc-two"));
    assert_false(payload_has((const header *)h, "svc-one"));

    /* a child does not inherit it */
    pid_t c = fork();
    if (c == 0) {
        int k;
        find_mapping(&k);
        _exit(k == 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A process whose SDK already published a context: the agent publishes
 * none (one per process). In a child, which has no context of the
 * agent's (MADV_DONTFORK). */
static void test_other_publisher(void **state) {
    (void)state;
    pid_t c = fork();
    if (c == 0) {
        int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, 4096) != 0)
            _exit(2);
        char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            _exit(2);
        memcpy(m, "OTEL_CTX", 8);
        int n;
        if (ss_otel_proc_publish() != 0)
            _exit(3);
        find_mapping(&n);
        _exit(n == 1 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_update),
        cmocka_unit_test(test_other_publisher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
