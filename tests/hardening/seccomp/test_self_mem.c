/* test_self_mem.c: the reads of the process's own memory (samplers/
 * self_mem.c), in-process (cmocka):
 *
 *   - bytes read are the memory's, a read running into an unmapped page
 *     stops there, an unmapped address fails;
 *   - the host closes the agent's mem descriptor and opens a file of its
 *     own on the same number: the next read still reads memory, and the
 *     host's file is neither read (its offset and contents unchanged) nor
 *     closed; the takeover is counted and the mem file opened again;
 *   - a forked child reads its own memory, not its parent's (its copy of
 *     the descriptor names the parent's, and is closed at its first read);
 *   - without /proc (a mount namespace with an empty /proc over it; root
 *     only, skipped otherwise): process_vm_readv while there is no
 *     seccomp filter; under a filter that kills on it, the read fails
 *     and the process lives. */
#include "samplers/self_mem.h"
#include "agent/kept_fd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static char pattern[8192];

static void reads_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = (char)(i * 7 + 3);
    char out[sizeof pattern];
    assert_int_equal(ss_uw_read_memory(out, (uint64_t)(uintptr_t)pattern, sizeof out), sizeof out);
    assert_memory_equal(out, pattern, sizeof out);
    /* two pages, the second unmapped: the read stops at the first's end */
    long page = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0x5a, (size_t)page);
    munmap(m + page, (size_t)page);
    char *buf = malloc((size_t)page * 2);
    assert_int_equal(ss_uw_read_memory(buf, (uint64_t)(uintptr_t)m + 16, (size_t)page), page - 16);
    assert_int_equal(buf[0], 0x5a);
    assert_true(ss_uw_read_memory(buf, (uint64_t)(uintptr_t)m + page, 8) < 0);
    assert_true(ss_uw_read_memory(buf, UINT64_MAX - 4, 8) < 0);
    free(buf);
    munmap(m, (size_t)page);
}

/* The descriptors on a mem file (their links name .../mem): how many, and
 * the last one's number in *last (-1: none). */
static int count_mem_fds(int *last) {
    DIR *d = opendir("/proc/self/fd");
    *last = -1;
    if (!d)
        return -1;
    int n_found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 4 && memcmp(target + n - 4, "/mem", 4) == 0) {
            *last = atoi(e->d_name);
            n_found++;
        }
    }
    closedir(d);
    return n_found;
}

/* The descriptor the agent keeps on its mem file. */
static int find_mem_fd(void) {
    int last;
    return count_mem_fds(&last) < 0 ? -2 : last;
}

static void host_takes_the_number(void **state) {
    (void)state;
    uint64_t v = 0x1122334455667788u, out = 0;
    assert_int_equal(ss_uw_read_memory(&out, (uint64_t)(uintptr_t)&v, 8), 8);
    int fd = find_mem_fd();
    assert_true(fd >= 0);
    ss_self_mem_counts before;
    ss_self_mem_stats(&before);
    uint64_t lost = ss_kept_fd_lost();

    /* the host closes it and gets the number back for its own file */
    char name[] = "/tmp/ss_self_mem.XXXXXX";
    int host = mkstemp(name);
    assert_true(host >= 0);
    unlink(name);
    char content[64 * 1024];
    memset(content, 'h', sizeof content);
    assert_int_equal(write(host, content, sizeof content), sizeof content);
    assert_int_equal(lseek(host, 100, SEEK_SET), 100);
    close(fd);
    assert_int_equal(dup2(host, fd), fd);
    close(host);

    out = 0;
    assert_int_equal(ss_uw_read_memory(&out, (uint64_t)(uintptr_t)&v, 8), 8);
    assert_true(out == v); /* memory, not the file's 'h' bytes */
    /* the host's file: still open on its number, offset where it was */
    assert_int_equal(lseek(fd, 0, SEEK_CUR), 100);
    char back[8];
    assert_int_equal(pread(fd, back, 8, 0), 8);
    assert_memory_equal(back, "hhhhhhhh", 8);
    ss_self_mem_counts after;
    ss_self_mem_stats(&after);
    assert_int_equal(ss_kept_fd_lost(), lost + 1);
    assert_int_equal(after.reopened, before.reopened + 1);
    assert_true(find_mem_fd() >= 0 && find_mem_fd() != fd);
    close(fd);
}

static volatile uint64_t forked_value = 1;

static void fork_reads_its_own(void **state) {
    (void)state;
    uint64_t out = 0;
    assert_int_equal(ss_uw_read_memory(&out, (uint64_t)(uintptr_t)&forked_value, 8), 8);
    assert_true(out == 1);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the copy of the parent's descriptor is still here (closed at the
         * child's first read, not by the fork: most children exit or exec) */
        int last;
        if (count_mem_fds(&last) != 1)
            _exit(6);
        forked_value = 2; /* the parent's stays 1 */
        uint64_t got = 0;
        long r = ss_uw_read_memory(&got, (uint64_t)(uintptr_t)&forked_value, 8);
        /* one mem descriptor now: the child's own (the parent's closed) */
        if (count_mem_fds(&last) != 1)
            _exit(5);
        _exit(r == 8 && got == 2 ? 0 : got == 1 ? 3 : 4);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    /* 3: it read its parent's memory; 5: kept the parent's descriptor too */
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Deny process_vm_readv (kill) on this thread. */
static int kill_on_vm_readv(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static void without_proc(void **state) {
    (void)state;
    uint64_t out = 0;
    assert_int_equal(ss_uw_read_memory(&out, (uint64_t)(uintptr_t)&forked_value, 8), 8);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a /proc with nothing in it, in a mount namespace of our own */
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("none", "/proc", "tmpfs", 0, NULL) != 0)
            _exit(77);
        ss_self_mem_counts a, b, c;
        ss_self_mem_stats(&a);
        uint64_t got = 0;
        if (ss_uw_read_memory(&got, (uint64_t)(uintptr_t)&forked_value, 8) != 8 || got != 1)
            _exit(3);
        ss_self_mem_stats(&b);
        if (b.vm_readv != a.vm_readv + 1 || b.proc_mem != a.proc_mem)
            _exit(4); /* not read with process_vm_readv */
        if (kill_on_vm_readv() != 0)
            _exit(5);
        /* the filter kills on process_vm_readv: not called, an error */
        if (ss_uw_read_memory(&got, (uint64_t)(uintptr_t)&forked_value, 8) != -EPERM)
            _exit(6);
        ss_self_mem_stats(&c);
        _exit(c.refused == b.refused + 1 && c.vm_readv == b.vm_readv ? 0 : 7);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        skip(); /* not allowed to mount here */
    assert_false(WIFSIGNALED(st)); /* SIGSYS: process_vm_readv under the filter */
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_memory),
        cmocka_unit_test(host_takes_the_number),
        cmocka_unit_test(fork_reads_its_own),
        cmocka_unit_test(without_proc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
