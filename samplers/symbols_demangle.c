/* symbols_demangle.c: C++ function names as namespace + name.
 *
 * Demangling uses the process's own C++ runtime. A process whose stacks
 * hold C++ functions has loaded libstdc++ (or libc++abi) already, so
 * __cxa_demangle is there to be found with dlsym; a pure C process has no
 * mangled names to demangle. This keeps a C++ runtime (and libiberty)
 * out of the agent. libstdc++ is never unloaded (it defines
 * STB_GNU_UNIQUE symbols, which make glibc mark it NODELETE), so the
 * pointer stays valid. When no runtime is loaded the mangled name is
 * kept as it is.
 *
 * The split walks the demangled text once, counting (), <>, [] and {}
 * so that "::" or spaces inside template arguments, parameter lists,
 * "(anonymous namespace)" or "{lambda(int)#1}" are not taken for scope
 * separators, and stepping over operator names ("operator<",
 * "operator()", "operator new[]", "operator std::string") whose
 * characters would otherwise look like brackets. */
#include "samplers/symbols_demangle.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);

static cxa_demangle_fn find_demangler(void) {
    void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    /* A runtime dlopen'ed RTLD_LOCAL is not in the global scope; ask for
     * it by name, without loading it (RTLD_NOLOAD). */
    static const char *const libs[] = {"libstdc++.so.6", "libc++abi.so.1",
                                       "libc++.so.1"};
    for (size_t i = 0; !f && i < sizeof libs / sizeof *libs; i++) {
        void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            f = dlsym(h, "__cxa_demangle");
            dlclose(h);
        }
    }
    cxa_demangle_fn fn;
    memcpy(&fn, &f, sizeof fn); /* object pointer to function pointer */
    return fn;
}

/* The resolver is single-threaded by contract; these are written only by
 * the sampler thread. */
static cxa_demangle_fn fn;
static bool looked;

void ss_demangle_reset(void) {
    if (!fn)
        looked = false; /* a dlopen may have brought a C++ runtime */
}

/* libstdc++'s demangler keeps its work arrays on the stack, about 100
 * bytes per character of the mangled name. The sampler thread's stack is
 * 1 MiB (agent/thread.c): longer names stay mangled rather than risk it. */
#define DEMANGLE_MAX 4096

char *ss_demangle(const char *mangled, bool refresh) {
    if (!mangled || strncmp(mangled, "_Z", 2) != 0 || strnlen(mangled, DEMANGLE_MAX) == DEMANGLE_MAX)
        return NULL;
    if (!looked || (refresh && !fn)) {
        fn = find_demangler();
        looked = true;
    }
    if (!fn)
        return NULL;
    int status = 0;
    char *out = fn(mangled, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- splitting ------------------------------------------------------ */

static bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$';
}

static const char op_chars[] = "+-*/%^&|~!=<>,";

/* If an operator name starts at s[i], return the index just past it;
 * else return i. */
static size_t skip_operator(const char *s, size_t i, size_t len) {
    if (i + 8 > len || strncmp(s + i, "operator", 8) != 0)
        return i;
    if (i > 0 && s[i - 1] != ':' && s[i - 1] != ' ')
        return i;
    size_t j = i + 8;
    if (j < len && is_ident(s[j]))
        return i; /* an identifier such as "operator_count" */
    while (j < len && s[j] == ' ')
        j++;
    if (j + 1 < len && ((s[j] == '(' && s[j + 1] == ')') ||
                        (s[j] == '[' && s[j + 1] == ']')))
        return j + 2;
    if (j < len && s[j] && strchr(op_chars, s[j])) {
        while (j < len && s[j] && strchr(op_chars, s[j]))
            j++;
        return j;
    }
    if (j + 1 < len && s[j] == '"' && s[j + 1] == '"') { /* operator"" _x */
        j += 2;
        while (j < len && s[j] == ' ')
            j++;
        while (j < len && is_ident(s[j]))
            j++;
        return j;
    }
    if ((len - j >= 3 && strncmp(s + j, "new", 3) == 0 &&
         (j + 3 == len || !is_ident(s[j + 3]))) ||
        (len - j >= 6 && strncmp(s + j, "delete", 6) == 0 &&
         (j + 6 == len || !is_ident(s[j + 6])))) {
        j += s[j] == 'n' ? 3 : 6;
        if (j + 1 < len && s[j] == '[' && s[j + 1] == ']')
            j += 2;
        return j;
    }
    /* A conversion operator: the type runs up to its parameter list. */
    int depth = 0;
    for (; j < len; j++) {
        char c = s[j];
        if (c == '<' || c == '[' || c == '{')
            depth++;
        else if ((c == '>' || c == ']' || c == '}') && depth > 0)
            depth--;
        else if (c == '(' && depth == 0)
            break;
    }
    return j;
}

static int depth_step(char c, int depth) {
    if (c == '(' || c == '<' || c == '[' || c == '{')
        return depth + 1;
    if ((c == ')' || c == '>' || c == ']' || c == '}') && depth > 0)
        return depth - 1;
    return depth;
}

/* Where the parameter list starts: the last top-level "(...)" group, or
 * len when there is none (a variable, "vtable for X"). */
static size_t params_start(const char *s, size_t len) {
    size_t at = len;
    int depth = 0;
    for (size_t i = 0; i < len;) {
        if (depth == 0) {
            size_t k = skip_operator(s, i, len);
            if (k != i) {
                i = k;
                continue;
            }
            if (s[i] == '(' && strncmp(s + i, "(anonymous namespace)", 21) != 0)
                at = i;
        }
        depth = depth_step(s[i], depth);
        i++;
    }
    return at;
}

static void copy_out(char *dst, size_t size, const char *src, size_t n) {
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void ss_cxx_split(const char *d, char *ns, size_t ns_size, char *name,
                  size_t name_size) {
    size_t len = params_start(d, strlen(d));
    size_t start = 0;                  /* past the return type, if any */
    size_t colon = SIZE_MAX;           /* last top-level "::" after start */
    int depth = 0;
    for (size_t i = 0; i < len;) {
        if (depth == 0) {
            size_t k = skip_operator(d, i, len);
            if (k != i) {
                i = k;
                continue;
            }
            if (d[i] == ' ') {
                start = i + 1;
                colon = SIZE_MAX;
            } else if (d[i] == ':' && i + 1 < len && d[i + 1] == ':') {
                colon = i;
                i += 2;
                continue;
            }
        }
        depth = depth_step(d[i], depth);
        i++;
    }
    if (colon == SIZE_MAX) {
        copy_out(ns, ns_size, "global", 6);
        copy_out(name, name_size, d + start, len - start);
    } else {
        copy_out(ns, ns_size, d + start, colon - start);
        copy_out(name, name_size, d + colon + 2, len - colon - 2);
    }
    if (!name[0])
        copy_out(name, name_size, "unknown", 7);
}
