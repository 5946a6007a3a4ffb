/*
 * settings.c: the options `stackshot run` and `stackshot attach` share.
 * Each maps to one documented key of the agent (docs/configuration.md, stackshot(7)); the
 * command never invents settings of its own that the agent would not see.
 */
#include "tools/stackshot/stackshot.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SS_CMD_LIBDIR
#define SS_CMD_LIBDIR "lib"
#endif

int ss_cmd_set(ss_cmd_settings *s, const char *key, const char *value) {
    for (int k = 0; k < s->n; k++)
        if (!strcmp(s->key[k], key)) {
            s->value[k] = value;
            return 0;
        }
    if (s->n == SS_CMD_MAX_KEYS)
        return -1;
    s->key[s->n] = key;
    s->value[s->n] = value;
    s->n++;
    return 0;
}

long long ss_cmd_parse_duration(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0 || v > 100000000)
        return -1;
    if (!strcmp(end, "") || !strcmp(end, "s"))
        return v * 1000;
    if (!strcmp(end, "ms"))
        return v;
    if (!strcmp(end, "m"))
        return v * 60000;
    if (!strcmp(end, "h"))
        return v * 3600000;
    return -1;
}

/* A key as the agent spells them: upper case, digits, '_'. */
static bool key_like(const char *k, size_t n) {
    if (n == 0 || !isupper((unsigned char)k[0]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isupper((unsigned char)k[i]) && !isdigit((unsigned char)k[i]) && k[i] != '_')
            return false;
    return true;
}

static int bad(const char *sub, const char *what, const char *arg) {
    fprintf(stderr, "stackshot %s: %s '%s' (see stackshot %s --help)\n", sub, what, arg, sub);
    return 2;
}

/* "--name=value" or "--name value" / "-x value": the value, or NULL. */
static const char *value_of(int argc, char **argv, int *i, const char *a, size_t namelen) {
    if (a[namelen] == '=')
        return a + namelen + 1;
    if (a[namelen] != '\0' || *i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

static bool is(const char *a, const char *shrt, const char *lng, size_t *len) {
    size_t n = strlen(lng);
    if (!strncmp(a, lng, n) && (a[n] == '\0' || a[n] == '=')) {
        *len = n;
        return true;
    }
    if (shrt && !strcmp(a, shrt)) {
        *len = strlen(shrt);
        return true;
    }
    return false;
}

int ss_cmd_parse(int argc, char **argv, int *i, ss_cmd_settings *s, const char *extra,
                 const char *sub) {
    static const struct {
        const char *shrt, *lng, *key;
    } map[] = {
        {"-i", "--interval", "SPLUNK_PROFILER_CALL_STACK_INTERVAL"},
        {"-e", "--exporters", "STACKSHOT_EXPORTERS"},
        {"-o", "--output", "STACKSHOT_OUTPUT_DIR"},
        {NULL, "--endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT"},
        {NULL, "--service", "OTEL_SERVICE_NAME"},
        {NULL, "--log-level", "STACKSHOT_LOG_LEVEL"},
    };
    for (; *i < argc; ++*i) {
        const char *a = argv[*i];
        size_t len;
        if (!strcmp(a, "--")) {
            ++*i;
            return 0;
        }
        if (a[0] != '-' || a[1] == '\0')
            return 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 3;
        bool done = false;
        for (size_t m = 0; m < sizeof map / sizeof map[0] && !done; m++) {
            if (!is(a, map[m].shrt, map[m].lng, &len))
                continue;
            const char *v = value_of(argc, argv, i, a, len);
            if (!v || !*v)
                return bad(sub, "a value is needed after", a);
            if (ss_cmd_set(s, map[m].key, v))
                return bad(sub, "too many settings at", a);
            done = true;
        }
        if (done)
            continue;
        if (is(a, "-s", "--set", &len)) {
            const char *v = value_of(argc, argv, i, a, len);
            const char *eq = v ? strchr(v, '=') : NULL;
            if (!eq || !key_like(v, (size_t)(eq - v)))
                return bad(sub, "expected KEY=value after", a);
            char *key = strndup(v, (size_t)(eq - v));
            if (!key || ss_cmd_set(s, key, eq + 1))
                return bad(sub, "too many settings at", a);
        } else if (is(a, NULL, "--lib", &len)) {
            s->lib = value_of(argc, argv, i, a, len);
            if (!s->lib || !*s->lib)
                return bad(sub, "a path is needed after", a);
        } else if (is(a, "-d", "--duration", &len)) {
            const char *v = value_of(argc, argv, i, a, len);
            long long ms = v ? ss_cmd_parse_duration(v) : -1;
            if (ms <= 0)
                return bad(sub, "a duration (30, 30s, 500ms, 2m) is needed after", a);
            snprintf(s->duration, sizeof s->duration, "%lld", ms);
            if (ss_cmd_set(s, "STACKSHOT_DURATION", s->duration))
                return bad(sub, "too many settings at", a);
        } else if (strchr(extra, 't') && is(a, "-t", "--timeout", &len)) {
            const char *v = value_of(argc, argv, i, a, len);
            s->timeout_ms = v ? ss_cmd_parse_duration(v) : -1;
            if (s->timeout_ms <= 0)
                return bad(sub, "a duration (10, 10s, 500ms) is needed after", a);
        } else {
            return bad(sub, "unknown option", a);
        }
    }
    return 0;
}

static bool usable(const char *path) { return access(path, R_OK) == 0; }

int ss_cmd_find_lib(const ss_cmd_settings *s, char *out, size_t n) {
    const char *given = s->lib ? s->lib : getenv("STACKSHOT_LIB");
    if (given && *given) {
        if (!usable(given) || !realpath(given, out)) {
            fprintf(stderr, "stackshot: %s: %s\n", given, strerror(errno));
            return -1;
        }
        return 0;
    }
    /* next to the command: <prefix>/bin/stackshot -> <prefix>/<libdir>/;
     * in the build tree tools/stackshot/stackshot -> ../../ */
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "stackshot: cannot tell where this command is (%s); use --lib\n",
                strerror(errno));
        return -1;
    }
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    const char *rel[] = {"../" SS_CMD_LIBDIR, "../lib", "../.."};
    char cand[PATH_MAX + 64];
    for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++) {
        snprintf(cand, sizeof cand, "%s/%s/libstackshot.so", self, rel[k]);
        if (usable(cand) && realpath(cand, out) && strlen(out) < n)
            return 0;
    }
    fprintf(stderr, "stackshot: libstackshot.so not found next to %s (../%s/); use --lib "
                    "PATH or STACKSHOT_LIB\n", self, SS_CMD_LIBDIR);
    return -1;
}
