/* fuzz_otlp_config.c: libFuzzer target, the OTLP settings a user writes
 * (exporters/otlp/endpoint.c, resource.c). The first input byte picks the
 * parser, the rest is its input:
 *   0 OTEL_EXPORTER_OTLP_HEADERS      (ss_otlp_parse_headers)
 *   1 OTEL_RESOURCE_ATTRIBUTES        (ss_otlp_parse_resource_attributes)
 *   2 an endpoint URL                 (ss_otlp_parse_url, INSECURE from a bit)
 *   3 percent-decoding                (ss_otlp_percent_decode)
 *   4 the whole LOGS endpoint from five variables split at '\n'
 *     (ss_otlp_endpoint_load)
 * Invariants: no crash; outputs within bounds (keys gRPC accepts, values
 * gRPC can send, targets "host:port" with a port in 1..65535, valid UTF-8
 * attributes); parsing twice gives the same; what was parsed, written back
 * (percent-encoded) and parsed again, gives the same list (round trip). */
#include "agent/buf.h"
#include "exporters/otlp/otlp.h"
#include "tests/hardening/fuzz/fuzz_check.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Append v percent-encoded: what could split or trim it, '%' itself, and
 * every byte outside printable ASCII. */
static void put_encoded(ss_buf *b, const char *v) {
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p <= 0x20 || *p >= 0x7f || *p == ',' || *p == '=' || *p == '%')
            ss_buf_printf(b, "%%%02X", *p);
        else
            ss_buf_putc(b, (char)*p);
    }
}

static void check_header_list(const ss_otlp_header *h, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK(h[i].key[0] != '\0');
        for (const char *k = h[i].key; *k; k++)
            CHECK(isdigit((unsigned char)*k) || (*k >= 'a' && *k <= 'z') || *k == '-' ||
                  *k == '_' || *k == '.');
        size_t kl = strlen(h[i].key);
        if (!(kl > 4 && strcmp(h[i].key + kl - 4, "-bin") == 0))
            for (const unsigned char *v = (const unsigned char *)h[i].value; *v; v++)
                CHECK(*v >= 0x20 && *v <= 0x7e);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(h[i].key, h[j].key) != 0);
    }
}

static void fuzz_headers(const char *s) {
    ss_otlp_header *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    int bad = ss_otlp_parse_headers("F", s, &a, &na);
    CHECK(bad >= 0);
    size_t items = 1;
    for (const char *p = s; *p; p++)
        items += *p == ',';
    CHECK(na + (size_t)bad <= items);
    check_header_list(a, na);
    CHECK(ss_otlp_parse_headers("F", s, &b, &nb) == bad && nb == na);
    for (size_t i = 0; i < na; i++)
        CHECK(strcmp(a[i].key, b[i].key) == 0 && strcmp(a[i].value, b[i].value) == 0);
    /* round trip: written back, parsed again: the same list */
    ss_buf out;
    ss_buf_init(&out);
    for (size_t i = 0; i < na; i++) {
        ss_buf_printf(&out, "%s%s=", i ? "," : "", a[i].key);
        put_encoded(&out, a[i].value);
    }
    ss_buf_putc(&out, '\0');
    CHECK(!out.failed);
    CHECK(ss_otlp_parse_headers("F", out.data, &c, &nc) == 0 && nc == na);
    for (size_t i = 0; i < na; i++)
        CHECK(strcmp(a[i].key, c[i].key) == 0 && strcmp(a[i].value, c[i].value) == 0);
    ss_buf_free(&out);
    ss_otlp_headers_free(a, na);
    ss_otlp_headers_free(b, nb);
    ss_otlp_headers_free(c, nc);
}

static void check_attrs(const ss_attr *a, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK(a[i].type == SS_ATTR_STRING && a[i].key && a[i].str);
        CHECK(a[i].key[0] != '\0');
        CHECK(ss_utf8_valid(a[i].key, strlen(a[i].key)));
        CHECK(ss_utf8_valid(a[i].str, strlen(a[i].str)));
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(a[i].key, a[j].key) != 0);
    }
}

static void fuzz_resource(const char *s) {
    ss_attr *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0;
    int rc = ss_otlp_parse_resource_attributes(s, &a, &na);
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK(ss_otlp_parse_resource_attributes(s, &b, &nb) == rc);
    if (rc != 0)
        return;
    check_attrs(a, na);
    CHECK(nb == na);
    for (size_t i = 0; i < na; i++)
        CHECK(strcmp(a[i].key, b[i].key) == 0 && strcmp(a[i].str, b[i].str) == 0);
    ss_buf out;
    ss_buf_init(&out);
    bool fits = true;
    for (size_t i = 0; i < na; i++) {
        size_t before = out.len;
        if (i)
            ss_buf_putc(&out, ',');
        size_t kstart = out.len;
        put_encoded(&out, a[i].key);
        fits = fits && out.len - kstart < 256; /* the parser's key limit */
        ss_buf_putc(&out, '=');
        put_encoded(&out, a[i].str);
        (void)before;
    }
    ss_buf_putc(&out, '\0');
    CHECK(!out.failed);
    if (fits) {
        CHECK(ss_otlp_parse_resource_attributes(out.data, &c, &nc) == 0 && nc == na);
        for (size_t i = 0; i < na; i++)
            CHECK(strcmp(a[i].key, c[i].key) == 0 && strcmp(a[i].str, c[i].str) == 0);
        ss_attrs_free(c, nc);
    }
    ss_buf_free(&out);
    ss_attrs_free(a, na);
    ss_attrs_free(b, nb);
}

static void fuzz_url(const char *s, bool insecure, size_t target_len) {
    char *t1 = malloc(target_len), *t2 = malloc(target_len); /* exact size: ASan sees overflows */
    bool tls1 = false, tls2 = false;
    int rc = ss_otlp_parse_url(s, insecure, t1, target_len, &tls1);
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK(ss_otlp_parse_url(s, insecure, t2, target_len, &tls2) == rc);
    if (rc == 0) {
        CHECK(strlen(t1) < target_len && strcmp(t1, t2) == 0 && tls1 == tls2);
        const char *colon = strrchr(t1, ':');
        CHECK(colon && colon != t1);
        char *end;
        long port = strtol(colon + 1, &end, 10);
        CHECK(*end == '\0' && port >= 1 && port <= 65535);
        /* the target itself parses to itself */
        char *t3 = malloc(target_len);
        bool tls3;
        CHECK(ss_otlp_parse_url(t1, insecure, t3, target_len, &tls3) == 0);
        CHECK(strcmp(t1, t3) == 0 && tls3 == !insecure);
        free(t3);
    }
    free(t1);
    free(t2);
}

static void fuzz_percent(const uint8_t *d, size_t n) {
    char *out = malloc(n + 1);
    int len = ss_otlp_percent_decode((const char *)d, n, out, n + 1);
    CHECK(len == -EINVAL || (len >= 0 && (size_t)len <= n && out[len] == '\0'));
    /* an output one byte short is refused, never overrun */
    CHECK(n == 0 || ss_otlp_percent_decode((const char *)d, n, out, n) == -EINVAL);
    if (len >= 0) { /* encode every byte, decode: the same bytes */
        char *enc = malloc((size_t)len * 3 + 1), *back = malloc((size_t)len * 3 + 1);
        for (int i = 0; i < len; i++)
            snprintf(enc + 3 * i, 4, "%%%02x", (unsigned char)out[i]);
        CHECK(ss_otlp_percent_decode(enc, (size_t)len * 3, back, (size_t)len * 3 + 1) == len);
        CHECK(memcmp(back, out, (size_t)len) == 0);
        free(enc);
        free(back);
    }
    free(out);
}

static const char *const endpoint_keys[] = {
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_COMPRESSION",
};
#define N_EP_KEYS (sizeof endpoint_keys / sizeof endpoint_keys[0])

static void fuzz_endpoint(char *s) {
    for (size_t k = 0; k < N_EP_KEYS; k++)
        unsetenv(endpoint_keys[k]);
    size_t k = 0;
    for (char *rec = s; rec && k < N_EP_KEYS; k++) {
        char *nl = strchr(rec, '\n');
        if (nl)
            *nl = '\0';
        setenv(endpoint_keys[k], rec, 1);
        rec = nl ? nl + 1 : NULL;
    }
    ss_otlp_endpoint ep;
    /* the configuration-time check and the load agree: an endpoint or
     * protocol that is a mistake turns the exporter off in both */
    int checked = ss_otlp_endpoint_check("LOGS");
    int rc = ss_otlp_endpoint_load(&ep, "LOGS");
    CHECK(rc == 0 || rc == -EINVAL);
    CHECK((checked == 0) == (rc == 0));
    if (rc != 0)
        return;
    CHECK(ep.target[0] != '\0' && memchr(ep.target, '\0', sizeof ep.target));
    CHECK(memchr(ep.url, '\0', sizeof ep.url) && !strchr(ep.url, '?') && !strchr(ep.url, '#'));
    CHECK(ep.timeout_ms <= 86400000u);
    CHECK(!ep.skip_verify || ep.tls);
    check_header_list(ep.headers, ep.n_headers);
    ss_otlp_endpoint_free(&ep);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    unsetenv("SPLUNK_PROFILER_LOGS_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT");
    unsetenv("OTEL_EXPORTER_OTLP_LOGS_INSECURE");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    char *s = fuzz_cstring(data + 1, size - 1);
    switch (mode % 5) {
    case 0: fuzz_headers(s); break;
    case 1: fuzz_resource(s); break;
    case 2: fuzz_url(s, mode & 0x80, 1 + (size_t)(mode >> 3) * 16); break;
    case 3: fuzz_percent(data + 1, size - 1); break;
    case 4: fuzz_endpoint(s); break;
    }
    free(s);
    return 0;
}
