/* http_redact.c: keeping secrets out of the HTTP client's messages.
 *
 * A URL may carry credentials ("https://user:token@host/") and a query
 * ("?access_token=..."); a header's value may be a token. None of them may
 * reach a log line, so every message the client builds from libcurl's
 * words is scrubbed of them here. No libcurl in this file. */
#include "exporters/common/http_redact.h"

#include <stdio.h>
#include <string.h>

/* Where the authority of the URL starts (after "scheme://"). */
static const char *authority(const char *url) {
    const char *p = strstr(url, "://");
    return p ? p + 3 : url;
}

void ss_http_url_for_messages(const char *url, char *out, size_t n) {
    if (!n)
        return;
    if (!url) {
        out[0] = '\0';
        return;
    }
    const char *auth = authority(url);
    size_t auth_len = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < auth_len; i++)
        if (auth[i] == '@')
            at = auth + i; /* the last '@' ends the userinfo */
    size_t rest = strcspn(auth, "?#"); /* up to the query or fragment */
    if (at)
        snprintf(out, n, "%.*s***%.*s", (int)(auth - url), url, (int)(auth + rest - at), at);
    else
        snprintf(out, n, "%.*s", (int)(auth - url + (ptrdiff_t)rest), url);
}

/* Replace every occurrence of secret[0..len) in msg by "***". */
static void scrub_one(char *msg, size_t cap, const char *secret, size_t len) {
    if (len == 0)
        return;
    char *p = msg;
    while ((p = memmem(p, strlen(p), secret, len)) != NULL) {
        size_t tail = strlen(p + len);
        if (len >= 3) {
            memcpy(p, "***", 3);
            memmove(p + 3, p + len, tail + 1);
            p += 3;
        } else {
            /* a secret shorter than the mask: grow in place when room */
            if ((size_t)(p - msg) + 3 + tail + 1 > cap) {
                *p = '\0';
                return;
            }
            memmove(p + 3, p + len, tail + 1);
            memcpy(p, "***", 3);
            p += 3;
        }
    }
}

/* Secrets shorter than this are not looked for in messages: a header
 * value "1" or "true" would blank out innocent words, and is no secret. */
#define MIN_SECRET 4

void ss_http_scrub(char *msg, size_t cap, const char *url, const char *const *headers) {
    if (url) {
        const char *auth = authority(url);
        size_t auth_len = strcspn(auth, "/?#");
        const char *at = NULL;
        for (size_t i = 0; i < auth_len; i++)
            if (auth[i] == '@')
                at = auth + i;
        if (at) {
            /* the whole userinfo, then each of its two halves */
            scrub_one(msg, cap, auth, (size_t)(at - auth));
            const char *colon = memchr(auth, ':', (size_t)(at - auth));
            if (colon) {
                scrub_one(msg, cap, auth, (size_t)(colon - auth));
                scrub_one(msg, cap, colon + 1, (size_t)(at - colon - 1));
            }
        }
        const char *q = strpbrk(auth, "?#");
        if (q && strlen(q + 1) >= 1)
            scrub_one(msg, cap, q + 1, strlen(q + 1));
    }
    for (const char *const *h = headers; h && *h; h++) {
        const char *v = strchr(*h, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strlen(v);
        while (len && (v[len - 1] == ' ' || v[len - 1] == '\t' || v[len - 1] == '\r'))
            len--;
        if (len >= MIN_SECRET)
            scrub_one(msg, cap, v, len);
    }
}
