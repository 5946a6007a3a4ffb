/* log.c: the agent's own messages, one line each, on stderr or in
 * STACKSHOT_LOG_FILE.
 *
 * The agent lives in someone else's process and shares its stderr, so every
 * message is one complete line prefixed "stackshot: ", written with a single
 * write(2) so that concurrent lines never interleave with each other (the
 * log file is opened O_APPEND: a forked child's lines land after its
 * parent's, whole). A file name with %p is opened again, under the child's
 * pid, by a forked child's first line. */
#include "ss_agent.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Atomic int log_level = SS_LOG_WARN;

/* STACKSHOT_LOG_FILE: the template, and the file opened for a pid. */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static char file_tmpl[1024];
static int file_fd = -1;
static pid_t file_pid;

void ss_log_set_level(ss_log_level level) { atomic_store(&log_level, (int)level); }
ss_log_level ss_log_get_level(void) { return (ss_log_level)atomic_load(&log_level); }
bool ss_log_enabled(ss_log_level level) {
    return level != SS_LOG_OFF && (int)level <= atomic_load(&log_level);
}

static void expand(const char *tmpl, char *out, size_t n) {
    size_t len = 0;
    for (const char *p = tmpl; *p && len + 24 < n; p++) {
        if (p[0] == '%' && (p[1] == 'p' || p[1] == 'u')) {
            len += (size_t)snprintf(out + len, n - len, "%u",
                                    p[1] == 'p' ? (unsigned)getpid() : (unsigned)geteuid());
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            out[len++] = '%';
            p++;
        } else {
            out[len++] = *p;
        }
    }
    out[len] = '\0';
}

void ss_log_after_fork(void) { pthread_mutex_init(&file_lock, NULL); }

void ss_log_set_file(const char *path) {
    pthread_mutex_lock(&file_lock);
    if (file_fd >= 0)
        close(file_fd);
    file_fd = -1;
    file_pid = 0;
    snprintf(file_tmpl, sizeof file_tmpl, "%s", path ? path : "");
    pthread_mutex_unlock(&file_lock);
}

/* The fd lines go to: the log file (opened on first use, again in a forked
 * child when its name has the pid), or stderr. */
static int log_fd(void) {
    pthread_mutex_lock(&file_lock);
    if (!file_tmpl[0]) {
        pthread_mutex_unlock(&file_lock);
        return STDERR_FILENO;
    }
    pid_t pid = getpid();
    if (file_fd < 0 || (file_pid != pid && strstr(file_tmpl, "%p"))) {
        if (file_fd >= 0)
            close(file_fd);
        char path[1100];
        expand(file_tmpl, path, sizeof path);
        file_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        file_pid = pid;
        if (file_fd < 0) {
            char line[1300];
            int n = snprintf(line, sizeof line,
                             SS_NAME ": STACKSHOT_LOG_FILE=%s: cannot open %s: %m; "
                                     "logging to stderr\n",
                             file_tmpl, path);
            file_tmpl[0] = '\0';
            ssize_t w = write(STDERR_FILENO, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
            (void)w;
        }
    }
    int fd = file_fd >= 0 ? file_fd : STDERR_FILENO;
    pthread_mutex_unlock(&file_lock);
    return fd;
}

void ss_vlog(ss_log_level level, const char *fmt, va_list ap) {
    if (!ss_log_enabled(level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, SS_NAME ": ");
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2; /* truncated: still one line */
    line[len++] = '\n';
    ssize_t w = write(log_fd(), line, len);
    (void)w;
}

void ss_log(ss_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ss_vlog(level, fmt, ap);
    va_end(ap);
}
