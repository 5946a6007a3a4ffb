/* diag.c: the dumps exporter's settings and addresses, read the way
 * diagtools reads them (specs/qubership-dumps.md §1.2, §1.6, §2.1).
 *
 * Uploads go to
 *   {base}/diagnostic/{ns}/{YYYY}/{MM}/{DD}/{HH}/{mm}/{ss}/{pod}/{name}
 * with every time part in UTC and zero-padded; the collector indexes a
 * file by that path alone, and only when its time is within about five
 * minutes of its arrival, so the directory time is taken when the request
 * is made (again on every retry). */
#include "agent/config.h"
#include "exporters/qubership/dumps.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define DEFAULT_SERVICE "nc-diagnostic-agent"
#define PROPERTIES_DIR "/app/ncdiag/properties" /* diagtools reads this path, fixed */

ssize_t qb_read_small(const char *path, char *buf, size_t n) {
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len + 1 < n) {
        ssize_t r = read(fd, buf + len, n - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    while (len && isspace((unsigned char)buf[len - 1]))
        len--;
    buf[len] = '\0';
    return (ssize_t)len;
}

int qb_parse_bool(const char *s) {
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0)
            return 1;
        if (strcmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

int qb_go_duration_ms(const char *s, uint64_t *ms) {
    while (isspace((unsigned char)*s))
        s++;
    char *end;
    /* integer seconds, as diagtools also takes */
    errno = 0;
    long long secs = strtoll(s, &end, 10);
    if (end != s && *end == '\0' && errno == 0 && secs >= 0) {
        *ms = (uint64_t)secs * 1000u;
        return 0;
    }
    if (*s == '+')
        s++;
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"\xc2\xb5s", 1e-3}, {"\xce\xbcs", 1e-3},
                 {"ms", 1},    {"s", 1e3},   {"m", 60e3},         {"h", 3600e3}};
    double total = 0;
    if (!*s)
        return -EINVAL;
    while (*s) {
        if (!isdigit((unsigned char)*s) && *s != '.')
            return -EINVAL;
        double v = strtod(s, &end);
        if (end == s)
            return -EINVAL;
        s = end;
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t l = strlen(units[i].unit);
            if (strncmp(s, units[i].unit, l) == 0 && l > best_len) {
                best = i;
                best_len = l;
            }
        }
        if (!best_len)
            return -EINVAL; /* a number without its unit */
        total += v * units[best].ms;
        s += best_len;
    }
    if (!isfinite(total) || total > 1e15)
        return -EINVAL;
    *ms = (uint64_t)(total + 0.5);
    return 0;
}

void qb_diag_base(const char *service, bool tls, const char *ns, char *out, size_t n) {
    char v[480];
    while (service && isspace((unsigned char)*service))
        service++;
    snprintf(v, sizeof v, "%s", service && *service ? service : DEFAULT_SERVICE);
    size_t len = strlen(v);
    while (len && isspace((unsigned char)v[len - 1]))
        v[--len] = '\0';
    const char *scheme = tls ? "https://" : "http://";
    const char *other = tls ? "http:" : "https:";
    const char *port = tls ? ":8443" : ":8080";
    if (strncmp(v, other, strlen(other)) == 0) {
        /* diagtools uses such a value as it is (after an error line) */
        snprintf(out, n, "%s", v);
        return;
    }
    char url[512];
    if (strncmp(v, scheme, strlen(scheme) - 2) == 0) /* "http:" / "https:" */
        snprintf(url, sizeof url, "%s", v);
    else
        snprintf(url, sizeof url, "%s%s", scheme, v);
    /* no ":<digits>" at the end (after at least one character): add the port */
    len = strlen(url);
    size_t d = len;
    while (d > 0 && isdigit((unsigned char)url[d - 1]))
        d--;
    bool has_port = d < len && d >= 2 && url[d - 1] == ':';
    if (!has_port) {
        strncat(url, port, sizeof url - strlen(url) - 1);
        len = strlen(url);
        d = len - strlen(port) + 1;
    }
    /* no dot anywhere: the service of this namespace */
    if (!strchr(url, '.')) {
        snprintf(out, n, "%.*s.%s%s", (int)(d - 1), url, ns, url + d - 1);
        return;
    }
    snprintf(out, n, "%s", url);
}

void qb_diag_url(const char *base, const char *ns, time_t when, const char *pod,
                 const char *name, char *out, size_t n) {
    struct tm tm;
    gmtime_r(&when, &tm);
    snprintf(out, n, "%s/diagnostic/%s/%04d/%02d/%02d/%02d/%02d/%02d/%s/%s", base, ns,
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             pod, name);
}

void qb_dump_name(time_t when, const char *suffix, char *out, size_t n) {
    struct tm tm;
    gmtime_r(&when, &tm);
    snprintf(out, n, "%04d%02d%02dT%02d%02d%02d%s", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, suffix);
}

/* A Go boolean from the environment (the JVMTI option string too); true
 * when unset or empty, and, with one line, when not a boolean. */
static bool env_enabled(const char *name) {
    const char *v = ss_config_raw(name);
    if (!v || !*v)
        return true;
    int b = qb_parse_bool(v);
    if (b < 0) {
        ss_config_bad(name, v, "not a boolean", "using true");
        return true;
    }
    return b;
}

/* diagtools' getProperty: /app/ncdiag/properties/<NAME> first, then the
 * environment (the JVMTI option string too), each a Go boolean; true
 * when neither says. */
static bool property_enabled(const char *name) {
    char path[256], buf[64];
    snprintf(path, sizeof path, PROPERTIES_DIR "/%s", name);
    if (qb_read_small(path, buf, sizeof buf) >= 0) {
        int b = qb_parse_bool(buf);
        if (b >= 0)
            return b;
    }
    return env_enabled(name);
}

static uint64_t duration_key(const char *key, const char *fallback_key, uint64_t def_ms,
                             uint64_t bad_ms, uint64_t min_ms) {
    const char *v = ss_config_raw(key);
    const char *used = key;
    if ((!v || !*v) && fallback_key) {
        v = ss_config_raw(fallback_key);
        used = fallback_key;
    }
    if (!v || !*v)
        return def_ms;
    uint64_t ms;
    char fb[64];
    if (qb_go_duration_ms(v, &ms) != 0) {
        snprintf(fb, sizeof fb, "using %llus, as diagtools does", (unsigned long long)bad_ms / 1000);
        ss_config_bad(used, v, "not a Go duration (1m, 30s, 1m30s) or seconds", fb);
        return bad_ms;
    }
    if (ms < min_ms) {
        snprintf(fb, sizeof fb, "using %llu ms", (unsigned long long)min_ms);
        ss_config_bad(used, v, "too short", fb);
        return min_ms;
    }
    return ms;
}

void qb_diag_cfg_load(qb_diag_cfg *c) {
    memset(c, 0, sizeof *c);
    qb_namespace(c->ns, sizeof c->ns);
    const char *tls = ss_config_raw("TLS_ENABLED");
    c->tls = tls && strcmp(tls, "true") == 0; /* diagtools: exactly "true" */
    qb_diag_base(ss_config_str("NC_DIAGNOSTIC_AGENT_SERVICE", ""), c->tls, c->ns, c->base,
                 sizeof c->base);
    snprintf(c->logs_dir, sizeof c->logs_dir, "%s",
             ss_config_str("NC_DIAGNOSTIC_LOGS_FOLDER", "/tmp/diagnostic"));
    snprintf(c->cert_dir, sizeof c->cert_dir, "%s", ss_config_str("TLS_CERT_DIR", ""));
    c->td = property_enabled("NC_DIAGNOSTIC_THREADDUMP_ENABLED");
    c->top = property_enabled("NC_DIAGNOSTIC_TOP_ENABLED");
    bool center = env_enabled("DIAGNOSTIC_CENTER_DUMPS_ENABLED");
    bool dumps = env_enabled("NC_DIAGNOSTIC_DUMPS_ENABLED");
    c->heap = center && dumps;
    c->dump_ms = duration_key("DIAGNOSTIC_DUMP_INTERVAL", NULL, 60000, 120000, 1000);
    c->scan_ms = duration_key("DIAGNOSTIC_SCAN_INTERVAL", "DIAGNOSTIC_DUMP_INTERVAL", 60000,
                              180000, 1000);
    c->upload_ms = duration_key("DIAGNOSTIC_UPLOAD_TIMEOUT", NULL, 300000, 300000, 100);
    c->zip_level = (int)ss_config_int("NC_HEAP_DUMP_COMPRESSION_LEVEL", 1, -1, 9);
}
