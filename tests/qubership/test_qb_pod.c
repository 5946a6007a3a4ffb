/* test_qb_pod.c: the Qubership pod name is unique per live process, also
 * for processes whose agents start in the same millisecond (forked
 * children, and programs started at once), passes the dumps collector's
 * pod pattern, and $NC_DIAGNOSTIC_FOLDER/pod.name names the pod's first
 * live agent.
 *
 *   test_qb_pod                 the cmocka tests
 *   test_qb_pod claim MS        (used by the tests) claim a name as an agent
 *                               started at MS would, print it, wait for EOF
 *                               on stdin */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/log.h"
#include "proc/process.h"
#include "exporters/qubership/qb.h"

#define START_MS 1700000000000LL
#define SERVER "demo-svc-5d8f7c9b4-x2x9k"

static char dir[256];

static void pretend_started(int64_t ms) {
    ss_process_refresh();
    ss_process_mut()->start_wall_ms = (uint64_t)ms;
}

static int claim_main(int64_t ms) {
    pretend_started(ms);
    qb_pod pod;
    qb_pod_get(&pod);
    printf("%s\n", pod.name);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) /* hold the claim until told */
        ;
    return 0;
}

/* A process of its own (not a forked agent): fork + exec of this test. */
typedef struct helper {
    pid_t pid;
    int to, from;
    char name[400];
} helper;

static void helper_start(helper *h, int64_t ms) {
    int in[2], out[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    h->pid = fork();
    assert_true(h->pid >= 0);
    if (h->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        char arg[32];
        snprintf(arg, sizeof arg, "%lld", (long long)ms);
        execl("/proc/self/exe", "test_qb_pod", "claim", arg, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->to = in[1];
    h->from = out[0];
    ssize_t n = 0, r;
    while ((r = read(h->from, h->name + n, sizeof h->name - 1 - (size_t)n)) > 0) {
        n += r;
        if (h->name[n - 1] == '\n')
            break;
    }
    h->name[n > 0 ? n - 1 : 0] = '\0';
}

static void helper_stop(helper *h) {
    close(h->to);
    close(h->from);
    int st;
    waitpid(h->pid, &st, 0);
}

static void read_pod_file(char *out, size_t n) {
    char path[300];
    snprintf(path, sizeof path, "%s/pod.name", dir);
    out[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    ssize_t r = read(fd, out, n - 1);
    close(fd);
    out[r > 0 ? r : 0] = '\0';
}

/* Eight programs whose agents all start in the same millisecond. */
static void test_same_ms_programs(void **state) {
    (void)state;
    helper h[8];
    for (int i = 0; i < 8; i++)
        helper_start(&h[i], START_MS);
    for (int i = 0; i < 8; i++) {
        char want[64];
        snprintf(want, sizeof want, SERVER "_%lld", START_MS);
        assert_true(strncmp(h[i].name, SERVER "_17000000000", strlen(SERVER) + 12) == 0);
        assert_true(qb_pod_dir_valid(h[i].name));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(h[i].name, h[j].name);
        (void)want;
    }
    /* pod.name: the first one's, not taken over while it lives */
    char file[400];
    read_pod_file(file, sizeof file);
    assert_string_equal(file, h[0].name);
    helper_stop(&h[0]);
    /* the first is gone: the next program to start takes the file over */
    helper late;
    helper_start(&late, START_MS);
    read_pod_file(file, sizeof file);
    assert_string_equal(file, late.name);
    /* and its millisecond is the one freed, or any one not in use */
    for (int i = 1; i < 8; i++)
        assert_string_not_equal(late.name, h[i].name);
    helper_stop(&late);
    for (int i = 1; i < 8; i++)
        helper_stop(&h[i]);
}

/* Children forked in the same millisecond: each has its own name, and the
 * pod.name file keeps the parent's. */
static void test_forked_children(void **state) {
    (void)state;
    pretend_started(START_MS + 5000);
    qb_pod parent;
    qb_pod_get(&parent);
    char want[64];
    snprintf(want, sizeof want, SERVER "_%lld", START_MS + 5000);
    assert_string_equal(parent.name, want);
    assert_int_equal(parent.start_ms, START_MS + 5000);
    char file[400];
    read_pod_file(file, sizeof file);
    assert_string_equal(file, parent.name);
    int fds[6][2];
    pid_t kids[6];
    for (int i = 0; i < 6; i++) {
        assert_int_equal(pipe(fds[i]), 0);
        kids[i] = fork();
        assert_true(kids[i] >= 0);
        if (kids[i] == 0) {
            /* the child's agent restarts: same start millisecond as its siblings */
            ss_process_mut()->pid = getpid();
            qb_pod pod;
            qb_pod_get(&pod);
            if (write(fds[i][1], pod.name, strlen(pod.name) + 1) < 0)
                _exit(2);
            sleep(2); /* alive while the others claim */
            _exit(0);
        }
    }
    char names[6][400];
    for (int i = 0; i < 6; i++) {
        ssize_t n = read(fds[i][0], names[i], sizeof names[i]);
        assert_true(n > 0);
        assert_true(strncmp(names[i], SERVER "_", strlen(SERVER) + 1) == 0);
        assert_string_not_equal(names[i], parent.name);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(names[i], names[j]);
    }
    for (int i = 0; i < 6; i++) {
        int st;
        kill(kids[i], SIGKILL);
        waitpid(kids[i], &st, 0);
    }
    read_pod_file(file, sizeof file);
    assert_string_equal(file, parent.name);
    /* the parent's own name does not change */
    qb_pod again;
    qb_pod_get(&again);
    assert_string_equal(again.name, parent.name);
}

static void test_pod_pattern(void **state) {
    (void)state;
    /* spec §2.3 (4) table */
    assert_true(qb_pod_dir_valid("test-service-1-5cbcd847d-l2t7t_1719318147399"));
    assert_true(qb_pod_dir_valid("vault-service-0_1721606400000"));
    assert_true(qb_pod_dir_valid("quarkus-3-vertx-b96c5d98c-dfxqg"));
    assert_false(qb_pod_dir_valid("myapp"));
    assert_false(qb_pod_dir_valid("myapp_123"));
    assert_false(qb_pod_dir_valid("My-Host_1"));
    assert_false(qb_pod_dir_valid("host.example-1_1"));
    assert_false(qb_pod_dir_valid("a-b_12a"));
    assert_true(qb_pod_dir_valid("a--b")); /* the empty hex group */
    assert_false(qb_pod_dir_valid("a---b"));
}

static void test_namespace(void **state) {
    (void)state;
    char ns[256];
    setenv("NAMESPACE", "from-namespace", 1);
    unsetenv("CLOUD_NAMESPACE");
    qb_namespace(ns, sizeof ns);
    assert_string_equal(ns, "from-namespace");
    setenv("CLOUD_NAMESPACE", "from-cloud", 1);
    qb_namespace(ns, sizeof ns);
    assert_string_equal(ns, "from-cloud");
    unsetenv("CLOUD_NAMESPACE");
    unsetenv("NAMESPACE");
    qb_namespace(ns, sizeof ns);
    if (access("/var/run/secrets/kubernetes.io/serviceaccount/namespace", R_OK) != 0)
        assert_string_equal(ns, "unknown");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "claim") == 0)
        return claim_main(atoll(argv[2]));
    snprintf(dir, sizeof dir, "/tmp/test_qb_pod.%d", (int)getpid());
    mkdir(dir, 0700);
    setenv("NC_DIAGNOSTIC_FOLDER", dir, 1);
    setenv("POD_NAME", SERVER, 1);
    ss_log_set_level(SS_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_pattern),
        cmocka_unit_test(test_namespace),
        cmocka_unit_test(test_same_ms_programs),
        cmocka_unit_test(test_forked_children),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char path[300];
    snprintf(path, sizeof path, "%s/pod.name", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}
