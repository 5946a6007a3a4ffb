/* otel_thread.c: reading each thread's OpenTelemetry thread context
 * (OTEP 4947, layout in otel_ctx.h).
 *
 * A module of the host that publishes thread context exports the TLS
 * symbol otel_thread_ctx_v1 in its dynamic symbol table: an OpenTelemetry
 * SDK, or libstackshot.so itself (stackshot_set_span_context). Sources
 * are found on the sampler thread (ss_otel_refresh, before each round;
 * again only when a module was loaded or unloaded: dl_iterate_phdr's
 * adds/subs counters): for each module with a PT_TLS segment, its dynamic
 * symbol table (read in place through its hash table, inside
 * dl_iterate_phdr, which keeps the module loaded) gives the variable's
 * offset in the module's TLS block; __tls_get_addr on the sampler thread
 * then gives its block, which says whether the block is in the static TLS
 * area. No dlopen: dlopen(RTLD_NOLOAD) of a module that is only another
 * module's dependency gives it a search list of its own that dlclose
 * never frees, and dlopen from dl_iterate_phdr's callback takes the
 * loader's locks in the opposite order of a host's dlopen. Every TLS model
 * ends up there: TLSDESC and traditional global dynamic (a block per
 * thread, reached through the thread's DTV), initial-exec and local-exec
 * (the block at a fixed offset from the thread pointer).
 *
 * A thread's variable, from its thread pointer tp (x86-64 glibc: the
 * %fs base, which is pthread_self()): its DTV is at tp + 8, dtv[-1]
 * holds the DTV's length, dtv[modid] the address of the module's block
 * (16-byte entries; (void *)-1 or NULL: not allocated for that thread).
 * A module in the static TLS area whose DTV entry the thread has not
 * updated (loaded by dlopen after the thread started, then reached only
 * through initial-exec code) is found at tp - (the same offset as the
 * sampler thread's). No call into the dynamic linker
 * (__tls_get_addr may allocate, and is not async-signal-safe): only loads.
 *
 * Two readers share one path (slot_of, read_slot): the signal handler reads its
 * own thread with plain loads (the thread is stopped under it, so the
 * record is whatever the writer left: whole or marked invalid, as the
 * OTEP's protocol makes it); the sampler reads a thread asleep in a system
 * call through the agent's own-memory reader (samplers/self_mem.c),
 * which cannot fault. The record is copied when its valid byte is 1; a
 * NULL pointer, another valid value, or an unreadable byte means no span.
 *
 * The sources table is replaced, never changed in place, and the old
 * ones are kept (a late handler may still read one) in a ring of 64. */
#include "agent/otel_ctx.h"
#include "agent/span.h"

#include <pthread.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SOURCES 8u
#define MAX_TABLES 64u /* tables kept for late handlers, reused in turn */
#define TLS_UNALLOCATED ((uint64_t)-1)

typedef struct source {
    const atomic_int *used; /* libstackshot.so's: read only once it is set */
    uint64_t modid;      /* 0: static only (the core's own writer) */
    uint64_t off;        /* of the variable in the module's block */
    int64_t static_off;  /* block - tp when the block is in static TLS */
    bool is_static;
} source;

typedef struct table {
    uint32_t n;
    source s[MAX_SOURCES];
} table;

static table tables[MAX_TABLES];
static _Atomic(const table *) current;
static uint32_t n_tables;
static unsigned long long seen_adds, seen_subs;
static bool scanned, own_in;

typedef long (*reader)(void *dst, uint64_t addr, size_t n);

/* The handler's reader: its own thread's memory, plain loads (its own
 * TLS, DTV and the record its writer pointed at). */
static long read_own(void *dst, uint64_t addr, size_t n) {
    memcpy(dst, (const void *)(uintptr_t)addr, n);
    return (long)n;
}

static bool read_u64(reader rd, uint64_t addr, uint64_t *v) {
    if (rd == read_own) { /* no call through a pointer in the handler */
        memcpy(v, (const void *)(uintptr_t)addr, 8);
        return true;
    }
    return rd(v, addr, 8) == 8;
}

static uint64_t block_of(const source *src, uint64_t tp, reader rd) {
#if defined(__x86_64__)
    if (src->modid) {
        uint64_t dtv, len, val;
        if (read_u64(rd, tp + 8, &dtv) && dtv >= 16 && read_u64(rd, dtv - 16, &len) &&
            src->modid <= len && read_u64(rd, dtv + 16 * src->modid, &val) && val != 0 &&
            val != TLS_UNALLOCATED)
            return val;
    }
    if (src->is_static)
        return tp + (uint64_t)src->static_off;
#else
    (void)src, (void)tp, (void)rd;
#endif
    return 0;
}

/* A record's fixed part (the first 28 bytes of ss_otel_rec). */
typedef struct head {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t valid;
    uint8_t trace_flags;
    uint16_t attrs_size;
} head;

_Static_assert(sizeof(head) == SS_OTEL_REC_HEAD, "OTEP 4947 layout");

/* The address of the thread's variable for one source (0: none yet). */
static uint64_t slot_of(const source *src, uint64_t tp, reader rd) {
    if (src->used && !atomic_load_explicit(src->used, memory_order_relaxed))
        return 0;
    uint64_t block = block_of(src, tp, rd);
    return block ? block + src->off : 0;
}

/* The record at a variable: its head into *h, and up to cap bytes of
 * attrs-data into attrs (*n of them). */
static bool read_slot(uint64_t slot, reader rd, head *h, uint8_t *attrs, size_t cap,
                      size_t *n) {
    uint64_t rec;
    *n = 0;
    if (!slot || !read_u64(rd, slot, &rec) || rec == 0 || (rec & 1))
        return false;
    if (rd != read_own && cap) {
        /* through the kernel each read is a system call: the head and the
         * room for attrs-data at once (a short read past the record's
         * mapping still gives the head) */
        uint8_t buf[SS_OTEL_REC_HEAD + SS_OTEL_ATTRS_MAX];
        size_t want_all = SS_OTEL_REC_HEAD + (cap < SS_OTEL_ATTRS_MAX ? cap : SS_OTEL_ATTRS_MAX);
        long got = rd(buf, rec, want_all);
        if (got < (long)SS_OTEL_REC_HEAD)
            return false;
        memcpy(h, buf, sizeof *h);
        if (h->valid != 1)
            return false;
        size_t want = h->attrs_size < want_all - SS_OTEL_REC_HEAD ? h->attrs_size
                                                                   : want_all - SS_OTEL_REC_HEAD;
        if ((size_t)got >= SS_OTEL_REC_HEAD + want) {
            memcpy(attrs, buf + SS_OTEL_REC_HEAD, want);
            *n = want;
        } else if (rd(attrs, rec + SS_OTEL_REC_HEAD, want) == (long)want) {
            *n = want;
        }
        return true;
    }
    if (rd(h, rec, sizeof *h) != (long)sizeof *h || h->valid != 1)
        return false;
    size_t want = h->attrs_size < cap ? h->attrs_size : cap;
    if (want && rd(attrs, rec + SS_OTEL_REC_HEAD, want) == (long)want)
        *n = want;
    return true;
}

bool ss_otel_read_self(uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags,
                       uint8_t *attrs, size_t cap, uint16_t *n_attrs) {
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    uint64_t tp = (uint64_t)(uintptr_t)pthread_self();
    head h;
    size_t n;
    for (uint32_t i = 0; t && i < t->n; i++) {
        if (read_slot(slot_of(&t->s[i], tp, read_own), read_own, &h, attrs, cap, &n)) {
            memcpy(trace_id, h.trace_id, 16);
            memcpy(span_id, h.span_id, 8);
            *flags = h.trace_flags;
            *n_attrs = (uint16_t)n;
            return true;
        }
    }
    return false;
}

/* A thread's variable of a source stays where it is found (its DTV
 * entry, once allocated, changes only with dlclose, which makes a new
 * table): kept per thread by the caller, the read of a thread asleep is
 * then two reads (the pointer, the record's head). */
bool ss_otel_read_thread(uint64_t pthread, long (*rd)(void *, uint64_t, size_t),
                         ss_otel_cache *cache, ss_otel_rec *out) {
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    out->valid = 0;
    if (!t || !pthread)
        return false;
    if (cache->table != t || cache->pthread != pthread) {
        memset(cache, 0, sizeof *cache);
        cache->table = t;
        cache->pthread = pthread;
    }
    head h;
    size_t n;
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->s[i].used && !atomic_load_explicit(t->s[i].used, memory_order_relaxed))
            continue;
        uint64_t slot = i < SS_OTEL_CACHE ? cache->slot[i] : 0;
        if (!slot) {
            slot = slot_of(&t->s[i], pthread, rd);
            if (i < SS_OTEL_CACHE)
                cache->slot[i] = slot;
        }
        if (read_slot(slot, rd, &h, out->attrs, SS_OTEL_ATTRS_MAX, &n)) {
            memcpy(out->trace_id, h.trace_id, 16);
            memcpy(out->span_id, h.span_id, 8);
            out->valid = 1;
            out->trace_flags = h.trace_flags;
            out->attrs_size = (uint16_t)n;
            return true;
        }
    }
    return false;
}

bool ss_otel_have_sources(void) {
    const table *t = atomic_load_explicit(&current, memory_order_acquire);
    return t && t->n;
}

/* ---- finding the sources (sampler thread) ---------------------------- */

typedef struct scan {
    unsigned long long adds, subs;
} scan;

static int count_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    scan *sc = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        sc->adds = info->dlpi_adds;
        sc->subs = info->dlpi_subs;
    }
    return 1;
}

static uint64_t tls_memsz(const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS)
            return info->dlpi_phdr[i].p_memsz;
    return 0;
}

static void add_source(table *t, const source *s) {
    for (uint32_t i = 0; i < t->n; i++)
        if (t->s[i].modid == s->modid)
            return;
    if (t->n < MAX_SOURCES)
        t->s[t->n++] = *s;
}

/* The dynamic section's address d_ptr of module base: relocated in place
 * by the dynamic linker for most modules, left relative for some (the
 * vDSO). */
static uint64_t dyn_ptr(ElfW(Addr) base, ElfW(Addr) ptr) {
    return ptr < base ? base + ptr : ptr;
}

/* The defined dynamic symbol called name in the module, or NULL: through
 * DT_GNU_HASH, else DT_HASH. */
static const ElfW(Sym) *find_dynsym(const struct dl_phdr_info *info, const char *name) {
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return NULL;
    const ElfW(Sym) *sym = NULL;
    const char *str = NULL;
    const uint32_t *gnu = NULL, *sysv = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        uint64_t v = dyn_ptr(info->dlpi_addr, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_SYMTAB)
            sym = (const ElfW(Sym) *)(uintptr_t)v;
        else if (dyn->d_tag == DT_STRTAB)
            str = (const char *)(uintptr_t)v;
        else if (dyn->d_tag == DT_GNU_HASH)
            gnu = (const uint32_t *)(uintptr_t)v;
        else if (dyn->d_tag == DT_HASH)
            sysv = (const uint32_t *)(uintptr_t)v;
    }
    if (!sym || !str)
        return NULL;
    if (gnu) {
        uint32_t h = 5381;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++)
            h = h * 33 + *c;
        uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
        const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu + 4) + bloom_size);
        const uint32_t *chain = buckets + nbuckets;
        if (!nbuckets)
            return NULL;
        uint32_t i = buckets[h % nbuckets];
        if (i < symoffset)
            return NULL;
        for (;; i++) {
            uint32_t h2 = chain[i - symoffset];
            if ((h | 1) == (h2 | 1) && !strcmp(str + sym[i].st_name, name))
                return sym[i].st_shndx != SHN_UNDEF ? &sym[i] : NULL;
            if (h2 & 1)
                return NULL;
        }
    }
    if (sysv) {
        uint32_t h = 0;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
            h = (h << 4) + *c;
            uint32_t g = h & 0xf0000000u;
            if (g)
                h ^= g >> 24;
            h &= ~g;
        }
        uint32_t nbucket = sysv[0];
        const uint32_t *bucket = sysv + 2, *chain = bucket + nbucket;
        if (!nbucket)
            return NULL;
        for (uint32_t i = bucket[h % nbucket]; i; i = chain[i])
            if (!strcmp(str + sym[i].st_name, name))
                return sym[i].st_shndx != SHN_UNDEF ? &sym[i] : NULL;
    }
    return NULL;
}

/* Pass 1: every module with TLS that exports otel_thread_ctx_v1 (its own
 * TLS symbol: the module id and offset are the module's). */
#define MAX_FOUND 32u

typedef struct found {
    source s[MAX_FOUND];
    uint32_t n;
} found;

static int module_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    found *f = arg;
    if (!info->dlpi_tls_modid || !tls_memsz(info) || f->n == MAX_FOUND)
        return 0;
    const ElfW(Sym) *var = find_dynsym(info, "otel_thread_ctx_v1");
    if (!var || ELF64_ST_TYPE(var->st_info) != STT_TLS)
        return 0;
    /* libstackshot.so's own writer says when a thread first used it */
    const ElfW(Sym) *used = find_dynsym(info, "stackshot_span_context_used");
    source *s = &f->s[f->n++];
    memset(s, 0, sizeof *s);
    s->modid = info->dlpi_tls_modid;
    s->off = var->st_value;
    s->used = used ? (const atomic_int *)(uintptr_t)(info->dlpi_addr + used->st_value) : NULL;
    return 0;
}

typedef struct tls_index {
    unsigned long modid, offset;
} tls_index;

/* Where the source's block lies for the sampler thread: in the static TLS
 * area (a fixed offset from every thread's pointer) or not. */
static void place_source(source *s, uint64_t tp, uint64_t static_size) {
    static void *(*tls_get_addr)(tls_index *);
    if (!tls_get_addr)
        tls_get_addr = (void *(*)(tls_index *))dlsym(RTLD_DEFAULT, "__tls_get_addr");
    if (!tls_get_addr)
        return;
    tls_index ti = {.modid = (unsigned long)s->modid, .offset = 0};
    uint64_t data = (uint64_t)(uintptr_t)tls_get_addr(&ti);
    if (!data)
        return;
    s->static_off = (int64_t)(data - tp);
    /* the static TLS area ends at tp (x86-64: it lies just below) */
    s->is_static = data < tp && tp - data <= static_size;
}

/* glibc's static TLS size, when it says (GLIBC_PRIVATE, looked up by name:
 * without it a module is read through DTVs only). */
static uint64_t static_tls_size(void) {
    void (*info)(size_t *, size_t *) =
        (void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
    size_t size = 0, align = 0;
    if (info)
        info(&size, &align);
    return size;
}

void ss_otel_refresh(void) {
    scan sc;
    memset(&sc, 0, sizeof sc);
    dl_iterate_phdr(count_cb, &sc);
    ptrdiff_t own_off;
    size_t own_size;
    bool own = ss_span_tls_where(&own_off, &own_size);
    if (scanned && sc.adds == seen_adds && sc.subs == seen_subs && own == own_in)
        return;
    /* a ring: the table rewritten is MAX_TABLES rescans old (at most one
     * rescan per round), long past any handler that could read it */
    table *t = &tables[n_tables++ % MAX_TABLES];
    memset(t, 0, sizeof *t);
    uint64_t tp = (uint64_t)(uintptr_t)pthread_self(), static_size = static_tls_size();
    found f = {.n = 0};
    dl_iterate_phdr(module_cb, &f);
    for (uint32_t i = 0; i < f.n; i++) {
        place_source(&f.s[i], tp, static_size);
        add_source(t, &f.s[i]);
    }
    if (own) {
        /* the core's own writer (agent/span.c): static TLS, no module id
         * needed; registered once a thread used it */
        source o = {.modid = 0, .off = 0, .static_off = own_off, .is_static = true};
        add_source(t, &o);
    }
    seen_adds = sc.adds;
    seen_subs = sc.subs;
    own_in = own;
    scanned = true;
    atomic_store_explicit(&current, t, memory_order_release);
}
