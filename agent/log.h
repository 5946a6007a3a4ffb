/*
 * agent/log.h: the agent's own lines (one line per message, never waiting).
 * Not async-signal-safe.
 */
#ifndef SS_AGENT_LOG_H
#define SS_AGENT_LOG_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

typedef enum ss_log_level {
    SS_LOG_OFF = 0,
    SS_LOG_ERROR,
    SS_LOG_WARN,
    SS_LOG_INFO,
    SS_LOG_DEBUG,
} ss_log_level;

/* Writes "stackshot: <message>\n" with one write, so lines of different
 * threads never interleave, to STACKSHOT_LOG_FILE or to the agent's own
 * duplicate of the stderr it started with (never to whatever fd 2 is
 * later). Never waits for a reader: a line the destination cannot take
 * now is dropped and counted. Not async-signal-safe. */
void ss_log(ss_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ss_vlog(ss_log_level level, const char *fmt, va_list ap);
void ss_log_set_level(ss_log_level level);
/* STACKSHOT_LOG_FILE: lines go to this file (appended, created 0600; %p
 * is the pid, %u the effective uid) instead of stderr; NULL or "":
 * stderr. A file that cannot be opened: one line on stderr, stderr kept. */
void ss_log_set_file(const char *path);
ss_log_level ss_log_get_level(void);
bool ss_log_enabled(ss_log_level level);
/* At the agent's start (the core's entry): take the private duplicate of
 * stderr. known: the loader looked at fd 2 at load; open_at_load, dev and
 * ino say what it found. If fd 2 is no longer that file (or was closed),
 * the host put its own file there: no line goes to stderr. Not known:
 * fd 2 as it is now. Without this call, the first line takes it so. */
void ss_log_take_stderr(bool known, bool open_at_load, uint64_t dev, uint64_t ino);
/* Tests that move fd 2 to capture the lines (tests/unit/stderr_capture.h):
 * forget the duplicate; the next line takes fd 2 as it is then. */
void ss_log_retake_stderr(void);
/* Lines dropped so far (destination full, gone or the host's). */
uint64_t ss_log_dropped(void);
/* At the agent's stop: one line (info) if lines were dropped since the
 * last report, else a debug line with the counters. */
void ss_log_report(void);

/* A message that can repeat (once per round, per thread...): the first
 * occurrence is written, then at most one line per SS_LOG_LIMIT_NS (a
 * minute) saying how many were suppressed since the last line written.
 * The state is a zero-initialised static next to the call site; any
 * thread may use it (atomics; a race at most writes one line more). */
#define SS_LOG_LIMIT_NS (60ull * 1000000000ull)
typedef struct ss_log_limit {
    _Atomic uint64_t last_ns;    /* when a line was last written; 0: never */
    _Atomic uint64_t suppressed; /* occurrences not written since */
} ss_log_limit;
void ss_log_limited(ss_log_limit *state, ss_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ss_error(...) ss_log(SS_LOG_ERROR, __VA_ARGS__)
#define ss_warn(...) ss_log(SS_LOG_WARN, __VA_ARGS__)
#define ss_info(...) ss_log(SS_LOG_INFO, __VA_ARGS__)
#define ss_debug(...) ss_log(SS_LOG_DEBUG, __VA_ARGS__)

#pragma GCC visibility pop

/* The core's own (hidden from modules). */
/* A forked child: the log file's lock. */
void ss_log_after_fork(void);
/* Every enabled message goes to sink (the text without the "stackshot: "
 * prefix and the newline) instead of a file: the gRPC helper process
 * hands its lines to the host's agent, which writes them. NULL: back to
 * the file or stderr. */
void ss_log_set_sink(void (*sink)(ss_log_level level, const char *msg));

#endif /* SS_AGENT_LOG_H */
