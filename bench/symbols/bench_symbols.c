/* bench_symbols.c: cost of the symbol resolver, per lookup.
 *
 *   cold   a fresh resolver: every address is a miss and the first ones
 *          also open the ELF files and parse the DWARF they need;
 *   miss   libdw warm (ELF and DWARF parsed) but the address not cached:
 *          a 16-entry cache that the working set keeps resetting;
 *   hot    every address cached: the steady state of a running program;
 *   leaf sweep  every byte of 512 bytes of each function above, taken as
 *          a leaf address (where a running thread is interrupted): how
 *          many need libdw with runs of code (symbols.c, "spans") and
 *          without, and the time of the sweep, with libdw warm.
 *
 * Baseline, measured in the same run: glibc's dladdr() on the same
 * addresses (a dynamic-symbol lookup, no files or lines). Figures are
 * lookups per second and ratios to the baseline; nothing is asserted. */
#define _GNU_SOURCE /* dladdr */
#include "agent/config.h"
#include "agent/log.h"
#include "agent/round.h"
#include "samplers/symbols_internal.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_ADDRS 4096

static uint64_t addrs[MAX_ADDRS];
static size_t naddrs;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Addresses spread through functions of libc (no DWARF: symbol table
 * only) and of the agent's own code linked here (with DWARF lines). */
static void collect(void) {
    static const char *const libc_fns[] = {
        "nanosleep", "malloc", "free", "memcpy", "strlen", "printf", "fopen",
        "read", "write", "pthread_create", "pthread_mutex_lock", "qsort",
        "getenv", "snprintf", "strtol", "clock_gettime", "epoll_wait", "poll"};
    for (size_t i = 0; i < sizeof libc_fns / sizeof *libc_fns; i++) {
        void *p = dlsym(RTLD_DEFAULT, libc_fns[i]);
        for (int off = 0; p && off < 64 && naddrs < MAX_ADDRS; off += 4)
            addrs[naddrs++] = (uint64_t)(uintptr_t)p + (uint64_t)off;
    }
    void *own[] = {(void *)ss_symbols_resolve, (void *)ss_funcinfo_intern,
                   (void *)ss_mapping_intern, (void *)ss_intern,
                   (void *)ss_symbols_create_sized, (void *)ss_round_builder_add_frame,
                   (void *)ss_config_load, (void *)ss_log};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        for (int off = 0; off < 256 && naddrs < MAX_ADDRS; off += 4)
            addrs[naddrs++] = (uint64_t)(uintptr_t)own[i] + (uint64_t)off;
}

/* Resident memory in kB (VmRSS), to see what libdw keeps of the files. */
/* Every byte of 512 bytes of each function the addresses start in, as
 * leaf addresses, once: seconds taken, and the resolver's misses. */
static double sweep(ss_symbols *s, uint64_t *misses) {
    double t0 = now();
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    for (size_t i = 0; i < naddrs; i++) {
        if (i > 0 && addrs[i] - addrs[i - 1] == 4)
            continue; /* the same function as the one before */
        for (uint64_t a = addrs[i]; a < addrs[i] + 512; a++)
            ss_symbols_resolve(s, a, false, f, SS_SYMBOLS_MAX_INLINE);
    }
    double secs = now() - t0;
    ss_symbols_counters c;
    ss_symbols_counters_get(s, &c);
    *misses = c.misses;
    return secs;
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static double run(ss_symbols *s, int passes) {
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    double t0 = now();
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < naddrs; i++)
            ss_symbols_resolve(s, addrs[i], true, f, SS_SYMBOLS_MAX_INLINE);
    return (double)passes * (double)naddrs / (now() - t0);
}

static double run_dladdr(int passes) {
    Dl_info di;
    volatile size_t sink = 0;
    double t0 = now();
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < naddrs; i++)
            if (dladdr((void *)(uintptr_t)(addrs[i] - 1), &di) && di.dli_sname)
                sink += strlen(di.dli_sname);
    (void)sink;
    return (double)passes * (double)naddrs / (now() - t0);
}

/* A big symbol table without DWARF: libjvm.so (~80 000 symbols), when a
 * JDK is installed. Misses in it through the resolver's symbol index vs.
 * libdwfl's own dwfl_module_addrinfo (a scan of the whole table per call)
 * on the same addresses, in a Dwfl of its own. */
static void bench_big_symtab(void) {
    static const char *const jvms[] = {
        "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        "/usr/lib/jvm/temurin-25-jdk-amd64/lib/server/libjvm.so"};
    void *h = NULL;
    const char *path = NULL;
    for (size_t i = 0; !h && i < sizeof jvms / sizeof *jvms; i++)
        if ((h = dlopen(jvms[i], RTLD_NOW | RTLD_LOCAL)))
            path = jvms[i];
    if (!h) {
        printf("  (no libjvm.so: big symbol table case skipped)\n");
        return;
    }
    uint64_t base = (uint64_t)(uintptr_t)dlsym(h, "JNI_CreateJavaVM");
    enum { N = 300 };
    uint64_t a[N];
    for (int i = 0; i < N; i++)
        a[i] = base - 3000000 + (uint64_t)i * 20011;

    ss_symbols *s = ss_symbols_create_sized(16);
    ss_frame f[SS_SYMBOLS_MAX_INLINE];
    ss_symbols_resolve(s, base, false, f, 8); /* builds the index */
    double t0 = now();
    for (int i = 0; i < N; i++)
        ss_symbols_resolve(s, a[i], false, f, 8);
    double ours = (now() - t0) / N;
    ss_symbols_destroy(s);

    char *dbg = NULL;
    Dwfl_Callbacks cb = {.find_elf = dwfl_linux_proc_find_elf,
                         .find_debuginfo = dwfl_standard_find_debuginfo,
                         .debuginfo_path = &dbg};
    Dwfl *d = dwfl_begin(&cb);
    dwfl_linux_proc_report(d, getpid());
    dwfl_report_end(d, NULL, NULL);
    GElf_Off off;
    GElf_Sym sym;
    dwfl_module_addrinfo(dwfl_addrmodule(d, base), base, &off, &sym, NULL, NULL, NULL);
    t0 = now();
    for (int i = 0; i < N; i++) {
        Dwfl_Module *m = dwfl_addrmodule(d, a[i]);
        if (m)
            dwfl_module_addrinfo(m, a[i], &off, &sym, NULL, NULL, NULL);
    }
    double theirs = (now() - t0) / N;
    dwfl_end(d);
    printf("  big symbol table (%s):\n", path);
    printf("    dwfl_module_addrinfo %10.1f us/lookup  1.00x\n", theirs * 1e6);
    printf("    resolver miss        %10.1f us/lookup  %.3fx\n", ours * 1e6,
           ours / theirs);
}

int main(void) {
    collect();
    double base = run_dladdr(20);

    long rss0 = rss_kb();
    double t0 = now();
    ss_symbols *cold = ss_symbols_create();
    double create_ms = (now() - t0) * 1e3;
    double cold_rate = run(cold, 1);
    long rss1 = rss_kb();

    ss_symbols *small = ss_symbols_create_sized(16);
    run(small, 1); /* parse what the addresses need */
    double miss_rate = run(small, 3);

    double hot_rate = run(cold, 50);
    ss_symbols_counters c;
    ss_symbols_counters_get(cold, &c);

    printf("symbols benchmark: %zu distinct addresses (libc + agent code)\n", naddrs);
    printf("  baseline dladdr      %12.0f lookups/s  1.00x\n", base);
    printf("  create (maps + Dwfl) %12.2f ms\n", create_ms);
    printf("  cold (fresh)         %12.0f lookups/s  %.3fx\n", cold_rate, cold_rate / base);
    printf("  miss (libdw warm)    %12.0f lookups/s  %.3fx\n", miss_rate, miss_rate / base);
    printf("  hot (cached)         %12.0f lookups/s  %.3fx\n", hot_rate, hot_rate / base);
    printf("  memory: +%ld kB resident after the cold pass (ELF + DWARF read)\n",
           rss1 - rss0);
    printf("  hot / cold           %12.1fx\n", hot_rate / cold_rate);
    printf("  cache: %llu hits, %llu misses, %llu entries, %llu resets\n",
           (unsigned long long)c.hits, (unsigned long long)c.misses,
           (unsigned long long)c.entries, (unsigned long long)c.resets);
    /* fresh resolvers, libdw already warm in this process's page cache */
    ss_symbols *runs = ss_symbols_create(), *plain = ss_symbols_create();
    ss_symbols_set_spans(plain, false);
    run(runs, 1);
    run(plain, 1); /* both open the same modules first */
    ss_symbols_counters r0, p0;
    ss_symbols_counters_get(runs, &r0);
    ss_symbols_counters_get(plain, &p0);
    uint64_t rm, pm;
    double ps = sweep(plain, &pm), rs = sweep(runs, &rm);
    rm -= r0.misses;
    pm -= p0.misses;
    printf("  leaf sweep, with runs of code    %8llu misses %8.1f ms\n", (unsigned long long)rm,
           rs * 1e3);
    printf("  leaf sweep, without (a miss each) %7llu misses %8.1f ms  %.2fx the misses, "
           "%.2fx the time\n",
           (unsigned long long)pm, ps * 1e3, rm ? (double)pm / (double)rm : 0.0,
           rs > 0 ? ps / rs : 0.0);
    ss_symbols_destroy(runs);
    ss_symbols_destroy(plain);
    ss_symbols_destroy(small);
    ss_symbols_destroy(cold);
    bench_big_symtab();
    return 0;
}
