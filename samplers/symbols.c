/* symbols.c: native addresses -> frames (function, file, line, module)
 * with elfutils libdw, for the native sampler.
 *
 * One Dwfl describes the own process: the modules of /proc/self/maps,
 * each opened from its ELF file on disk (libdw never reads the process's
 * memory for symbols; the vDSO, which has no file, is the one exception
 * libdwfl handles itself). An address resolves to its function through
 * the symbol table, to file and line through DWARF when the module (or
 * its separate debuginfo) has it, and to a chain of inlined calls through
 * the DWARF scopes that contain it.
 *
 * Resolving is slow (DWARF is parsed lazily, per CU, on first use) and a
 * steady program shows the same few hundred addresses every round, so
 * results are cached by address in an open-addressing table. The table
 * is bounded: when full it is emptied and refilled (counted), which
 * costs one round of DWARF work and never grows memory. Once no address
 * has missed the cache for a while, what libdw read is released (see
 * release_dwarf) and read again only for the next miss.
 *
 * Modules come and go with dlopen/dlclose. glibc counts both
 * (dl_iterate_phdr's dlpi_adds/dlpi_subs); each resolve compares the
 * counters with those seen when the module list was last read, and on a
 * change reads /proc/self/maps again and empties the cache. That keeps
 * an address of an unloaded library from keeping its stale name when
 * another library is mapped at the same place, and lets an address in a
 * freshly loaded library find it. Addresses outside every module (JIT
 * code, anonymous memory) do not trigger a re-read: only the loader can
 * add an ELF module, and it bumps dlpi_adds when it does.
 *
 * The module list is read by symbols_maps.c, which keeps a file's distant
 * second mappings (node's remapped builtins) out of its load; an address
 * there is resolved as the same file offset in the load. Addresses in no
 * module are looked up in /tmp/perf-<pid>.map (symbols_perfmap.c), where
 * JIT compilers name their code, else they are "unknown".
 *
 * Not thread-safe (one resolver per sampler thread), never called from a
 * signal handler: libdw allocates and takes locks. */
#include "agent/config.h"
#include "agent/log.h"
#include "agent/round.h"
#include "agent/time.h"
#include "samplers/symbols_internal.h"
#include "samplers/symbols_demangle.h"
#include "proc/threads.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One cached address: its frames live in the frame pool. */
typedef struct cache_slot {
    uint64_t key;    /* address << 1 | return_address; 0 = empty */
    uint32_t first;  /* index into pool */
    uint8_t n;       /* frames */
} cache_slot;

/* The function last found for a 256-byte block of code: most misses fall
 * in a function met before, and a lookup may start there. */
#define SS_SYMBOLS_FN_SLOTS 1024

/* libdw's tables are released after this long without a miss (doubled by
 * each reload, up to the max): see release_dwarf. 1 s: a host settles
 * within its first rounds, and libc6-dbg's DWARF is 15 MiB while held;
 * a program still meeting new addresses pays a reload at 1, 2, 4 s...
 * (two more over its life than from 5 s). */
#define SS_SYMBOLS_IDLE_NS (1ull * 1000000000ull)
#define SS_SYMBOLS_IDLE_MAX_NS (320ull * 1000000000ull)

typedef struct fn_slot {
    Dwfl_Module *mod; /* NULL = empty */
    Dwarf_Die die;
} fn_slot;

/* A run of code [lo, hi) every address of which resolves to the same
 * frames (one line-table row, one chain of scopes): its frames live in the
 * frame pool, as a cached address's. */
typedef struct span {
    uint64_t lo, hi;
    uint32_t first; /* index into pool */
    uint8_t n;
} span;

struct ss_symbols {
    Dwfl *dwfl;    /* NULL: none (a fresh one could not be made) */
    Dwfl *parents; /* a parent's, forgotten unread (ss_symbols_adopt) */
    Dwfl_Callbacks callbacks;
    char *debuginfo_path;
    unsigned long long adds, subs; /* loader counters at the last report */
    bool reported;                 /* the module list has been read */
    bool rereport;                 /* a fresh Dwfl: report the modules to it */

    cache_slot *slots;
    size_t mask;        /* slots - 1 (power of two) */
    size_t max_entries; /* resets past this (half the slots) */
    ss_frame *pool;
    size_t pool_used, pool_size;
    fn_slot *fns;
    span *spans; /* sorted by lo, none overlapping (see "spans") */
    size_t n_spans, max_spans;
    ss_remap *remaps; /* distant second mappings of a file */
    size_t n_remaps;
    ss_perfmap *perfmap;
    pid_t perf_pid;
    char jit_file_name[32]; /* "perf-<pid>.map": the file of JIT frames */
    ss_symbols_counters c;
    /* Releasing what libdw holds once no address has needed it for a
     * while (see release_dwarf). */
    bool holds;             /* libdw has opened modules since the last release */
    bool released;          /* a release happened: the next load is a reload */
    uint64_t last_miss_ns;
    uint64_t idle_ns;       /* current delay before a release; 0: never */
    _Atomic bool busy; /* inside ss_symbols_resolve (see ss_symbols_busy) */
};

/* Used only when interning fails (out of memory): a frame always names
 * something. */
static const ss_funcinfo unknown_fn = {"unknown", "unknown", "unknown", NULL,
                                       SS_FRAME_NATIVE, NULL};

/* ---- loader counters -------------------------------------------------- */

struct loader_counts {
    unsigned long long adds, subs;
    bool ok;
};

static int read_counts(struct dl_phdr_info *info, size_t size, void *arg) {
    struct loader_counts *lc = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        lc->adds = info->dlpi_adds;
        lc->subs = info->dlpi_subs;
        lc->ok = true;
    }
    return 1; /* the counters are the same in every entry: stop here */
}

/* ---- the module list -------------------------------------------------- */

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t mix64_block(uint64_t pc) { return mix64(pc >> 8); }

static void cache_clear(ss_symbols *s) {
    memset(s->slots, 0, (s->mask + 1) * sizeof *s->slots);
    s->n_spans = 0; /* their frames are in the pool */
    s->pool_used = 0;
    s->c.entries = 0;
}

static void mod_info_free(void *user);

/* libdwfl passes the address of the userdata slot here (its
 * MODCB_ARGS), though the prototype says void *. */
static int module_removed(Dwfl_Module *mod, void *slot, const char *name,
                          Dwarf_Addr base, void *arg) {
    (void)mod, (void)name, (void)base, (void)arg;
    void **user = slot;
    mod_info_free(*user);
    *user = NULL;
    return DWARF_CB_OK;
}

static int module_forget(Dwfl_Module *mod, void **user, const char *name,
                         Dwarf_Addr base, void *arg) {
    (void)mod, (void)name, (void)base, (void)arg;
    mod_info_free(*user);
    *user = NULL;
    return DWARF_CB_OK;
}

/* Read /proc/self/maps into the Dwfl. Modules still mapped at the same
 * place keep what libdw already parsed of them. */
static int report_modules(ss_symbols *s) {
    struct loader_counts lc = {0, 0, false};
    dl_iterate_phdr(read_counts, &lc);
    /* Modules that go away free their DWARF: forget remembered DIEs. */
    memset(s->fns, 0, SS_SYMBOLS_FN_SLOTS * sizeof *s->fns);
    ss_demangle_reset();
    dwfl_report_begin(s->dwfl);
    ss_remaps_free(s->remaps, s->n_remaps);
    s->remaps = NULL;
    s->n_remaps = 0;
    int rc = ss_maps_report(s->dwfl, &s->remaps, &s->n_remaps);
    if (dwfl_report_end(s->dwfl, module_removed, NULL) != 0 && rc == 0)
        rc = -1;
    s->adds = lc.adds;
    s->subs = lc.subs;
    s->reported = true;
    s->c.refreshes++;
    if (rc != 0)
        ss_debug("symbols: reading /proc/self/maps failed (%d)", rc);
    return rc == 0 ? 0 : -EIO;
}

/* Re-read the module list (and forget cached addresses) when the loader
 * added or removed a module since the last read. Cheap when nothing
 * changed: dl_iterate_phdr stops at its first entry. */
static void check_loader(ss_symbols *s) {
    struct loader_counts lc = {0, 0, false};
    dl_iterate_phdr(read_counts, &lc);
    bool same = lc.ok && lc.adds == s->adds && lc.subs == s->subs;
    if (s->reported && same && !s->rereport)
        return;
    if (s->reported && !same) {
        cache_clear(s);
        s->c.flushes++;
    }
    s->rereport = false;
    report_modules(s);
}

/* ---- names ------------------------------------------------------------ */

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* What the resolver keeps per module, in libdwfl's userdata slot: the
 * interned mapping and a sorted index of the symbol table's functions.
 * (libdwfl's own dwfl_module_addrinfo scans the whole symbol table on
 * every call: 2 ms per lookup in libjvm.so's 80 000 symbols.) Freed when
 * the module goes away (dwfl_report_end) or with the resolver. */
typedef struct sym_entry {
    uint64_t start, size;
    const char *name; /* in the ELF's string table: lives with the module */
    int rank;         /* GLOBAL 2 > WEAK 1 > LOCAL 0, among equal starts */
} sym_entry;

typedef struct mod_info {
    const ss_mapping *map;
    sym_entry *syms;
    size_t nsyms;
    bool indexed; /* the index was attempted (syms may still be NULL) */
    bool dwarf_seen; /* libdw was asked for the DWARF (see dwarf_loaded) */
} mod_info;

#define SS_SYMBOLS_MAX_SYMS (4u << 20) /* past this, libdwfl's scan */

static mod_info *module_info(Dwfl_Module *mod) {
    void **user = NULL;
    Dwarf_Addr start = 0, end = 0;
    const char *name = dwfl_module_info(mod, &user, &start, &end, NULL, NULL,
                                        NULL, NULL);
    if (!user)
        return NULL;
    if (*user)
        return *user;
    mod_info *mi = calloc(1, sizeof *mi);
    if (!mi)
        return NULL;
    if (!name)
        name = "unknown";
    if (strncmp(name, "[vdso", 5) == 0)
        name = "[vdso]"; /* libdwfl names it "[vdso: <pid>]" */
    char hex[2 * 64 + 1] = "";
    const unsigned char *bits = NULL;
    GElf_Addr vaddr, bias;
    dwfl_module_getelf(mod, &bias); /* the build id is read with the ELF */
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    for (int i = 0; i < len && i < 64; i++)
        snprintf(hex + 2 * i, 3, "%02x", bits[i]);
    mi->map = ss_mapping_intern(name, hex, start, end, 0);
    *user = mi;
    return mi;
}

static const ss_mapping *module_mapping(Dwfl_Module *mod) {
    mod_info *mi = module_info(mod);
    return mi ? mi->map : NULL;
}

static void mod_info_free(void *user) {
    mod_info *mi = user;
    if (mi) {
        free(mi->syms);
        free(mi);
    }
}

static int sym_cmp(const void *a, const void *b) {
    const sym_entry *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return y->rank - x->rank; /* best name first */
}

/* A symbol without a size (hand-written assembly, _init, _fini) reaches
 * to the end of its section at most; the next symbol bounds it earlier
 * (the search finds that one first). Not knowing its section: its own
 * address only. (Stretched to the next symbol of the module, _fini, the
 * last one, once covered everything up to node's remapped code.) */
static uint64_t sizeless_extent(Dwfl_Module *mod, uint64_t addr, GElf_Word shndx) {
    GElf_Addr bias = 0;
    Elf *elf = dwfl_module_getelf(mod, &bias);
    GElf_Shdr shdr;
    Elf_Scn *scn = elf && shndx != SHN_UNDEF && shndx < SHN_LORESERVE ? elf_getscn(elf, shndx)
                                                                     : NULL;
    if (!scn || !gelf_getshdr(scn, &shdr) || !(shdr.sh_flags & SHF_EXECINSTR))
        return 1;
    uint64_t end = shdr.sh_addr + shdr.sh_size + bias;
    return end > addr ? end - addr : 1;
}

static void index_symbols(Dwfl_Module *mod, mod_info *mi) {
    mi->indexed = true;
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1 || (unsigned)n > SS_SYMBOLS_MAX_SYMS)
        return;
    sym_entry *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return;
    size_t k = 0;
    for (int i = 1; i < n; i++) { /* entry 0 is the null symbol */
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx,
                                                   NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || addr == 0 || sym.st_shndx == SHN_UNDEF ||
            (type != STT_FUNC && type != STT_GNU_IFUNC))
            continue;
        int bind = GELF_ST_BIND(sym.st_info);
        uint64_t size = sym.st_size ? sym.st_size : sizeless_extent(mod, addr, shndx);
        v[k++] = (sym_entry){addr, size, name,
                             bind == STB_GLOBAL ? 2 : bind == STB_WEAK ? 1 : 0};
    }
    qsort(v, k, sizeof *v, sym_cmp);
    size_t u = 0; /* one entry per start: the best-ranked name */
    for (size_t i = 0; i < k; i++) {
        if (u > 0 && v[u - 1].start == v[i].start) {
            if (v[i].size > v[u - 1].size)
                v[u - 1].size = v[i].size;
            continue;
        }
        v[u++] = v[i];
    }
    mi->syms = v;
    mi->nsyms = u;
}

/* The index of the first symbol starting above pc (binary search). */
static size_t syms_after(const mod_info *mi, Dwarf_Addr pc) {
    size_t lo = 0, hi = mi->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mi->syms[mid].start <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The function symbol containing pc: binary search of the index (every
 * entry has a size: see sizeless_extent). */
static const char *symbol_name(Dwfl_Module *mod, Dwarf_Addr pc) {
    mod_info *mi = module_info(mod);
    if (mi && !mi->indexed)
        index_symbols(mod, mi);
    if (!mi || !mi->syms) {
        GElf_Off off = 0;
        GElf_Sym sym;
        return dwfl_module_addrinfo(mod, pc, &off, &sym, NULL, NULL, NULL);
    }
    size_t after = syms_after(mi, pc);
    if (after == 0)
        return NULL;
    const sym_entry *e = &mi->syms[after - 1];
    return pc - e->start < e->size ? e->name : NULL;
}

/* Intern a function name as namespace + name: C names go to "global",
 * C++ names are demangled and split at their last scope. */
static const ss_funcinfo *intern_fn(const char *sym, const char *file) {
    if (!sym || !*sym)
        return ss_funcinfo_intern("unknown", "unknown", file, NULL, SS_FRAME_NATIVE);
    char *d = ss_demangle(sym, false);
    const ss_funcinfo *fn;
    if (d) {
        char ns[512], name[512];
        ss_cxx_split(d, ns, sizeof ns, name, sizeof name);
        fn = ss_funcinfo_intern(ns, name, file, NULL, SS_FRAME_NATIVE);
        free(d);
    } else {
        fn = ss_funcinfo_intern("global", sym, file, NULL, SS_FRAME_NATIVE);
    }
    return fn;
}

/* A DWARF function's name: the linkage (mangled) name when it has one,
 * so that C++ gets its scope, else DW_AT_name; following abstract
 * origins (an inlined instance names nothing itself). */
static const char *die_fn_name(Dwarf_Die *die) {
    Dwarf_Attribute a;
    const char *n = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
        dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
        n = dwarf_formstring(&a);
    if (!n && dwarf_attr_integrate(die, DW_AT_name, &a))
        n = dwarf_formstring(&a);
    return n;
}

/* The call site of an inlined instance: file (basename) and line in the
 * caller. */
static void call_site(Dwarf_Die *inl, Dwarf_Die *cudie, const char **file,
                      int *line) {
    Dwarf_Attribute a;
    Dwarf_Word v;
    *file = NULL;
    *line = 0;
    if (dwarf_attr(inl, DW_AT_call_line, &a) && dwarf_formudata(&a, &v) == 0)
        *line = (int)v;
    Dwarf_Files *files;
    size_t nfiles;
    if (dwarf_attr(inl, DW_AT_call_file, &a) && dwarf_formudata(&a, &v) == 0 &&
        dwarf_getsrcfiles(cudie, &files, &nfiles) == 0 && v < nfiles) {
        const char *f = dwarf_filesrc(files, v, NULL, NULL);
        if (f)
            *file = base_name(f);
    }
}

/* C++ functions with internal linkage (anonymous namespaces, static
 * members of local classes) have no linkage name in DWARF, only their
 * bare DW_AT_name. Their scope is the chain of namespaces and classes
 * that contain their declaration. */
static bool cu_is_cxx(Dwarf_Die *cudie) {
    int lang = dwarf_srclang(cudie);
    return lang == DW_LANG_C_plus_plus || lang == DW_LANG_C_plus_plus_03 ||
           lang == DW_LANG_C_plus_plus_11 || lang == DW_LANG_C_plus_plus_14;
}

static void die_scope(Dwarf_Die *die, char *ns, size_t size) {
    Dwarf_Die decl = *die, next;
    Dwarf_Attribute a;
    for (int hop = 0; hop < 8; hop++) { /* to the declaration */
        if (!dwarf_attr(&decl, DW_AT_abstract_origin, &a) &&
            !dwarf_attr(&decl, DW_AT_specification, &a))
            break;
        if (!dwarf_formref_die(&a, &next))
            break;
        decl = next;
    }
    size_t len = 0;
    ns[0] = '\0';
    Dwarf_Die *scopes = NULL;
    int n = dwarf_getscopes_die(&decl, &scopes);
    for (int i = n - 1; i >= 1; i--) { /* outermost first, decl itself last */
        const char *part;
        switch (dwarf_tag(&scopes[i])) {
        case DW_TAG_namespace:
            part = dwarf_diename(&scopes[i]);
            if (!part)
                part = "(anonymous namespace)";
            break;
        case DW_TAG_class_type:
        case DW_TAG_structure_type:
        case DW_TAG_union_type:
            part = dwarf_diename(&scopes[i]);
            if (!part)
                part = "{anonymous}";
            break;
        default:
            continue;
        }
        int w = snprintf(ns + len, size - len, "%s%s", len ? "::" : "", part);
        if (w < 0 || (size_t)w >= size - len)
            break; /* truncated: keep what fits */
        len += (size_t)w;
    }
    free(scopes);
    if (len == 0)
        snprintf(ns, size, "global");
}

/* The funcinfo of a DWARF function DIE, or NULL when DWARF names none. */
static const ss_funcinfo *intern_die_fn(Dwarf_Die *die, Dwarf_Die *cudie,
                                        const char *file) {
    const char *name = die_fn_name(die);
    if (!name)
        return NULL;
    if (strncmp(name, "_Z", 2) == 0 || !cu_is_cxx(cudie))
        return intern_fn(name, file);
    char ns[512];
    die_scope(die, ns, sizeof ns);
    return ss_funcinfo_intern(ns, name, file, NULL, SS_FRAME_NATIVE);
}

/* ---- resolving one address -------------------------------------------- */

typedef struct resolved {
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n;
    uint64_t run_lo, run_hi; /* pcs resolving the same (see "spans"); empty: none */
} resolved;

/* The function and inlined-instance DIEs that contain a pc, outermost
 * first. */
typedef struct scope_chain {
    Dwarf_Die d[SS_SYMBOLS_MAX_INLINE + 8];
    int n;
} scope_chain;

/* Walk down from `parent` into the one child that contains pc, and so on:
 * subtrees that do not contain pc are skipped whole (dwarf_siblingof
 * jumps over them), so one lookup reads a CU's top-level DIEs and the
 * DIEs of one function. (dwarf_getscopes reads the same, but then walks
 * into the abstract definition of an inlined function rather than its
 * callers, which dwarf_getscopes_die would find with a second full
 * walk.) Namespaces have no address range: they are searched. */
static bool descend(Dwarf_Die *parent, Dwarf_Addr pc, scope_chain *c, int depth) {
    Dwarf_Die child;
    if (depth > 64 || dwarf_child(parent, &child) != 0)
        return false;
    do {
        int tag = dwarf_tag(&child);
        switch (tag) {
        case DW_TAG_subprogram:
        case DW_TAG_inlined_subroutine:
        case DW_TAG_lexical_block:
        case DW_TAG_try_block:
        case DW_TAG_catch_block:
            if (dwarf_haspc(&child, pc) == 1) {
                if (tag != DW_TAG_lexical_block && tag != DW_TAG_try_block &&
                    tag != DW_TAG_catch_block && c->n < (int)(sizeof c->d / sizeof *c->d))
                    c->d[c->n++] = child;
                descend(&child, pc, c, depth + 1);
                return true;
            }
            break;
        case DW_TAG_namespace:
        case DW_TAG_module:
            if (descend(&child, pc, c, depth + 1))
                return true;
            break;
        default:
            break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return false;
}

/* The scopes of pc, starting from a function remembered for pc's 256-byte
 * block when it still contains pc, else from the CU. */
static void find_scopes(ss_symbols *s, Dwfl_Module *mod, Dwarf_Die *cudie,
                        Dwarf_Addr pc, scope_chain *c) {
    fn_slot *fs = &s->fns[(mix64_block(pc)) & (SS_SYMBOLS_FN_SLOTS - 1)];
    c->n = 0;
    if (fs->mod == mod && dwarf_haspc(&fs->die, pc) == 1) {
        c->d[c->n++] = fs->die;
        descend(&fs->die, pc, c, 1);
        return;
    }
    descend(cudie, pc, c, 0);
    if (c->n > 0 && dwarf_tag(&c->d[0]) == DW_TAG_subprogram) {
        fs->mod = mod;
        fs->die = c->d[0];
    }
}

/* Add the inlined frames that contain pc, innermost first, and return
 * the DIE of the function they are inlined into (NULL if DWARF has no
 * function there). *file and *line come in as pc's own place and leave
 * as the place in that function (the outermost call site). */
static Dwarf_Die *add_inlines(ss_symbols *s, Dwfl_Module *mod, Dwarf_Addr pc,
                              Dwarf_Die *cudie, Dwarf_Addr bias, resolved *r, scope_chain *c,
                              const char **file, int *line) {
    if (!cudie)
        return NULL;
    find_scopes(s, mod, cudie, pc - bias, c);
    int i = c->n - 1;
    for (; i >= 0 && r->n < SS_SYMBOLS_MAX_INLINE - 1; i--) {
        if (dwarf_tag(&c->d[i]) != DW_TAG_inlined_subroutine)
            break;
        /* This frame is at the current *file:*line; its caller is at the
         * call site. */
        ss_frame *f = &r->f[r->n++];
        const ss_funcinfo *fn = intern_die_fn(&c->d[i], cudie,
                                              *file ? *file : "unknown");
        f->fn = fn ? fn : &unknown_fn;
        f->line = *line;
        f->inlined = 1;
        call_site(&c->d[i], cudie, file, line);
    }
    while (i >= 0 && dwarf_tag(&c->d[i]) != DW_TAG_subprogram)
        i--; /* inline chain deeper than the frames we keep */
    return i >= 0 ? &c->d[i] : NULL;
}

/* The CU whose code holds pc (module address), or NULL; *bias as
 * dwfl_module_addrdie's. libdwfl finds a CU by .debug_aranges, each entry
 * taken to reach up to the next one: where .debug_aranges lists only some
 * CUs (a cgo program: Go's linker writes none for the Go code, gcc one
 * per C file) an address of an unlisted CU lands in the C file listed
 * before it (Go frames named as in gcc_mmap.c). The CU found is checked
 * against its own ranges; when it does not hold pc, every CU is looked
 * at (once per address: the result is cached). */
static Dwarf_Die *cu_at(Dwfl_Module *mod, Dwarf_Addr pc, Dwarf_Addr *bias, Dwarf_Die *mem) {
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, bias);
    if (!cu || dwarf_haspc(cu, pc - *bias) == 1)
        return cu;
    Dwarf *dw = dwfl_module_getdwarf(mod, bias);
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dw && dwarf_nextcu(dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        if (dwarf_offdie(dw, off + hsize, mem) && dwarf_haspc(mem, pc - *bias) == 1)
            return mem;
        off = next;
    }
    return NULL;
}

/* ---- spans ------------------------------------------------------------
 *
 * A running thread's leaf address is wherever it was interrupted: a loop
 * of a few lines shows a new address every few rounds. Each one missed
 * the cache, and after a release made libdw read the module's tables
 * again and hold them for the next delay (while held, every fork() of
 * the host copies their page tables). The frames of an address depend
 * only on its line-table row and on the DWARF scopes (the function, the
 * inlined calls) that hold it, so a miss also records the run of code
 * around the address with the same row and the same scopes, and a later
 * address in that run is served from it without libdw. The run is the
 * row's code [its address, the next row's), within the range of every
 * scope of the chain that holds the address, cut at every inlined call
 * and nested function below the innermost scope (entering one changes
 * the chain). In a module without any DWARF the symbol table names an
 * address: the run is the symbol's extent. Remapped and JIT addresses,
 * and anything less certain, get no run. */

/* A row of the same source line as (src, line): its code names pc alike. */
static bool same_place(Dwarf_Line *row, const char *src, int line) {
    bool end;
    int l;
    return dwarf_lineendsequence(row, &end) == 0 && !end && dwarf_lineno(row, &l) == 0 &&
           l == line && dwarf_linesrc(row, NULL, NULL) == src;
}

static bool line_addr(Dwarf_Lines *lines, size_t i, Dwarf_Addr *a) {
    return dwarf_lineaddr(dwarf_onesrcline(lines, i), a) == 0;
}

#define SS_SYMBOLS_RUN_ROWS 256 /* rows looked at each way */

/* The code of pc's source line around pc: dwarf_getsrc_die gives an
 * address the last row at or below it (several rows may share an
 * address: the last one counts), so every address up to the next row's
 * gets the same row, and the rows before and after of the same file and
 * line (optimised code has several per line: columns, views) give the
 * same name too. */
static bool row_run(Dwarf_Die *cudie, Dwarf_Line *dl, Dwarf_Addr pc, Dwarf_Addr *lo,
                    Dwarf_Addr *hi) {
    Dwarf_Lines *lines;
    size_t n;
    Dwarf_Addr a, b;
    int line;
    const char *src = dl ? dwarf_linesrc(dl, NULL, NULL) : NULL;
    if (!src || dwarf_lineno(dl, &line) != 0 || !same_place(dl, src, line) ||
        dwarf_getsrclines(cudie, &lines, &n) != 0 || dwarf_lineaddr(dl, &a) != 0 || a > pc)
        return false;
    size_t l = 0, h = n; /* the first row past address a */
    while (l < h) {
        size_t m = l + (h - l) / 2;
        if (!line_addr(lines, m, &b))
            return false;
        if (b <= a)
            l = m + 1;
        else
            h = m;
    }
    if (l == 0 || l >= n || dwarf_onesrcline(lines, l - 1) != dl || !line_addr(lines, l, &b) ||
        pc >= b)
        return false;
    *lo = a;
    *hi = b;
    /* backwards: the first row met at a lower address is the last at it */
    for (size_t k = l - 1, seen = 0; k-- > 0 && seen < SS_SYMBOLS_RUN_ROWS; seen++) {
        if (!line_addr(lines, k, &b) || b > *lo)
            break;
        if (b == *lo)
            continue; /* a later row at this address counts */
        if (!same_place(dwarf_onesrcline(lines, k), src, line))
            break;
        *lo = b;
    }
    /* forwards: the last row at *hi decides up to the next address */
    for (size_t i = l, seen = 0; i < n && seen < SS_SYMBOLS_RUN_ROWS; seen++) {
        size_t last = i;
        while (last + 1 < n && line_addr(lines, last + 1, &b) && b == *hi)
            last++;
        if (last + 1 >= n || !same_place(dwarf_onesrcline(lines, last), src, line) ||
            !line_addr(lines, last + 1, &b) || b <= *hi)
            break;
        *hi = b;
        i = last + 1;
    }
    return true;
}

/* [*lo, *hi) narrowed to the range of `die` that holds pc. */
static bool within_ranges(Dwarf_Die *die, Dwarf_Addr pc, Dwarf_Addr *lo, Dwarf_Addr *hi) {
    Dwarf_Addr base, b, e;
    ptrdiff_t off = 0;
    while ((off = dwarf_ranges(die, off, &base, &b, &e)) > 0)
        if (b <= pc && pc < e) {
            *lo = b > *lo ? b : *lo;
            *hi = e < *hi ? e : *hi;
            return true;
        }
    return false;
}

/* [*lo, *hi) cut short of every range of `die` (none of which may hold
 * pc: that would be a scope the chain lacks). */
static bool outside_ranges(Dwarf_Die *die, Dwarf_Addr pc, Dwarf_Addr *lo, Dwarf_Addr *hi) {
    Dwarf_Addr base, b, e;
    ptrdiff_t off = 0;
    while ((off = dwarf_ranges(die, off, &base, &b, &e)) > 0) {
        if (b <= pc && pc < e)
            return false;
        if (e <= pc && e > *lo)
            *lo = e;
        if (b > pc && b < *hi)
            *hi = b;
    }
    return off == 0;
}

/* Cut [*lo, *hi) at the inlined calls and nested functions under `die`,
 * through its lexical blocks. */
static bool cut_inner_scopes(Dwarf_Die *die, Dwarf_Addr pc, Dwarf_Addr *lo, Dwarf_Addr *hi,
                             int depth) {
    Dwarf_Die child;
    int rc = depth > 64 ? -1 : dwarf_child(die, &child);
    if (rc != 0)
        return rc > 0; /* no children: nothing to cut */
    do {
        switch (dwarf_tag(&child)) {
        case DW_TAG_subprogram:
        case DW_TAG_inlined_subroutine:
            if (!outside_ranges(&child, pc, lo, hi))
                return false;
            break;
        case DW_TAG_lexical_block:
        case DW_TAG_try_block:
        case DW_TAG_catch_block:
            if (!cut_inner_scopes(&child, pc, lo, hi, depth + 1))
                return false;
            break;
        default:
            break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return true;
}

/* The run of module addresses around pc that resolve as pc did, from its
 * row and its chain of scopes (outermost first). */
static bool dwarf_run(Dwarf_Die *cudie, Dwarf_Line *dl, const scope_chain *c, Dwarf_Addr pc,
                      Dwarf_Addr *lo, Dwarf_Addr *hi) {
    if (c->n == 0 || c->n >= (int)(sizeof c->d / sizeof *c->d) || !row_run(cudie, dl, pc, lo, hi))
        return false;
    for (int i = 0; i < c->n; i++)
        if (!within_ranges((Dwarf_Die *)&c->d[i], pc, lo, hi))
            return false;
    return cut_inner_scopes((Dwarf_Die *)&c->d[c->n - 1], pc, lo, hi, 0) && *lo <= pc &&
           pc < *hi;
}

/* The extent of the symbol naming pc, in a module without DWARF. */
static bool symbol_run(Dwfl_Module *mod, Dwarf_Addr pc, Dwarf_Addr *lo, Dwarf_Addr *hi) {
    Dwarf_Addr bias;
    mod_info *mi = module_info(mod);
    if (!mi || !mi->syms || dwfl_module_getdwarf(mod, &bias))
        return false;
    size_t l = syms_after(mi, pc);
    if (l == 0 || pc - mi->syms[l - 1].start >= mi->syms[l - 1].size)
        return false;
    *lo = mi->syms[l - 1].start;
    *hi = *lo + mi->syms[l - 1].size;
    if (l < mi->nsyms && mi->syms[l].start < *hi)
        *hi = mi->syms[l].start; /* the next symbol's code is named after it */
    return true;
}

/* A module's DWARF is read by libdw on the first address resolved in it
 * (dwfl_module_addrdie), never before: modules no stack passes through
 * cost only their entry in the module list. The first time, the pages of
 * compressed DWARF that libdw has decompressed are given back. */
static void dwarf_loaded(ss_symbols *s, Dwfl_Module *mod) {
    mod_info *mi = module_info(mod);
    if (!mi || mi->dwarf_seen)
        return;
    mi->dwarf_seen = true;
    Dwarf_Addr bias;
    if (!dwfl_module_getdwarf(mod, &bias))
        return;
    s->c.dwarf_modules++;
    s->c.trimmed += ss_debuginfo_trim(mod);
}

/* The module containing pc, or NULL. Past the highest module (the stack,
 * say) libdwfl answers with the last module anyway: check the range. */
static Dwfl_Module *module_at(ss_symbols *s, Dwarf_Addr pc) {
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, pc);
    Dwarf_Addr start = 0, end = 0;
    if (mod && (!dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL) ||
                pc < start || pc >= end))
        mod = NULL;
    return mod;
}

static const ss_remap *remap_at(ss_symbols *s, uint64_t pc) {
    for (size_t i = 0; i < s->n_remaps; i++)
        if (pc >= s->remaps[i].start && pc < s->remaps[i].end)
            return &s->remaps[i];
    return NULL;
}

/* The perf map of this process (a forked child's is its own), read again
 * when it grew (at most every 200 ms). True when names were added. */
static bool perfmap_check(ss_symbols *s) {
    pid_t pid = getpid();
    if (!s->perfmap || pid != s->perf_pid) {
        ss_perfmap_destroy(s->perfmap);
        s->perfmap = ss_perfmap_create(pid);
        s->perf_pid = pid;
        snprintf(s->jit_file_name, sizeof s->jit_file_name, "perf-%d.map", (int)pid);
    }
    return ss_perfmap_refresh(s->perfmap, ss_mono_ns());
}

/* An address in no module: JIT code named in the perf map, else unknown. */
static void resolve_outside(ss_symbols *s, uint64_t addr, Dwarf_Addr pc, resolved *r) {
    const char *jit = ss_perfmap_lookup(s->perfmap, pc);
    const ss_funcinfo *fn =
        jit ? ss_funcinfo_intern("jit", jit, s->jit_file_name, NULL, SS_FRAME_NATIVE)
            : ss_funcinfo_intern("unknown", "unknown", "unknown", NULL, SS_FRAME_NATIVE);
    r->f[0].fn = fn ? fn : &unknown_fn;
    r->f[0].addr = addr;
    r->n = 1;
}

static void resolve_uncached(ss_symbols *s, uint64_t addr, bool ret, resolved *r) {
    Dwarf_Addr pc = ret ? addr - 1 : addr;
    memset(r, 0, sizeof *r);
    Dwfl_Module *mod = module_at(s, pc);
    const ss_mapping *map = NULL;
    bool rm_used = false; /* pc is a remapped address's place in the load */
    if (!mod) {
        if (perfmap_check(s)) {
            cache_clear(s); /* unknown addresses may have a name now */
            s->c.flushes++;
        }
        /* JIT code the perf map names (node names its remapped builtins
         * there too); else a distant second mapping of a file: the same
         * offset in its load; else unknown */
        ss_remap *rm = (ss_remap *)remap_at(s, pc);
        Dwfl_Module *loaded = rm ? module_at(s, pc + rm->delta) : NULL;
        if (!loaded || ss_perfmap_lookup(s->perfmap, pc)) {
            resolve_outside(s, addr, pc, r);
            return;
        }
        if (!rm->map) {
            const ss_mapping *m = module_mapping(loaded);
            rm->map = ss_mapping_intern(rm->path, m ? m->build_id : "", rm->start, rm->end,
                                        rm->start + rm->delta - (m ? m->start : 0));
        }
        map = rm->map;
        mod = loaded;
        pc += rm->delta;
        rm_used = true;
    }
    s->holds = true; /* libdw opens the module's files now */
    if (!map)
        map = module_mapping(mod);
    const char *file = NULL;
    int line = 0;
    Dwarf_Addr bias = 0;
    Dwarf_Die cu_mem;
    Dwarf_Die *cudie = cu_at(mod, pc, &bias, &cu_mem);
    dwarf_loaded(s, mod);
    Dwarf_Line *dl = cudie ? dwarf_getsrc_die(cudie, pc - bias) : NULL;
    const char *src = dl ? dwarf_linesrc(dl, NULL, NULL) : NULL;
    if (src && dwarf_lineno(dl, &line) == 0)
        file = base_name(src);
    else
        line = 0;
    scope_chain c;
    Dwarf_Die *sub = add_inlines(s, mod, pc, cudie, bias, r, &c, &file, &line);
    if (!file) /* no DWARF line: name the module, as jstack does */
        file = map ? base_name(map->path) : "unknown";

    /* The function: DWARF's name when DWARF has the function (no symbol
     * table scan, and the linkage name of C++ methods), else the symbol
     * table's. */
    const ss_funcinfo *fn = sub ? intern_die_fn(sub, cudie, file) : NULL;
    Dwarf_Addr lo = 0, hi = 0;
    if (fn && !rm_used && dwarf_run(cudie, dl, &c, pc - bias, &lo, &hi)) {
        r->run_lo = lo + bias;
        r->run_hi = hi + bias;
    }
    if (!fn) {
        fn = intern_fn(symbol_name(mod, pc), file);
        if (fn && !cudie && !rm_used && symbol_run(mod, pc, &lo, &hi)) {
            r->run_lo = lo;
            r->run_hi = hi;
        }
    }
    ss_frame *f = &r->f[r->n++];
    f->fn = fn ? fn : &unknown_fn;
    f->line = line;
    f->inlined = 0;
    for (int i = 0; i < r->n; i++) {
        r->f[i].map = map;
        r->f[i].addr = addr;
    }
}

/* ---- the cache -------------------------------------------------------- */

static cache_slot *cache_find(ss_symbols *s, uint64_t key) {
    for (size_t i = mix64(key) & s->mask;; i = (i + 1) & s->mask) {
        cache_slot *sl = &s->slots[i];
        if (sl->key == key || sl->key == 0)
            return sl;
    }
}

/* The index of the first span starting above pc (binary search). */
static size_t spans_after(const ss_symbols *s, uint64_t pc) {
    size_t l = 0, h = s->n_spans;
    while (l < h) {
        size_t m = l + (h - l) / 2;
        if (s->spans[m].lo <= pc)
            l = m + 1;
        else
            h = m;
    }
    return l;
}

/* The span holding pc, or NULL. */
static const span *span_find(const ss_symbols *s, uint64_t pc) {
    size_t l = spans_after(s, pc);
    return l > 0 && pc < s->spans[l - 1].hi ? &s->spans[l - 1] : NULL;
}

/* Remember [lo, hi) as resolving to the n frames at pool[first]; left out
 * when full (until the cache's next reset) or overlapping one known. */
static void span_put(ss_symbols *s, uint64_t lo, uint64_t hi, uint32_t first, uint8_t n) {
    if (s->n_spans >= s->max_spans || lo >= hi)
        return;
    size_t l = spans_after(s, lo); /* the one before starts at lo or below */
    if ((l > 0 && s->spans[l - 1].hi > lo) || (l < s->n_spans && s->spans[l].lo < hi))
        return;
    memmove(&s->spans[l + 1], &s->spans[l], (s->n_spans - l) * sizeof *s->spans);
    s->spans[l] = (span){lo, hi, first, n};
    s->n_spans++;
}

static void cache_put(ss_symbols *s, uint64_t key, const resolved *r) {
    if (s->c.entries >= s->max_entries || s->pool_used + (size_t)r->n > s->pool_size) {
        cache_clear(s);
        s->c.resets++;
    }
    cache_slot *sl = cache_find(s, key);
    sl->key = key;
    sl->first = (uint32_t)s->pool_used;
    sl->n = (uint8_t)r->n;
    memcpy(s->pool + s->pool_used, r->f, (size_t)r->n * sizeof *r->f);
    s->pool_used += (size_t)r->n;
    s->c.entries++;
    if (r->run_hi && s->max_spans)
        span_put(s, r->run_lo, r->run_hi, sl->first, sl->n);
}

/* ---- the API ---------------------------------------------------------- */

/* Separate debuginfo: looked for on this machine only
 * (symbols_debuginfo.c), never through debuginfod; none at all with
 * STACKSHOT_SYMBOLS_DEBUGINFO=false. */
/* dwfl_linux_proc_find_elf, but libdw is handed the module's Elf and no
 * descriptor: libdw keeps the descriptors it is given until the module
 * goes away (a dlclose) or dwfl_end, and closes them then, unchecked, when
 * the host may have closed every descriptor and got those numbers back
 * for files of its own (docs/safety/descriptors.md). The Elf is mapped
 * whole (ELF_C_READ_MMAP, as libdw would), so the descriptor is done with
 * (ELF_C_FDDONE) and closed here at once. */
static int find_elf_unkept(Dwfl_Module *mod, void **user, const char *modname,
                           Dwarf_Addr base, char **file_name, Elf **elfp) {
    int fd = dwfl_linux_proc_find_elf(mod, user, modname, base, file_name, elfp);
    if (fd < 0 || *elfp)
        return fd;
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF || elf_cntl(elf, ELF_C_FDDONE) != 0) {
        if (elf)
            elf_end(elf);
        return fd; /* libdw tries, and keeps the descriptor, as before */
    }
    close(fd);
    *elfp = elf;
    return -1;
}

static int no_debuginfo(Dwfl_Module *mod, void **user, const char *modname,
                        Dwarf_Addr base, const char *file, const char *link,
                        GElf_Word crc, char **name) {
    (void)mod, (void)user, (void)modname, (void)base, (void)file, (void)link,
        (void)crc, (void)name;
    return -1;
}

ss_symbols *ss_symbols_create_sized(size_t entries) {
    size_t slots = 32;
    while (slots < 2 * entries)
        slots <<= 1;
    ss_symbols *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->mask = slots - 1;
    s->idle_ns = SS_SYMBOLS_IDLE_NS;
    s->max_entries = slots / 2;
    s->pool_size = s->max_entries * 2; /* inline chains are rare and short */
    s->slots = calloc(slots, sizeof *s->slots);
    s->pool = calloc(s->pool_size, sizeof *s->pool);
    s->fns = calloc(SS_SYMBOLS_FN_SLOTS, sizeof *s->fns);
    s->max_spans = s->max_entries / 2;
    s->spans = calloc(s->max_spans, sizeof *s->spans);
    s->callbacks.find_elf = find_elf_unkept;
    /* libdw keeps each separate debuginfo file open as long as its module:
     * none under a small RLIMIT_NOFILE (proc/threads.h) */
    s->callbacks.find_debuginfo = ss_config_bool("STACKSHOT_SYMBOLS_DEBUGINFO", true) &&
                                          !ss_proc_fds_tight()
                                      ? ss_find_debuginfo
                                      : no_debuginfo;
    s->callbacks.debuginfo_path = &s->debuginfo_path; /* NULL: the default */
    bool mem = s->slots && s->pool && s->fns && s->spans;
    if (mem)
        s->dwfl = dwfl_begin(&s->callbacks);
    if (!s->dwfl) {
        if (mem)
            ss_error("symbols: dwfl_begin failed: %s; native frames stay unnamed",
                     dwfl_errmsg(-1));
        ss_symbols_destroy(s);
        return NULL;
    }
    report_modules(s);
    return s;
}

ss_symbols *ss_symbols_create(void) {
    int64_t n = ss_config_int("STACKSHOT_SYMBOLS_CACHE", SS_SYMBOLS_CACHE_ENTRIES,
                              16, 1 << 20);
    return ss_symbols_create_sized((size_t)n);
}

void ss_symbols_destroy(ss_symbols *s) {
    if (!s)
        return;
    /* a parent's Dwfl forgotten by ss_symbols_adopt (its memory not here,
     * or a copy nothing frees): kept referenced, never read */
    static Dwfl *volatile parents_kept;
    if (s->parents) {
        parents_kept = s->parents;
        (void)parents_kept;
    }
    if (s->dwfl) {
        dwfl_getmodules(s->dwfl, module_forget, NULL, 0);
        dwfl_end(s->dwfl);
    }
    free(s->slots);
    free(s->pool);
    free(s->fns);
    free(s->spans);
    ss_remaps_free(s->remaps, s->n_remaps);
    ss_perfmap_destroy(s->perfmap);
    free(s);
}

/* libdw's tables (decompressed DWARF, its CUs, line tables, the symbol
 * indexes) are needed only to resolve an address not in the cache. A
 * steady program stops showing new addresses after its first rounds, and
 * from then on every round is served from the cache, whose frames hold
 * only interned names: so once no lookup has missed for idle_ns, the
 * Dwfl is closed and a fresh one takes its place, which opens a module
 * again only when an address in it misses. That gives back libc6-dbg's
 * ~12 MiB for as long as no new address shows up. A reload costs what the
 * first lookup in the module cost (tens of milliseconds for libc with
 * libc6-dbg); each one doubles the delay (up to SS_SYMBOLS_IDLE_MAX_NS),
 * so a program that keeps meeting new addresses keeps its tables. */
static void fresh_dwfl(ss_symbols *s) {
    s->dwfl = dwfl_begin(&s->callbacks);
    memset(s->fns, 0, SS_SYMBOLS_FN_SLOTS * sizeof *s->fns);
    s->rereport = true; /* read the module list again, keeping the cache */
    if (s->holds) {
        s->holds = false;
        s->released = true;
    }
}

/* Ended before the fresh one is made: with nothing of libdw's left, the
 * core's zone gives its memory back (core/core_heap.c). */
static void release_dwarf(ss_symbols *s) {
    dwfl_getmodules(s->dwfl, module_forget, NULL, 0);
    dwfl_end(s->dwfl);
    fresh_dwfl(s);
    s->c.releases++;
}

bool ss_symbols_adopt(ss_symbols *s) {
    if (!s)
        return false;
    if (s->dwfl)
        s->parents = s->dwfl;
    fresh_dwfl(s);
    return s->dwfl != NULL;
}

/* Called once per round by the sampler (a settled thread's stack is
 * reused without a lookup, so an idle host makes none at all). */
void ss_symbols_idle(ss_symbols *s) {
    if (!s || !s->dwfl || !s->holds || s->idle_ns == 0 || ss_mono_ns() - s->last_miss_ns < s->idle_ns)
        return;
    atomic_store(&s->busy, true); /* a child forked now must not use it */
    release_dwarf(s);
    atomic_store_explicit(&s->busy, false, memory_order_release);
}

static void note_miss(ss_symbols *s) {
    s->last_miss_ns = ss_mono_ns();
    if (s->released && s->holds) { /* this miss opened a module again */
        s->released = false;
        s->c.reloads++;
        if (s->idle_ns && s->idle_ns < SS_SYMBOLS_IDLE_MAX_NS)
            s->idle_ns *= 2;
    }
}

void ss_symbols_set_idle(ss_symbols *s, uint64_t idle_ns) { s->idle_ns = idle_ns; }

void ss_symbols_set_spans(ss_symbols *s, bool on) {
    s->max_spans = on ? s->max_entries / 2 : 0;
    s->n_spans = 0;
}

static int lookup(ss_symbols *s, uint64_t addr, bool return_address, ss_frame *out,
                  int max) {
    if (return_address && addr == 0)
        return_address = false; /* no "call before" address 0 */
    if (!s->dwfl) /* a release could not make a fresh one */
        fresh_dwfl(s);
    if (!s->dwfl) {
        resolved r;
        memset(&r, 0, sizeof r);
        resolve_outside(s, addr, return_address ? addr - 1 : addr, &r);
        memcpy(out, r.f, sizeof *out);
        return 1;
    }
    check_loader(s);
    uint64_t key = addr << 1 | (return_address ? 1 : 0);
    if (key != 0) {
        cache_slot *sl = cache_find(s, key);
        /* outside every module: the perf map may have grown since */
        if (sl->key == key && !s->pool[sl->first].map && perfmap_check(s)) {
            cache_clear(s);
            s->c.flushes++;
        }
        if (sl->key == key) {
            s->c.hits++;
            int n = sl->n < max ? sl->n : max;
            memcpy(out, s->pool + sl->first, (size_t)n * sizeof *out);
            return n;
        }
    }
    const span *sp = s->n_spans ? span_find(s, return_address ? addr - 1 : addr) : NULL;
    if (sp) {
        s->c.hits++;
        s->c.span_hits++;
        int n = sp->n < max ? sp->n : max;
        memcpy(out, s->pool + sp->first, (size_t)n * sizeof *out);
        for (int i = 0; i < n; i++)
            out[i].addr = addr;
        return n;
    }
    s->c.misses++;
    resolved r;
    resolve_uncached(s, addr, return_address, &r);
    note_miss(s);
    if (key != 0)
        cache_put(s, key, &r);
    int n = r.n < max ? r.n : max;
    memcpy(out, r.f, (size_t)n * sizeof *out);
    return n;
}

int ss_symbols_resolve(ss_symbols *s, uint64_t addr, bool return_address,
                       ss_frame *out, int max) {
    if (max < 1)
        return 0;
    /* set before the lookup changes anything, cleared after it is done:
     * fork copies memory as it is at one moment, so a child that sees
     * the flag clear holds a resolver between two lookups */
    atomic_store(&s->busy, true);
    int n = lookup(s, addr, return_address, out, max);
    atomic_store_explicit(&s->busy, false, memory_order_release);
    return n;
}

bool ss_symbols_busy(const ss_symbols *s) { return atomic_load(&s->busy); }

void ss_symbols_stats(const ss_symbols *s, uint64_t *hits, uint64_t *misses) {
    *hits = s->c.hits;
    *misses = s->c.misses;
}

void ss_symbols_counters_get(const ss_symbols *s, ss_symbols_counters *out) {
    *out = s->c;
}
