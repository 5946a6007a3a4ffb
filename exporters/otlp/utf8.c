/* utf8.c: keep protobuf strings valid UTF-8.
 *
 * proto3 `string` fields must hold valid UTF-8, and receivers written in Go
 * (the OpenTelemetry Collector) reject the whole request when one does not:
 * one odd thread name would cost every record of the batch. Names come from
 * /proc (any bytes) and from JVMTI (modified UTF-8: supplementary
 * characters as surrogate pairs, NUL as C0 80), so strings are checked and
 * every byte of an invalid sequence becomes '?'. */
#include "exporters/otlp/otlp.h"

#include <string.h>

/* Length of the valid sequence at p (at most n bytes), or 0. */
static size_t valid_seq(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0; /* continuation byte, C0/C1 overlong lead, F5+ */
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0; /* overlong or beyond Unicode */
    if (cp >= 0xd800 && cp <= 0xdfff)
        return 0; /* surrogate */
    return len;
}

/* Skip ASCII from i on, eight bytes at a time (bodies are mostly ASCII). */
static size_t skip_ascii(const char *s, size_t i, size_t n) {
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            break;
        i += 8;
    }
    while (i < n && (unsigned char)s[i] < 0x80)
        i++;
    return i;
}

size_t ss_utf8_fix(char *s, size_t n) {
    size_t fixed = 0;
    for (size_t i = skip_ascii(s, 0, n); i < n; i = skip_ascii(s, i, n)) {
        size_t len = valid_seq((const unsigned char *)s + i, n - i);
        if (len) {
            i += len;
            continue;
        }
        s[i++] = '?';
        fixed++;
    }
    return fixed;
}

bool ss_utf8_valid(const char *s, size_t n) {
    for (size_t i = skip_ascii(s, 0, n); i < n; i = skip_ascii(s, i, n)) {
        size_t len = valid_seq((const unsigned char *)s + i, n - i);
        if (!len)
            return false;
        i += len;
    }
    return true;
}
