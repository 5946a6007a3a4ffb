/*
 * agent/buf.h: a growable byte buffer whose failure is sticky.
 */
#ifndef SS_AGENT_BUF_H
#define SS_AGENT_BUF_H

#include <stdbool.h>
#include <stddef.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

typedef struct ss_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed; /* an allocation failed; contents are truncated */
} ss_buf;

void ss_buf_init(ss_buf *b);
void ss_buf_free(ss_buf *b);
void ss_buf_reset(ss_buf *b); /* len = 0, keeps the allocation */
int ss_buf_reserve(ss_buf *b, size_t extra);
int ss_buf_append(ss_buf *b, const void *p, size_t n);
int ss_buf_puts(ss_buf *b, const char *s);
int ss_buf_putc(ss_buf *b, char c);
int ss_buf_printf(ss_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#pragma GCC visibility pop

#endif /* SS_AGENT_BUF_H */
