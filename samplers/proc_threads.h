/*
 * proc_threads.h: facts about the threads of this process, from /proc and
 * the per-thread CPU clocks. Private to samplers/.
 *
 * Everything here reads small files into stack buffers with open/read, so
 * a round costs a few system calls per thread and no allocation (except
 * the tid list, which the caller owns and reuses).
 */
#ifndef SS_PROC_THREADS_H
#define SS_PROC_THREADS_H

#include "ss_samplers.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The tids of /proc/self/task, sorted ascending, into *tids (grown with
 * realloc as needed). Returns the count or -errno. */
int ss_proc_list_tids(pid_t **tids, size_t *cap);

/* The fields of /proc/self/task/<tid>/stat that the sampler uses. */
typedef struct ss_proc_stat {
    char name[32];       /* comm, as in field 2 (saves reading comm) */
    char state;          /* R, S, D, T, t, Z, X, ... */
    int32_t nice;
    uint64_t start_ticks; /* starttime: clock ticks after boot */
} ss_proc_stat;

/* 0, or -errno (-ESRCH when the thread is gone). */
int ss_proc_read_stat(pid_t tid, ss_proc_stat *out);

/* The thread's name (comm) into buf. 0 or -errno. */
int ss_proc_read_comm(pid_t tid, char *buf, size_t n);

/* Does the thread block `sig` (SigBlk of status)? 1 yes, 0 no, -errno. */
int ss_proc_blocks_signal(pid_t tid, int sig);

/* The system call the thread is blocked in (first field of `syscall`),
 * -1 when running or unknown. */
long ss_proc_read_syscall(pid_t tid);

/* read_bytes / write_bytes of `io`. 0, or -errno (often -EACCES). */
int ss_proc_read_io(pid_t tid, uint64_t *read_bytes, uint64_t *write_bytes);

/* CPU time of any thread of this process, ns; SS_UNKNOWN_U64 when gone. */
uint64_t ss_thread_cpu_ns(pid_t tid);

/* Nanoseconds since the thread started; SS_UNKNOWN_U64 when unknown. */
uint64_t ss_proc_elapsed_ns(uint64_t start_ticks, uint64_t now_boot_ns);
uint64_t ss_boottime_ns(void);

/* A name for a system call number ("epoll_wait"), or NULL. */
const char *ss_syscall_name(long nr);

/* The jstack-like state of a native thread, decided from its /proc state,
 * the system call it is blocked in and its resolved frames (leaf first).
 * See docs/native.md, "Thread states". */
void ss_native_state(char proc_state, long syscall_nr, const ss_frame *frames,
                     uint32_t n_frames, ss_thread_state *state,
                     const char **status, const char **detail);

#endif /* SS_PROC_THREADS_H */
