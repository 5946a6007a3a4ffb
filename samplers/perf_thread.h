/*
 * perf_thread.h: the stack of a running thread the sampler may not
 * signal (it blocks the signal, has no alternate signal stack known, or a
 * tracer is attached), taken by the kernel (a perf event on the thread's
 * CPU clock). Private to samplers/.
 *
 * Libraries block every signal in the threads they create so that the
 * process's signals go to its main thread: liblzma's (xz -T), QEMU's
 * vCPU and worker threads. Such a thread cannot be signalled, and while it
 * computes it is in no system call to be read asleep: without this it is
 * only counted ("N blocking the signal"), and a profile of xz shows none
 * of its compression. The kernel samples it instead: a software event on
 * the thread's own CPU clock (PERF_COUNT_SW_TASK_CLOCK, user mode only,
 * every half interval of its CPU time) writes its user registers and the
 * top of its stack into a ring shared with the agent; the sampler takes
 * the newest sample of the round and unwinds it as it unwinds a signal
 * handler's copy. No signal reaches the thread, nothing runs on it.
 *
 * Opened only where the kernel lets a process sample its own threads
 * (perf_event_paranoid 2 or less, or CAP_PERFMON), never under a seccomp
 * filter (perf_event_open is in systemd's @debug set: an allow list
 * without it kills the process), never under valgrind, and only for
 * threads that run while they may not be signalled. x86-64 only (the registers' order is the
 * architecture's).
 */
#ifndef SS_PERF_THREAD_H
#define SS_PERF_THREAD_H

#include "agent/kept_fd.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/ucontext.h>

/* One thread's event. Zero-initialised is "none". */
typedef struct ss_perf_thread {
    void *ring;         /* NULL: none. The metadata page, then the data */
    ss_kept_fd fd;      /* in the kept set (proc/threads.h) */
    uint32_t gen;       /* the kept set's generation it was kept in */
    pid_t owner;        /* the process that mapped ring */
    uint64_t last_ns;   /* CLOCK_MONOTONIC time of the last sample taken */
} ss_perf_thread;

/* What one sample gives, as a signal handler's copy (ss_sig_copy): its
 * registers (REG_* of <sys/ucontext.h>) and its stack bytes. */
typedef struct ss_perf_sample {
    uint64_t gregs[NGREG];
    uint64_t sp;
    uint64_t time_ns;   /* CLOCK_MONOTONIC */
    uint32_t len;       /* bytes of stack copied from sp */
    bool at_end;        /* the copy reached the end of the stack's mapping */
    uint8_t *stack;     /* the caller's buffer (ss_perf_stack_bytes) */
} ss_perf_sample;

/* Bytes of stack a sample holds, for copy_bytes wanted (multiple of 8;
 * a perf record is at most 64 KiB). */
uint32_t ss_perf_stack_bytes(uint32_t copy_bytes);

/* Open t for tid (its CPU clock sampled every period_ns of it). 0, or
 * -errno: -EACCES/-EPERM the kernel refuses, -ENOSYS not here; not asked
 * of the kernel: -ECANCELED a seccomp filter, -EOPNOTSUPP under valgrind,
 * -EMFILE past the kept budget or with 8 events open (may be tried again
 * later). */
int ss_perf_thread_open(ss_perf_thread *t, pid_t tid, uint64_t period_ns, uint32_t stack_bytes);

/* The newest sample of t after since_ns into out (at most stack_cap bytes
 * of its stack into out->stack). true: one was there. Everything older is
 * consumed. false also when t was closed meanwhile (forgotten then). */
bool ss_perf_thread_take(ss_perf_thread *t, uint64_t since_ns, ss_perf_sample *out,
                         uint32_t stack_cap);

/* Closed and unmapped (in the process that opened it; a forked child's
 * copy only forgets: the ring is not inherited, and the descriptor is
 * closed with the kept set). */
void ss_perf_thread_close(ss_perf_thread *t);

/* Events open now, and opens the kernel refused (since start). */
void ss_perf_thread_stats(uint32_t *open, uint64_t *refused);

#endif /* SS_PERF_THREAD_H */
