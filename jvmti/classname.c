/* classname.c: class signatures and JVM strings as jstack prints them.
 *
 * JVMTI gives a class as its type signature: "Ljava/util/HashMap;". jstack
 * prints the binary name with dots: "java.util.HashMap". Nested classes keep
 * their '$' ("java.lang.ref.Reference$ReferenceHandler"). A hidden class
 * (lambda proxies, lambda forms) is named "Demo$$Lambda$14/0x0000000800c03000"
 * by the VM; JVMTI's signature spells its suffix with a dot
 * ("LDemo$$Lambda$14.0x0000000800c03000;", JVMTI spec, GetClassSignature),
 * so turning package slashes into dots and that dot into a slash gives
 * exactly what jstack prints. */
#include "jvmti/jvmti_internal.h"

#include <string.h>

void ss_jclass_name(const char *sig, char *out, size_t n) {
    if (n == 0)
        return;
    if (!sig || !*sig) {
        snprintf(out, n, "unknown");
        return;
    }
    const char *p = sig;
    size_t len = strlen(sig);
    if (p[0] == 'L' && len >= 2 && p[len - 1] == ';') {
        p++;
        len -= 2;
    }
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        char c = p[i];
        out[o++] = c == '/' ? '.' : c == '.' ? '/' : c;
    }
    out[o] = '\0';
}

/* Put one code point as standard UTF-8; false when it does not fit. */
static bool put_cp(char *out, size_t n, size_t *o, uint32_t cp) {
    char tmp[4];
    size_t k;
    if (cp < 0x80) {
        tmp[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        tmp[0] = (char)(0xC0 | (cp >> 6));
        tmp[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        tmp[0] = (char)(0xE0 | (cp >> 12));
        tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        tmp[0] = (char)(0xF0 | (cp >> 18));
        tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        tmp[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    if (*o + k + 1 > n)
        return false;
    memcpy(out + *o, tmp, k);
    *o += k;
    return true;
}

/* Decode one 3-byte sequence at p (a UTF-16 unit in modified UTF-8). */
static uint32_t unit3(const unsigned char *p) {
    return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) |
           (p[2] & 0x3F);
}

static bool is3(const unsigned char *p) {
    return (p[0] & 0xF0) == 0xE0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80;
}

/* Modified UTF-8 differs from UTF-8 in two ways (JNI spec, "Modified UTF-8
 * Strings"): U+0000 is the pair C0 80, and characters beyond the BMP are
 * two 3-byte surrogates. Everything else is copied as is; the output never
 * splits a character. */
void ss_mutf8_to_utf8(const char *in, char *out, size_t n) {
    if (n == 0)
        return;
    const unsigned char *p = (const unsigned char *)(in ? in : "");
    size_t o = 0;
    while (*p) {
        if (p[0] == 0xC0 && p[1] == 0x80) {
            if (!put_cp(out, n, &o, '?'))
                break;
            p += 2;
        } else if (is3(p) && (unit3(p) & 0xFC00) == 0xD800 && is3(p + 3) &&
                   (unit3(p + 3) & 0xFC00) == 0xDC00) {
            uint32_t cp = 0x10000 + ((unit3(p) - 0xD800) << 10) + (unit3(p + 3) - 0xDC00);
            if (!put_cp(out, n, &o, cp))
                break;
            p += 6;
        } else {
            /* copy one whole character (lead byte + continuations) */
            size_t k = 1;
            while (p[k] && (p[k] & 0xC0) == 0x80 && k < 4)
                k++;
            if (o + k + 1 > n)
                break;
            memcpy(out + o, p, k);
            o += k;
            p += k;
        }
    }
    out[o] = '\0';
}
