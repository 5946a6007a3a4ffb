/* perf_thread.c: a running thread the sampler may not signal, sampled by
 * the kernel (see perf_thread.h). */
#include "samplers/perf_thread.h"
#include "proc/process.h"
#include "proc/threads.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic uint32_t n_open;
static _Atomic uint64_t n_refused;

void ss_perf_thread_stats(uint32_t *open, uint64_t *refused) {
    *open = atomic_load(&n_open);
    *refused = atomic_load(&n_refused);
}

#if defined(__x86_64__)
#include <linux/perf_event.h>

/* The ring: its metadata page and 2^RING_ORDER data pages, room for three
 * samples of the largest stack copy. The sampler empties it every round;
 * a full ring drops the newest samples until then. The kernel charges
 * rings to the user's locked memory (free up to kernel.perf_event_mlock_kb
 * per CPU, then to RLIMIT_MEMLOCK), which io_uring's registered buffers
 * count against too: hence small rings, and EVENTS_MAX of them at most
 * (8 x 68 KiB). */
#define RING_ORDER 4
#define STACK_MAX 16384u
#define EVENTS_MAX 8u

/* perf's x86 register numbers (arch/x86/include/uapi/asm/perf_regs.h), in
 * the order a sample lists them (ascending), with the ucontext slot each
 * goes to. FLAGS and the segment registers are not asked for. */
static const struct {
    int perf, greg;
} regs[] = {
    {0, REG_RAX},  {1, REG_RBX},  {2, REG_RCX},  {3, REG_RDX},  {4, REG_RSI},  {5, REG_RDI},
    {6, REG_RBP},  {7, REG_RSP},  {8, REG_RIP},  {16, REG_R8},  {17, REG_R9},  {18, REG_R10},
    {19, REG_R11}, {20, REG_R12}, {21, REG_R13}, {22, REG_R14}, {23, REG_R15},
};
#define NREGS (sizeof regs / sizeof regs[0])

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static size_t ring_len(void) { return page_size() * ((1u << RING_ORDER) + 1); }

uint32_t ss_perf_stack_bytes(uint32_t copy_bytes) {
    uint32_t n = copy_bytes < STACK_MAX ? copy_bytes : STACK_MAX;
    return n & ~7u;
}

int ss_perf_thread_open(ss_perf_thread *t, pid_t tid, uint64_t period_ns, uint32_t stack_bytes) {
    memset(t, 0, sizeof *t);
    t->fd.fd = -1;
    /* under valgrind the thread's real registers are valgrind's (the
     * guest's are in its memory): a sample would be no stack of the program's */
    if (ss_process_under_valgrind())
        return -EOPNOTSUPP;
    /* a filter is never removed; -1: even prctl refused */
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0)
        return -ECANCELED;
    /* no open past the budget: it would take the lowest free number for
     * a moment, round after round */
    if (ss_proc_fds_kept() >= ss_proc_fd_budget() || atomic_load(&n_open) >= EVENTS_MAX)
        return -EMFILE;
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = period_ns ? period_ns : 1000000;
    a.sample_type =
        PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
    for (size_t i = 0; i < NREGS; i++)
        a.sample_regs_user |= 1ull << regs[i].perf;
    a.sample_stack_user = ss_perf_stack_bytes(stack_bytes);
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    a.watermark = 1; /* no wake-up: nobody polls the ring */
    a.wakeup_watermark = (uint32_t)(ring_len() - page_size());
    int fd = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        atomic_fetch_add(&n_refused, 1);
        return -e;
    }
    ss_kept_fd k;
    if (ss_kept_fd_adopt(&k, ss_fd_move_high(fd)) != 0)
        return -EBADF;
    if (!ss_proc_keep(&k, &t->gen)) {
        ss_kept_fd_close(&k);
        return -EMFILE;
    }
    void *ring = mmap(NULL, ring_len(), PROT_READ | PROT_WRITE, MAP_SHARED, k.fd, 0);
    if (ring == MAP_FAILED) {
        int e = errno;
        ss_proc_unkeep(&k, t->gen);
        return -e;
    }
    t->fd = k;
    t->ring = ring;
    t->owner = getpid();
    atomic_fetch_add(&n_open, 1);
    return 0;
}

/* Gives t's ring back (in the process that mapped it: a forked child has
 * none) and forgets t; its descriptor is closed when close_fd (else the
 * kept set closed it already). */
static void release(ss_perf_thread *t, bool close_fd) {
    if (t->owner == getpid()) {
        munmap(t->ring, ring_len());
        atomic_fetch_sub(&n_open, 1);
        if (close_fd) /* a child's copy is the kept set's to close */
            ss_proc_unkeep(&t->fd, t->gen);
    }
    t->fd.fd = -1;
    t->ring = NULL;
}

void ss_perf_thread_close(ss_perf_thread *t) {
    if (t->ring)
        release(t, true);
}

/* n bytes at offset off of the data area (which wraps) into out. */
static void ring_copy(const uint8_t *data, uint64_t size, uint64_t off, void *out, size_t n) {
    uint64_t at = off & (size - 1);
    size_t first = at + n <= size ? n : (size_t)(size - at);
    memcpy(out, data + at, first);
    if (first < n)
        memcpy((uint8_t *)out + first, data, n - first);
}

/* One PERF_RECORD_SAMPLE (its header at off) into out. */
static bool parse_sample(const uint8_t *data, uint64_t size, uint64_t off, uint32_t rec_size,
                         ss_perf_sample *out, uint32_t stack_cap) {
    uint64_t at = off + sizeof(struct perf_event_header), end = off + rec_size;
    uint32_t ids[2];
    uint64_t v;
    if (at + 8 + 8 + 8 > end)
        return false;
    ring_copy(data, size, at, ids, 8); /* pid, tid */
    at += 8;
    ring_copy(data, size, at, &out->time_ns, 8);
    at += 8;
    ring_copy(data, size, at, &v, 8); /* the registers' ABI: 0 none */
    at += 8;
    if (v == PERF_SAMPLE_REGS_ABI_NONE || at + NREGS * 8 + 8 > end)
        return false;
    memset(out->gregs, 0, sizeof out->gregs);
    for (size_t i = 0; i < NREGS; i++, at += 8)
        ring_copy(data, size, at, &out->gregs[regs[i].greg], 8);
    uint64_t dump;
    ring_copy(data, size, at, &dump, 8);
    at += 8;
    if (dump == 0 || at + dump + 8 > end)
        return false;
    uint64_t dyn;
    ring_copy(data, size, at + dump, &dyn, 8);
    if (dyn > dump)
        dyn = dump;
    uint32_t len = dyn < stack_cap ? (uint32_t)dyn : stack_cap;
    ring_copy(data, size, at, out->stack, len);
    out->len = len;
    out->at_end = dyn < dump; /* the kernel's copy stopped at the mapping's end */
    out->sp = out->gregs[REG_RSP];
    return true;
}

bool ss_perf_thread_take(ss_perf_thread *t, uint64_t since_ns, ss_perf_sample *out,
                         uint32_t stack_cap) {
    if (!t->ring)
        return false;
    if (!ss_proc_kept_still(t->gen)) { /* closed with the kept set */
        release(t, false);
        return false;
    }
    struct perf_event_mmap_page *m = t->ring;
    const uint8_t *data = (const uint8_t *)t->ring + page_size();
    uint64_t size = ring_len() - page_size();
    uint64_t head = __atomic_load_n(&m->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = m->data_tail, newest = UINT64_MAX;
    uint32_t newest_size = 0;
    while (tail + sizeof(struct perf_event_header) <= head) {
        struct perf_event_header h;
        ring_copy(data, size, tail, &h, sizeof h);
        if (h.size < sizeof h || tail + h.size > head)
            break;
        if (h.type == PERF_RECORD_SAMPLE) {
            newest = tail;
            newest_size = h.size;
        }
        tail += h.size;
    }
    bool got = newest != UINT64_MAX &&
               parse_sample(data, size, newest, newest_size, out, stack_cap) &&
               out->time_ns > since_ns && out->time_ns > t->last_ns;
    __atomic_store_n(&m->data_tail, head, __ATOMIC_RELEASE);
    if (got)
        t->last_ns = out->time_ns;
    return got;
}

#else

uint32_t ss_perf_stack_bytes(uint32_t copy_bytes) { return copy_bytes & ~7u; }

int ss_perf_thread_open(ss_perf_thread *t, pid_t tid, uint64_t period_ns, uint32_t stack_bytes) {
    (void)tid, (void)period_ns, (void)stack_bytes;
    memset(t, 0, sizeof *t);
    t->fd.fd = -1;
    return -ENOSYS;
}

void ss_perf_thread_close(ss_perf_thread *t) { t->ring = NULL; }

bool ss_perf_thread_take(ss_perf_thread *t, uint64_t since_ns, ss_perf_sample *out,
                         uint32_t stack_cap) {
    (void)t, (void)since_ns, (void)out, (void)stack_cap;
    return false;
}

#endif
