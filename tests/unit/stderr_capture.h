/* stderr_capture.h: run code with stderr redirected to a temporary file and
 * read back what the agent printed. Header-only, for the unit tests. */
#ifndef STDERR_CAPTURE_H
#define STDERR_CAPTURE_H

#include "agent/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* agent/log.c: the agent keeps its own duplicate of stderr (never
 * whatever fd 2 is later); a test that moves fd 2 tells it to take fd 2
 * again. */
void ss_log_retake_stderr(void);

typedef struct capture {
    int saved;
    FILE *tmp;
    char text[8192];
} capture;

static inline void capture_begin(capture *c) {
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    c->tmp = tmpfile();
    dup2(fileno(c->tmp), STDERR_FILENO);
    ss_log_retake_stderr();
    c->text[0] = '\0';
}

/* Ends the capture; c->text holds what was written. Returns the number of lines. */
static inline int capture_end(capture *c) {
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    ss_log_retake_stderr();
    close(c->saved);
    rewind(c->tmp);
    size_t n = fread(c->text, 1, sizeof c->text - 1, c->tmp);
    c->text[n] = '\0';
    fclose(c->tmp);
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += c->text[i] == '\n';
    return lines;
}

#endif
