/*
 * proc/threads.h: facts about the threads of this process, from /proc and
 * the per-thread CPU clocks: one-shot readers any folder may use (the
 * JVMTI sampler, the Qubership top, the gRPC module's thread scan), and
 * the kept files the native sampler reads round after round.
 *
 * A round must not cost an open/read/close per file per thread: the files
 * a sampled thread is read from every round (stat, syscall, io) stay open
 * in its ss_task_files and are read again with pread, within a budget of
 * descriptors (a guest must not eat the host's RLIMIT_NOFILE). Without a
 * free descriptor a file is opened, read and closed as before. Nothing
 * here allocates per read; buffers are on the stack.
 */
#ifndef SS_PROC_THREADS_H
#define SS_PROC_THREADS_H

#include "agent/kept_fd.h"
#include "agent/round.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- one-shot readers (any thread: every folder that reads the process) */

/* The tids of /proc/self/task, sorted ascending, into *tids (grown with
 * realloc as needed). Returns the count or -errno. */
/* Part of the core's API for its modules (agent/module_abi.h). */
__attribute__((visibility("default"))) int ss_proc_list_tids(pid_t **tids, size_t *cap);
/* How many threads the process has now (the link count of
 * /proc/self/task, else num_threads of /proc/self/stat: 1.5 us, where
 * listing /proc/self/task costs ~0.35 us per thread). > 0, or -errno. */
int ss_proc_thread_count(void);

/* The fields of /proc/self/task/<tid>/stat that the samplers use. */
typedef struct ss_proc_stat {
    char name[32];        /* comm, as in field 2 (saves reading comm) */
    char state;           /* R, S, D, T, t, Z, X, ... */
    int32_t nice;
    int32_t priority;     /* field 18, as the kernel gives it */
    uint64_t utime, stime; /* fields 14 and 15: CPU time in clock ticks */
    uint64_t start_ticks; /* starttime: clock ticks after boot */
} ss_proc_stat;

/* 0, or -errno (-ESRCH or -ENOENT when the thread is gone). */
int ss_proc_read_stat(pid_t tid, ss_proc_stat *out);

/* The thread's name (comm) into buf. 0 or -errno. */
int ss_proc_read_comm(pid_t tid, char *buf, size_t n);
/* The kernel function thread `tid` waits in ("hrtimer_nanosleep",
 * "ep_poll"...; "0" when it is not blocked), from its wchan file, which a
 * non-dumpable process may still read (mode 0444). */
int ss_proc_read_wchan(pid_t tid, char *buf, size_t n);
/* The pid of the process's tracer (a debugger, strace: TracerPid of the
 * main thread), 0 if none, or -errno. Through a descriptor it keeps;
 * sampler thread only. */
int ss_proc_tracer(void);

/* Has process pid (0: this one) a thread whose name (comm) starts with
 * prefix? 1 or 0; -errno when its thread list cannot be read. Listed
 * without opendir (agent/dir.h). */
int ss_proc_has_thread_named(pid_t pid, const char *prefix);

/* CPU time of any thread of this process from its CPU clock, ns;
 * SS_UNKNOWN_U64 when gone. */
uint64_t ss_thread_cpu_ns(pid_t tid);

/* Nanoseconds since the thread started; SS_UNKNOWN_U64 when unknown. */
uint64_t ss_proc_elapsed_ns(uint64_t start_ticks, uint64_t now_boot_ns);
uint64_t ss_boottime_ns(void);

/* When the thread started, epoch ms; 0 when unknown. */
uint64_t ss_proc_start_wall_ms(pid_t tid);


/* ---- kept files (the native sampler's thread) ------------------------ */

enum { SS_TASK_STAT = 0, SS_TASK_SYSCALL, SS_TASK_IO, SS_TASK_FILES };

/* The descriptors kept open for one thread. Zero-initialised means "none
 * open"; the generation tells descriptors of an earlier life (before a
 * fork, or before ss_proc_close_all) from live ones. */
typedef struct ss_task_files {
    int fd[SS_TASK_FILES];      /* valid when gen matches and fd > 0 */
    uint64_t ino[SS_TASK_FILES]; /* what was opened (with dev), checked before close */
    uint64_t dev[SS_TASK_FILES];
    uint32_t gen;
} ss_task_files;

/* The system call line of /proc/self/task/<tid>/syscall. */
typedef struct ss_proc_syscall {
    bool running;   /* "running": on a CPU or runnable, no registers */
    bool unknown;   /* the file could not be read (a process not dumpable) */
    long nr;        /* system call number; -1: stopped outside one */
    uint64_t sp;    /* user stack pointer */
    uint64_t pc;    /* user program counter (after the syscall instruction) */
    uint64_t args[6]; /* its arguments, asleep in a system call; else 0 */
    uint8_t len;
    char line[190]; /* the raw line, to tell "the same before and after" */
} ss_proc_syscall;

/* Reads with the thread's kept descriptors (f may be NULL: one-shot). */
int ss_task_read_stat(pid_t tid, ss_task_files *f, ss_proc_stat *out);
int ss_task_read_syscall(pid_t tid, ss_task_files *f, ss_proc_syscall *out);
int ss_task_read_io(pid_t tid, ss_task_files *f, uint64_t *read_bytes, uint64_t *write_bytes);

/* The sampler's reads of a thread it may not read again soon (seen for the
 * first time, or idle): through f's kept descriptor when it has one, else
 * the file is opened through the kept /proc/self/task and not kept (no
 * fstat, no move, nothing to close later), and closed after the read.
 * With `hold`, a syscall file that gives registers stays open for a read
 * after the walk (ss_task_read_syscall with the same tid reads it again):
 * held, one file at a time, until ss_proc_release_held, the next hold or
 * ss_proc_close_all. Sampler thread only. */
int ss_task_look_stat(pid_t tid, ss_task_files *f, ss_proc_stat *out);
int ss_task_look_syscall(pid_t tid, ss_task_files *f, bool hold, ss_proc_syscall *out);
void ss_proc_release_held(void);

/* Close what f holds (only descriptors still ours: one the host closed and
 * reused is left alone). */
void ss_task_files_close(ss_task_files *f);

/* Kept descriptors now, and the most that may be kept. */
uint32_t ss_proc_fds_kept(void);
uint32_t ss_proc_fd_budget(void);
/* Below this soft RLIMIT_NOFILE no /proc file is kept open. */
#define SS_PROC_KEEP_MIN 256
/* Is the soft RLIMIT_NOFILE below SS_PROC_KEEP_MIN (as last read)? Then
 * the agent keeps no descriptor it can do without. */
bool ss_proc_fds_tight(void);
/* Once per round: the limit read again; lowered under what is kept, every
 * kept descriptor is closed (checked) and files are opened per read. */
void ss_proc_limits_round(void);

/* Another descriptor of the sampler's kept with the /proc files: within
 * their budget, closed with them (ss_proc_close_all; in a forked child,
 * ss_proc_close_inherited). false: past the budget (k is left to the
 * caller). *gen: the generation it was kept in; once
 * ss_proc_kept_still(gen) is false it was closed (or, in a child, is the
 * parent's) and k must be forgotten. ss_proc_unkeep closes it (only if
 * still kept and still what was opened) and forgets it. */
bool ss_proc_keep(const ss_kept_fd *k, uint32_t *gen);
bool ss_proc_kept_still(uint32_t gen);
void ss_proc_unkeep(ss_kept_fd *k, uint32_t gen);

/* Close every kept descriptor (the host lowered its limit). Every
 * ss_task_files becomes stale. */
void ss_proc_close_all(void);
/* The same in a forked child, for the copies of the parent's (they name
 * the parent's threads): one found taken over is not counted (it was the
 * parent's). Safe in an at-fork child handler. */
void ss_proc_close_inherited(void);

/* Does the thread block `sig` (SigBlk of status)? 1 yes, 0 no, -errno. A
 * thread in seccomp's strict mode blocks every signal: it could not take
 * one (a handler's system call would kill it). */
int ss_proc_blocks_signal(pid_t tid, int sig);
/* The same, and as of the same read how many times the thread went to
 * sleep (its voluntary context switches) into *slept and how many times it
 * left a CPU (voluntary and nonvoluntary) into *switched_out. */
int ss_proc_blocks_signal_out(pid_t tid, int sig, uint64_t *slept, uint64_t *switched_out);
/* How many times the thread was put on a CPU (third field of schedstat). */
int ss_proc_schedstat(pid_t tid, uint64_t *switched_in);

/* The signals the thread blocks (SigBlk of status) into *mask. 0 or
 * -errno. Any thread; part of the core's API for its modules. */
__attribute__((visibility("default"))) int ss_proc_sigblk(pid_t tid, uint64_t *mask);

/* The system call the thread is blocked in (first field of `syscall`),
 * -1 when running or unknown. */
long ss_proc_read_syscall(pid_t tid);

/* read_bytes / write_bytes of `io`. 0, or -errno (often -EACCES). */
int ss_proc_read_io(pid_t tid, uint64_t *read_bytes, uint64_t *write_bytes);

/* A name for a system call number ("epoll_wait"), or NULL. */
const char *ss_syscall_name(long nr);

/* The jstack-like state of a native thread, decided from its /proc state,
 * the system call it is blocked in and its resolved frames (leaf first).
 * See docs/native.md, "Thread states". */
void ss_native_state(char proc_state, long syscall_nr, const ss_frame *frames,
                     uint32_t n_frames, ss_thread_state *state,
                     const char **status, const char **detail);

#endif /* SS_PROC_THREADS_H */
