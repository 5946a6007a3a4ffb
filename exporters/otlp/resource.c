/* resource.c: the OTLP resource of this process.
 *
 * What the user says (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) wins
 * over what the agent detects. telemetry.sdk.language is "cpp": the agent
 * is C, which has no well-known value; "cpp" is the registry's nearest
 * native-code value, and backends group and display it correctly, where a
 * custom string ("c") would show up as unknown. */
#include "agent/config.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/version.h"
#include "exporters/otlp/otlp.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ss_attrs_free(ss_attr *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(list[i].key);
        free(list[i].str);
    }
    free(list);
}

static int attr_add(ss_attr **list, size_t *n, const char *key, size_t klen,
                    const char *str, int64_t i, ss_attr_type type) {
    ss_attr *grown = realloc(*list, (*n + 1) * sizeof **list);
    if (!grown)
        return -ENOMEM;
    *list = grown;
    ss_attr *a = &grown[*n];
    memset(a, 0, sizeof *a);
    a->key = strndup(key, klen);
    a->type = type;
    a->i = i;
    if (type == SS_ATTR_STRING)
        a->str = strdup(str ? str : "");
    if (!a->key || (type == SS_ATTR_STRING && !a->str)) {
        free(a->key);
        free(a->str);
        return -ENOMEM;
    }
    /* /proc/self/cmdline, host names, user input: any bytes */
    ss_utf8_fix(a->key, strlen(a->key));
    if (a->str)
        ss_utf8_fix(a->str, strlen(a->str));
    (*n)++;
    return 0;
}

static void trim(const char **b, const char **e) {
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

int ss_otlp_parse_resource_attributes(const char *s, ss_attr **list, size_t *n) {
    ss_attr *out = NULL;
    size_t count = 0;
    const char *p = s;
    int rc = 0;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *b = p, *e = end;
        p = *end ? end + 1 : end;
        trim(&b, &e);
        if (b == e)
            continue;
        const char *eq = memchr(b, '=', (size_t)(e - b));
        if (!eq) {
            rc = -EINVAL;
            break;
        }
        const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
        trim(&kb, &ke);
        trim(&vb, &ve);
        char kbuf[256], *vbuf = malloc((size_t)(ve - vb) + 1);
        if (!vbuf) {
            rc = -ENOMEM;
            break;
        }
        int kn = ke == kb ? -1 : ss_otlp_percent_decode(kb, (size_t)(ke - kb), kbuf, sizeof kbuf);
        int vn = ss_otlp_percent_decode(vb, (size_t)(ve - vb), vbuf, (size_t)(ve - vb) + 1);
        /* "%00" would cut a C string short (a key "%00x" would become an
         * empty key): a NUL decoded anywhere is a decoding error */
        if (kn <= 0 || vn < 0 || strlen(kbuf) != (size_t)kn || strlen(vbuf) != (size_t)vn) {
            free(vbuf);
            rc = -EINVAL;
            break;
        }
        /* Invalid UTF-8 becomes '?' (attr_add) before keys are compared:
         * two keys that differ only in invalid bytes are the same key
         * once sent, and a resource must not carry a key twice. */
        ss_utf8_fix(kbuf, (size_t)kn);
        /* a repeated key: the last one wins */
        size_t j;
        for (j = 0; j < count && strcmp(out[j].key, kbuf) != 0; j++)
            ;
        if (j < count) {
            /* the replacing value is fixed too (it used to go out as is) */
            ss_utf8_fix(vbuf, (size_t)vn);
            free(out[j].str);
            out[j].str = vbuf;
            continue;
        }
        rc = attr_add(&out, &count, kbuf, strlen(kbuf), vbuf, 0, SS_ATTR_STRING);
        free(vbuf);
        if (rc != 0)
            break;
    }
    if (rc != 0) {
        ss_attrs_free(out, count);
        return rc;
    }
    *list = out;
    *n = count;
    return 0;
}

const ss_attr *ss_otlp_resource_get(const ss_otlp_resource *r, const char *key) {
    for (size_t i = 0; i < r->n_attrs; i++)
        if (strcmp(r->attrs[i].key, key) == 0)
            return &r->attrs[i];
    return NULL;
}

/* Add unless the user already set that key. */
static int detected(ss_otlp_resource *r, const char *key, const char *str) {
    if (ss_otlp_resource_get(r, key) || !str || !*str)
        return 0;
    return attr_add(&r->attrs, &r->n_attrs, key, strlen(key), str, 0, SS_ATTR_STRING);
}

static int detected_int(ss_otlp_resource *r, const char *key, int64_t v) {
    if (ss_otlp_resource_get(r, key))
        return 0;
    return attr_add(&r->attrs, &r->n_attrs, key, strlen(key), NULL, v, SS_ATTR_INT);
}

static int set_service_name(ss_otlp_resource *r) {
    const char *svc = ss_config_str("OTEL_SERVICE_NAME", NULL);
    ss_attr *have = (ss_attr *)ss_otlp_resource_get(r, "service.name");
    if (svc) {
        if (have) {
            char *copy = strdup(svc);
            if (!copy)
                return -ENOMEM;
            ss_utf8_fix(copy, strlen(copy));
            free(have->str);
            have->str = copy;
            return 0;
        }
        return detected(r, "service.name", svc);
    }
    if (have)
        return 0;
    const ss_process_info *p = ss_process();
    char name[300];
    snprintf(name, sizeof name, "unknown_service%s%s", p->exe_name[0] ? ":" : "",
             p->exe_name);
    return detected(r, "service.name", name);
}

static int add_detected(ss_otlp_resource *r) {
    const ss_process_info *p = ss_process();
    int rc = 0;
    rc |= set_service_name(r);
    rc |= detected_int(r, "process.pid", p->pid);
    rc |= detected(r, "process.executable.name", p->exe_name);
    rc |= detected(r, "process.executable.path", p->exe_path);
    rc |= detected(r, "process.command_line", p->command_line);
    /* what the source said of its runtime ("" adds nothing: a native process) */
    rc |= detected(r, "process.runtime.name", p->runtime_name);
    rc |= detected(r, "process.runtime.version", p->runtime_version);
    rc |= detected(r, "process.runtime.description", p->runtime_description);
    rc |= detected(r, "host.name", p->host_name);
    rc |= detected(r, "telemetry.sdk.name", SS_NAME);
    rc |= detected(r, "telemetry.sdk.language", "cpp");
    rc |= detected(r, "telemetry.sdk.version", SS_VERSION);
    rc |= detected(r, "telemetry.distro.name", SS_NAME);
    rc |= detected(r, "telemetry.distro.version", SS_VERSION);
    return rc ? -ENOMEM : 0;
}

int ss_otlp_resource_build(ss_otlp_resource *r) {
    memset(r, 0, sizeof *r);
    const char *env = ss_config_str("OTEL_RESOURCE_ATTRIBUTES", NULL);
    if (env) {
        int rc = ss_otlp_parse_resource_attributes(env, &r->attrs, &r->n_attrs);
        if (rc == -ENOMEM)
            return rc;
        /* one line per process: every OTLP exporter and the process
         * context (OTEP 4719) build the same resource */
        static atomic_bool said;
        if (rc != 0 && !atomic_exchange(&said, true))
            ss_config_bad("OTEL_RESOURCE_ATTRIBUTES", env,
                          "not a list of key=value with percent-encoded values",
                          "ignoring the whole variable");
    }
    int rc = add_detected(r);
    if (rc != 0)
        ss_otlp_resource_free(r);
    return rc;
}

void ss_otlp_resource_free(ss_otlp_resource *r) {
    ss_attrs_free(r->attrs, r->n_attrs);
    memset(r, 0, sizeof *r);
}
