/* buf.c: a growable byte buffer. On allocation failure the buffer keeps
 * what it has, sets `failed`, and every later append is a no-op, so a
 * caller checks once at the end instead of after every append. */
#include "agent/buf.h"
#include "agent/grow.h"

#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ss_buf_init(ss_buf *b) { memset(b, 0, sizeof *b); }

void ss_buf_free(ss_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void ss_buf_reset(ss_buf *b) {
    b->len = 0;
    b->failed = false;
    if (b->data)
        b->data[0] = '\0';
}

int ss_buf_reserve(ss_buf *b, size_t extra) {
    if (b->failed)
        return -ENOMEM;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    if (extra > SIZE_MAX - b->len - 1 ||
        ss_grow((void **)&b->data, &b->cap, b->len + extra + 1, 1, 256) != 0) {
        b->failed = true;
        return -ENOMEM;
    }
    return 0;
}

int ss_buf_append(ss_buf *b, const void *p, size_t n) {
    if (ss_buf_reserve(b, n) != 0)
        return -ENOMEM;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int ss_buf_puts(ss_buf *b, const char *s) { return ss_buf_append(b, s, strlen(s)); }

int ss_buf_putc(ss_buf *b, char c) { return ss_buf_append(b, &c, 1); }

int ss_buf_printf(ss_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n < sizeof small)
        return ss_buf_append(b, small, (size_t)n);
    if (ss_buf_reserve(b, (size_t)n) != 0)
        return -ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}
