/* test_symbols.c: the libdw symbol resolver against this very process:
 * its own functions (name, file, line of a marked call), libc, an inline
 * chain (-O2 helper), a C++ method, unknown addresses, the address cache
 * and its bound, and dlopen/dlclose of libraries landing at the same
 * address. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/round.h"
#include "samplers/symbols_internal.h"

#include <elfutils/libdwfl.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* inline_helper.c */
extern int helper_inner_line, helper_outer_line;
extern uint64_t helper_ra;
int outer_caller(volatile int *p);
/* cpp_helper.cpp */
extern int cpp_line;
extern uint64_t cpp_ra;
int cpp_call_method(int x);
extern int cpp_inline_line, cpp_lambda_line;
extern uint64_t cpp_inline_ra, cpp_lambda_ra;
int cpp_call_scopes(int x);

static uint64_t ra_seen;

__attribute__((noinline)) static void capture_ra(void) {
    ra_seen = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

/* The call to capture_ra() sits on the line recorded beside it. */
__attribute__((noinline)) static int known_static_fn(int x) {
    int line = __LINE__; capture_ra();
    return line + x;
}

static void assert_fn(const ss_frame *f, const char *ns, const char *name,
                      const char *file) {
    assert_non_null(f->fn);
    assert_string_equal(f->fn->ns, ns);
    assert_string_equal(f->fn->name, name);
    assert_string_equal(f->fn->file, file);
    assert_int_equal(f->fn->kind, SS_FRAME_NATIVE);
}

static void test_static_function(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    assert_non_null(s);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    uint64_t entry = (uint64_t)(uintptr_t)&known_static_fn;
    int n = ss_symbols_resolve(s, entry, false, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 1);
    assert_fn(&f[0], "global", "known_static_fn", "test_symbols.c");
    assert_int_equal(f[0].addr, entry);
    assert_int_equal(f[0].inlined, 0);
    /* The entry's line is the function's own line (the one above the
     * marked call, give or take the prologue). */
    int marked = known_static_fn(0);
    assert_in_range(f[0].line, marked - 2, marked);
    assert_non_null(f[0].map);
    assert_true(strstr(f[0].map->path, "test_symbols") != NULL);
    assert_true(entry >= f[0].map->start && entry < f[0].map->limit);
    ss_symbols_destroy(s);
}

static void test_return_address(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    int line = known_static_fn(0);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, ra_seen, true, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 1);
    assert_fn(&f[0], "global", "known_static_fn", "test_symbols.c");
    assert_int_equal(f[0].line, line);
    assert_int_equal(f[0].addr, ra_seen); /* the address as given */
    ss_symbols_destroy(s);
}

/* libc's own nanosleep: under a sanitizer RTLD_DEFAULT finds the
 * sanitizer's interceptor first. */
static void *libc_nanosleep(void) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    return libc ? dlsym(libc, "nanosleep") : NULL;
}

static void test_libc(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    void *p = libc_nanosleep();
    assert_non_null(p);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)p + 4, false, f,
                               SS_SYMBOLS_MAX_INLINE);
    assert_true(n >= 1);
    const ss_frame *phys = &f[n - 1];
    assert_string_equal(phys->fn->ns, "global");
    assert_non_null(strstr(phys->fn->name, "nanosleep"));
    assert_non_null(phys->map);
    assert_string_equal(strrchr(phys->map->path, '/') + 1, "libc.so.6");
    /* Without libc's debuginfo the file is the module; with it, a .c. */
    const char *file = phys->fn->file;
    size_t len = strlen(file);
    assert_true(strcmp(file, "libc.so.6") == 0 ||
                (len > 2 && strcmp(file + len - 2, ".c") == 0));
    assert_int_equal(strlen(phys->map->build_id), 40); /* SHA-1 build id */
    ss_symbols_destroy(s);
}

static void test_inline_chain(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    volatile int v = 1;
    outer_caller(&v);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, helper_ra, true, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 2);
    assert_fn(&f[0], "global", "inner_add", "inline_helper.c");
    assert_int_equal(f[0].line, helper_inner_line);
    assert_int_equal(f[0].inlined, 1);
    assert_fn(&f[1], "global", "outer_caller", "inline_helper.c");
    assert_int_equal(f[1].line, helper_outer_line);
    assert_int_equal(f[1].inlined, 0);
    assert_ptr_equal(f[0].map, f[1].map);
    /* Room for one frame: the innermost. */
    ss_frame one;
    assert_int_equal(ss_symbols_resolve(s, helper_ra, true, &one, 1), 1);
    assert_string_equal(one.fn->name, "inner_add");
    ss_symbols_destroy(s);
}

static void test_cxx(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    assert_int_equal(cpp_call_method(21), 42);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, cpp_ra, true, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 1);
    assert_fn(&f[0], "demo::Box<int>", "get_twice", "cpp_helper.cpp");
    assert_int_equal(f[0].line, cpp_line);

    /* An inlined static member of a class in an anonymous namespace (no
     * linkage name in DWARF), then a lambda. */
    assert_int_equal(cpp_call_scopes(5), 15);
    n = ss_symbols_resolve(s, cpp_inline_ra, true, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 2);
    assert_fn(&f[0], "outer::(anonymous namespace)::Widget", "twice", "cpp_helper.cpp");
    assert_int_equal(f[0].line, cpp_inline_line);
    assert_int_equal(f[0].inlined, 1);
    assert_fn(&f[1], "outer", "use", "cpp_helper.cpp");
    n = ss_symbols_resolve(s, cpp_lambda_ra, true, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 1);
    assert_fn(&f[0], "outer::use(int)::{lambda(int)#1}", "operator()", "cpp_helper.cpp");
    assert_int_equal(f[0].line, cpp_lambda_line);
    ss_symbols_destroy(s);
}

static void test_unknown(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    /* The stack: no module (an anonymous mmap may land in the gap
     * between two segments of a library, which libdwfl counts as the
     * library's). */
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    uint64_t a = (uint64_t)(uintptr_t)&f[1];
    int n = ss_symbols_resolve(s, a, false, f, SS_SYMBOLS_MAX_INLINE);
    assert_int_equal(n, 1);
    assert_fn(&f[0], "unknown", "unknown", "unknown");
    assert_null(f[0].map);
    assert_int_equal(f[0].addr, a);
    assert_int_equal(f[0].line, 0);
    /* Address 0, as a return address too: a frame, no crash. */
    assert_int_equal(ss_symbols_resolve(s, 0, true, f, 1), 1);
    assert_string_equal(f[0].fn->ns, "unknown");
    assert_int_equal(ss_symbols_resolve(s, 0, false, f, 0), 0);
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.refreshes, 1); /* unknown addresses re-read nothing */
    ss_symbols_destroy(s);
}

static void test_cache(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    uint64_t a = (uint64_t)(uintptr_t)&known_static_fn;
    ss_frame f1, f2;
    uint64_t hits, misses;
    ss_symbols_resolve(s, a, false, &f1, 1);
    ss_symbols_stats(s, &hits, &misses);
    assert_int_equal(hits, 0);
    assert_int_equal(misses, 1);
    ss_symbols_resolve(s, a, false, &f2, 1);
    ss_symbols_stats(s, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(misses, 1);
    assert_memory_equal(&f1, &f2, sizeof f1);
    /* The same pc as a return address is another key (addr - 1), served
     * from the run of code the first miss found: no miss */
    ss_symbols_resolve(s, a + 1, true, &f2, 1);
    ss_symbols_stats(s, &hits, &misses);
    assert_int_equal(misses, 1);
    assert_ptr_equal(f1.fn, f2.fn);
    assert_int_equal(f2.addr, a + 1);
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.span_hits, 1);
    assert_int_equal(c.entries, 1);
    /* without spans, it is a miss of its own */
    ss_symbols_set_spans(s, false);
    ss_symbols_resolve(s, a + 1, true, &f2, 1);
    ss_symbols_stats(s, &hits, &misses);
    assert_int_equal(misses, 2);
    assert_ptr_equal(f1.fn, f2.fn);
    ss_symbols_destroy(s);
}

static void test_cache_bound(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create_sized(16);
    volatile int v = 1;
    outer_caller(&v);
    uint64_t base = (uint64_t)(uintptr_t)&known_static_fn;
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    for (int round = 0; round < 2; round++) {
        for (uint64_t i = 0; i < 100; i++) {
            int n = ss_symbols_resolve(s, base + (i % 8), false, f, 8);
            assert_int_equal(n, 1);
            assert_string_equal(f[0].fn->name, "known_static_fn");
            n = ss_symbols_resolve(s, helper_ra + 1000 * i, false, f, 8);
            assert_true(n >= 1);
        }
    }
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_true(c.resets > 0);
    assert_true(c.entries <= 16);
    assert_true(c.hits > 0);
    assert_int_equal(c.hits + c.misses, 400);
    ss_symbols_destroy(s);
}

static void test_dlopen_dlclose(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];

    void *ha = dlopen(SYM_LIB_A, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(ha);
    uint64_t a = (uint64_t)(uintptr_t)dlsym(ha, "sym_a_func");
    assert_true(a != 0);
    assert_int_equal(ss_symbols_resolve(s, a, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_a_func", "dl_lib.c");
    assert_non_null(strstr(f[0].map->path, "libsym_a.so"));
    const ss_mapping *map_a = f[0].map;
    /* Cached now: a second lookup is a hit. */
    uint64_t hits, misses;
    ss_symbols_resolve(s, a, false, f, 8);
    ss_symbols_stats(s, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(dlclose(ha), 0);

    void *hb = dlopen(SYM_LIB_B, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(hb);
    uint64_t b = (uint64_t)(uintptr_t)dlsym(hb, "sym_b_func");
    assert_true(b != 0);
    /* The old address never keeps A's name, whatever is there now. */
    assert_true(ss_symbols_resolve(s, a, false, f, 8) >= 1);
    assert_string_not_equal(f[0].fn->name, "sym_a_func");
    assert_ptr_not_equal(f[0].map, map_a);
    if (a == b) /* B landed where A was: the name must be B's */
        assert_string_equal(f[0].fn->name, "sym_b_func");
    assert_int_equal(ss_symbols_resolve(s, b, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_b_func", "dl_lib.c");
    assert_non_null(strstr(f[0].map->path, "libsym_b.so"));
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_true(c.flushes >= 1);
    assert_true(c.refreshes >= 2);
    printf("dlopen test: B %s A's old address\n", a == b ? "landed at" : "did not land at");
    dlclose(hb);
    ss_symbols_destroy(s);
}

/* A symbol without a size (_fini, hand-written assembly) covers at most
 * the rest of its section: read-only data after the code is not _fini. */
static const char after_code[64] = "read-only data, in no function";

static void test_sizeless_symbol(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    uint64_t a = (uint64_t)(uintptr_t)&after_code[8];
    assert_int_equal(ss_symbols_resolve(s, a, false, f, SS_SYMBOLS_MAX_INLINE), 1);
    assert_string_not_equal(f[0].fn->name, "_fini");
    assert_string_equal(f[0].fn->name, "unknown");
    assert_non_null(f[0].map); /* in the module, in no function */
    ss_symbols_destroy(s);
}

typedef struct seg_find {
    uint64_t addr;
    const char *path;
    uint64_t file_off; /* of addr */
    bool found;
} seg_find;

static int find_seg(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    seg_find *sf = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && sf->addr >= lo && sf->addr < lo + ph->p_memsz) {
            sf->path = info->dlpi_name;
            sf->file_off = sf->addr - lo + ph->p_offset;
            sf->found = true;
            return 1;
        }
    }
    return 0;
}

/* The code of a library mapped a second time far from its load (node does
 * so with V8's builtins): its own module, named as the same offset in the
 * load; the memory around it belongs to nothing. */
static void test_distant_remap(void **state) {
    (void)state;
    void *h = dlopen(SYM_LIB_A, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    uint64_t fn = (uint64_t)(uintptr_t)dlsym(h, "sym_a_func");
    seg_find sf = {.addr = fn};
    dl_iterate_phdr(find_seg, &sf);
    assert_true(sf.found);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t off = sf.file_off & ~(uint64_t)(page - 1);
    int fd = open(sf.path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    /* three pages of address space 8 GiB below the library (far from its
     * load, and inside the ranges a sanitizer lets a program map), the
     * file's page in the middle: the pages around it stay anonymous */
    uint64_t hint = (fn & ~(uint64_t)0xfffff) - (8ull << 30);
    char *area = mmap((void *)(uintptr_t)hint, 3 * (size_t)page, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (area == MAP_FAILED) {
        dlclose(h);
        skip(); /* something lives there already */
    }
    char *remap = mmap(area + page, (size_t)page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED,
                       fd, (off_t)off);
    assert_true(remap == area + page);
    close(fd);
    uint64_t again = (uint64_t)(uintptr_t)remap + (sf.file_off - off);

    ss_symbols *s = ss_symbols_create(); /* reads the maps as they are now */
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    assert_int_equal(ss_symbols_resolve(s, fn, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_a_func", "dl_lib.c");
    const ss_mapping *load = f[0].map;
    assert_int_equal(ss_symbols_resolve(s, again, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_a_func", "dl_lib.c");
    assert_non_null(f[0].map);
    assert_ptr_not_equal(f[0].map, load);
    assert_int_equal(f[0].map->start, (uint64_t)(uintptr_t)remap);
    assert_int_equal(f[0].map->limit, (uint64_t)(uintptr_t)remap + (uint64_t)page);
    assert_string_equal(f[0].map->build_id, load->build_id);
    assert_int_equal(f[0].addr, again);
    /* the anonymous pages on either side: in no module */
    assert_int_equal(ss_symbols_resolve(s, (uint64_t)(uintptr_t)area + 16, false, f, 8), 1);
    assert_fn(&f[0], "unknown", "unknown", "unknown");
    assert_null(f[0].map);
    assert_int_equal(ss_symbols_resolve(s, (uint64_t)(uintptr_t)remap + (uint64_t)page + 16,
                                        false, f, 8), 1);
    assert_fn(&f[0], "unknown", "unknown", "unknown");
    ss_symbols_destroy(s);
    munmap(area, 3 * (size_t)page);
    dlclose(h);
}

/* The modules one Dwfl holds, as "name lo-hi" lines. */
static int list_module(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr lo,
                       void *arg) {
    (void)mod;
    (void)user;
    char line[600];
    Dwarf_Addr hi;
    dwfl_module_info(mod, NULL, NULL, &hi, NULL, NULL, NULL, NULL);
    snprintf(line, sizeof line, "%s %llx-%llx\n", name, (unsigned long long)lo,
             (unsigned long long)hi);
    strncat(arg, line, 65535 - strlen(arg));
    return DWARF_CB_OK;
}

static char *modules_of(Dwfl *d) {
    char *text = calloc(1, 65536);
    assert_non_null(text);
    dwfl_getmodules(d, list_module, text, 0);
    return text;
}

/* Without remaps, the resolver's own reading of /proc/self/maps reports
 * the modules libdwfl's reader does (same names, same bounds), plus the
 * vDSO. */
static void test_maps_as_libdwfl(void **state) {
    (void)state;
    static const Dwfl_Callbacks cb = {.find_elf = dwfl_linux_proc_find_elf,
                                      .find_debuginfo = dwfl_standard_find_debuginfo};
    Dwfl *ours = dwfl_begin(&cb), *theirs = dwfl_begin(&cb);
    assert_non_null(ours);
    assert_non_null(theirs);
    ss_remap *r;
    size_t n;
    dwfl_report_begin(ours);
    assert_int_equal(ss_maps_report(ours, &r, &n), 0);
    dwfl_report_end(ours, NULL, NULL);
    ss_remaps_free(r, n);
    if (n) {
        /* a runtime that maps files again elsewhere (TSan maps hundreds):
         * libdwfl's reader then differs by design; the plain build runs
         * this comparison */
        dwfl_end(ours);
        dwfl_end(theirs);
        skip();
    }
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    dwfl_report_begin(theirs);
    assert_int_equal(dwfl_linux_proc_maps_report(theirs, f), 0);
    char vdso[48];
    snprintf(vdso, sizeof vdso, "[vdso: %d]", (int)getpid());
    uint64_t v = getauxval(AT_SYSINFO_EHDR);
    Dwfl_Module *m = dwfl_addrmodule(ours, v);
    assert_non_null(m);
    Dwarf_Addr lo, hi;
    dwfl_module_info(m, NULL, &lo, &hi, NULL, NULL, NULL, NULL);
    dwfl_report_module(theirs, vdso, lo, hi);
    dwfl_report_end(theirs, NULL, NULL);
    fclose(f);
    char *a = modules_of(ours), *b = modules_of(theirs);
    assert_true(strchr(a, '\n') != NULL);
    assert_string_equal(a, b);
    free(a);
    free(b);
    dwfl_end(ours);
    dwfl_end(theirs);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* JIT code named in /tmp/perf-<pid>.map, read again as it grows. */
static void test_perf_map(void **state) {
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    char *code = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(code != MAP_FAILED);
    uint64_t c = (uint64_t)(uintptr_t)code;
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    unlink(path);
    FILE *m = fopen(path, "w");
    assert_non_null(m);
    fprintf(m, "%llx 40 JS:*first /tmp/app.js:1:1\n", (unsigned long long)c);
    fprintf(m, "%llx 20 LazyCompile:~second /tmp/app.js:9:3\n", (unsigned long long)(c + 0x100));
    fflush(m);

    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    assert_int_equal(ss_symbols_resolve(s, c + 0x10, false, f, 8), 1);
    char file[32];
    snprintf(file, sizeof file, "perf-%d.map", (int)getpid());
    assert_fn(&f[0], "jit", "JS:*first /tmp/app.js:1:1", file);
    assert_null(f[0].map);
    assert_int_equal(ss_symbols_resolve(s, c + 0x110, true, f, 8), 1);
    assert_string_equal(f[0].fn->name, "LazyCompile:~second /tmp/app.js:9:3");
    /* between the two: nothing named it */
    assert_int_equal(ss_symbols_resolve(s, c + 0x80, false, f, 8), 1);
    assert_fn(&f[0], "unknown", "unknown", "unknown");
    /* not yet written: unknown, and cached so */
    uint64_t later = c + (uint64_t)page + 0x20;
    assert_int_equal(ss_symbols_resolve(s, later, false, f, 8), 1);
    assert_string_equal(f[0].fn->name, "unknown");

    /* the JIT writes more (a line in two pieces), and reuses the first
     * piece's address for new code: the later line wins */
    fprintf(m, "%llx 80 JS:*third /tmp/app", (unsigned long long)(c + (uint64_t)page));
    fflush(m);
    sleep_ms(250);
    assert_int_equal(ss_symbols_resolve(s, later, false, f, 8), 1);
    assert_string_equal(f[0].fn->name, "unknown"); /* half a line is no line */
    fprintf(m, ".js:20:5\n%llx 40 JS:*fourth /tmp/app.js:30:1\n", (unsigned long long)c);
    fclose(m);
    sleep_ms(250);
    assert_int_equal(ss_symbols_resolve(s, later, false, f, 8), 1);
    assert_string_equal(f[0].fn->name, "JS:*third /tmp/app.js:20:5");
    assert_int_equal(ss_symbols_resolve(s, c + 0x10, false, f, 8), 1);
    assert_string_equal(f[0].fn->name, "JS:*fourth /tmp/app.js:30:1");
    ss_symbols_destroy(s);

    /* a map this user does not own is not trusted (root: chown it away) */
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 1, 1), 0);
        s = ss_symbols_create();
        assert_int_equal(ss_symbols_resolve(s, c + 0x10, false, f, 8), 1);
        assert_string_equal(f[0].fn->name, "unknown");
        ss_symbols_destroy(s);
    }
    /* nor one reached through a symlink */
    char target[80];
    snprintf(target, sizeof target, "%s.real", path);
    rename(path, target);
    assert_int_equal(chown(target, geteuid(), getegid()), 0);
    assert_int_equal(symlink(target, path), 0);
    s = ss_symbols_create();
    assert_int_equal(ss_symbols_resolve(s, c + 0x10, false, f, 8), 1);
    assert_string_equal(f[0].fn->name, "unknown");
    ss_symbols_destroy(s);
    unlink(path);
    unlink(target);
    munmap(code, 2 * (size_t)page);
}

/* STACKSHOT_SYMBOLS_DEBUGINFO=false: separate debuginfo (libc6-dbg's
 * /usr/lib/debug files) is not read, so libc has names from its own
 * symbol table and no lines; the test binary's own DWARF still counts.
 * STACKSHOT_SYMBOLS_CACHE sizes the cache. */
static void test_config(void **state) {
    (void)state;
    setenv("STACKSHOT_SYMBOLS_DEBUGINFO", "false", 1);
    setenv("STACKSHOT_SYMBOLS_CACHE", "16", 1);
    ss_symbols *s = ss_symbols_create();
    unsetenv("STACKSHOT_SYMBOLS_DEBUGINFO");
    unsetenv("STACKSHOT_SYMBOLS_CACHE");
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    void *p = libc_nanosleep();
    int n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)p + 4, false, f, 8);
    assert_int_equal(n, 1);
    assert_non_null(strstr(f[0].fn->name, "nanosleep"));
    assert_string_equal(f[0].fn->file, "libc.so.6");
    assert_int_equal(f[0].line, 0);
    /* Names from the symbol-table index, anywhere inside the function. */
    static const char *const libc_fns[] = {"malloc", "free", "getenv", "opendir",
                                           "pthread_create"};
    /* libc's own definitions: under ASan, RTLD_DEFAULT finds its
     * interceptors first. */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(libc);
    for (size_t i = 0; i < sizeof libc_fns / sizeof *libc_fns; i++) {
        uint64_t a = (uint64_t)(uintptr_t)dlsym(libc, libc_fns[i]);
        assert_true(a != 0);
        for (uint64_t off = 1; off < 24; off += 7) {
            n = ss_symbols_resolve(s, a + off, true, f, 8);
            assert_int_equal(n, 1);
            if (!strstr(f[0].fn->name, libc_fns[i]))
                fail_msg("%s+%d resolved as %s", libc_fns[i], (int)off, f[0].fn->name);
            assert_string_equal(f[0].fn->file, "libc.so.6");
        }
    }
    dlclose(libc);
    int line = known_static_fn(0);
    n = ss_symbols_resolve(s, ra_seen, true, f, 8);
    assert_fn(&f[0], "global", "known_static_fn", "test_symbols.c");
    assert_int_equal(f[0].line, line);
    for (uint64_t i = 0; i < 64; i++)
        ss_symbols_resolve(s, (uint64_t)(uintptr_t)p + i, false, f, 8);
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_true(c.resets > 0);
    assert_true(c.entries <= 16);
    ss_symbols_destroy(s);
}

/* The vDSO has no file: libdwfl reads it from memory (the one module it
 * does). Some address in its first pages is clock_gettime's. */
static void test_vdso(void **state) {
    (void)state;
    uint64_t base = getauxval(AT_SYSINFO_EHDR);
    if (!base)
        skip();
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    bool found = false;
    for (uint64_t off = 0; off < 8192; off += 16) {
        int n = ss_symbols_resolve(s, base + off, false, f, 8);
        assert_int_equal(n, 1);
        if (off > 0 && !f[0].map)
            break; /* past its end (it is at least a page) */
        assert_non_null(f[0].map);
        assert_string_equal(f[0].map->path, "[vdso]");
        assert_string_equal(f[0].fn->file, "[vdso]");
        if (strstr(f[0].fn->name, "clock_gettime"))
            found = true;
    }
    assert_true(found);
    ss_symbols_destroy(s);
}

/* With DEBUGINFOD_URLS set (Debian's login shells set it), resolving a
 * stripped library (libc) must not ask a debuginfod server: the server
 * here is a listening socket that must see no connection. Meaningful
 * when libdebuginfod1 is installed (libdwfl loads it if present). */
static void test_no_debuginfod(void **state) {
    (void)state;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(ls, 16), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
    char url[64], cache[] = "/tmp/ss_symbols_dbgXXXXXX";
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(sa.sin_port));
    assert_non_null(mkdtemp(cache));
    setenv("DEBUGINFOD_URLS", url, 1);
    setenv("DEBUGINFOD_TIMEOUT", "2", 1);
    setenv("DEBUGINFOD_CACHE_PATH", cache, 1);

    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    void *p = libc_nanosleep();
    int n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)p, false, f, 8);
    assert_true(n >= 1);
    assert_non_null(strstr(f[n - 1].fn->name, "nanosleep"));
    n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)&dwfl_begin, false, f, 8);
    assert_string_equal(f[n - 1].fn->name, "dwfl_begin");
    ss_symbols_destroy(s);

    struct pollfd pf = {.fd = ls, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, 0), 0); /* nobody connected */
    close(ls);
    unsetenv("DEBUGINFOD_URLS");
    unsetenv("DEBUGINFOD_TIMEOUT");
    unsetenv("DEBUGINFOD_CACHE_PATH");
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    assert_int_equal(system(cmd), 0);
}

/* Separate debuginfo is looked for on this machine only: resolving a
 * module that has a build id but no debug file anywhere (libdw itself)
 * must not load libdebuginfod (libdw 0.188's own search dlopens it, with
 * libcurl, GnuTLS, Kerberos...). libc keeps its files and lines when
 * libc6-dbg is installed (found by build id); a library without a build id
 * finds its DWARF through .gnu_debuglink in .debug/ next to it, and a
 * debug file whose CRC is not the recorded one is not used. */
static bool in_maps(const char *what) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return found;
}

static void test_local_debuginfo(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)&dwfl_begin + 1, false, f, 8);
    assert_string_equal(f[n - 1].fn->name, "dwfl_begin");
    n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)libc_nanosleep() + 4, false, f, 8);
    const ss_frame *libc = &f[n - 1];
    assert_non_null(strstr(libc->fn->name, "nanosleep"));
    assert_null(dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_NOLOAD));
    assert_false(in_maps("libdebuginfod"));
    assert_false(in_maps("libcurl-gnutls")); /* debuginfod's */
    char dbg[160];
    snprintf(dbg, sizeof dbg, "/usr/lib/debug/.build-id/%.2s/%s.debug", libc->map->build_id,
             libc->map->build_id + 2);
    if (access(dbg, R_OK) == 0) { /* libc6-dbg */
        size_t len = strlen(libc->fn->file);
        if (len < 3 || strcmp(libc->fn->file + len - 2, ".c") != 0 || libc->line <= 0)
            fail_msg("libc's nanosleep at %s:%d with %s installed", libc->fn->file,
                     (int)libc->line, dbg);
    } else {
        printf("no %s: libc's lines not checked\n", dbg);
    }

    void *hl = dlopen(SYM_LIB_LINK, RTLD_NOW | RTLD_LOCAL);
    void *hb = dlopen(SYM_LIB_BADLINK, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(hl);
    assert_non_null(hb);
    uint64_t a = (uint64_t)(uintptr_t)dlsym(hl, "sym_link_func");
    assert_int_equal(ss_symbols_resolve(s, a, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_link_func", "dl_lib.c");
    assert_true(f[0].line > 0);
    a = (uint64_t)(uintptr_t)dlsym(hb, "sym_badlink_func");
    assert_int_equal(ss_symbols_resolve(s, a, false, f, 8), 1);
    assert_fn(&f[0], "global", "sym_badlink_func", "libsym_badlink.so");
    assert_int_equal(f[0].line, 0);
    dlclose(hl);
    dlclose(hb);
    ss_symbols_destroy(s);
}

/* Resident KiB of the mappings of `path` (/proc/self/smaps), -1 when it
 * is not mapped. */
static long mapped_rss_kb(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[1024];
    long kb = -1;
    bool in = false;
    size_t plen = strlen(path);
    while (f && fgets(line, sizeof line, f)) {
        long v;
        size_t len = strlen(line);
        const char *dash = strchr(line, '-'), *space = strchr(line, ' ');
        if (dash && space && dash < space) { /* a mapping's first line */
            in = len > plen + 1 && line[len - 1] == '\n' &&
                 strncmp(line + len - 1 - plen, path, plen) == 0;
            if (in && kb < 0)
                kb = 0;
        } else if (in && sscanf(line, "Rss: %ld kB", &v) == 1) {
            kb += v;
        }
    }
    if (f)
        fclose(f);
    return kb;
}

/* DWARF is read only for modules an address was resolved in: a stack
 * through libc alone reads libc's (with libc6-dbg) and not this test's
 * own, which has DWARF too. Once read, the compressed DWARF of libc6-dbg's
 * file (3.7 MiB of its 4) is no longer resident: libdw works on its
 * decompressed copy. */
static void test_dwarf_lazy(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    int n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)libc_nanosleep() + 4, false, f, 8);
    assert_true(n >= 1);
    const ss_frame *libc = &f[n - 1];
    char dbg[160];
    snprintf(dbg, sizeof dbg, "/usr/lib/debug/.build-id/%.2s/%s.debug", libc->map->build_id,
             libc->map->build_id + 2);
    bool has_dbg = access(dbg, R_OK) == 0;
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.dwarf_modules, has_dbg ? 1 : 0);
    if (has_dbg) {
        long kb = mapped_rss_kb(dbg);
        printf("libc6-dbg: %s resident %ld KiB, %llu KiB of compressed DWARF dropped\n", dbg, kb,
               (unsigned long long)c.trimmed / 1024);
        assert_true(kb >= 0); /* libdw maps it */
        if (kb > 1024)
            fail_msg("%s: %ld KiB resident after libdw read it", dbg, kb);
    } else {
        printf("no %s: only the laziness checked\n", dbg);
    }
    n = ss_symbols_resolve(s, (uint64_t)(uintptr_t)&known_static_fn, false, f, 8);
    assert_fn(&f[n - 1], "global", "known_static_fn", "test_symbols.c");
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.dwarf_modules, has_dbg ? 2 : 1);
    ss_symbols_destroy(s);
}

/* Once no lookup has missed for the idle delay, what libdw read is
 * released (libc6-dbg's debug file no longer mapped); cached addresses
 * keep their frames, a new address opens its module again and resolves
 * as before, a library unloaded meanwhile does not keep its name. */
static void test_release(void **state) {
    (void)state;
    void *h = dlopen(SYM_LIB_A, RTLD_NOW | RTLD_LOCAL); /* first: a dlopen empties the cache */
    assert_non_null(h);
    ss_symbols *s = ss_symbols_create();
    ss_frame f[SS_SYMBOLS_MAX_INLINE], g[SS_SYMBOLS_MAX_INLINE];
    uint64_t libc_a = (uint64_t)(uintptr_t)libc_nanosleep() + 4;
    int n = ss_symbols_resolve(s, libc_a, false, f, 8);
    assert_true(n >= 1);
    char dbg[160];
    snprintf(dbg, sizeof dbg, "/usr/lib/debug/.build-id/%.2s/%s.debug", f[n - 1].map->build_id,
             f[n - 1].map->build_id + 2);
    bool has_dbg = access(dbg, R_OK) == 0;
    known_static_fn(0);
    uint64_t own = ra_seen;
    int m = ss_symbols_resolve(s, own, true, g, 8);
    assert_fn(&g[m - 1], "global", "known_static_fn", "test_symbols.c");
    int line = g[m - 1].line;
    uint64_t a = (uint64_t)(uintptr_t)dlsym(h, "sym_a_func");
    assert_int_equal(ss_symbols_resolve(s, a, false, g, 8), 1);
    assert_fn(&g[0], "global", "sym_a_func", "dl_lib.c");
    if (has_dbg)
        assert_true(mapped_rss_kb(dbg) >= 0);

    ss_symbols_idle(s); /* within the delay: nothing happens */
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.releases, 0);
    ss_symbols_set_idle(s, 1);
    ss_symbols_idle(s);
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.releases, 1);
    if (has_dbg && mapped_rss_kb(dbg) >= 0)
        fail_msg("%s still mapped after the release", dbg);

    /* cached: the same frames, no miss */
    uint64_t misses = c.misses;
    ss_frame f2[SS_SYMBOLS_MAX_INLINE];
    assert_int_equal(ss_symbols_resolve(s, libc_a, false, f2, 8), n);
    assert_memory_equal(f, f2, (size_t)n * sizeof *f);
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.misses, misses);
    assert_int_equal(c.reloads, 0);

    /* the same pc, another key: served from its run of code, libdw not
     * asked (nothing opened again) */
    m = ss_symbols_resolve(s, own - 1, false, g, 8);
    assert_fn(&g[m - 1], "global", "known_static_fn", "test_symbols.c");
    assert_int_equal(g[m - 1].line, line);
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.misses, misses);
    assert_int_equal(c.reloads, 0);
    /* new code: the modules open again, same names and lines */
    ss_symbols_set_spans(s, false);
    m = ss_symbols_resolve(s, own - 1, false, g, 8);
    assert_fn(&g[m - 1], "global", "known_static_fn", "test_symbols.c");
    assert_int_equal(g[m - 1].line, line);
    n = ss_symbols_resolve(s, libc_a + 1, false, f2, 8);
    assert_non_null(strstr(f2[n - 1].fn->name, "nanosleep"));
    assert_string_equal(f2[n - 1].fn->file, f[n - 1 < 8 ? n - 1 : 0].fn->file);
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.reloads, 1);

    /* released again, then the library goes: its address is no longer
     * named after it */
    ss_symbols_idle(s); /* the delay doubled: 2 ns */
    ss_symbols_counters_get(s, &c);
    assert_int_equal(c.releases, 2);
    dlclose(h);
    assert_int_equal(ss_symbols_resolve(s, a, false, g, 8), 1);
    if (!in_maps("/libsym_a.so")) /* unloaded (not always under valgrind) */
        assert_true(g[0].map == NULL || strcmp(g[0].fn->name, "sym_a_func") != 0);
    ss_symbols_destroy(s);
}

/* Spans (symbols.c): every address of a stretch of code resolves, with
 * runs of code remembered, to exactly what a resolver without them finds
 * (libdw for each address): this file's functions, an -O2 inline chain, C++
 * scopes, libc's malloc and qsort (with libc6-dbg: DWARF and inlined
 * calls; without: its symbol table) and libcmocka (its symbol table). Leaf
 * and return addresses. */
static void assert_same_frames(ss_symbols *s, ss_symbols *ref, uint64_t a, bool ret) {
    ss_frame f[SS_SYMBOLS_MAX_INLINE], g[SS_SYMBOLS_MAX_INLINE];
    memset(f, 0, sizeof f);
    memset(g, 0, sizeof g);
    int n = ss_symbols_resolve(s, a, ret, f, SS_SYMBOLS_MAX_INLINE);
    int m = ss_symbols_resolve(ref, a, ret, g, SS_SYMBOLS_MAX_INLINE);
    if (n != m)
        fail_msg("%#llx ret=%d: %d frames, %d without spans", (unsigned long long)a, ret, n, m);
    for (int i = 0; i < n; i++)
        if (f[i].fn != g[i].fn || f[i].line != g[i].line || f[i].inlined != g[i].inlined ||
            f[i].map != g[i].map || f[i].addr != g[i].addr)
            fail_msg("%#llx ret=%d frame %d: %s %s:%d (inlined %d) with spans, %s %s:%d "
                     "(inlined %d) without",
                     (unsigned long long)a, ret, i, f[i].fn->name, f[i].fn->file, f[i].line,
                     f[i].inlined, g[i].fn->name, g[i].fn->file, g[i].line, g[i].inlined);
}

static void test_spans_agree(void **state) {
    (void)state;
    ss_symbols *s = ss_symbols_create(), *ref = ss_symbols_create();
    assert_non_null(s);
    assert_non_null(ref);
    ss_symbols_set_spans(ref, false);
    const struct {
        uint64_t start;
        size_t len;
    } code[] = {
        {(uint64_t)(uintptr_t)outer_caller, 256},
        {(uint64_t)(uintptr_t)known_static_fn, 192},
        {(uint64_t)(uintptr_t)cpp_call_scopes, 768},
        {(uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "malloc"), 2048},
        {(uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "qsort"), 1024},
        /* a library without DWARF (no debuginfo package): its symbols */
        {(uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "_cmocka_run_group_tests"), 4096},
    };
    uint64_t total = 0;
    for (size_t k = 0; k < sizeof code / sizeof code[0]; k++) {
        assert_true(code[k].start != 0);
        for (uint64_t a = code[k].start; a < code[k].start + code[k].len; a++) {
            assert_same_frames(s, ref, a, false);
            assert_same_frames(s, ref, a + 1, true);
            total += 2;
        }
    }
    ss_symbols_counters c, r;
    ss_symbols_counters_get(s, &c);
    ss_symbols_counters_get(ref, &r);
    assert_int_equal(r.span_hits, 0);
    assert_int_equal(r.misses, total);
    /* most addresses were served by a run of code met before */
    if (c.span_hits * 2 < total)
        fail_msg("%llu of %llu addresses from spans", (unsigned long long)c.span_hits,
                 (unsigned long long)total);
    assert_int_equal(c.hits + c.misses, total);
    ss_symbols_destroy(s);
    ss_symbols_destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_function),
        cmocka_unit_test(test_return_address),
        cmocka_unit_test(test_libc),
        cmocka_unit_test(test_inline_chain),
        cmocka_unit_test(test_cxx),
        cmocka_unit_test(test_unknown),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cache_bound),
        cmocka_unit_test(test_dlopen_dlclose),
        cmocka_unit_test(test_sizeless_symbol),
        cmocka_unit_test(test_distant_remap),
        cmocka_unit_test(test_maps_as_libdwfl),
        cmocka_unit_test(test_perf_map),
        cmocka_unit_test(test_vdso),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_no_debuginfod),
        cmocka_unit_test(test_local_debuginfo),
        cmocka_unit_test(test_dwarf_lazy),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_spans_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
