/*
 * proc/process.h: the process being profiled (proc/process.c): who it is
 * (pid, exe, command line, host) as /proc says, and what the JVM adds
 * (jvmti/ fills the runtime fields).
 */
#ifndef SS_PROC_PROCESS_H
#define SS_PROC_PROCESS_H

#include "agent/round.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

/* What a JVM offers the exporters beyond rounds (jvmti/heapdump.c sets
 * it; NULL in a native process). The calls may block (JNI, a
 * stop-the-world heap dump): agent threads only, never while the VM dies. */
typedef struct ss_jvm_services {
    /* Make an OutOfMemoryError write a heap dump into dir (the manageable
     * flags HeapDumpOnOutOfMemoryError and HeapDumpPath, unless the user
     * set them). 0, 1 (the user's HeapDumpPath points elsewhere) or
     * -errno; `why` says what was done or why not. */
    int (*heap_dump_on_oom)(const char *dir, char *why, size_t n);
    /* Write a heap dump (live objects) to path now. 0 or -errno, `why`. */
    int (*dump_heap)(const char *path, char *why, size_t n);
    /* How many ResourceExhausted events (an OutOfMemoryError) so far. */
    uint64_t (*exhausted)(void);
} ss_jvm_services;

typedef struct ss_process_info {
    pid_t pid;                   /* as the host sees it: the outermost PID namespace
                                    /proc shows (pid 1 in a container is its real pid) */
    pid_t ns_pid;                /* getpid(): in the process's own PID namespace */
    pid_t ppid;
    char exe_path[1024];         /* /proc/self/exe target */
    char exe_name[256];          /* basename of exe_path */
    char program_name[256];      /* the name it was run by (argv[0]'s basename):
                                    local files are named after it */
    char command_line[2048];     /* argv joined by spaces */
    char host_name[256];
    uint64_t start_wall_ms;      /* when the agent started, epoch ms */
    /* JVM only (set by jvmti before exporters start); "" otherwise. */
    char runtime_name[128];      /* java.runtime.name */
    char runtime_version[128];   /* java.runtime.version */
    char runtime_description[256]; /* vendor, vm name, vm version */
    char runtime_banner[256];    /* what jstack prints after "Full thread dump ":
                                    "<java.vm.name> (<java.vm.version> <java.vm.info>)" */
    const ss_jvm_services *jvm;
    ss_runtime runtime;
    /* The runtime's thread dumps print "#<n> [<os tid>]" and the nid in
     * decimal (JDK 21 and later); set by jvmti/ with runtime_banner. */
    bool dump_os_tid;
} ss_process_info;

/* Filled at agent start and again in a forked child. */
const ss_process_info *ss_process(void);
ss_process_info *ss_process_mut(void);
void ss_process_refresh(void);
/* Where the program's short name lives as the host binds it (the loader
 * passes &program_invocation_short_name); NULL: the core's own view. */
void ss_process_set_program_name_ref(char *const *ref);


#pragma GCC visibility pop

/* The core's own (hidden from modules). */
/* Does the program run under valgrind (its vgpreload_*.so in the
 * LD_PRELOAD the process started with)? Then a thread's real registers
 * are valgrind's, and a clone other than fork's, vfork's or a thread's
 * ends the program. */
bool ss_process_under_valgrind(void);

#endif /* SS_PROC_PROCESS_H */
