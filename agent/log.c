/* log.c: the agent's own messages, one line each on stderr.
 *
 * The agent lives in someone else's process and shares its stderr, so every
 * message is one complete line prefixed "stackshot: ", written with a single
 * write(2) so that concurrent lines never interleave with each other. */
#include "ss_agent.h"

#include <stdio.h>
#include <unistd.h>

static _Atomic int log_level = SS_LOG_WARN;

void ss_log_set_level(ss_log_level level) { atomic_store(&log_level, (int)level); }
ss_log_level ss_log_get_level(void) { return (ss_log_level)atomic_load(&log_level); }
bool ss_log_enabled(ss_log_level level) {
    return level != SS_LOG_OFF && (int)level <= atomic_load(&log_level);
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
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void ss_log(ss_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ss_vlog(level, fmt, ap);
    va_end(ap);
}
