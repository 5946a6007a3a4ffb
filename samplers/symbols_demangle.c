/* symbols_demangle.c: C++ function names as namespace + name.
 *
 * Demangling: the agent's own Itanium C++ ABI demangler first (below), for
 * the subset compilers emit for ordinary code (nested names, templates,
 * function parameters, qualifiers, pointers and references, substitutions,
 * operator names, constructors and destructors, local names, lambdas,
 * clone suffixes). It works in a fixed buffer on the caller's stack: no
 * allocation but the one for the result. A name it does not cover (an
 * expression in a template argument, decltype, a vector type...) is not
 * guessed at: then the process's own C++ runtime is asked, if one is
 * loaded (__cxa_demangle of libstdc++ or libc++abi, found with dlsym; the
 * agent links no C++ runtime), and failing that the mangled name is kept.
 * The runtime alone was not enough: a JVM whose libjvm links libstdc++
 * statically (Temurin's) loads no C++ runtime, so its C++ frames stayed
 * mangled. libstdc++ is never unloaded (it defines STB_GNU_UNIQUE
 * symbols, which make glibc mark it NODELETE), so the pointer stays
 * valid.
 *
 * The split walks the demangled text once, counting (), <>, [] and {}
 * so that "::" or spaces inside template arguments, parameter lists,
 * "(anonymous namespace)" or "{lambda(int)#1}" are not taken for scope
 * separators, and stepping over operator names ("operator<",
 * "operator()", "operator new[]", "operator std::string") whose
 * characters would otherwise look like brackets. */
#include "samplers/symbols_demangle.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
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
 * 1 MiB (agent/thread.c): longer names stay mangled rather than risk it.
 * The agent's own demangler takes 25 KiB of stack (its state), plus at
 * most 4 saved argument lists of 2.8 KiB and 48 levels of small frames:
 * about 65 KiB at worst. */
#define DEMANGLE_MAX 4096

/* ---- the agent's own demangler --------------------------------------
 *
 * Itanium C++ ABI ("_Z" names), written from the ABI's grammar. The
 * output is what binutils' c++filt prints for the same name (the tests
 * compare with it). Each parse step returns false when it meets a
 * construct it does not handle: the caller then keeps the mangled name
 * (or asks the runtime), never a guess.
 *
 * Types are kept in three parts so that a declarator can go inside them:
 * "void (*)(int)" is l "void", d "*", r "(int)"; "int (&) [3]" is l
 * "int", d "&", r "[3]". A plain type has only l. Every text lives in one
 * pool on the caller's stack; a combination copies its parts (the names
 * are short, the copies cheap) and running out of pool is a failure. */

/* Sizes: every libjvm name of OpenJDK 17 and Temurin 25 fits in half the
 * pool and a quarter of the candidates; a name that does not is declined.
 * The whole state is about 25 KiB of stack. */
#define DM_POOL 16384
#define DM_SUBS 128
#define DM_TARGS 64
#define DM_DEPTH 48
#define DM_NESTED 4 /* encodings inside encodings (each saves the arguments) */

typedef struct {
    uint32_t off, len;
} dm_str;

enum { DM_PLAIN, DM_FUNC, DM_ARRAY };

typedef struct {
    uint8_t kind;
    dm_str l, d, r; /* a name is an l */
    dm_str ident;   /* a name's last identifier: what a constructor is called */
    uint8_t tparam; /* a template parameter as such: its index + 1 */
    bool dep;       /* built while a template parameter was read */
    int epoch;      /* (a candidate) the encoding it was read in */
} dm_node;

typedef struct {
    dm_node n;
    bool targs;     /* the name ends with template arguments */
    bool no_return; /* constructor, destructor, conversion: no return type */
    dm_str quals;   /* a member function's " const", " &" */
} dm_name;

typedef struct {
    const char *p, *end;
    size_t used;
    int depth;
    int nsubs, ntargs;
    int epoch, epochs;  /* the current encoding; encodings so far */
    int nested;         /* encodings open inside the outermost */
    dm_str enc_name;    /* the last encoding read: its name, */
    bool enc_scoped;    /* and whether it was a nested name (N...E) */
    unsigned tparams;   /* template parameters read so far */
    int first_read;     /* candidates before the first read in this type */
    dm_node subs[DM_SUBS];
    dm_node targs[DM_TARGS];
    char pool[DM_POOL];
} dm_state;

static char dm_peek(const dm_state *s, size_t k) {
    return s->p + k < s->end ? s->p[k] : '\0';
}

static bool dm_eat(dm_state *s, char c) {
    if (dm_peek(s, 0) != c)
        return false;
    s->p++;
    return true;
}

/* -- building texts: put pieces at the pool's end, then take them as one */

static bool dm_put(dm_state *s, const char *t, size_t n) {
    if (n > DM_POOL - s->used)
        return false;
    memmove(s->pool + s->used, t, n); /* t may be in the pool */
    s->used += n;
    return true;
}

static bool dm_puts(dm_state *s, const char *t) {
    return dm_put(s, t, strlen(t));
}

static bool dm_puts_str(dm_state *s, dm_str x) {
    return dm_put(s, s->pool + x.off, x.len);
}

static dm_str dm_take(const dm_state *s, size_t mark) {
    dm_str r = {(uint32_t)mark, (uint32_t)(s->used - mark)};
    return r;
}

static bool dm_ends_with(const dm_state *s, dm_str x, char c) {
    return x.len > 0 && s->pool[x.off + x.len - 1] == c;
}

/* a + sep + b, as a new text */
static bool dm_cat(dm_state *s, dm_str a, const char *sep, dm_str b, dm_str *out) {
    size_t m = s->used;
    if (!dm_puts_str(s, a) || !dm_puts(s, sep) || !dm_puts_str(s, b))
        return false;
    *out = dm_take(s, m);
    return true;
}

static bool dm_text(dm_state *s, const char *t, dm_str *out) {
    size_t m = s->used;
    if (!dm_puts(s, t))
        return false;
    *out = dm_take(s, m);
    return true;
}

/* A whole type as one text. */
static bool dm_put_type(dm_state *s, const dm_node *t) {
    if (!dm_puts_str(s, t->l))
        return false;
    if (t->kind == DM_PLAIN)
        return true;
    if (!dm_puts(s, " "))
        return false;
    if (t->d.len && (!dm_puts(s, "(") || !dm_puts_str(s, t->d) || !dm_puts(s, ")") ||
                     (t->kind == DM_ARRAY && !dm_puts(s, " "))))
        return false;
    return dm_puts_str(s, t->r);
}

static bool dm_type_text(dm_state *s, const dm_node *t, dm_str *out) {
    size_t m = s->used;
    if (!dm_put_type(s, t))
        return false;
    *out = dm_take(s, m);
    return true;
}

static void dm_plain(dm_node *n, dm_str text, dm_str ident) {
    memset(n, 0, sizeof *n);
    n->kind = DM_PLAIN;
    n->l = text;
    n->ident = ident;
}

static bool dm_add_sub(dm_state *s, const dm_node *n) {
    if (s->nsubs == DM_SUBS)
        return false;
    s->subs[s->nsubs] = *n;
    s->subs[s->nsubs++].epoch = s->epoch;
    return true;
}

static bool dm_number(dm_state *s, size_t *out) {
    size_t v = 0;
    if (!isdigit((unsigned char)dm_peek(s, 0)))
        return false;
    while (isdigit((unsigned char)dm_peek(s, 0))) {
        v = v * 10 + (size_t)(*s->p++ - '0');
        if (v > DEMANGLE_MAX)
            return false;
    }
    *out = v;
    return true;
}

/* "_" -> 0, "<n>_" -> n + 1 (decimal: discriminators, lambda numbers) */
static bool dm_index(dm_state *s, size_t *out) {
    size_t v = 0;
    if (!dm_eat(s, '_')) {
        if (!dm_number(s, &v) || !dm_eat(s, '_'))
            return false;
        v++;
    }
    *out = v;
    return true;
}

static bool dm_source_name(dm_state *s, dm_str *out) {
    size_t n;
    if (!dm_number(s, &n) || n == 0 || n > (size_t)(s->end - s->p))
        return false;
    const char *id = s->p;
    s->p += n;
    if (n >= 10 && strncmp(id, "_GLOBAL__N", 10) == 0)
        return dm_text(s, "(anonymous namespace)", out);
    size_t m = s->used;
    if (!dm_put(s, id, n))
        return false;
    *out = dm_take(s, m);
    return true;
}

static bool dm_type(dm_state *s, dm_node *out);
static bool dm_name_(dm_state *s, dm_name *out, bool top);
static bool dm_encoding(dm_state *s, dm_str *out, bool nested, bool local);

/* -- operators */

static const struct {
    char code[3];
    const char *text;
} dm_ops[] = {
    {"nw", "new"}, {"na", "new[]"}, {"dl", "delete"}, {"da", "delete[]"},
    {"ps", "+"}, {"ng", "-"}, {"ad", "&"}, {"de", "*"}, {"co", "~"},
    {"pl", "+"}, {"mi", "-"}, {"ml", "*"}, {"dv", "/"}, {"rm", "%"},
    {"an", "&"}, {"or", "|"}, {"eo", "^"}, {"aS", "="}, {"pL", "+="},
    {"mI", "-="}, {"mL", "*="}, {"dV", "/="}, {"rM", "%="}, {"aN", "&="},
    {"oR", "|="}, {"eO", "^="}, {"ls", "<<"}, {"rs", ">>"}, {"lS", "<<="},
    {"rS", ">>="}, {"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"gt", ">"},
    {"le", "<="}, {"ge", ">="}, {"ss", "<=>"}, {"nt", "!"}, {"aa", "&&"},
    {"oo", "||"}, {"pp", "++"}, {"mm", "--"}, {"cm", ","}, {"pm", "->*"},
    {"pt", "->"}, {"cl", "()"}, {"ix", "[]"}, {"qu", "?"},
};

static bool dm_operator(dm_state *s, dm_str *out, bool *no_return) {
    char a = dm_peek(s, 0), b = dm_peek(s, 1);
    size_t m = s->used;
    if (a == 'c' && b == 'v') { /* conversion: "operator int" */
        s->p += 2;
        dm_node t;
        if (!dm_type(s, &t))
            return false;
        m = s->used;
        if (!dm_puts(s, "operator ") || !dm_put_type(s, &t))
            return false;
        *no_return = true;
        *out = dm_take(s, m);
        return true;
    }
    if (a == 'l' && b == 'i') { /* literal operator: operator"" _x */
        s->p += 2;
        dm_str id;
        if (!dm_source_name(s, &id))
            return false;
        m = s->used;
        if (!dm_puts(s, "operator\"\" ") || !dm_puts_str(s, id))
            return false;
        *out = dm_take(s, m);
        return true;
    }
    for (size_t i = 0; i < sizeof dm_ops / sizeof *dm_ops; i++) {
        if (dm_ops[i].code[0] != a || dm_ops[i].code[1] != b)
            continue;
        s->p += 2;
        const char *t = dm_ops[i].text;
        bool word = t[0] == 'n' || t[0] == 'd'; /* operator new, operator delete[] */
        if (!dm_puts(s, word ? "operator " : "operator") || !dm_puts(s, t))
            return false;
        *out = dm_take(s, m);
        return true;
    }
    return false;
}

/* "{lambda(int)#1}", "{unnamed type#1}" */
static bool dm_unnamed(dm_state *s, dm_str *out) {
    size_t m, n;
    if (dm_eat(s, 't')) {
        char num[24];
        if (!dm_index(s, &n))
            return false;
        snprintf(num, sizeof num, "{unnamed type#%zu}", n + 1);
        return dm_text(s, num, out);
    }
    if (!dm_eat(s, 'l'))
        return false;
    dm_str params = {0, 0};
    bool first = true;
    if (dm_peek(s, 0) == 'E')
        return false;
    while (dm_peek(s, 0) != 'E') {
        dm_node t;
        dm_str tt;
        if (!dm_type(s, &t) || !dm_type_text(s, &t, &tt))
            return false;
        if (first && t.kind == DM_PLAIN && tt.len == 4 &&
            memcmp(s->pool + tt.off, "void", 4) == 0 && dm_peek(s, 0) == 'E')
            break; /* (void): no parameters */
        if (first)
            params = tt;
        else if (!dm_cat(s, params, ", ", tt, &params))
            return false;
        first = false;
    }
    s->p++;
    if (!dm_index(s, &n))
        return false;
    char num[24];
    snprintf(num, sizeof num, ")#%zu}", n + 1);
    m = s->used;
    if (!dm_puts(s, "{lambda(") || !dm_puts_str(s, params) || !dm_puts(s, num))
        return false;
    *out = dm_take(s, m);
    return true;
}

/* One component of a name. `owner`: the identifier of the enclosing
 * class, what its constructors and destructors are called. */
static bool dm_unqualified(dm_state *s, dm_str owner, dm_str *text, dm_str *ident,
                           bool *no_return) {
    char c = dm_peek(s, 0), c1 = dm_peek(s, 1);
    *no_return = false;
    if (c == 'L') { /* internal linkage (a static function): a source name follows */
        s->p++;
        c = dm_peek(s, 0);
        if (!isdigit((unsigned char)c))
            return false;
    }
    if (isdigit((unsigned char)c)) {
        if (!dm_source_name(s, text))
            return false;
        *ident = *text;
    } else if (c == 'C' && ((c1 >= '1' && c1 <= '5') || c1 == 'I')) {
        s->p += 2;
        if (c1 == 'I') { /* inheriting constructor: C I1 <base type> */
            dm_node base;
            if (!(dm_eat(s, '1') || dm_eat(s, '2')) || !dm_type(s, &base))
                return false;
        }
        if (!owner.len)
            return false;
        *text = *ident = owner;
        *no_return = true;
    } else if (c == 'D' && (c1 == '0' || c1 == '1' || c1 == '2' || c1 == '4' || c1 == '5')) {
        s->p += 2;
        size_t m = s->used;
        if (!owner.len || !dm_puts(s, "~") || !dm_puts_str(s, owner))
            return false;
        *text = *ident = dm_take(s, m);
        *no_return = true;
    } else if (c == 'U') {
        s->p++;
        if (!dm_unnamed(s, text))
            return false;
        *ident = *text;
    } else if (c >= 'a' && c <= 'z') {
        if (!dm_operator(s, text, no_return))
            return false;
        *ident = owner; /* a constructor is named by the class, never an operator */
    } else {
        return false;
    }
    while (dm_peek(s, 0) == 'B') { /* ABI tags: f[abi:cxx11] */
        s->p++;
        dm_str tag;
        size_t m;
        if (!dm_source_name(s, &tag))
            return false;
        m = s->used;
        if (!dm_puts_str(s, *text) || !dm_puts(s, "[abi:") || !dm_puts_str(s, tag) ||
            !dm_puts(s, "]"))
            return false;
        *text = dm_take(s, m);
    }
    return true;
}

/* -- template arguments */

static bool dm_template_args(dm_state *s, dm_str *out, bool top);
static bool dm_template_param(dm_state *s, dm_node *out);

static const struct {
    char code;
    const char *name;
} dm_builtins[] = {
    {'v', "void"}, {'w', "wchar_t"}, {'b', "bool"}, {'c', "char"},
    {'a', "signed char"}, {'h', "unsigned char"}, {'s', "short"},
    {'t', "unsigned short"}, {'i', "int"}, {'j', "unsigned int"}, {'l', "long"},
    {'m', "unsigned long"}, {'x', "long long"}, {'y', "unsigned long long"},
    {'n', "__int128"}, {'o', "unsigned __int128"}, {'f', "float"}, {'d', "double"},
    {'e', "long double"}, {'g', "__float128"}, {'z', "..."},
};

/* An integer literal's suffix by its type, as c++filt prints it; NULL:
 * printed with a cast, "(char)65" */
static const char *dm_literal_suffix(char code) {
    switch (code) {
    case 'i': return "";
    case 'j': return "u";
    case 'l': return "l";
    case 'm': return "ul";
    case 'x': return "ll";
    case 'y': return "ull";
    default: return NULL;
    }
}

/* L <type> <value> E, L _Z <encoding> E */
static bool dm_literal(dm_state *s, dm_node *out) {
    dm_str text, empty = {0, 0};
    if (dm_peek(s, 0) == '_' && dm_peek(s, 1) == 'Z') {
        s->p += 2;
        if (!dm_encoding(s, &text, true, false) || !dm_eat(s, 'E'))
            return false;
        dm_plain(out, text, empty);
        return true;
    }
    char code = dm_peek(s, 0);
    dm_node t;
    if (!dm_type(s, &t) || t.kind != DM_PLAIN)
        return false;
    bool neg = dm_eat(s, 'n');
    const char *digits = s->p;
    while (isdigit((unsigned char)dm_peek(s, 0)))
        s->p++;
    size_t nd = (size_t)(s->p - digits);
    if (nd == 0 || !dm_eat(s, 'E'))
        return false;
    size_t m = s->used;
    if (code == 'f' || code == 'd' || code == 'e' || code == 'g')
        return false; /* a floating literal: c++filt prints its bytes */
    if (code == 'b' && nd == 1 && !neg && (digits[0] == '0' || digits[0] == '1')) {
        if (!dm_puts(s, digits[0] == '0' ? "false" : "true"))
            return false;
    } else {
        const char *suffix = dm_literal_suffix(code);
        if (!suffix && (!dm_puts(s, "(") || !dm_puts_str(s, t.l) || !dm_puts(s, ")")))
            return false;
        if ((neg && !dm_puts(s, "-")) || !dm_put(s, digits, nd) ||
            (suffix && !dm_puts(s, suffix)))
            return false;
    }
    dm_plain(out, dm_take(s, m), empty);
    return true;
}

/* X <expression> E, for the two forms compilers emit in ordinary
 * templates: a template parameter ("X T_ E": its argument) and a
 * function's address ("X ad L _Z <encoding> E E"; c++filt prints a free
 * function's "&(f(int))", a member's "&A::f"). Any other expression is
 * declined. */
static bool dm_expression(dm_state *s, dm_node *out) {
    dm_str text, empty = {0, 0};
    if (dm_eat(s, 'T')) {
        if (!dm_template_param(s, out) || !dm_eat(s, 'E'))
            return false;
        out->tparam = 0;
        return true;
    }
    if (dm_peek(s, 0) != 'a' || dm_peek(s, 1) != 'd' || dm_peek(s, 2) != 'L' ||
        dm_peek(s, 3) != '_' || dm_peek(s, 4) != 'Z')
        return false;
    s->p += 5;
    size_t m;
    if (!dm_encoding(s, &text, true, false) || !dm_eat(s, 'E') || !dm_eat(s, 'E'))
        return false;
    m = s->used;
    if (s->enc_scoped ? !dm_puts(s, "&") || !dm_puts_str(s, s->enc_name)
                      : !dm_puts(s, "&(") || !dm_puts_str(s, text) || !dm_puts(s, ")"))
        return false;
    dm_plain(out, dm_take(s, m), empty);
    return true;
}

static bool dm_template_arg(dm_state *s, dm_node *out) {
    dm_str empty = {0, 0};
    if (dm_eat(s, 'L'))
        return dm_literal(s, out);
    if (dm_eat(s, 'J')) { /* an argument pack: its arguments, in a row */
        dm_str list = {0, 0};
        bool first = true;
        while (!dm_eat(s, 'E')) {
            dm_node a;
            dm_str at;
            if (!dm_template_arg(s, &a) || !dm_type_text(s, &a, &at))
                return false;
            if (first)
                list = at;
            else if (!dm_cat(s, list, ", ", at, &list))
                return false;
            first = false;
        }
        dm_plain(out, list, empty);
        return true;
    }
    if (dm_eat(s, 'X')) /* an expression: two forms only */
        return dm_expression(s, out);
    return dm_type(s, out);
}

/* I <arg>+ E -> "<a, b>"; `top`: the arguments of the name being encoded,
 * which T_, T0_... refer to */
static bool dm_template_args(dm_state *s, dm_str *out, bool top) {
    if (!dm_eat(s, 'I'))
        return false;
    dm_str list = {0, 0};
    int n = 0;
    while (!dm_eat(s, 'E')) {
        dm_node a;
        dm_str at;
        if (n == DM_TARGS || !dm_template_arg(s, &a) || !dm_type_text(s, &a, &at))
            return false;
        if (top)
            s->targs[n] = a;
        if (n == 0)
            list = at;
        else if (!dm_cat(s, list, ", ", at, &list))
            return false;
        n++;
    }
    if (top)
        s->ntargs = n;
    size_t m = s->used;
    if (!dm_puts(s, "<") || !dm_puts_str(s, list) ||
        !dm_puts(s, dm_ends_with(s, list, '>') ? " >" : ">"))
        return false;
    *out = dm_take(s, m);
    return true;
}

/* name + "<args>" ("operator< <int>": a space after a '<') */
static bool dm_with_args(dm_state *s, dm_node *n, bool top) {
    dm_str args;
    n->tparam = 0;
    if (!dm_template_args(s, &args, top))
        return false;
    return dm_cat(s, n->l, dm_ends_with(s, n->l, '<') ? " " : "", args, &n->l);
}

/* -- substitutions */

static bool dm_std_sub(dm_state *s, char c, dm_node *out) {
    static const struct {
        char code;
        const char *text, *ident;
    } abbr[] = {
        {'a', "std::allocator", "allocator"},
        {'b', "std::basic_string", "basic_string"},
        {'s', "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
         "basic_string"},
        {'i', "std::basic_istream<char, std::char_traits<char> >", "basic_istream"},
        {'o', "std::basic_ostream<char, std::char_traits<char> >", "basic_ostream"},
        {'d', "std::basic_iostream<char, std::char_traits<char> >", "basic_iostream"},
    };
    for (size_t i = 0; i < sizeof abbr / sizeof *abbr; i++) {
        if (abbr[i].code != c)
            continue;
        dm_str text, ident;
        if (!dm_text(s, abbr[i].text, &text) || !dm_text(s, abbr[i].ident, &ident))
            return false;
        dm_plain(out, text, ident);
        return true;
    }
    return false;
}

/* after the 'S': S_, S<seq-id>_ (base 36), Sa, Ss... (not St) */
static bool dm_substitution(dm_state *s, dm_node *out) {
    char c = dm_peek(s, 0);
    if (c >= 'a' && c <= 'z') {
        s->p++;
        return dm_std_sub(s, c, out);
    }
    size_t v = 0;
    if (c != '_') {
        while (isdigit((unsigned char)(c = dm_peek(s, 0))) || (c >= 'A' && c <= 'Z')) {
            v = v * 36 + (size_t)(isdigit((unsigned char)c) ? c - '0' : c - 'A' + 10);
            if (v > DM_SUBS)
                return false;
            s->p++;
        }
        v++;
    }
    if (!dm_eat(s, '_') || v >= (size_t)s->nsubs)
        return false;
    *out = s->subs[v];
    /* A template parameter stands for the argument of the template whose
     * encoding uses it, not the one it was first read in (c++filt reads
     * it so too): a bare one is looked up again; a type built from one in
     * another encoding is not covered. */
    if (out->tparam) {
        size_t i = out->tparam - 1u;
        if (i >= (size_t)s->ntargs)
            return false;
        *out = s->targs[i];
        out->tparam = (uint8_t)(i + 1);
        out->dep = true;
        return true;
    }
    return !out->dep || out->epoch == s->epoch;
}

static bool dm_template_param(dm_state *s, dm_node *out) {
    size_t i;
    if (!dm_index(s, &i) || i >= (size_t)s->ntargs)
        return false;
    *out = s->targs[i];
    out->tparam = (uint8_t)(i + 1);
    out->dep = true;
    s->tparams++;
    if (s->first_read < 0)
        s->first_read = s->nsubs;
    return true;
}

/* -- types */

/* Does the type already end with qualifier `q` (" const"), among its
 * last qualifiers? (a substituted "T const" qualified again: c++filt
 * merges the two, not covered) */
static bool dm_has_qual(const dm_state *s, dm_str t, const char *q) {
    static const char *const quals[] = {" const", " volatile", " restrict"};
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < 3; i++) {
            size_t n = strlen(quals[i]);
            if (t.len >= n && memcmp(s->pool + t.off + t.len - n, quals[i], n) == 0) {
                if (strcmp(quals[i], q) == 0)
                    return true;
                t.len -= (uint32_t)n;
                more = true;
            }
        }
    }
    return false;
}

/* Qualifiers and declarators go at the end of a plain type's text, or
 * inside the parentheses of a function or array type's ("void (* const)()");
 * on a function type without a declarator they qualify the function
 * itself (a member function type: "void (A::*)() const"). */
static bool dm_apply(dm_state *s, dm_node *t, const char *q) {
    dm_str qs;
    t->tparam = 0;
    if (!dm_text(s, q, &qs))
        return false;
    if (t->kind == DM_PLAIN) {
        /* a reference to a reference collapses, a qualified member pointer
         * prints its qualifiers the other way round: not covered */
        if ((q[0] == '&' && dm_ends_with(s, t->l, '&')) ||
            (q[0] == ' ' && dm_ends_with(s, t->l, '*') && t->l.len >= 3 &&
             s->pool[t->l.off + t->l.len - 2] == ':') ||
            (q[0] == ' ' && dm_has_qual(s, t->l, q)))
            return false;
        return dm_cat(s, t->l, "", qs, &t->l);
    }
    if (t->d.len || q[0] == '*' || q[0] == '&')
        return dm_cat(s, t->d, "", qs, &t->d);
    if (t->kind != DM_FUNC)
        return false;
    return dm_cat(s, t->r, "", qs, &t->r);
}

/* each qualifier at most once ("KK" is no name a compiler writes) */
static bool dm_quals_once(const char *q, const char *end) {
    for (const char *a = q; a < end; a++)
        for (const char *b = a + 1; b < end; b++)
            if (*a == *b)
                return false;
    return true;
}

static const char *dm_qual_text(char code) {
    return code == 'K' ? " const" : code == 'V' ? " volatile" : " restrict";
}

static bool dm_builtin(dm_state *s, dm_node *out) {
    char c = dm_peek(s, 0);
    const char *name = NULL;
    dm_str text, empty = {0, 0};
    if (c == 'D') {
        static const char codes[] = "nsiuac";
        static const char *const names[] = {"decltype(nullptr)", "char16_t", "char32_t",
                                            "char8_t", "auto", "decltype(auto)"};
        const char *at = dm_peek(s, 1) ? strchr(codes, dm_peek(s, 1)) : NULL;
        if (!at)
            return false;
        name = names[at - codes];
        s->p += 2;
    } else {
        for (size_t i = 0; i < sizeof dm_builtins / sizeof *dm_builtins; i++)
            if (dm_builtins[i].code == c)
                name = dm_builtins[i].name;
        if (!name)
            return false;
        s->p++;
    }
    if (!dm_text(s, name, &text))
        return false;
    dm_plain(out, text, empty);
    return true;
}

/* F [Y] <return type> <parameters> [R|O] E */
static bool dm_function_type(dm_state *s, dm_node *out) {
    dm_eat(s, 'Y');
    dm_node ret;
    if (!dm_type(s, &ret) || ret.kind != DM_PLAIN)
        return false;
    dm_str params = {0, 0}, refq = {0, 0};
    bool first = true;
    if (dm_peek(s, 0) == 'E') /* at least one parameter type ("v": none) */
        return false;
    for (;;) {
        char c = dm_peek(s, 0);
        if (c == 'E')
            break;
        if ((c == 'R' || c == 'O') && dm_peek(s, 1) == 'E') {
            s->p++;
            if (!dm_text(s, c == 'R' ? " &" : " &&", &refq))
                return false;
            break;
        }
        dm_node p;
        dm_str pt;
        if (!dm_type(s, &p) || !dm_type_text(s, &p, &pt))
            return false;
        if (first && pt.len == 4 && memcmp(s->pool + pt.off, "void", 4) == 0 &&
            dm_peek(s, 0) == 'E')
            break;
        if (first)
            params = pt;
        else if (!dm_cat(s, params, ", ", pt, &params))
            return false;
        first = false;
    }
    s->p++;
    memset(out, 0, sizeof *out);
    out->kind = DM_FUNC;
    out->l = ret.l;
    size_t m = s->used;
    if (!dm_puts(s, "(") || !dm_puts_str(s, params) || !dm_puts(s, ")") || !dm_puts_str(s, refq))
        return false;
    out->r = dm_take(s, m);
    return true;
}

/* A <dimension> _ <element type> */
static bool dm_array_type(dm_state *s, dm_node *out) {
    const char *dim = s->p;
    while (isdigit((unsigned char)dm_peek(s, 0)))
        s->p++;
    size_t nd = (size_t)(s->p - dim);
    dm_node elem;
    if (!dm_eat(s, '_') || !dm_type(s, &elem))
        return false;
    if (elem.kind == DM_FUNC || elem.d.len)
        return false;
    size_t m = s->used;
    if (!dm_puts(s, "[") || !dm_put(s, dim, nd) || !dm_puts(s, "]") ||
        (elem.kind == DM_ARRAY && !dm_puts_str(s, elem.r)))
        return false;
    memset(out, 0, sizeof *out);
    out->kind = DM_ARRAY;
    out->l = elem.l;
    out->r = dm_take(s, m);
    return true;
}

/* M <class type> <member type> */
static bool dm_member_pointer(dm_state *s, dm_node *out) {
    dm_node cls, mem;
    dm_str ct;
    if (!dm_type(s, &cls) || !dm_type_text(s, &cls, &ct) || !dm_type(s, &mem))
        return false;
    if (mem.d.len || mem.kind == DM_ARRAY)
        return false;
    *out = mem;
    out->tparam = 0;
    size_t m = s->used;
    if (mem.kind == DM_FUNC) {
        if (!dm_puts_str(s, ct) || !dm_puts(s, "::*"))
            return false;
        out->d = dm_take(s, m);
        return true;
    }
    if (!dm_puts_str(s, mem.l) || !dm_puts(s, " ") || !dm_puts_str(s, ct) || !dm_puts(s, "::*"))
        return false;
    out->l = dm_take(s, m);
    return true;
}

static bool dm_type_(dm_state *s, dm_node *out) {
    char c = dm_peek(s, 0), c1 = dm_peek(s, 1);
    if (c == 'r' || c == 'V' || c == 'K') {
        const char *q = s->p, *qe;
        while ((c = dm_peek(s, 0)) == 'r' || c == 'V' || c == 'K')
            s->p++;
        qe = s->p;
        if (!dm_quals_once(q, qe) || !dm_type(s, out))
            return false;
        /* printed last to first: "rVK" (the ABI's order) reads
         * "const volatile restrict" */
        for (const char *k = qe; k-- > q;)
            if (!dm_apply(s, out, dm_qual_text(*k)))
                return false;
        return dm_add_sub(s, out);
    }
    if (c == 'P' || c == 'R' || c == 'O') {
        s->p++;
        if (!dm_type(s, out) || !dm_apply(s, out, c == 'P' ? "*" : c == 'R' ? "&" : "&&"))
            return false;
        return dm_add_sub(s, out);
    }
    if (c == 'F' || c == 'A' || c == 'M') {
        s->p++;
        bool ok = c == 'F' ? dm_function_type(s, out)
                  : c == 'A' ? dm_array_type(s, out) : dm_member_pointer(s, out);
        return ok && dm_add_sub(s, out);
    }
    if (c == 'T') {
        s->p++;
        if (!dm_template_param(s, out) || !dm_add_sub(s, out))
            return false;
        if (dm_peek(s, 0) == 'I') /* a template template parameter's use */
            return out->kind == DM_PLAIN && dm_with_args(s, out, false) && dm_add_sub(s, out);
        return true;
    }
    if (c == 'S' && c1 != 't') {
        s->p++;
        if (!dm_substitution(s, out))
            return false;
        if (dm_peek(s, 0) == 'I')
            return out->kind == DM_PLAIN && dm_with_args(s, out, false) && dm_add_sub(s, out);
        return true;
    }
    if (c == 'D' && c1 != 'p' && c1 != 't' && c1 != 'T' && c1 != 'v')
        return dm_builtin(s, out);
    if (c == 'N' || c == 'Z' || c == 'S' || isdigit((unsigned char)c)) {
        dm_name n;
        if (!dm_name_(s, &n, false) || n.quals.len) /* a member function's qualifiers */
            return false;
        *out = n.n;
        return dm_add_sub(s, out);
    }
    if (c == 'u') { /* a vendor's type */
        dm_str id;
        s->p++;
        if (!dm_source_name(s, &id))
            return false;
        dm_plain(out, id, id);
        return dm_add_sub(s, out);
    }
    return dm_builtin(s, out);
}

static bool dm_type(dm_state *s, dm_node *out) {
    if (++s->depth > DM_DEPTH)
        return false;
    unsigned tparams = s->tparams;
    int outer_read = s->first_read;
    s->first_read = -1;
    bool ok = dm_type_(s, out);
    if (ok && s->tparams != tparams) {
        /* it and the candidates read since the parameter (the parts of
         * it, "A<T_>", "T_ const") depend on it; the ones read before
         * it, complete by then, do not */
        out->dep = true;
        for (int i = s->first_read; i < s->nsubs; i++)
            s->subs[i].dep = true;
    }
    if (outer_read >= 0)
        s->first_read = outer_read;
    s->depth--;
    return ok;
}

/* -- names */

static bool dm_cv_quals(dm_state *s, dm_str *out) {
    const char *q = s->p;
    char c;
    while ((c = dm_peek(s, 0)) == 'r' || c == 'V' || c == 'K')
        s->p++;
    if (!dm_quals_once(q, s->p))
        return false;
    size_t m = s->used;
    for (const char *k = s->p; k-- > q;) /* last to first, as for types */
        if (!dm_puts(s, dm_qual_text(*k)))
            return false;
    if (dm_peek(s, 0) == 'R' || dm_peek(s, 0) == 'O') {
        if (!dm_puts(s, *s->p == 'R' ? " &" : " &&"))
            return false;
        s->p++;
    }
    *out = dm_take(s, m);
    return true;
}

/* N [qualifiers] <prefix components> E */
static bool dm_nested(dm_state *s, dm_name *out, bool top) {
    dm_node cur;
    bool have = false, ends_named = false; /* the last part is no substitution */
    memset(out, 0, sizeof *out);
    memset(&cur, 0, sizeof cur);
    if (!dm_cv_quals(s, &out->quals))
        return false;
    while (!dm_eat(s, 'E')) {
        char c = dm_peek(s, 0);
        bool add = true;
        ends_named = c != 'S';
        if (c == 'S' && dm_peek(s, 1) == 't' && !have) {
            s->p += 2;
            if (!dm_text(s, "std", &cur.l))
                return false;
            cur.ident = cur.l;
            have = true;
            continue; /* "std" alone is no candidate */
        }
        if (c == 'S') {
            s->p++;
            if (have || !dm_substitution(s, &cur))
                return false;
            add = false;
            out->targs = out->no_return = false;
        } else if (c == 'I') {
            if (!have || cur.kind != DM_PLAIN || !dm_with_args(s, &cur, top))
                return false;
            out->targs = true;
        } else if (c == 'T') {
            s->p++;
            if (have || !dm_template_param(s, &cur))
                return false;
            out->targs = out->no_return = false;
        } else {
            dm_str text, ident;
            bool no_return;
            if (!dm_unqualified(s, cur.ident, &text, &ident, &no_return))
                return false;
            if (have && !dm_cat(s, cur.l, "::", text, &text))
                return false;
            dm_plain(&cur, text, ident);
            out->targs = false;
            out->no_return = no_return;
        }
        have = true;
        if (add && dm_peek(s, 0) != 'E' && !dm_add_sub(s, &cur))
            return false;
    }
    if (!have || !ends_named)
        return false;
    out->n = cur;
    return true;
}

/* Z <encoding> E <entity> [<discriminator>] */
static bool dm_local(dm_state *s, dm_name *out, bool top) {
    dm_str enc, text;
    if (!dm_encoding(s, &enc, true, true) || !dm_eat(s, 'E'))
        return false;
    if (dm_eat(s, 's')) {
        memset(out, 0, sizeof *out);
        if (!dm_text(s, "string literal", &text))
            return false;
        out->n.l = text;
    } else if (!dm_name_(s, out, top)) {
        return false;
    }
    if (dm_eat(s, '_')) { /* discriminator: _<digit> or __<number>_ */
        size_t n;
        if (dm_eat(s, '_')) {
            if (!dm_number(s, &n) || !dm_eat(s, '_'))
                return false;
        } else if (!dm_number(s, &n)) {
            return false;
        }
    }
    return dm_cat(s, enc, "::", out->n.l, &out->n.l);
}

static bool dm_name_(dm_state *s, dm_name *out, bool top) {
    if (++s->depth > DM_DEPTH)
        return false;
    bool ok;
    char c = dm_peek(s, 0);
    memset(out, 0, sizeof *out);
    if (c == 'N') {
        s->p++;
        ok = dm_nested(s, out, top);
    } else if (c == 'Z') {
        s->p++;
        ok = dm_local(s, out, top);
    } else if (c == 'S' && dm_peek(s, 1) != 't') { /* a substituted template */
        s->p++;
        ok = dm_substitution(s, &out->n) && dm_peek(s, 0) == 'I' && out->n.kind == DM_PLAIN &&
             dm_with_args(s, &out->n, top);
        out->targs = true;
    } else {
        dm_str text, ident, empty = {0, 0};
        bool in_std = c == 'S';
        if (in_std)
            s->p += 2;
        ok = dm_unqualified(s, empty, &text, &ident, &out->no_return) && !out->no_return;
        if (ok && in_std)
            ok = dm_cat(s, (dm_str){0, 0}, "std::", text, &text);
        if (ok) {
            dm_plain(&out->n, text, ident);
            if (dm_peek(s, 0) == 'I') { /* an unscoped template's name is a candidate */
                ok = dm_add_sub(s, &out->n) && dm_with_args(s, &out->n, top);
                out->targs = true;
            }
        }
    }
    s->depth--;
    return ok;
}

/* -- encodings */

static bool dm_offset(dm_state *s) { /* [n] <number> _ */
    size_t v;
    dm_eat(s, 'n');
    return dm_number(s, &v) && dm_eat(s, '_');
}

static bool dm_special(dm_state *s, dm_str *out) {
    static const struct {
        char code[3];
        const char *text;
        char what; /* t: a type, e: an encoding, n: a name */
    } sp[] = {
        {"TV", "vtable for ", 't'}, {"TT", "VTT for ", 't'}, {"TI", "typeinfo for ", 't'},
        {"TS", "typeinfo name for ", 't'}, {"Th", "non-virtual thunk to ", 'e'},
        {"Tv", "virtual thunk to ", 'e'}, {"GV", "guard variable for ", 'n'},
        {"TH", "TLS init function for ", 'n'}, {"TW", "TLS wrapper function for ", 'n'},
    };
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
        if (sp[i].code[0] != dm_peek(s, 0) || sp[i].code[1] != dm_peek(s, 1))
            continue;
        s->p += 2;
        dm_str what, label;
        if (sp[i].what == 't') {
            dm_node t;
            if (!dm_type(s, &t) || !dm_type_text(s, &t, &what))
                return false;
        } else if (sp[i].what == 'e') {
            if (!dm_offset(s) || (sp[i].code[1] == 'v' && !dm_offset(s)) ||
                !dm_encoding(s, &what, true, false))
                return false;
        } else {
            dm_name n;
            if (!dm_name_(s, &n, false))
                return false;
            what = n.n.l;
        }
        return dm_text(s, sp[i].text, &label) && dm_cat(s, label, "", what, out);
    }
    return false;
}

/* `local`: the function of a local name, printed without its return type
 * ("f<int>()::x", as c++filt does) */
static bool dm_encoding_(dm_state *s, dm_str *out, bool local) {
    char c = dm_peek(s, 0);
    if (c == 'T' || c == 'G')
        return dm_special(s, out);
    dm_name n;
    bool scoped = c == 'N';
    if (!dm_name_(s, &n, true))
        return false;
    c = dm_peek(s, 0);
    if (c == '\0' || c == 'E' || c == '.') { /* data */
        if (c == '.') /* clones are of functions */
            return false;
        if (n.quals.len && !dm_cat(s, n.n.l, "", n.quals, &n.n.l))
            return false;
        s->enc_name = n.n.l;
        s->enc_scoped = scoped;
        *out = n.n.l;
        return true;
    }
    dm_node ret;
    dm_str rt = {0, 0}, params = {0, 0};
    if (n.targs && !n.no_return &&
        (!dm_type(s, &ret) || ret.kind != DM_PLAIN || !dm_type_text(s, &ret, &rt)))
        return false;
    c = dm_peek(s, 0);
    if (c == '\0' || c == 'E' || c == '.') /* at least one parameter type */
        return false;
    for (bool first = true; (c = dm_peek(s, 0)) != '\0' && c != 'E' && c != '.'; first = false) {
        dm_node p;
        dm_str pt;
        if (!dm_type(s, &p) || !dm_type_text(s, &p, &pt))
            return false;
        if (first && pt.len == 4 && memcmp(s->pool + pt.off, "void", 4) == 0 &&
            (dm_peek(s, 0) == '\0' || dm_peek(s, 0) == 'E' || dm_peek(s, 0) == '.'))
            break;
        if (first)
            params = pt;
        else if (!dm_cat(s, params, ", ", pt, &params))
            return false;
    }
    size_t m = s->used;
    if ((rt.len && !local && (!dm_puts_str(s, rt) || !dm_puts(s, " "))) || !dm_puts_str(s, n.n.l) ||
        !dm_puts(s, "(") || !dm_puts_str(s, params) || !dm_puts(s, ")") ||
        !dm_puts_str(s, n.quals))
        return false;
    *out = dm_take(s, m);
    s->enc_name = n.n.l;
    s->enc_scoped = scoped;
    return true;
}

/* `nested`: an encoding inside another (a local name's function, a
 * function as a template argument), whose template arguments are its own:
 * the outer ones are put back after it. */
static bool dm_encoding(dm_state *s, dm_str *out, bool nested, bool local) {
    if (++s->depth > DM_DEPTH)
        return false;
    bool ok;
    if (nested) { /* all of them: the outer list may be half-read */
        if (s->nested == DM_NESTED) {
            s->depth--;
            return false;
        }
        s->nested++;
        dm_node saved[DM_TARGS];
        int n = s->ntargs, epoch = s->epoch;
        memcpy(saved, s->targs, sizeof saved);
        s->epoch = ++s->epochs;
        ok = dm_encoding_(s, out, local);
        memcpy(s->targs, saved, sizeof saved);
        s->ntargs = n;
        s->epoch = epoch;
        s->nested--;
    } else {
        ok = dm_encoding_(s, out, local);
    }
    s->depth--;
    return ok;
}

/* GCC's clones: ".cold", ".isra.0", ".constprop.0.isra.0" -> " [clone .x]" */
static bool dm_clones(dm_state *s, dm_str *out) {
    while (dm_peek(s, 0) == '.') {
        const char *at = s->p++;
        char c = dm_peek(s, 0);
        if ((c >= 'a' && c <= 'z') || c == '_')
            while ((c = dm_peek(s, 0)) == '_' || (c >= 'a' && c <= 'z'))
                s->p++;
        else if (!isdigit((unsigned char)c))
            return false;
        while (isdigit((unsigned char)dm_peek(s, 0)))
            s->p++;
        while (dm_peek(s, 0) == '.' && isdigit((unsigned char)dm_peek(s, 1))) {
            s->p++;
            while (isdigit((unsigned char)dm_peek(s, 0)))
                s->p++;
        }
        size_t m = s->used;
        if (!dm_puts_str(s, *out) || !dm_puts(s, " [clone ") ||
            !dm_put(s, at, (size_t)(s->p - at)) || !dm_puts(s, "]"))
            return false;
        *out = dm_take(s, m);
    }
    return s->p == s->end;
}

/* The whole name; false when it is not one this demangler covers. */
static bool dm_run(dm_state *s, const char *mangled, dm_str *text) {
    size_t len = mangled ? strnlen(mangled, DEMANGLE_MAX) : 0;
    if (len < 3 || len == DEMANGLE_MAX || strncmp(mangled, "_Z", 2) != 0)
        return false;
    s->p = mangled + 2;
    s->end = mangled + len;
    s->used = 0;
    s->depth = 0;
    s->nsubs = s->ntargs = 0;
    s->epoch = s->epochs = s->nested = 0;
    s->tparams = 0;
    s->first_read = -1;
    return dm_encoding(s, text, false, false) && dm_clones(s, text);
}

int ss_demangle_into(const char *mangled, char *out, size_t size) {
    dm_state s;
    dm_str text;
    if (!dm_run(&s, mangled, &text))
        return -EINVAL;
    if (text.len >= size)
        return -ENOSPC;
    memcpy(out, s.pool + text.off, text.len);
    out[text.len] = '\0';
    return (int)text.len;
}

static char *runtime_demangle(const char *mangled, bool refresh) {
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

char *ss_demangle(const char *mangled, bool refresh) {
    if (!mangled || strncmp(mangled, "_Z", 2) != 0 || strnlen(mangled, DEMANGLE_MAX) == DEMANGLE_MAX)
        return NULL;
    dm_state st;
    dm_str text;
    if (dm_run(&st, mangled, &text)) {
        char *out = malloc(text.len + 1);
        if (out) {
            memcpy(out, st.pool + text.off, text.len);
            out[text.len] = '\0';
        }
        return out;
    }
    return runtime_demangle(mangled, refresh);
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
