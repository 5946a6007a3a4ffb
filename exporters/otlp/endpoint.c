/* endpoint.c: where and how an OTLP signal is sent, from the environment.
 *
 * The OpenTelemetry exporter variables, each with a per-signal variant that
 * wins (OTEL_EXPORTER_OTLP_LOGS_HEADERS over OTEL_EXPORTER_OTLP_HEADERS).
 * Header values are secrets (x-sf-token): no message ever prints them. */
#include "agent/config.h"
#include "agent/log.h"
#include "exporters/otlp/otlp.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small parsers (pure; unit-tested) ----------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int ss_otlp_percent_decode(const char *in, size_t n, char *out, size_t out_len) {
    if (out_len < n + 1)
        return -EINVAL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        if (i + 2 >= n)
            return -EINVAL;
        int hi = hexval(in[i + 1]), lo = hexval(in[i + 2]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[o++] = (char)(hi << 4 | lo);
        i += 2;
    }
    out[o] = '\0';
    return (int)o;
}

/* Trim [*b, *e) of spaces and tabs. */
static void trim(const char **b, const char **e) {
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

/* gRPC accepts metadata keys of [0-9a-z_.-] only. */
static bool legal_key(const char *k) {
    if (!*k)
        return false;
    for (const char *p = k; *p; p++)
        if (!(isdigit((unsigned char)*p) || (*p >= 'a' && *p <= 'z') || *p == '-' ||
              *p == '_' || *p == '.'))
            return false;
    return true;
}

/* gRPC sends a non-binary metadata value only if it is printable ASCII
 * (0x20-0x7e); anything else makes gRPC refuse every call and print the
 * raw value in its own error line. A key ending in "-bin" may hold any
 * bytes (gRPC base64-encodes it). */
static bool legal_value(const char *key, const char *v, size_t n) {
    size_t klen = strlen(key);
    if (klen > 4 && strcmp(key + klen - 4, "-bin") == 0)
        return true;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
            return false;
    return true;
}

void ss_otlp_headers_free(ss_otlp_header *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(list[i].key);
        if (list[i].value) /* wipe: it may be a token */
            memset(list[i].value, 0, strlen(list[i].value));
        free(list[i].value);
    }
    free(list);
}

static int header_put(ss_otlp_header **list, size_t *n, char *key, char *value) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].key, key) == 0) {
            free((*list)[i].value);
            (*list)[i].value = value;
            free(key);
            return 0;
        }
    ss_otlp_header *grown = realloc(*list, (*n + 1) * sizeof **list);
    if (!grown) {
        free(key);
        free(value);
        return -ENOMEM;
    }
    *list = grown;
    grown[*n].key = key;
    grown[*n].value = value;
    (*n)++;
    return 0;
}

int ss_otlp_parse_headers(const char *key_name, const char *s, ss_otlp_header **list,
                          size_t *n) {
    int bad = 0;
    const char *p = s;
    int item = 0;
    while (p && *p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        item++;
        const char *b = p, *e = end;
        trim(&b, &e);
        p = *end ? end + 1 : end;
        if (b == e)
            continue; /* empty item: harmless */
        const char *eq = memchr(b, '=', (size_t)(e - b));
        const char *why = NULL;
        char *key = NULL, *value = NULL;
        int len = 0;
        if (!eq) {
            why = "has no '='";
        } else {
            const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
            trim(&kb, &ke);
            trim(&vb, &ve);
            key = strndup(kb, (size_t)(ke - kb));
            value = malloc((size_t)(ve - vb) + 1);
            if (!key || !value) {
                free(key);
                free(value);
                return -ENOMEM;
            }
            for (char *k = key; *k; k++)
                *k = (char)tolower((unsigned char)*k);
            if (!legal_key(key))
                why = "has an empty key or one with characters gRPC metadata does not allow";
            else if ((len = ss_otlp_percent_decode(vb, (size_t)(ve - vb), value,
                                                   (size_t)(ve - vb) + 1)) < 0)
                why = "has a bad percent-escape in its value";
            else if (!legal_value(key, value, (size_t)len))
                why = "has a value with bytes gRPC metadata does not allow (control or "
                      "non-ASCII characters)";
        }
        if (why) {
            /* never print the item: its value may be a token */
            ss_error("%s: header item %d %s; skipping that header", key_name, item, why);
            free(key);
            free(value);
            bad++;
            continue;
        }
        if (header_put(list, n, key, value) != 0)
            return -ENOMEM;
    }
    return bad;
}

int ss_otlp_parse_url(const char *url, bool insecure, char *target, size_t target_len,
                      bool *tls) {
    const char *p = url;
    while (isspace((unsigned char)*p))
        p++;
    const char *default_port = "4317";
    bool use_tls = !insecure;
    if (strncasecmp(p, "http://", 7) == 0) {
        use_tls = false;
        p += 7;
    } else if (strncasecmp(p, "https://", 8) == 0) {
        use_tls = true;
        default_port = "443";
        p += 8;
    } else if (strstr(p, "://")) {
        return -EINVAL; /* grpc://, unix://... : not an OTLP endpoint */
    }
    /* a path after the authority is ignored: gRPC has none */
    size_t n = strcspn(p, "/?#");
    while (n > 0 && isspace((unsigned char)p[n - 1]))
        n--;
    if (n == 0)
        return -EINVAL;
    /* host, [v6]:port, host:port */
    const char *host_end;
    const char *port = NULL;
    if (*p == '[') {
        const char *close = memchr(p, ']', n);
        if (!close || close == p + 1)
            return -EINVAL;
        host_end = close + 1;
        if (host_end < p + n) {
            if (*host_end != ':')
                return -EINVAL;
            port = host_end + 1;
        }
    } else {
        const char *colon = memchr(p, ':', n);
        host_end = colon ? colon : p + n;
        if (colon)
            port = colon + 1;
        if (host_end == p)
            return -EINVAL;
        for (const char *h = p; h < host_end; h++)
            if (!(isalnum((unsigned char)*h) || *h == '-' || *h == '.' || *h == '_'))
                return -EINVAL;
    }
    size_t port_len = port ? (size_t)(p + n - port) : 0;
    if (port) {
        if (port_len == 0 || port_len > 5)
            return -EINVAL;
        long v = 0;
        for (size_t i = 0; i < port_len; i++) {
            if (!isdigit((unsigned char)port[i]))
                return -EINVAL;
            v = v * 10 + (port[i] - '0');
        }
        if (v < 1 || v > 65535)
            return -EINVAL;
    }
    int w = snprintf(target, target_len, "%.*s:%.*s", (int)(host_end - p), p,
                     port ? (int)port_len : (int)strlen(default_port),
                     port ? port : default_port);
    if (w < 0 || (size_t)w >= target_len)
        return -EINVAL;
    *tls = use_tls;
    return 0;
}

/* ---- the variables -------------------------------------------------- */

/* The value of OTEL_EXPORTER_OTLP_<SIGNAL>_<NAME>, else of
 * OTEL_EXPORTER_OTLP_<NAME>; the key used goes to key_out. */
static const char *signal_var(const char *signal, const char *name, char *key_out,
                              size_t key_len) {
    snprintf(key_out, key_len, "OTEL_EXPORTER_OTLP_%s_%s", signal, name);
    const char *v = ss_config_str(key_out, NULL);
    if (v)
        return v;
    snprintf(key_out, key_len, "OTEL_EXPORTER_OTLP_%s", name);
    return ss_config_str(key_out, NULL);
}

/* Read a PEM file whole (at most 1 MiB). NULL and one line on failure. */
static char *read_pem(const char *key, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size > (1 << 20)) {
        ss_config_bad(key, path, fd < 0 ? strerror(errno) : "not a readable file under 1 MiB",
                      "using the system's trusted roots");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf)
        return NULL;
    buf[got] = '\0';
    return buf;
}

/* The configured endpoint, first set wins; *as_is: a signal-specific one
 * (over HTTP used as it is, where the general one gets the signal's path). */
static const char *configured_endpoint(const char *signal, char *key, size_t key_len,
                                       bool *as_is) {
    *as_is = true;
    if (strcmp(signal, "LOGS") == 0) {
        snprintf(key, key_len, "SPLUNK_PROFILER_LOGS_ENDPOINT");
        const char *v = ss_config_str(key, NULL);
        if (v)
            return v;
    }
    snprintf(key, key_len, "OTEL_EXPORTER_OTLP_%s_ENDPOINT", signal);
    const char *v = ss_config_str(key, NULL);
    if (v)
        return v;
    *as_is = false;
    snprintf(key, key_len, "OTEL_EXPORTER_OTLP_ENDPOINT");
    return ss_config_str(key, NULL);
}

static void load_endpoint_url(ss_otlp_endpoint *ep, const char *signal) {
    char key[96];
    bool as_is;
    const char *v = configured_endpoint(signal, key, sizeof key, &as_is);
    if (v) {
        snprintf(ep->url, sizeof ep->url, "%s", v);
        snprintf(ep->url_key, sizeof ep->url_key, "%.63s", key);
    } else {
        snprintf(ep->url, sizeof ep->url, "%s", SS_OTLP_DEFAULT_ENDPOINT);
        ep->url_key[0] = '\0';
    }
}

/* quiet: the configuration-time check, which says nothing of a bad
 * value (the exporter's own load does, once): the same spellings as
 * ss_config_bool, false otherwise. */
static bool load_insecure(const char *signal, char *key, size_t key_len, bool quiet) {
    signal_var(signal, "INSECURE", key, key_len);
    if (!quiet)
        return ss_config_bool(key, false);
    const char *v = ss_config_raw(key);
    static const char *const yes[] = {"true", "1", "yes", "on"};
    for (size_t i = 0; v && i < sizeof yes / sizeof yes[0]; i++)
        if (strcasecmp(v, yes[i]) == 0)
            return true;
    return false;
}

/* Does the URL name its scheme as https:// ? */
static bool is_https(const char *url) {
    while (isspace((unsigned char)*url))
        url++;
    return strncasecmp(url, "https://", 8) == 0;
}

/* The URL for a message: credentials in it ("https://user:token@host")
 * become "***" (they are not supported, and never printed). */
static void redact_userinfo(const char *url, char *out, size_t n) {
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t len = strcspn(auth, "/?#");
    const char *at = memchr(auth, '@', len);
    if (!at) {
        snprintf(out, n, "%s", url);
        return;
    }
    snprintf(out, n, "%.*s***%s", (int)(auth - url), url, at);
}

/* The URL as messages show it: credentials ("user:token@") redacted, and
 * the query and fragment (gRPC ignores them; "?access_token=..." is a
 * token) cut off. */
static void url_for_messages(char *url, size_t n) {
    char shown[1024];
    redact_userinfo(url, shown, sizeof shown);
    const char *auth = strstr(shown, "://");
    auth = auth ? auth + 3 : shown;
    shown[auth - shown + strcspn(auth, "?#")] = '\0';
    snprintf(url, n, "%s", shown);
}

/* One line for an endpoint that does not parse: the value (credentials
 * and query not shown), what was expected, and that the signal's exporter
 * is off. */
static void say_bad_endpoint(const char *key, const char *url, const char *signal, bool http) {
    char shown[1024];
    snprintf(shown, sizeof shown, "%s", url);
    url_for_messages(shown, sizeof shown);
    char off[96];
    snprintf(off, sizeof off, "the %s exporter is off: nothing is sent",
             strcmp(signal, "PROFILES") == 0 ? "otlp_profiles" : "otlp_logs");
    ss_config_bad(key, shown,
                  http ? "not an endpoint (expected http://host:port/path or "
                         "https://host:port/path)"
                       : "not an endpoint (expected http://host:port or https://host:port)",
                  off);
}

/* quiet: only a failure is said (the configuration-time check). */
static int load_target(ss_otlp_endpoint *ep, const char *signal, bool quiet) {
    load_endpoint_url(ep, signal);
    char ikey[96];
    bool insecure = load_insecure(signal, ikey, sizeof ikey, quiet);
    if (ss_otlp_parse_url(ep->url, insecure, ep->target, sizeof ep->target, &ep->tls) == 0) {
        /* OTel: INSECURE only decides for an endpoint without scheme
         * (true: plaintext). With https:// the scheme says TLS; INSECURE=true
         * then keeps TLS but stops verifying the server, as the user asked. */
        if (ep->tls && insecure && is_https(ep->url)) {
            ep->skip_verify = true;
            if (!quiet)
                ss_warn("%s=true with an https:// endpoint (%s): TLS without verifying the "
                        "server's certificate or name; anyone on the path can impersonate it",
                        ikey, ep->target);
        }
        url_for_messages(ep->url, sizeof ep->url);
        return 0;
    }
    /* a mistake is never sent to a default destination */
    say_bad_endpoint(ep->url_key, ep->url, signal, false);
    ep->url[0] = ep->target[0] = '\0'; /* it may hold credentials */
    return -EINVAL;
}

/* SPLUNK_ACCESS_TOKEN: sent as X-SF-Token (Splunk Observability Cloud's
 * access token header), unless the headers already have one. Its value is
 * never printed, not even in the line about a bad one. */
static int load_splunk_token(ss_otlp_endpoint *ep) {
    const char *v = ss_config_str("SPLUNK_ACCESS_TOKEN", NULL);
    if (!v)
        return 0;
    for (size_t i = 0; i < ep->n_headers; i++)
        if (strcmp(ep->headers[i].key, "x-sf-token") == 0)
            return 0; /* the one the user wrote wins */
    const char *b = v, *e = v + strlen(v);
    trim(&b, &e);
    if (b == e || !legal_value("x-sf-token", b, (size_t)(e - b))) {
        ss_error("SPLUNK_ACCESS_TOKEN: the token holds bytes a header cannot carry (control "
                 "or non-ASCII characters); not sending it");
        return 0;
    }
    char *key = strdup("x-sf-token");
    char *value = strndup(b, (size_t)(e - b));
    if (!key || !value) {
        free(key);
        free(value);
        return -ENOMEM;
    }
    return header_put(&ep->headers, &ep->n_headers, key, value);
}

static int load_headers(ss_otlp_endpoint *ep, const char *signal) {
    const char *general = ss_config_str("OTEL_EXPORTER_OTLP_HEADERS", NULL);
    if (general &&
        ss_otlp_parse_headers("OTEL_EXPORTER_OTLP_HEADERS", general, &ep->headers,
                              &ep->n_headers) == -ENOMEM)
        return -ENOMEM;
    char key[96];
    snprintf(key, sizeof key, "OTEL_EXPORTER_OTLP_%s_HEADERS", signal);
    const char *own = ss_config_str(key, NULL);
    if (own && ss_otlp_parse_headers(key, own, &ep->headers, &ep->n_headers) == -ENOMEM)
        return -ENOMEM;
    return load_splunk_token(ep);
}

static void load_compression(ss_otlp_endpoint *ep, const char *signal) {
    char key[96];
    const char *v = signal_var(signal, "COMPRESSION", key, sizeof key);
    ep->compression = SS_OTLP_COMPRESS_NONE;
    if (!v || strcasecmp(v, "none") == 0)
        return;
    if (strcasecmp(v, "gzip") == 0) {
        ep->compression = SS_OTLP_COMPRESS_GZIP;
        return;
    }
    ss_config_bad(key, v, "unknown compression (gzip or none)", "sending uncompressed");
}

static void load_timeout(ss_otlp_endpoint *ep, const char *signal) {
    char key[96];
    const char *v = signal_var(signal, "TIMEOUT", key, sizeof key);
    ep->timeout_ms = SS_OTLP_DEFAULT_TIMEOUT_MS;
    if (!v)
        return;
    char *end;
    errno = 0;
    long long ms = strtoll(v, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (end == v || *end || errno == ERANGE) {
        ss_config_bad(key, v, "not an integer number of milliseconds", "using 10000");
        return;
    }
    if (ms < 0) {
        ss_config_bad(key, v, "negative timeout", "using 10000");
        return;
    }
    ep->timeout_ms = ms > 86400000 ? 86400000u : (uint32_t)ms;
}

/* OTEL_EXPORTER_OTLP[_<signal>]_PROTOCOL; -EINVAL (one line) for a value
 * that is not a protocol: the exporter is off. quiet: not the notice
 * about http/json (the exporter's own load says it). */
static int load_protocol(const char *signal, bool quiet, ss_otlp_protocol *out) {
    char key[96];
    const char *v = signal_var(signal, "PROTOCOL", key, sizeof key);
    *out = SS_OTLP_GRPC;
    if (!v || strcasecmp(v, "grpc") == 0)
        return 0;
    *out = SS_OTLP_HTTP_PROTOBUF;
    if (strcasecmp(v, "http/protobuf") == 0)
        return 0;
    if (strcasecmp(v, "http/json") == 0) {
        /* an OTLP/HTTP receiver takes protobuf too (the specification
         * requires both), at the same endpoint */
        if (!quiet)
            ss_config_bad(key, v, "http/json is not supported by this agent",
                          "using http/protobuf");
        return 0;
    }
    char off[96];
    snprintf(off, sizeof off, "the %s exporter is off: nothing is sent",
             strcmp(signal, "PROFILES") == 0 ? "otlp_profiles" : "otlp_logs");
    ss_config_bad(key, v, "not a protocol (grpc or http/protobuf)", off);
    return -EINVAL;
}

/* ---- OTLP/HTTP: the URL requests are posted to ---------------------- */

/* url_in (http://h:p/x, https://..., or h:p/x decided by `insecure`) as
 * the URL to post to: the signal's path appended when `append` (to what
 * path the URL has, without its trailing '/'), else as it is. The host
 * and port are checked; *target gets "host:port" (80 or 443 when the URL
 * has no port). 0 or -EINVAL. */
static int http_url(const char *url_in, bool insecure, bool append, const char *path,
                    char *out, size_t n, char *target, size_t target_len, bool *tls) {
    while (isspace((unsigned char)*url_in))
        url_in++;
    const char *scheme = insecure ? "http" : "https";
    const char *rest = url_in;
    if (strncasecmp(url_in, "http://", 7) == 0) {
        scheme = "http";
        rest += 7;
    } else if (strncasecmp(url_in, "https://", 8) == 0) {
        scheme = "https";
        rest += 8;
    } else if (strstr(url_in, "://")) {
        return -EINVAL;
    }
    size_t auth_len = strcspn(rest, "/?#");
    char check[1100];
    bool t;
    snprintf(check, sizeof check, "%s://%.*s", scheme, (int)auth_len, rest);
    if (ss_otlp_parse_url(check, insecure, target, target_len, &t) != 0)
        return -EINVAL;
    *tls = strcmp(scheme, "https") == 0;
    /* the display target: the URL's own port, or its scheme's */
    const char *auth_end = rest + auth_len;
    const char *colon = NULL;
    for (const char *c = rest; c < auth_end; c++)
        if (*c == ':')
            colon = c;
    if (!colon || (rest[0] == '[' && colon < (const char *)memchr(rest, ']', auth_len)))
        snprintf(target, target_len, "%.*s:%s", (int)auth_len, rest, *tls ? "443" : "80");
    const char *tail = auth_end;
    size_t tail_len = strlen(tail);
    while (tail_len && isspace((unsigned char)tail[tail_len - 1]))
        tail_len--;
    int w;
    if (append) {
        size_t keep = strcspn(tail, "?#");
        if (keep > tail_len)
            keep = tail_len;
        while (keep && tail[keep - 1] == '/')
            keep--;
        w = snprintf(out, n, "%s://%.*s%.*s%s", scheme, (int)auth_len, rest, (int)keep, tail,
                     path);
    } else {
        w = snprintf(out, n, "%s://%.*s%.*s", scheme, (int)auth_len, rest, (int)tail_len, tail);
    }
    return w > 0 && (size_t)w < n ? 0 : -EINVAL;
}

/* SPLUNK_REALM, for the call-stack logs when no endpoint is configured:
 * 0 with *out NULL when it does not apply, 0 with the realm, or -EINVAL
 * for a value that is not a realm name (one line: a mistake is never
 * sent to a default destination, the exporter is off). */
static int splunk_realm(const char *signal, const char **out) {
    char key[96];
    bool as_is;
    *out = NULL;
    const char *realm = ss_config_str("SPLUNK_REALM", NULL);
    if (strcmp(signal, "LOGS") != 0 || !realm || configured_endpoint(signal, key, sizeof key, &as_is))
        return 0;
    bool ok = strlen(realm) < 64;
    for (const char *c = realm; *c && ok; c++)
        ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-';
    if (!ok) {
        ss_config_bad("SPLUNK_REALM", realm, "not a realm name (like us0, eu0)",
                      "the otlp_logs exporter is off: nothing is sent");
        return -EINVAL;
    }
    *out = realm;
    return 0;
}

/* Splunk Observability Cloud's ingest endpoint of a realm for profiling
 * logs (docs/otlp.md says where this comes from), over OTLP/HTTP. */
static void splunk_realm_endpoint(ss_otlp_endpoint *ep, const char *realm) {
    ep->protocol = SS_OTLP_HTTP_PROTOBUF;
    snprintf(ep->http_url, sizeof ep->http_url, SS_SPLUNK_INGEST_LOGS, realm);
    snprintf(ep->target, sizeof ep->target, "ingest.%s.signalfx.com:443", realm);
    snprintf(ep->url_key, sizeof ep->url_key, "SPLUNK_REALM");
    snprintf(ep->url, sizeof ep->url, "%s", ep->http_url);
    ep->tls = true;
}

static int load_http_target(ss_otlp_endpoint *ep, const char *signal, const char *path,
                            bool quiet) {
    char key[96], ikey[96];
    bool as_is;
    const char *v = configured_endpoint(signal, key, sizeof key, &as_is);
    bool insecure = load_insecure(signal, ikey, sizeof ikey, quiet);
    if (!v) {
        ep->url_key[0] = '\0';
        http_url(SS_OTLP_DEFAULT_HTTP_ENDPOINT, true, true, path, ep->http_url,
                 sizeof ep->http_url, ep->target, sizeof ep->target, &ep->tls);
    } else if (http_url(v, insecure, !as_is, path, ep->http_url, sizeof ep->http_url,
                        ep->target, sizeof ep->target, &ep->tls) == 0) {
        snprintf(ep->url_key, sizeof ep->url_key, "%.63s", key);
        if (ep->tls && insecure && is_https(v)) {
            ep->skip_verify = true;
            if (!quiet)
                ss_warn("%s=true with an https:// endpoint (%s): TLS without verifying the "
                    "server's certificate or name; anyone on the path can impersonate it",
                    ikey, ep->target);
        }
    } else {
        /* a mistake is never sent to a default destination */
        say_bad_endpoint(key, v, signal, true);
        return -EINVAL;
    }
    snprintf(ep->url, sizeof ep->url, "%s", ep->http_url);
    url_for_messages(ep->url, sizeof ep->url);
    return 0;
}

/* The PEM files: read whole (gRPC takes their contents; reading them also
 * checks them, with one line for one that cannot be read), and their
 * paths kept (libcurl reads them itself). */
static void load_tls_files(ss_otlp_endpoint *ep, const char *signal) {
    char key[96];
    const char *v = signal_var(signal, "CERTIFICATE", key, sizeof key);
    if (v && (ep->root_certs_pem = read_pem(key, v)))
        ep->ca_file = strdup(v);
    const char *k = signal_var(signal, "CLIENT_KEY", key, sizeof key);
    if (k && (ep->client_key_pem = read_pem(key, k)))
        ep->key_file = strdup(k);
    const char *c = signal_var(signal, "CLIENT_CERTIFICATE", key, sizeof key);
    if (c && (ep->client_cert_pem = read_pem(key, c)))
        ep->cert_file = strdup(c);
    if (!ep->client_key_pem != !ep->client_cert_pem) {
        ss_error("OTEL_EXPORTER_OTLP_%s_CLIENT_KEY and _CLIENT_CERTIFICATE must be set "
                 "together; not using a client certificate",
                 signal);
        free(ep->client_key_pem);
        free(ep->client_cert_pem);
        free(ep->key_file);
        free(ep->cert_file);
        ep->client_key_pem = ep->client_cert_pem = ep->key_file = ep->cert_file = NULL;
    }
}

int ss_otlp_endpoint_fork_http(ss_otlp_endpoint *ep, const char *http_path) {
    static const char key[] = "STACKSHOT_OTLP_FORK_ENDPOINT";
    const char *v = ss_config_str(key, NULL);
    if (!v)
        return -ENOENT;
    char ikey[96], url[sizeof ep->http_url], target[sizeof ep->target];
    bool insecure = load_insecure(ep->signal, ikey, sizeof ikey, false), tls;
    if (http_url(v, insecure, true, http_path, url, sizeof url, target, sizeof target, &tls) != 0) {
        char shown[sizeof ep->url];
        snprintf(shown, sizeof shown, "%s", v);
        url_for_messages(shown, sizeof shown);
        ss_config_bad(key, shown, "not an endpoint (expected http://host:port or https://...)",
                      "no OTLP export in forked children");
        return -EINVAL;
    }
    if (tls && !ep->tls)
        load_tls_files(ep, ep->signal);
    ep->protocol = SS_OTLP_HTTP_PROTOBUF;
    ep->tls = tls;
    ep->skip_verify = tls && insecure && is_https(v);
    snprintf(ep->http_url, sizeof ep->http_url, "%s", url);
    snprintf(ep->target, sizeof ep->target, "%s", target);
    snprintf(ep->url_key, sizeof ep->url_key, "%s", key);
    snprintf(ep->url, sizeof ep->url, "%s", url);
    url_for_messages(ep->url, sizeof ep->url);
    return 0;
}

static const char *default_http_path(const char *signal) {
    return strcmp(signal, "PROFILES") == 0 ? "/v1development/profiles" : "/v1/logs";
}

int ss_otlp_endpoint_load(ss_otlp_endpoint *ep, const char *signal) {
    return ss_otlp_endpoint_load_path(ep, signal, default_http_path(signal));
}

int ss_otlp_endpoint_load_path(ss_otlp_endpoint *ep, const char *signal, const char *http_path) {
    memset(ep, 0, sizeof *ep);
    snprintf(ep->signal, sizeof ep->signal, "%s", signal);
    if (load_protocol(signal, false, &ep->protocol) != 0)
        return -EINVAL;
    const char *realm;
    if (splunk_realm(signal, &realm) != 0)
        return -EINVAL;
    int rc = 0;
    if (realm)
        splunk_realm_endpoint(ep, realm); /* over OTLP/HTTP, whatever the protocol */
    else if (ep->protocol == SS_OTLP_HTTP_PROTOBUF)
        rc = load_http_target(ep, signal, http_path, false);
    else
        rc = load_target(ep, signal, false);
    if (rc != 0)
        return rc;
    load_compression(ep, signal);
    load_timeout(ep, signal);
    if (ep->tls)
        load_tls_files(ep, signal);
    if (load_headers(ep, signal) != 0) {
        ss_otlp_endpoint_free(ep);
        return -ENOMEM;
    }
    return 0;
}

void ss_otlp_endpoint_free(ss_otlp_endpoint *ep) {
    ss_otlp_headers_free(ep->headers, ep->n_headers);
    ep->headers = NULL;
    ep->n_headers = 0;
    free(ep->root_certs_pem);
    free(ep->client_cert_pem);
    if (ep->client_key_pem)
        memset(ep->client_key_pem, 0, strlen(ep->client_key_pem));
    free(ep->client_key_pem);
    free(ep->ca_file);
    free(ep->cert_file);
    free(ep->key_file);
    ep->root_certs_pem = ep->client_key_pem = ep->client_cert_pem = NULL;
    ep->ca_file = ep->cert_file = ep->key_file = NULL;
}

/* Configuration time (the exporter table's check, before anything starts):
 * would this signal's protocol and endpoint be usable? Only those two
 * decide, and only their failure is said here (one line: the exporter is
 * off); every other key is read, and said, when the exporter loads. */
int ss_otlp_endpoint_check(const char *signal) {
    ss_otlp_protocol protocol;
    if (load_protocol(signal, true, &protocol) != 0)
        return -EINVAL;
    const char *realm;
    if (splunk_realm(signal, &realm) != 0)
        return -EINVAL;
    if (realm)
        return 0;
    /* the load's own parsing, into a scratch endpoint, so that the two
     * never disagree */
    ss_otlp_endpoint *tmp = calloc(1, sizeof *tmp);
    if (!tmp)
        return 0; /* the load will tell */
    snprintf(tmp->signal, sizeof tmp->signal, "%s", signal);
    int rc = protocol == SS_OTLP_HTTP_PROTOBUF
                 ? load_http_target(tmp, signal, default_http_path(signal), true)
                 : load_target(tmp, signal, true);
    free(tmp);
    return rc;
}
