/* test_output_safety.c: the local files the agent writes (exporters/output.c,
 * used by the text, pprof and flamegraph exporters) are 0600 in a 0700
 * directory whatever the umask, and nothing planted in their place by
 * another user makes the agent write elsewhere: a symlink at the file name
 * or at the output directory, a hard link, a FIFO. Every refusal is
 * counted (ss_output_refused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "exporters/ss_exporters.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[256];

static int setup(void **state) {
    (void)state;
    snprintf(base, sizeof base, "%s/ss-outsafe-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base))
        return -1;
    umask(0); /* the host's umask must not matter */
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t n, const char *rel) {
    snprintf(out, n, "%s/%s", base, rel);
}

static mode_t mode_of(const char *p) {
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    return st.st_mode & 07777;
}

static void write_file(const char *p, const char *text, mode_t mode) {
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(p, mode), 0);
}

static void assert_content(const char *p, const char *text) {
    char buf[256] = "";
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n >= 0);
    buf[n] = '\0';
    assert_string_equal(buf, text);
}

/* Created directories 0700 (every level), files 0600, with umask 000. */
static void test_modes_under_umask_000(void **state) {
    (void)state;
    char dir[PATH_MAX], file[PATH_MAX + 16];
    path_of(dir, sizeof dir, "a/b");
    int fd = ss_output_open(dir, "x.txt", true);
    assert_true(fd >= 0);
    assert_int_equal(ss_write_all(fd, "hello", 5), 0);
    close(fd);
    snprintf(file, sizeof file, "%s/x.txt", dir);
    assert_int_equal(mode_of(file), 0600);
    assert_int_equal(mode_of(dir), 0700);
    path_of(dir, sizeof dir, "a");
    assert_int_equal(mode_of(dir), 0700);
    assert_content(file, "hello");
}

/* A file that existed with a looser mode is made 0600 when opened. */
static void test_existing_file_tightened(void **state) {
    (void)state;
    char dir[PATH_MAX], file[PATH_MAX + 16];
    path_of(dir, sizeof dir, "loose");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(file, sizeof file, "%s/y.pb.gz", dir);
    write_file(file, "old", 0666);
    int fd = ss_output_open(dir, "y.pb.gz", false);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(mode_of(file), 0600);
    assert_content(file, ""); /* truncated: it was ours */
}

/* A symlink at the file name is not followed; its target is untouched. */
static void test_symlink_at_name_refused(void **state) {
    (void)state;
    char dir[PATH_MAX], victim[PATH_MAX], lpath[PATH_MAX + 16];
    path_of(dir, sizeof dir, "out1");
    path_of(victim, sizeof victim, "victim1");
    assert_int_equal(mkdir(dir, 0700), 0);
    write_file(victim, "precious", 0644);
    snprintf(lpath, sizeof lpath, "%s/app.1.txt", dir);
    assert_int_equal(symlink(victim, lpath), 0);
    uint64_t before = ss_output_refused();
    assert_int_equal(ss_output_open(dir, "app.1.txt", false), -ELOOP);
    assert_int_equal(ss_output_open(dir, "app.1.txt", true), -ELOOP);
    assert_int_equal(ss_output_refused(), before + 2);
    assert_content(victim, "precious");
    assert_int_equal(mode_of(victim), 0644);
}

/* A symlink AT the output directory (to a directory of ours elsewhere) is
 * not followed: nothing is created in its target. */
static void test_symlink_at_dir_refused(void **state) {
    (void)state;
    char target[PATH_MAX], link[PATH_MAX], inside[PATH_MAX + 16];
    path_of(target, sizeof target, "elsewhere");
    path_of(link, sizeof link, "out2");
    assert_int_equal(mkdir(target, 0755), 0);
    assert_int_equal(symlink(target, link), 0);
    uint64_t before = ss_output_refused();
    int fd = ss_output_open(link, "app.2.txt", true);
    assert_true(fd < 0);
    assert_int_equal(fd, -ELOOP);
    assert_int_equal(ss_output_refused(), before + 1);
    snprintf(inside, sizeof inside, "%s/app.2.txt", target);
    assert_int_equal(access(inside, F_OK), -1);
}

/* A hard link planted at the name (to a file of ours) is refused and the
 * linked file keeps its content (a truncating open would have erased it). */
static void test_hard_link_refused(void **state) {
    (void)state;
    char dir[PATH_MAX], victim[PATH_MAX], lpath[PATH_MAX + 16];
    path_of(dir, sizeof dir, "out3");
    path_of(victim, sizeof victim, "victim3");
    assert_int_equal(mkdir(dir, 0700), 0);
    write_file(victim, "keep me", 0644);
    snprintf(lpath, sizeof lpath, "%s/app.3.collapsed", dir);
    assert_int_equal(link(victim, lpath), 0);
    uint64_t before = ss_output_refused();
    assert_int_equal(ss_output_open(dir, "app.3.collapsed", false), -EPERM);
    assert_int_equal(ss_output_refused(), before + 1);
    assert_content(victim, "keep me");
    assert_int_equal(mode_of(victim), 0644);
}

/* A FIFO at the name does not block the exporter thread. */
static void test_fifo_does_not_block(void **state) {
    (void)state;
    char dir[PATH_MAX], fifo[PATH_MAX + 16];
    path_of(dir, sizeof dir, "out4");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(fifo, sizeof fifo, "%s/app.4.html", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10); /* a blocking open would hang here: SIGALRM fails the test */
    int fd = ss_output_open(dir, "app.4.html", false);
    alarm(0);
    assert_true(fd < 0);
}

/* A directory of another user (here: a symlink-free path we do not own,
 * "/") is refused. */
static void test_foreign_dir_refused(void **state) {
    (void)state;
    if (geteuid() == 0)
        skip(); /* root owns "/" */
    assert_true(ss_output_open("/", "x.txt", true) < 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes_under_umask_000),
        cmocka_unit_test(test_existing_file_tightened),
        cmocka_unit_test(test_symlink_at_name_refused),
        cmocka_unit_test(test_symlink_at_dir_refused),
        cmocka_unit_test(test_hard_link_refused),
        cmocka_unit_test(test_fifo_does_not_block),
        cmocka_unit_test(test_foreign_dir_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
