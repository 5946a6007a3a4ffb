/* config.c: every setting, read once at start.
 *
 * The environment is the interface; a JVMTI option string may set the same
 * keys and wins over the environment. A bad value never stops the host
 * program: it gets one line ("stackshot: KEY=value: why; what instead") and
 * the default is used. */
#include "agent/config.h"
#include "agent/enabled.h"
#include "agent/exporter.h"
#include "agent/log.h"
#include "agent/ms_keys.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The keys of the core, the samplers and the JVMTI agent. Each exporter's
 * keys are in its row of the exporter table (exporters/registry.c). The
 * option string is checked against both, so that a typo gets a line. */
static const char *const core_keys[] = {
    "SPLUNK_PROFILER_ENABLED",
    "OTEL_SDK_DISABLED",
    "SPLUNK_PROFILER_CALL_STACK_INTERVAL",
    "SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS",
    "STACKSHOT_OUTPUT_DIR",
    "STACKSHOT_OUTPUT_MAX_BYTES", /* exporters/common/output.c */
    "STACKSHOT_OUTPUT_KEEP",
    "STACKSHOT_OUTPUT_MAX_AGE",
    "STACKSHOT_OUTPUT_MAX_TOTAL",
    "STACKSHOT_OUTPUT_KEEP_PERIODS", /* exporters/profiles/files_exporter.c */
    "STACKSHOT_EXPORTERS",
    "STACKSHOT_MAX_DEPTH",
    "STACKSHOT_MAX_MEMORY",
    "STACKSHOT_LOG_LEVEL",
    "STACKSHOT_LOG_FILE",
    "STACKSHOT_SIGNAL",
    "STACKSHOT_SIGNAL_TIMEOUT",
    "STACKSHOT_UNWIND",
    "STACKSHOT_STACK_COPY",
    "STACKSHOT_SHUTDOWN_TIMEOUT",
    "STACKSHOT_CORE", /* read by the loader (loader/loader.c) */
    "STACKSHOT_SYMBOLS_DEBUGINFO",
    "STACKSHOT_SYMBOLS_CACHE",
    "STACKSHOT_JVMTI_STACKS",
    "STACKSHOT_MAX_VIRTUAL_THREADS",
    "STACKSHOT_JVMTI_REFRESH",
    "STACKSHOT_DURATION", /* read by the samplers at their start */
    NULL,
};

static bool in_list(const char *const *list, const char *key) {
    for (const char *const *k = list; k && *k; k++)
        if (strcasecmp(*k, key) == 0)
            return true;
    return false;
}

bool ss_config_known_key(const char *key) {
    if (in_list(core_keys, key))
        return true;
    for (const ss_exporter_def *e = ss_exporter_table; e->name; e++)
        if (in_list(e->keys, key))
            return true;
    return false;
}

/* ---- the option string ------------------------------------------- */

#define MAX_OPTIONS 64

static struct {
    char *copy; /* the option string, split in place */
    const char *key[MAX_OPTIONS];
    const char *value[MAX_OPTIONS];
    int n;
} options;

/* Does `p` start a new "KEY=value" pair? Values may contain commas (OTEL
 * headers "k1=v1,k2=v2", resource attributes, exporter lists), so a comma
 * splits only before something shaped like an environment variable name:
 * an upper-case identifier (or a known key in any case) followed by '='.
 * Header and attribute keys are lower-case by convention and stay inside
 * their value. */
static bool starts_pair(const char *p) {
    const char *eq = strchr(p, '=');
    if (!eq || eq == p || eq - p > 127)
        return false;
    char key[128];
    memcpy(key, p, (size_t)(eq - p));
    key[eq - p] = '\0';
    if (ss_config_known_key(key))
        return true;
    if (!isupper((unsigned char)key[0]))
        return false;
    for (const char *k = key; *k; k++)
        if (!isupper((unsigned char)*k) && !isdigit((unsigned char)*k) && *k != '_')
            return false;
    return true;
}

int ss_config_set_options(const char *s) {
    free(options.copy);
    memset(&options, 0, sizeof options);
    if (!s || !*s)
        return 0;
    options.copy = strdup(s);
    if (!options.copy) {
        ss_error("option string: out of memory; ignoring the options");
        return 1;
    }
    int problems = 0;
    char *p = options.copy;
    while (p && *p) {
        /* find the comma that starts the next known pair */
        char *next = NULL;
        for (char *c = strchr(p, ','); c; c = strchr(c + 1, ','))
            if (starts_pair(c + 1)) {
                next = c;
                break;
            }
        if (next)
            *next++ = '\0';
        char *eq = strchr(p, '=');
        if (*p == '\0') {
            /* empty item between commas: harmless */
        } else if (!eq || eq == p) {
            ss_error("option '%s': expected key=value; ignoring it", p);
            problems++;
        } else {
            *eq = '\0';
            if (!ss_config_known_key(p)) {
                ss_error("option '%s': unknown key; ignoring it", p);
                problems++;
            } else if (options.n == MAX_OPTIONS) {
                ss_error("option '%s': more than %d options; ignoring it", p,
                         MAX_OPTIONS);
                problems++;
            } else {
                options.key[options.n] = p;
                options.value[options.n] = eq + 1;
                options.n++;
            }
        }
        p = next;
    }
    return problems;
}

/* The environment as it was at load, when the loader saved it (a server
 * may clear or rewrite its environment before the agent starts: nginx's
 * workers keep only TZ); else the process's environment now. */
static char *const *env_at_load;

void ss_env_set_snapshot(char *const *env) { env_at_load = env; }

char *const *ss_env_all(void) {
    extern char **environ;
    return env_at_load ? env_at_load : environ;
}

const char *ss_env(const char *key) {
    if (!env_at_load)
        return getenv(key);
    size_t n = strlen(key);
    for (char *const *e = env_at_load; *e; e++)
        if (strncmp(*e, key, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

const char *ss_config_raw(const char *key) {
    for (int i = options.n - 1; i >= 0; i--)
        if (strcasecmp(options.key[i], key) == 0)
            return options.value[i];
    return ss_env(key);
}

/* ---- typed readers ----------------------------------------------- */

/* A bad value is shown in its line, except what follows a comma when a
 * "k=v" comes after it: that is another setting swallowed by this one (an
 * option string "A=x,OTEL_EXPORTER_OTLP_HEADERS x-sf-token=..." whose
 * second item is not split off), and its value may be a token. */
void ss_config_bad(const char *key, const char *value, const char *why,
                   const char *fallback) {
    const char *comma = strchr(value, ',');
    if (comma && strchr(comma, '='))
        ss_error("%s=%.*s,... (rest not shown): %s; %s", key, (int)(comma - value), value,
                 why, fallback);
    else
        ss_error("%s=%s: %s; %s", key, value, why, fallback);
}

static bool blank(const char *s) {
    while (*s && isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

bool ss_config_bool(const char *key, bool def) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return def;
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return true;
        if (strcasecmp(v, no[i]) == 0)
            return false;
    }
    ss_config_bad(key, v, "not a boolean (true or false)",
                  def ? "using true" : "using false");
    return def;
}

int64_t ss_config_int(const char *key, int64_t def, int64_t min, int64_t max) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return def;
    char fallback[64];
    snprintf(fallback, sizeof fallback, "using %lld", (long long)def);
    errno = 0;
    char *end;
    long long n = strtoll(v, &end, 10);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (end == v || *end != '\0') {
        ss_config_bad(key, v, "not an integer", fallback);
        return def;
    }
    if (errno == ERANGE || n < min || n > max) {
        char why[96];
        snprintf(why, sizeof why, "out of range [%lld, %lld]", (long long)min,
                 (long long)max);
        ss_config_bad(key, v, why, fallback);
        return def;
    }
    return n;
}

/* A key the loader reads too (agent/ms_keys.h): its parser, the lines of
 * ss_config_int. */
static uint32_t config_ms(const char *key, uint32_t def, uint32_t min, uint32_t max) {
    const char *v = ss_config_raw(key);
    uint32_t ms = def;
    int rc = ss_ms_parse(v, min, max, &ms);
    if (rc == -EINVAL || rc == -ERANGE) {
        char fallback[64], why[96];
        snprintf(fallback, sizeof fallback, "using %u", def);
        snprintf(why, sizeof why, "out of range [%u, %u]", min, max);
        ss_config_bad(key, v, rc == -EINVAL ? "not an integer" : why, fallback);
    }
    return rc == 0 ? ms : def;
}

uint64_t ss_config_size(const char *key, uint64_t def, uint64_t min,
                        uint64_t max) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return def;
    char fallback[64];
    snprintf(fallback, sizeof fallback, "using %llu bytes",
             (unsigned long long)def);
    errno = 0;
    char *end;
    if (*v == '-') {
        ss_config_bad(key, v, "negative size", fallback);
        return def;
    }
    unsigned long long n = strtoull(v, &end, 10);
    if (end == v || errno == ERANGE) {
        ss_config_bad(key, v, "not a size (bytes, or with K, M, G)", fallback);
        return def;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0') {
        ss_config_bad(key, v, "not a size (bytes, or with K, M, G)", fallback);
        return def;
    }
    if (shift && n > (UINT64_MAX >> shift)) {
        ss_config_bad(key, v, "too large", fallback);
        return def;
    }
    uint64_t bytes = (uint64_t)n << shift;
    if (bytes < min || bytes > max) {
        char why[96];
        snprintf(why, sizeof why, "out of range [%llu, %llu] bytes",
                 (unsigned long long)min, (unsigned long long)max);
        ss_config_bad(key, v, why, fallback);
        return def;
    }
    return bytes;
}

const char *ss_config_str(const char *key, const char *def) {
    const char *v = ss_config_raw(key);
    return (v && !blank(v)) ? v : def;
}

/* ---- signals ------------------------------------------------------ */

int ss_parse_signal(const char *s) {
    if (!s || !*s)
        return -1;
    if (isdigit((unsigned char)*s)) {
        char *end;
        long n = strtol(s, &end, 10);
        if (*end || n < 1 || n > SIGRTMAX)
            return -1;
        return (int)n;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (int sig = 1; sig < SIGRTMIN; sig++) {
        const char *abbrev = sigabbrev_np(sig); /* "PROF", "USR2", ... */
        if (abbrev && strcasecmp(s, abbrev) == 0)
            return sig;
    }
    int base, dir;
    if (strncasecmp(s, "RTMIN", 5) == 0) {
        base = SIGRTMIN;
        dir = 1;
    } else if (strncasecmp(s, "RTMAX", 5) == 0) {
        base = SIGRTMAX;
        dir = -1;
    } else {
        return -1;
    }
    s += 5;
    if (*s == '\0')
        return base;
    if ((dir > 0 && *s != '+') || (dir < 0 && *s != '-'))
        return -1;
    char *end;
    long off = strtol(s + 1, &end, 10);
    if (*end || end == s + 1 || off < 0 || off > SIGRTMAX - SIGRTMIN)
        return -1;
    return base + dir * (int)off;
}

/* Signals the agent refuses: the ones that stop, kill or are needed to
 * report crashes, and the ones the process cannot catch. */
static bool signal_usable(int sig) {
    switch (sig) {
    case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGFPE:
    case SIGILL: case SIGABRT: case SIGTRAP: case SIGSYS: case SIGCHLD:
    case SIGINT: case SIGTERM: case SIGQUIT: case SIGHUP: case SIGPIPE:
    case SIGTSTP: case SIGTTIN: case SIGTTOU: case SIGCONT: case SIGALRM:
        return false;
    default:
        return sig > 0 && sig <= SIGRTMAX;
    }
}

/* ---- the core keys ------------------------------------------------ */

const ss_exporter_def *ss_exporter_by_name(const char *name, size_t n) {
    for (const ss_exporter_def *e = ss_exporter_table; e->name; e++)
        if (strlen(e->name) == n && strncasecmp(name, e->name, n) == 0)
            return e;
    return NULL;
}

uint32_t ss_exporter_bit(const char *name) {
    const ss_exporter_def *e = ss_exporter_by_name(name, strlen(name));
    return e ? 1u << (e - ss_exporter_table) : 0;
}

/* OTLP call-stack logs are what the seed agents ship by default; a user
 * with no collector asks for local files with STACKSHOT_EXPORTERS=text. */
#define DEFAULT_EXPORTER "otlp_logs"

/* "text, otlp_logs, ..., none": the names a user may write. */
static void known_exporters(char *out, size_t n) {
    size_t len = 0;
    out[0] = '\0';
    for (const ss_exporter_def *e = ss_exporter_table; e->name && len < n; e++) {
        int w = snprintf(out + len, n - len, "%s, ", e->name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len < n)
        snprintf(out + len, n - len, "none");
}

/* A comma list of exporter names. Unknown names are reported and skipped;
 * a list with no known name at all falls back to the default, in one line. */
/* STACKSHOT_EXPORTERS. A name that is not an exporter is a mistake: it
 * is left out (one line), never replaced by the default, whose destination
 * the user did not choose; with nothing left (and `none` not said)
 * *nothing is set and the agent does not start. */
static uint32_t parse_exporters(const char *key, bool *nothing) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return ss_exporter_bit(DEFAULT_EXPORTER);
    uint32_t bits = 0;
    bool none = false;
    char unknown[256] = "";
    size_t n_unknown = 0;
    for (const char *p = v; *p;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == 0)
            break;
        const ss_exporter_def *e = ss_exporter_by_name(p, n);
        if (e)
            bits |= 1u << (e - ss_exporter_table);
        else if (n == 4 && strncasecmp(p, "none", 4) == 0)
            none = true;
        else if (n_unknown++ == 0)
            snprintf(unknown, sizeof unknown, "%.*s", (int)n, p);
        p += n;
    }
    if (n_unknown) {
        char known[256], why[600];
        known_exporters(known, sizeof known);
        snprintf(why, sizeof why, "unknown exporter '%s' (known: %s)", unknown, known);
        ss_config_bad(key, v, why,
                      bits || none ? "ignoring the unknown names"
                                   : "no exporter left: the agent stays off");
    }
    *nothing = !bits && !none;
    for (const ss_exporter_def *e = ss_exporter_table; e->name; e++)
        if (e->with && (bits & ss_exporter_bit(e->with)))
            bits |= 1u << (e - ss_exporter_table);
    return bits;
}

/* Each selected exporter whose row can check its destination (an OTLP
 * endpoint or protocol that does not parse) and finds it unusable is left
 * out: it has said why in one line. */
static uint32_t check_destinations(uint32_t bits) {
    for (int i = 0; ss_exporter_table[i].name && i < 32; i++)
        if ((bits & (1u << i)) && ss_exporter_table[i].check &&
            ss_exporter_table[i].check() != 0)
            bits &= ~(1u << i);
    return bits;
}

static ss_log_level parse_log_level(const char *key, ss_log_level def) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return def;
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i < 5; i++)
        if (strcasecmp(v, names[i]) == 0)
            return (ss_log_level)i;
    if (strcasecmp(v, "warning") == 0)
        return SS_LOG_WARN;
    ss_config_bad(key, v, "not a log level (off, error, warn, info, debug)",
                  "using info");
    return def;
}

static int parse_signal_key(const char *key, int def) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v))
        return def;
    int sig = ss_parse_signal(v);
    if (sig < 0) {
        ss_config_bad(key, v,
                      "not a signal (a name like SIGPROF, SIGRTMIN+5, "
                      "SIGRTMAX-3, or a number)",
                      "using SIGRTMAX-3");
        return def;
    }
    if (!signal_usable(sig)) {
        ss_config_bad(key, v,
                      "that signal stops, kills or reports errors in the "
                      "process",
                      "using SIGRTMAX-3");
        return def;
    }
    /* 32 and 33 (below glibc's SIGRTMIN) are the C library's own: thread
     * cancellation and set*id broadcasts; sigaction refuses them */
    if (sig > 31 && sig < SIGRTMIN) {
        ss_config_bad(key, v, "reserved by the C library (below SIGRTMIN)",
                      "using SIGRTMAX-3");
        return def;
    }
    return sig;
}

/* A template: %u is expanded with the effective uid when a file is
 * created (exporters/output.c), so workers that dropped privileges write
 * where they may. A '%' in TMPDIR is kept as one. */
static void default_output_dir(char *out, size_t n) {
    const char *tmp = ss_env("TMPDIR");
    if (!tmp || tmp[0] != '/')
        tmp = "/tmp";
    size_t len = 0;
    for (; *tmp && len + 2 < n - 16; tmp++) {
        if (*tmp == '%')
            out[len++] = '%';
        out[len++] = *tmp;
    }
    snprintf(out + len, n - len, "/stackshot-%%u");
}

static void parse_output_dir(const char *key, char *out, size_t n) {
    const char *v = ss_config_raw(key);
    if (!v || blank(v)) {
        default_output_dir(out, n);
        return;
    }
    if (strlen(v) >= n - 64) {
        char fallback[1100];
        default_output_dir(out, n);
        snprintf(fallback, sizeof fallback, "using %s", out);
        ss_config_bad(key, v, "path too long", fallback);
        return;
    }
    snprintf(out, n, "%s", v);
}

void ss_config_load(ss_config *c) {
    memset(c, 0, sizeof *c);
    c->log_level = parse_log_level("STACKSHOT_LOG_LEVEL", SS_LOG_INFO);
    ss_log_set_level(c->log_level);
    ss_log_set_file(ss_config_raw("STACKSHOT_LOG_FILE"));
    char why[256];
    ss_enabled on = ss_enabled_decide(ss_config_raw("SPLUNK_PROFILER_ENABLED"),
                                      ss_config_raw("OTEL_SDK_DISABLED"), why, sizeof why);
    if (on == SS_ENABLED_BAD_VALUE) /* said as every bad value is (a swallowed
                                       option after a comma is not shown) */
        ss_config_bad("SPLUNK_PROFILER_ENABLED", ss_config_raw("SPLUNK_PROFILER_ENABLED"),
                      "only true turns the agent on", "the agent stays off");
    else if (on == SS_ENABLED_SDK_DISABLED)
        ss_error("%s", why);
    c->enabled = on == SS_ENABLED_ON;
    c->interval_ms = config_ms(SS_INTERVAL_KEY, SS_INTERVAL_DEFAULT_MS, SS_INTERVAL_MIN_MS,
                               SS_INTERVAL_MAX_MS);
    c->include_internal =
        ss_config_bool("SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS", false);
    parse_output_dir("STACKSHOT_OUTPUT_DIR", c->output_dir, sizeof c->output_dir);
    c->exporters = parse_exporters("STACKSHOT_EXPORTERS", &c->nothing_to_run);
    if (c->exporters) {
        c->exporters = check_destinations(c->exporters);
        if (!c->exporters) {
            ss_error("no exporter has a usable destination: the agent stays off");
            c->nothing_to_run = true;
        }
    }
    if (c->nothing_to_run)
        c->enabled = false;
    c->max_depth = (uint32_t)ss_config_int("STACKSHOT_MAX_DEPTH", 1024, 1, 65536);
    c->max_memory = ss_config_size("STACKSHOT_MAX_MEMORY", 64ull << 20, 1ull << 20,
                                   16ull << 30);
    c->signal = parse_signal_key("STACKSHOT_SIGNAL", SIGRTMAX - 3);
    c->shutdown_ms = config_ms(SS_SHUTDOWN_KEY, SS_SHUTDOWN_DEFAULT_MS, SS_SHUTDOWN_MIN_MS,
                               SS_SHUTDOWN_MAX_MS);
    c->answer_ms = (uint32_t)ss_config_int("STACKSHOT_SIGNAL_TIMEOUT", 100, 1, 10000);
}
