/* unwind_cfi.c: DWARF call frame information of the process's own modules,
 * compiled per address into rules the walker (unwind.c) applies.
 *
 * Where the CFI comes from: dl_iterate_phdr lists every loaded module (the
 * vDSO included) with its PT_GNU_EH_FRAME, the .eh_frame_hdr the linker
 * wrote: a sorted table of (first address, FDE) pairs. An address is
 * looked up there, its FDE and CIE are read (both small), the CIE's
 * initial instructions and the FDE's instructions run up to the address,
 * and the row in effect is kept as a compact rule: how to find the CFA,
 * which registers are saved where, whether the return address is
 * undefined (the thread's entry) and whether the frame is a signal frame.
 * (DWARF 5, section 6.4; the .eh_frame layout of the LSB, "Exception
 * Frames".)
 *
 * Rules are cached by address (stacks repeat: a steady program shows the
 * same few hundred return addresses round after round), so a step is a
 * hash lookup. The cache and its expression bytes are emptied when full
 * and when a module is unloaded (the loader's dlpi_subs moved), so an
 * address never keeps the rule of a library that is gone.
 *
 * The module list is read under the loader's lock (dl_iterate_phdr), where
 * the headers may be read directly. Everything read later (the table, the
 * FDEs and CIEs) is read with ss_uw_read_memory (self_mem.c): a module
 * unloaded meanwhile gives an error, not a fault. */
#include "agent/grow.h"
#include "samplers/unwind.h"

#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a cursor over bytes read from address `addr` ------------------ */

typedef struct cursor {
    const uint8_t *p, *end;
    uint64_t addr; /* process address of p (for pc-relative pointers) */
    bool bad;
} cursor;

static void skip(cursor *c, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        c->bad = true;
        c->p = c->end;
        return;
    }
    c->p += n;
    c->addr += n;
}

static uint64_t rd_fixed(cursor *c, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        c->bad = true;
        c->p = c->end;
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)c->p[i] << (8 * i); /* x86-64: little-endian */
    skip(c, n);
    return v;
}

static uint8_t rd_u8(cursor *c) { return (uint8_t)rd_fixed(c, 1); }

static uint64_t rd_uleb(cursor *c) {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (c->p >= c->end) {
            c->bad = true;
            return 0;
        }
        uint8_t b = *c->p;
        skip(c, 1);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t rd_sleb(cursor *c) {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        if (c->p >= c->end) {
            c->bad = true;
            return 0;
        }
        b = *c->p;
        skip(c, 1);
        if (shift < 64)
            v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40))
        v |= -((int64_t)1 << shift);
    return v;
}

enum {
    PE_ABSPTR = 0x00, PE_ULEB = 0x01, PE_U2 = 0x02, PE_U4 = 0x03, PE_U8 = 0x04,
    PE_SLEB = 0x09, PE_S2 = 0x0a, PE_S4 = 0x0b, PE_S8 = 0x0c,
    PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80, PE_OMIT = 0xff,
};

/* An encoded pointer (DW_EH_PE_*). `datarel` is the base of datarel
 * values (the .eh_frame_hdr). Indirect pointers are not followed (only
 * personality routines use them, and they are skipped). */
static uint64_t rd_encoded(cursor *c, uint8_t enc, uint64_t datarel) {
    if (enc == PE_OMIT)
        return 0;
    uint64_t at = c->addr;
    uint64_t v;
    switch (enc & 0x0f) {
    case PE_ABSPTR: case PE_U8: v = rd_fixed(c, 8); break;
    case PE_ULEB: v = rd_uleb(c); break;
    case PE_U2: v = rd_fixed(c, 2); break;
    case PE_U4: v = rd_fixed(c, 4); break;
    case PE_SLEB: v = (uint64_t)rd_sleb(c); break;
    case PE_S2: v = (uint64_t)(int64_t)(int16_t)rd_fixed(c, 2); break;
    case PE_S4: v = (uint64_t)(int64_t)(int32_t)rd_fixed(c, 4); break;
    case PE_S8: v = rd_fixed(c, 8); break;
    default: c->bad = true; return 0;
    }
    switch (enc & 0x70) {
    case 0: return v;
    case PE_PCREL: return v + at;
    case PE_DATAREL: return v + datarel;
    default: c->bad = true; return 0; /* textrel, funcrel, aligned: not used on x86-64 */
    }
}

/* ---- modules ------------------------------------------------------- */

typedef struct module {
    uint64_t lo, hi;      /* executable segments */
    uint64_t hdr;         /* .eh_frame_hdr, 0: none */
    uint64_t table;       /* its search table */
    uint32_t count;       /* entries in it; 0: no usable table */
    uint8_t copied;       /* 0 not yet, 1 entries valid, 2 could not be read */
    int32_t *entries;     /* 2 * count: (first address, FDE), relative to hdr */
} module;

/* The compiled rule of one address. */
typedef struct cache_entry {
    uint64_t key;          /* address + 1; 0: empty */
    uint64_t fn_start;
    int32_t cfa_off;       /* offset, or expression start in the arena */
    uint32_t rules;        /* first of n_rules in c->rules */
    uint16_t cfa_expr_len;
    uint8_t flags, cfa_kind, cfa_reg, n_rules;
} cache_entry;

enum { CE_FOUND = 1, CE_SIGNAL = 2, CE_RA_UNDEF = 4 };

/* The cache starts small and doubles at 3/4 full up to CACHE_SLOTS, where
 * it is emptied instead: an idle host's few stacks need a few dozen rows,
 * and a table of the full size, hashed at random, was 256 KiB resident
 * from the first round on. */
#define CACHE_FIRST 256u  /* power of two */
#define CACHE_SLOTS 8192u /* power of two; emptied at 3/4 */
#define MAX_FDE_BYTES (1u << 20)
#define STATE_STACK 8     /* DW_CFA_remember_state depth */

/* The row while the CFA program runs. */
typedef struct rule_state {
    uint8_t kind;
    int64_t off;
    const uint8_t *expr;
    uint32_t len;
} rule_state;

typedef struct row_state {
    uint8_t cfa_kind, cfa_reg;
    int64_t cfa_off;
    const uint8_t *cfa_expr;
    uint32_t cfa_len;
    rule_state r[SS_UW_NREGS];
} row_state;

struct ss_cfi {
    module *mods;
    uint32_t n_mods, cap_mods;
    unsigned long long adds, subs;
    bool listed;

    cache_entry *cache;
    uint32_t slots; /* capacity of cache, a power of two */
    uint32_t used;
    ss_cfi_reg_rule *rules;
    uint32_t n_rules, cap_rules;
    uint8_t *arena;
    uint32_t arena_used, arena_cap;

    uint8_t *cie_buf, *fde_buf;
    size_t cie_cap, fde_cap;
    row_state initial, row, stack[STATE_STACK];
    uint64_t compiled, hits;
};

ss_cfi *ss_cfi_create(void) {
    ss_cfi *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cache = calloc(CACHE_FIRST, sizeof *c->cache);
    if (!c->cache) {
        free(c);
        return NULL;
    }
    c->slots = CACHE_FIRST;
    return c;
}

static void free_modules(ss_cfi *c) {
    for (uint32_t i = 0; i < c->n_mods; i++)
        free(c->mods[i].entries);
    c->n_mods = 0;
}

void ss_cfi_destroy(ss_cfi *c) {
    if (!c)
        return;
    free_modules(c);
    free(c->mods);
    free(c->cache);
    free(c->rules);
    free(c->arena);
    free(c->cie_buf);
    free(c->fde_buf);
    free(c);
}

static void cache_clear(ss_cfi *c) {
    if (c->used) /* an empty table stays untouched (not resident) */
        memset(c->cache, 0, c->slots * sizeof *c->cache);
    c->used = 0;
    c->n_rules = 0;
    c->arena_used = 0;
}

typedef struct counts {
    unsigned long long adds, subs;
    bool ok;
} counts;

static int read_counts(struct dl_phdr_info *info, size_t size, void *arg) {
    counts *k = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        k->adds = info->dlpi_adds;
        k->subs = info->dlpi_subs;
        k->ok = true;
    }
    return 1; /* the same in every entry */
}

/* The header of .eh_frame_hdr, read in place (under the loader's lock the
 * module cannot go away): version 1, encodings of the .eh_frame pointer,
 * of the count and of the table. Only the table layout every linker
 * writes is used: datarel signed 4-byte pairs. */
static void read_hdr(module *m) {
    const uint8_t *h = (const uint8_t *)(uintptr_t)m->hdr;
    if (h[0] != 1 || h[3] != (PE_DATAREL | PE_S4))
        return;
    cursor cur = {h + 4, h + 4 + 16, m->hdr + 4, false};
    rd_encoded(&cur, h[1], m->hdr); /* .eh_frame itself: found through the table */
    uint64_t count = rd_encoded(&cur, h[2], m->hdr);
    if (cur.bad || count == 0 || count > (1u << 26))
        return;
    m->table = cur.addr;
    m->count = (uint32_t)count;
}

static int add_module(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    ss_cfi *c = arg;
    module m = {.lo = UINT64_MAX};
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t at = (uint64_t)info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            if (at < m.lo)
                m.lo = at;
            if (at + ph->p_memsz > m.hi)
                m.hi = at + ph->p_memsz;
        } else if (ph->p_type == PT_GNU_EH_FRAME) {
            m.hdr = at;
        }
    }
    if (m.hi == 0)
        return 0;
    if (m.hdr)
        read_hdr(&m);
    if (ss_grow32((void **)&c->mods, &c->cap_mods, c->n_mods + 1, sizeof *c->mods, 64) != 0)
        return 1;
    c->mods[c->n_mods++] = m;
    return 0;
}

static int cmp_module(const void *a, const void *b) {
    const module *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

bool ss_cfi_refresh(ss_cfi *c) {
    counts k = {0};
    dl_iterate_phdr(read_counts, &k);
    if (c->listed && k.ok && k.adds == c->adds && k.subs == c->subs)
        return false;
    free_modules(c);
    dl_iterate_phdr(add_module, c);
    qsort(c->mods, c->n_mods, sizeof *c->mods, cmp_module);
    c->adds = k.adds;
    c->subs = k.subs;
    c->listed = k.ok;
    cache_clear(c);
    return true;
}

static module *find_module(ss_cfi *c, uint64_t addr) {
    uint32_t lo = 0, hi = c->n_mods;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (addr < c->mods[mid].lo)
            hi = mid;
        else if (addr >= c->mods[mid].hi)
            lo = mid + 1;
        else
            return &c->mods[mid];
    }
    return NULL;
}

bool ss_cfi_in_module(ss_cfi *c, uint64_t addr) { return find_module(c, addr) != NULL; }

/* The FDE whose range may hold addr: the last table entry at or below it. */
static uint64_t find_fde(module *m, uint64_t addr) {
    if (m->copied == 0) {
        size_t bytes = (size_t)m->count * 8;
        m->entries = malloc(bytes);
        m->copied = m->entries && ss_uw_read_memory(m->entries, m->table, bytes) == (long)bytes
                        ? 1 : 2;
    }
    if (m->copied != 1)
        return 0;
    int64_t rel = (int64_t)(addr - m->hdr);
    if (rel < INT32_MIN || rel > INT32_MAX)
        return 0;
    uint32_t lo = 0, hi = m->count; /* first entry above rel */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (m->entries[2 * mid] <= rel)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    return m->hdr + (uint64_t)(int64_t)m->entries[2 * (lo - 1) + 1];
}

/* Read a CIE or FDE record (length-prefixed) at addr into *buf. Returns
 * its total length, 0 on failure. */
static size_t read_record(uint64_t addr, uint8_t **buf, size_t *cap) {
    if (*cap < 512) {
        uint8_t *b = realloc(*buf, 512);
        if (!b)
            return 0;
        *buf = b;
        *cap = 512;
    }
    long got = ss_uw_read_memory(*buf, addr, 512);
    if (got < 4) {
        /* near the end of a mapping: read what there is */
        got = ss_uw_read_memory(*buf, addr, 64);
        if (got < 4)
            return 0;
    }
    uint32_t len = (uint32_t)(*buf)[0] | (uint32_t)(*buf)[1] << 8 | (uint32_t)(*buf)[2] << 16 |
                   (uint32_t)(*buf)[3] << 24;
    if (len == 0 || len == 0xffffffffu || len > MAX_FDE_BYTES) /* 64-bit records: not on x86-64 */
        return 0;
    size_t total = (size_t)len + 4;
    if (total > (size_t)got) {
        if (total > *cap) {
            uint8_t *b = realloc(*buf, total);
            if (!b)
                return 0;
            *buf = b;
            *cap = total;
        }
        if (ss_uw_read_memory(*buf, addr, total) != (long)total)
            return 0;
    }
    return total;
}

typedef struct cie_info {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_z, signal;
    const uint8_t *insns, *end;
    uint64_t insns_addr;
} cie_info;

static bool parse_cie(const uint8_t *b, size_t total, uint64_t addr, cie_info *ci) {
    cursor c = {b + 4, b + total, addr + 4, false};
    if (rd_fixed(&c, 4) != 0) /* CIE id is 0 in .eh_frame */
        return false;
    uint8_t version = rd_u8(&c);
    const char *aug = (const char *)c.p;
    size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
    if (aug_len == (size_t)(c.end - c.p))
        return false; /* no NUL within the record: read no further */
    skip(&c, aug_len + 1);
    if (strstr(aug, "eh"))
        skip(&c, 8);
    ci->code_align = rd_uleb(&c);
    ci->data_align = rd_sleb(&c);
    ci->ra_reg = version == 1 ? rd_u8(&c) : rd_uleb(&c);
    ci->fde_enc = PE_ABSPTR;
    ci->has_z = aug[0] == 'z';
    ci->signal = false;
    if (ci->has_z) {
        uint64_t len = rd_uleb(&c);
        cursor a = {c.p, c.p + len <= c.end ? c.p + len : c.end, c.addr, false};
        for (const char *s = aug + 1; *s && !a.bad; s++) {
            switch (*s) {
            case 'L': rd_u8(&a); break;
            case 'R': ci->fde_enc = rd_u8(&a); break;
            case 'P': {
                uint8_t enc = rd_u8(&a);
                rd_encoded(&a, enc & 0x7f, 0);
                break;
            }
            case 'S': ci->signal = true; break;
            default: break; /* 'B', 'G': nothing in the data; others end the list */
            }
        }
        skip(&c, len);
    }
    ci->insns = c.p;
    ci->end = b + total;
    ci->insns_addr = c.addr;
    return !c.bad && ci->code_align != 0;
}

/* Run CFA instructions until the location passes `target`. */
static bool run_program(ss_cfi *c, const cie_info *ci, const uint8_t *p, const uint8_t *end,
                        uint64_t p_addr, uint64_t loc, uint64_t target) {
    cursor cur = {p, end, p_addr, false};
    row_state *st = &c->row;
    uint32_t depth = 0;
    while (cur.p < cur.end && !cur.bad) {
        uint8_t op = rd_u8(&cur);
        uint8_t hi = op & 0xc0, lo = op & 0x3f;
        uint64_t reg = 0, delta = 0;
        int64_t off = 0;
        if (hi == 0x40) { /* advance_loc */
            delta = lo * ci->code_align;
            goto advance;
        }
        if (hi == 0x80) { /* offset */
            reg = lo;
            off = (int64_t)rd_uleb(&cur) * ci->data_align;
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_OFFSET, off, NULL, 0};
            continue;
        }
        if (hi == 0xc0) { /* restore */
            if (lo < SS_UW_NREGS)
                st->r[lo] = c->initial.r[lo];
            continue;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x01: /* set_loc */
            loc = rd_encoded(&cur, ci->fde_enc, 0);
            if (loc > target)
                return true;
            break;
        case 0x02: delta = rd_fixed(&cur, 1) * ci->code_align; goto advance;
        case 0x03: delta = rd_fixed(&cur, 2) * ci->code_align; goto advance;
        case 0x04: delta = rd_fixed(&cur, 4) * ci->code_align; goto advance;
        case 0x05: /* offset_extended */
            reg = rd_uleb(&cur);
            off = (int64_t)rd_uleb(&cur) * ci->data_align;
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_OFFSET, off, NULL, 0};
            break;
        case 0x06: /* restore_extended */
            reg = rd_uleb(&cur);
            if (reg < SS_UW_NREGS)
                st->r[reg] = c->initial.r[reg];
            break;
        case 0x07: /* undefined */
            reg = rd_uleb(&cur);
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_UNDEF, 0, NULL, 0};
            break;
        case 0x08: /* same_value */
            reg = rd_uleb(&cur);
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_SAME, 0, NULL, 0};
            break;
        case 0x09: { /* register */
            reg = rd_uleb(&cur);
            uint64_t from = rd_uleb(&cur);
            if (reg < SS_UW_NREGS)
                st->r[reg] = from < SS_UW_NREGS ? (rule_state){SS_RULE_REG, (int64_t)from, NULL, 0}
                                                : (rule_state){SS_RULE_UNDEF, 0, NULL, 0};
            break;
        }
        case 0x0a: /* remember_state */
            if (depth == STATE_STACK)
                return false;
            c->stack[depth++] = *st;
            break;
        case 0x0b: /* restore_state: the CFA too (gcc's epilogues rely on it,
                    * as libgcc's unwinder does: remember/ret/restore) */
            if (depth == 0)
                return false;
            *st = c->stack[--depth];
            break;
        case 0x0c: /* def_cfa */
            st->cfa_kind = SS_CFA_REG;
            st->cfa_reg = (uint8_t)rd_uleb(&cur);
            st->cfa_off = (int64_t)rd_uleb(&cur);
            break;
        case 0x0d: /* def_cfa_register */
            st->cfa_kind = SS_CFA_REG;
            st->cfa_reg = (uint8_t)rd_uleb(&cur);
            break;
        case 0x0e: /* def_cfa_offset */
            st->cfa_off = (int64_t)rd_uleb(&cur);
            break;
        case 0x0f: { /* def_cfa_expression */
            uint64_t len = rd_uleb(&cur);
            st->cfa_kind = SS_CFA_EXPR;
            st->cfa_expr = cur.p;
            st->cfa_len = (uint32_t)len;
            skip(&cur, len);
            break;
        }
        case 0x10: case 0x16: { /* expression, val_expression */
            reg = rd_uleb(&cur);
            uint64_t len = rd_uleb(&cur);
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){op == 0x10 ? SS_RULE_EXPR : SS_RULE_VAL_EXPR, 0, cur.p,
                                          (uint32_t)len};
            skip(&cur, len);
            break;
        }
        case 0x11: /* offset_extended_sf */
            reg = rd_uleb(&cur);
            off = rd_sleb(&cur) * ci->data_align;
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_OFFSET, off, NULL, 0};
            break;
        case 0x12: /* def_cfa_sf */
            st->cfa_kind = SS_CFA_REG;
            st->cfa_reg = (uint8_t)rd_uleb(&cur);
            st->cfa_off = rd_sleb(&cur) * ci->data_align;
            break;
        case 0x13: /* def_cfa_offset_sf */
            st->cfa_off = rd_sleb(&cur) * ci->data_align;
            break;
        case 0x14: case 0x15: /* val_offset, val_offset_sf */
            reg = rd_uleb(&cur);
            off = op == 0x14 ? (int64_t)rd_uleb(&cur) * ci->data_align
                             : rd_sleb(&cur) * ci->data_align;
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_VAL_OFFSET, off, NULL, 0};
            break;
        case 0x2e: /* GNU_args_size */
            rd_uleb(&cur);
            break;
        case 0x2f: /* GNU_negative_offset_extended */
            reg = rd_uleb(&cur);
            off = -(int64_t)rd_uleb(&cur) * ci->data_align;
            if (reg < SS_UW_NREGS)
                st->r[reg] = (rule_state){SS_RULE_OFFSET, off, NULL, 0};
            break;
        default:
            return false; /* unknown: the row cannot be trusted */
        }
        continue;
    advance:
        loc += delta;
        if (loc > target)
            return true;
    }
    return !cur.bad;
}

/* ---- the cache ----------------------------------------------------- */

static uint32_t hash_addr(uint64_t a) {
    a ^= a >> 29;
    a *= 0xbf58476d1ce4e5b9ull;
    a ^= a >> 32;
    return (uint32_t)a;
}

/* Double the cache, every row moved (rows hold indexes into rules and the
 * arena, which stay). false when it is at its largest or memory is short:
 * the caller empties it instead, as it did at the full size. */
static bool cache_grow(ss_cfi *c) {
    if (c->slots >= CACHE_SLOTS)
        return false;
    uint32_t slots = c->slots * 2, mask = slots - 1;
    cache_entry *n = calloc(slots, sizeof *n);
    if (!n)
        return false;
    for (uint32_t i = 0; i < c->slots; i++) {
        if (!c->cache[i].key)
            continue;
        uint32_t h = hash_addr(c->cache[i].key - 1) & mask;
        while (n[h].key)
            h = (h + 1) & mask;
        n[h] = c->cache[i];
    }
    free(c->cache);
    c->cache = n;
    c->slots = slots;
    return true;
}

static int32_t arena_put(ss_cfi *c, const uint8_t *p, uint32_t len) {
    if (len > UINT32_MAX - c->arena_used ||
        ss_grow32((void **)&c->arena, &c->arena_cap, c->arena_used + len, 1, 4096) != 0)
        return -1;
    memcpy(c->arena + c->arena_used, p, len);
    c->arena_used += len;
    return (int32_t)(c->arena_used - len);
}

static bool rules_room(ss_cfi *c, uint32_t n) {
    return n <= UINT32_MAX - c->n_rules &&
           ss_grow32((void **)&c->rules, &c->cap_rules, c->n_rules + n, sizeof *c->rules, 1024) == 0;
}

/* Keep the row now in c->row as addr's entry. */
static bool compile_row(ss_cfi *c, cache_entry *e, const cie_info *ci) {
    const row_state *st = &c->row;
    e->flags = CE_FOUND | (ci->signal ? CE_SIGNAL : 0);
    if (ci->ra_reg < SS_UW_NREGS && st->r[ci->ra_reg].kind == SS_RULE_UNDEF)
        e->flags |= CE_RA_UNDEF;
    e->cfa_kind = st->cfa_kind;
    e->cfa_reg = st->cfa_reg;
    e->cfa_off = (int32_t)st->cfa_off;
    e->cfa_expr_len = 0;
    if (st->cfa_kind == SS_CFA_EXPR) {
        int32_t at = arena_put(c, st->cfa_expr, st->cfa_len);
        if (at < 0 || st->cfa_len > UINT16_MAX)
            return false;
        e->cfa_off = at;
        e->cfa_expr_len = (uint16_t)st->cfa_len;
    }
    if (!rules_room(c, SS_UW_NREGS))
        return false;
    e->rules = c->n_rules;
    e->n_rules = 0;
    for (uint8_t r = 0; r < SS_UW_NREGS; r++) {
        const rule_state *rs = &st->r[r];
        /* the return address column is always kept: its rule says where
         * the caller's pc is */
        if (rs->kind == SS_RULE_SAME && r != ci->ra_reg)
            continue;
        ss_cfi_reg_rule *out = &c->rules[c->n_rules++];
        out->reg = r == ci->ra_reg ? SS_UW_RIP : r;
        out->kind = rs->kind;
        out->len = 0;
        out->off = (int32_t)rs->off;
        if (rs->kind == SS_RULE_EXPR || rs->kind == SS_RULE_VAL_EXPR) {
            int32_t at = arena_put(c, rs->expr, rs->len);
            if (at < 0 || rs->len > UINT16_MAX)
                return false;
            out->off = at;
            out->len = (uint16_t)rs->len;
        }
        e->n_rules++;
    }
    return true;
}

/* Find and run addr's FDE into e. false: no CFI for addr. */
static bool compile(ss_cfi *c, uint64_t addr, cache_entry *e) {
    module *m = find_module(c, addr);
    if (!m || !m->count)
        return false;
    uint64_t fde = find_fde(m, addr);
    if (!fde)
        return false;
    size_t fde_len = read_record(fde, &c->fde_buf, &c->fde_cap);
    if (fde_len < 16)
        return false;
    const uint8_t *fb = c->fde_buf;
    uint32_t cie_ptr = (uint32_t)fb[4] | (uint32_t)fb[5] << 8 | (uint32_t)fb[6] << 16 |
                       (uint32_t)fb[7] << 24;
    if (cie_ptr == 0) /* a CIE where an FDE should be */
        return false;
    uint64_t cie = fde + 4 - cie_ptr;
    size_t cie_len = read_record(cie, &c->cie_buf, &c->cie_cap);
    cie_info ci;
    if (!cie_len || !parse_cie(c->cie_buf, cie_len, cie, &ci))
        return false;
    cursor f = {fb + 8, fb + fde_len, fde + 8, false};
    uint64_t start = rd_encoded(&f, ci.fde_enc, m->hdr);
    uint64_t range = rd_encoded(&f, ci.fde_enc & 0x0f, 0);
    if (f.bad || addr < start || addr - start >= range)
        return false;
    if (ci.has_z)
        skip(&f, rd_uleb(&f));
    if (f.bad)
        return false;
    /* the CIE's instructions give the initial rules (DW_CFA_restore goes
     * back to them), then the FDE's run up to addr */
    memset(&c->row, 0, sizeof c->row);
    if (!run_program(c, &ci, ci.insns, ci.end, ci.insns_addr, 0, UINT64_MAX))
        return false;
    c->initial = c->row;
    if (!run_program(c, &ci, f.p, f.end, f.addr, start, addr))
        return false;
    if (c->row.cfa_kind == SS_CFA_NONE)
        return false;
    e->fn_start = start;
    return compile_row(c, e, &ci);
}

void ss_cfi_lookup(ss_cfi *c, uint64_t addr, ss_cfi_row *row) {
    uint32_t mask = c->slots - 1, h = hash_addr(addr) & mask;
    cache_entry *e;
    for (;; h = (h + 1) & mask) {
        e = &c->cache[h];
        if (e->key == addr + 1) {
            c->hits++;
            goto found;
        }
        if (e->key == 0)
            break;
    }
    if (c->used >= c->slots / 4 * 3) {
        if (!cache_grow(c))
            cache_clear(c);
        mask = c->slots - 1;
        for (h = hash_addr(addr) & mask; c->cache[h].key; h = (h + 1) & mask)
            ;
        e = &c->cache[h];
    }
    memset(e, 0, sizeof *e);
    uint32_t rules0 = c->n_rules, arena0 = c->arena_used;
    if (!compile(c, addr, e)) {
        c->n_rules = rules0; /* a half-compiled row takes no room */
        c->arena_used = arena0;
        memset(e, 0, sizeof *e); /* remembered as "no CFI" */
    }
    e->key = addr + 1;
    c->used++;
    c->compiled++;
found:
    row->found = e->flags & CE_FOUND;
    row->signal_frame = e->flags & CE_SIGNAL;
    row->ra_undefined = e->flags & CE_RA_UNDEF;
    row->cfa_kind = e->cfa_kind;
    row->cfa_reg = e->cfa_reg;
    row->cfa_off = e->cfa_off;
    row->cfa_expr = e->cfa_kind == SS_CFA_EXPR ? c->arena + e->cfa_off : NULL;
    row->cfa_expr_len = e->cfa_expr_len;
    row->n_rules = e->n_rules;
    row->rules = c->rules + e->rules;
    row->arena = c->arena;
    row->fn_start = e->fn_start;
}

void ss_cfi_stats(const ss_cfi *c, uint64_t *compiled, uint64_t *cached) {
    *compiled = c->compiled;
    *cached = c->hits;
}
