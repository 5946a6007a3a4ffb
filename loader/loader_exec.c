/* loader_exec.c: the exec family, wrapped so that an exec ends the agent
 * as an exit would (in the loader, libstackshot.so; it was
 * agent/exec_guard.c before the split).
 *
 * exec runs no destructor: rounds still queued would be lost. And pending
 * signals survive execve() while handlers are reset to SIG_DFL, whose
 * action for a real-time signal is to terminate: a thread that execs just
 * as the sampler signals it would kill the new program the moment it
 * starts. So with the library preloaded, every exec function first stops
 * the agent (ss_agent_exec_begin: sampler joined, exporters flushed within
 * STACKSHOT_SHUTDOWN_TIMEOUT, a pending signal taken by our handler). If
 * the exec fails the agent starts again.
 *
 * These are the only symbols besides the public API and the JVMTI entry
 * points that the library exports (stackshot.map). With no core loaded
 * (agent disabled) each is a plain call of libc's. Inside a JVM the
 * library is loaded with dlopen and interposes nothing; the JVMTI sampler
 * sends no signals, so nothing is needed there. posix_spawn() and
 * system() exec in a new process through glibc's internal execve and are
 * not affected: our signals go only to the threads of this process. */

#include "loader/ss_loader.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

SS_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    static execve_fn fn;
    if (!fn && !(fn = (execve_fn)ss_loader_next("execve")))
        return -1;
    int token = ss_start_quiesce(SS_ASIDE_EXEC);
    int rc = fn(path, argv, envp);
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}

SS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    static execve_fn fn;
    if (!fn && !(fn = (execve_fn)ss_loader_next("execvpe")))
        return -1;
    int token = ss_start_quiesce(SS_ASIDE_EXEC);
    int rc = fn(file, argv, envp);
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}

SS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    static fexecve_fn fn;
    if (!fn && !(fn = (fexecve_fn)ss_loader_next("fexecve")))
        return -1;
    int token = ss_start_quiesce(SS_ASIDE_EXEC);
    int rc = fn(fd, argv, envp);
    int saved = errno;
    ss_start_resume(token);
    errno = saved;
    return rc;
}

SS_EXPORT int execv(const char *path, char *const argv[]) {
    return execve(path, argv, environ);
}

SS_EXPORT int execvp(const char *file, char *const argv[]) {
    return execvpe(file, argv, environ);
}

/* The list forms: count the arguments, copy them to an array on the
 * stack (as libc does: no malloc between fork and exec); execle's
 * environment follows the terminating NULL. */
#define LIST_TO_ARGV(arg0, argv)                                             \
    size_t n_ = 1;                                                           \
    va_list ap_;                                                             \
    va_start(ap_, arg0);                                                     \
    while (va_arg(ap_, char *))                                              \
        n_++;                                                                \
    va_end(ap_);                                                             \
    char *argv[n_ + 1];                                                      \
    argv[0] = (char *)(arg0);                                                \
    va_start(ap_, arg0);                                                     \
    for (size_t i_ = 1; i_ <= n_; i_++)                                      \
        argv[i_] = va_arg(ap_, char *)

SS_EXPORT int execl(const char *path, const char *arg, ...) {
    LIST_TO_ARGV(arg, argv);
    va_end(ap_);
    return execve(path, argv, environ);
}

SS_EXPORT int execlp(const char *file, const char *arg, ...) {
    LIST_TO_ARGV(arg, argv);
    va_end(ap_);
    return execvpe(file, argv, environ);
}

SS_EXPORT int execle(const char *path, const char *arg, ...) {
    LIST_TO_ARGV(arg, argv);
    char **envp = va_arg(ap_, char **);
    va_end(ap_);
    return execve(path, argv, envp);
}
