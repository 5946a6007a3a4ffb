/* zorka_dump.c: `stackshot-dump zorka [options] FILE...`: agd and trc
 * bodies as readable events (zkdump.h says what is printed).
 *
 * Files, by their name:
 *   *.jsonl  ZICO's dump format: one request per line, a JSON object with
 *            "uri", "headers" (each value a list of one string) and "body"
 *            (standard base64); the session, reset and trace headers come
 *            from it ("null" when absent);
 *   *.hex    one body as hex digits (white space ignored);
 *   *.b64    one body as base64;
 *   others   one raw body.
 * A body's kind comes from its name ("agd" or "trc" in it) unless
 * --agd or --trc says; its headers from --session, --reset and
 * --trace-id ("-" when not given). Files share one collector: an agd's
 * definitions serve the trc files after it.
 *
 * Exit status: 0 everything decoded, 1 something did not, 2 usage. */
#include "agent/buf.h"
#include "tools/stackshot-dump/zkdump.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    const char *sid, *reset, *tid, *kind;
} opts;

static int read_file(const char *path, ss_buf *out) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        ss_buf_append(out, chunk, n);
    int rc = ferror(f) ? -EIO : out->failed ? -ENOMEM : 0;
    fclose(f);
    return rc;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Hex digits -> bytes, white space ignored. -1 on anything else. */
static int unhex(const char *s, size_t n, ss_buf *out) {
    int hi = -1;
    for (size_t i = 0; i < n; i++) {
        if (isspace((unsigned char)s[i]))
            continue;
        int v = hexval((unsigned char)s[i]);
        if (v < 0)
            return -1;
        if (hi < 0) {
            hi = v;
        } else {
            ss_buf_putc(out, (char)(hi << 4 | v));
            hi = -1;
        }
    }
    return hi < 0 ? 0 : -1;
}

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 -> bytes; white space and "\/" (JSON's escaped slash)
 * tolerated. -1 on anything else. */
static int unbase64(const char *s, size_t n, ss_buf *out) {
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (isspace(c) || c == '\\')
            continue;
        if (c == '=')
            break;
        int v = b64val(c);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            ss_buf_putc(out, (char)(acc >> bits));
        }
    }
    return 0;
}

/* ---- the dump format's JSON (just what it needs) ---------------------------- */

typedef struct json {
    const char *p, *end;
} json;

static void ws(json *j) {
    while (j->p < j->end && isspace((unsigned char)*j->p))
        j->p++;
}

/* A JSON string into out (escapes decoded; \u only for ASCII). */
static int jstring(json *j, ss_buf *out) {
    ws(j);
    if (j->p >= j->end || *j->p != '"')
        return -1;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\') {
            if (j->p >= j->end)
                return -1;
            c = *j->p++;
            if (c == 'n')
                c = '\n';
            else if (c == 't')
                c = '\t';
            else if (c == 'r')
                c = '\r';
            else if (c == 'b')
                c = '\b';
            else if (c == 'f')
                c = '\f';
            else if (c == 'u') {
                if (j->end - j->p < 4)
                    return -1;
                int v = 0;
                for (int i = 0; i < 4; i++) {
                    int h = hexval((unsigned char)*j->p++);
                    if (h < 0)
                        return -1;
                    v = v << 4 | h;
                }
                c = v < 0x80 ? (char)v : '?';
            }
        }
        ss_buf_putc(out, c);
    }
    if (j->p >= j->end)
        return -1;
    j->p++;
    return out->failed ? -1 : 0;
}

static bool jchar(json *j, char c) {
    ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

typedef struct dump_req {
    ss_buf uri, body, sid, reset, tid;
    bool has_sid, has_reset, has_tid;
} dump_req;

/* "headers": {"Name": ["value"], ...} */
static int jheaders(json *j, dump_req *r) {
    if (!jchar(j, '{'))
        return -1;
    if (jchar(j, '}'))
        return 0;
    do {
        ss_buf name, value;
        ss_buf_init(&name);
        ss_buf_init(&value);
        int rc = jstring(j, &name) || !jchar(j, ':') || !jchar(j, '[') ? -1 : 0;
        if (!rc && !jchar(j, ']')) {
            rc = jstring(j, &value);
            while (!rc && jchar(j, ',')) { /* further values: ignored */
                ss_buf extra;
                ss_buf_init(&extra);
                rc = jstring(j, &extra);
                ss_buf_free(&extra);
            }
            if (!rc && !jchar(j, ']'))
                rc = -1;
        }
        if (!rc) {
            const char *n = name.data ? name.data : "";
            const char *v = value.data ? value.data : "";
            if (!strcasecmp(n, "X-Zorka-Session-ID"))
                r->has_sid = true, ss_buf_puts(&r->sid, v);
            else if (!strcasecmp(n, "X-Zorka-Session-Reset"))
                r->has_reset = true, ss_buf_puts(&r->reset, v);
            else if (!strcasecmp(n, "X-Zorka-Trace-ID"))
                r->has_tid = true, ss_buf_puts(&r->tid, v);
        }
        ss_buf_free(&name);
        ss_buf_free(&value);
        if (rc)
            return -1;
    } while (jchar(j, ','));
    return jchar(j, '}') ? 0 : -1;
}

static int jrequest(const char *line, size_t n, dump_req *r) {
    json j = {line, line + n};
    if (!jchar(&j, '{'))
        return -1;
    do {
        ss_buf key;
        ss_buf_init(&key);
        if (jstring(&j, &key) || !jchar(&j, ':')) {
            ss_buf_free(&key);
            return -1;
        }
        const char *k = key.data ? key.data : "";
        int rc;
        if (!strcmp(k, "uri")) {
            rc = jstring(&j, &r->uri);
        } else if (!strcmp(k, "headers")) {
            rc = jheaders(&j, r);
        } else if (!strcmp(k, "body")) {
            ss_buf b64;
            ss_buf_init(&b64);
            rc = jstring(&j, &b64);
            if (!rc)
                rc = unbase64(b64.data ? b64.data : "", b64.len, &r->body);
            ss_buf_free(&b64);
        } else {
            ss_buf skip; /* other string fields */
            ss_buf_init(&skip);
            rc = jstring(&j, &skip);
            ss_buf_free(&skip);
        }
        ss_buf_free(&key);
        if (rc)
            return -1;
    } while (jchar(&j, ','));
    return jchar(&j, '}') ? 0 : -1;
}

/* ---- files ------------------------------------------------------------------ */

static const char *or_null(bool has, ss_buf *b) { return has ? (b->data ? b->data : "") : "null"; }

int zkd_dump_jsonl(zkd *d, const char *name, const ss_buf *text, ss_buf *out) {
    int status = 0;
    size_t line_no = 0;
    for (const char *p = text->data ? text->data : "", *end = p + text->len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        line_no++;
        dump_req r;
        memset(&r, 0, sizeof r);
        bool blank = true;
        for (size_t i = 0; i < n; i++)
            blank = blank && isspace((unsigned char)p[i]);
        if (!blank) {
            if (jrequest(p, n, &r) != 0) {
                ss_buf_printf(out, "%s:%zu: not a dump line (JSON with uri, headers, body)\n",
                              name, line_no);
                status = 1;
            } else {
                zkd_request rq = {.uri = r.uri.data ? r.uri.data : "?",
                                  .sid = or_null(r.has_sid, &r.sid),
                                  .reset = or_null(r.has_reset, &r.reset),
                                  .trace_id = or_null(r.has_tid, &r.tid),
                                  .body = (const uint8_t *)r.body.data, .len = r.body.len};
                if (zkd_request_print(d, &rq, out) != 0)
                    status = 1;
            }
        }
        ss_buf_free(&r.uri);
        ss_buf_free(&r.body);
        ss_buf_free(&r.sid);
        ss_buf_free(&r.reset);
        ss_buf_free(&r.tid);
        p += n + (nl ? 1 : 0);
    }
    return status;
}

static int dump_file(zkd *d, const char *name, const opts *o, ss_buf *out) {
    ss_buf raw, body;
    ss_buf_init(&raw);
    ss_buf_init(&body);
    int rc = read_file(name, &raw), status = 0;
    if (rc) {
        fprintf(stderr, "stackshot-dump: %s: %s\n", name, strerror(-rc));
        ss_buf_free(&raw);
        return 1;
    }
    if (ends_with(name, ".jsonl")) {
        status = zkd_dump_jsonl(d, name, &raw, out);
    } else {
        const ss_buf *b = &raw;
        if (ends_with(name, ".hex") || ends_with(name, ".b64")) {
            bool hex = ends_with(name, ".hex");
            if ((hex ? unhex : unbase64)(raw.data ? raw.data : "", raw.len, &body) != 0) {
                fprintf(stderr, "stackshot-dump: %s: not %s text\n", name, hex ? "hex" : "base64");
                status = 1;
            }
            b = &body;
        }
        const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
        const char *kind = o->kind ? o->kind : strstr(base, "trc") ? "trc"
                                             : strstr(base, "agd") ? "agd" : NULL;
        if (!kind) {
            fprintf(stderr, "stackshot-dump: %s: cannot tell agd from trc by the name; use "
                            "--agd or --trc\n", name);
            status = 1;
        } else if (!status) {
            bool trc = !strcmp(kind, "trc");
            zkd_request rq = {.uri = trc ? "/agent/submit/trc" : "/agent/submit/agd",
                              .sid = o->sid, .reset = trc ? "-" : o->reset,
                              .trace_id = trc ? o->tid : "-",
                              .body = (const uint8_t *)b->data, .len = b->len};
            if (zkd_request_print(d, &rq, out) != 0)
                status = 1;
        }
    }
    ss_buf_free(&raw);
    ss_buf_free(&body);
    return status;
}

static int usage_to(FILE *f, int rc) {
    fputs("usage: stackshot dump zorka [--session SID] [--reset true|false] [--trace-id ID] "
          "[--agd|--trc] FILE...\n"
          "  FILE: *.jsonl (ZICO request dumps), *.hex, *.b64, or a raw agd/trc body\n",
          f);
    return rc;
}

static int usage(void) { return usage_to(stderr, 2); }

int ss_zorka_dump_main(int argc, char **argv) {
    opts o = {.sid = "-", .reset = "-", .tid = "-"};
    zkd *d = zkd_new();
    if (!d)
        return 1;
    int status = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--session") && i + 1 < argc) {
            o.sid = argv[++i];
        } else if (!strcmp(a, "--reset") && i + 1 < argc) {
            o.reset = argv[++i];
        } else if (!strcmp(a, "--trace-id") && i + 1 < argc) {
            o.tid = argv[++i];
        } else if (!strcmp(a, "--agd") || !strcmp(a, "--trc")) {
            o.kind = a + 2;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            zkd_free(d);
            return usage_to(stdout, 0);
        } else if (a[0] == '-' && a[1]) {
            zkd_free(d);
            return usage();
        } else {
            ss_buf out;
            ss_buf_init(&out);
            if (dump_file(d, a, &o, &out) != 0)
                status = 1;
            fwrite(out.data ? out.data : "", 1, out.len, stdout);
            ss_buf_free(&out);
            files++;
        }
    }
    zkd_free(d);
    if (!files)
        return usage();
    return status;
}
