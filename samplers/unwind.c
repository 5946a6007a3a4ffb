/* unwind.c: walking a thread's stack on the sampler thread (see unwind.h).
 *
 * One frame after another: the CFI row of the frame's pc gives the CFA
 * and where the caller's registers were saved; the caller's pc is the
 * return address. A frame whose pc has no CFI (JIT code) is stepped with
 * its frame pointer (CFA = rbp + 16, return address at rbp + 8, caller's
 * rbp at rbp), as libunwind does.
 *
 * Only SP and PC are known for a thread asleep in a system call. Code
 * built with frame pointers finds its CFA from rbp, which glibc's system
 * call wrappers leave untouched and so still holds the frame pointer of
 * the innermost frame-pointer function: that value is not in the syscall
 * file. It is found on the stack instead: the frame F that needs it has
 * a known SP (the CFA of the frame below), its function starts at the
 * FDE's first address, and its return address sits at CFA - 8 with
 * CFA = rbp + 16. The candidate taken is (1) the one F's prologue gives
 * (push rbp; mov rbp, rsp; pushes; sub rsp, n: rbp = SP + the frame's
 * size), else (2) the first 16-byte aligned slot above SP holding a return
 * address whose call instruction calls F (directly, through a PLT stub or
 * a GOT slot, or indirectly through a register, which cannot be checked).
 * The caller's rbp is then read from F's frame and the rest is exact. The
 * walk is used only when it reaches the thread's entry (the caller checks,
 * and that the thread did not run meanwhile). */
#include "samplers/unwind.h"

#include <stdlib.h>
#include <string.h>

#define LIVE_PAGES 16u      /* pages read outside the stack copy, per walk */
#define CODE_PAGES 64u      /* pages of modules' code, kept across walks */
#define PROLOGUES 256u      /* frame sizes of functions' prologues */
#define PAGE 4096u
#define CALL_SLOTS 1024u    /* return addresses known to follow calls */
#define GUESS_SPAN (16u * 1024u) /* how far above SP a frame pointer is looked for */
#define MAX_STEPS 100000u   /* a walk never loops for ever */

/* A small cache of pages read from the process. Each page's buffer is
 * allocated the first time a page goes in that slot: the sets were arrays
 * of whole pages (320 KiB), every page written as the sets were emptied,
 * resident even where an idle host's walks read one or two pages. */
typedef struct page_set {
    uint32_t n;        /* slots */
    uint64_t *addr;    /* page address + 1; 0 empty */
    uint8_t **data;    /* PAGE bytes each, NULL until first used */
} page_set;

typedef struct call_slot {
    uint64_t ra;      /* 0: empty */
    uint64_t target;  /* the function called; 0: through a register (unknown) */
    bool is_call;
} call_slot;

typedef struct prologue_slot {
    uint64_t fn; /* 0: empty */
    int64_t size;
} prologue_slot;

struct ss_unwinder {
    ss_cfi *cfi;
    const ss_maps *maps;
    page_set pages; /* LIVE_PAGES, emptied per walk */
    page_set code;  /* CODE_PAGES of module text (does not change while loaded) */
    call_slot *calls;
    prologue_slot *prologues;
    ss_unwinder_refresh_fn refresh; /* the table of mappings, read again */
    void *refresh_arg;
};

static bool page_set_init(page_set *p, uint32_t n) {
    p->n = n;
    p->addr = calloc(n, sizeof *p->addr);
    p->data = calloc(n, sizeof *p->data);
    return p->addr && p->data;
}

static void page_set_free(page_set *p) {
    if (p->data)
        for (uint32_t i = 0; i < p->n; i++)
            free(p->data[i]);
    free(p->data);
    free(p->addr);
}

static void page_set_empty(page_set *p) { memset(p->addr, 0, p->n * sizeof *p->addr); }

ss_unwinder *ss_unwinder_create(void) {
    ss_unwinder *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->cfi = ss_cfi_create();
    bool pages = page_set_init(&u->pages, LIVE_PAGES);
    bool code = page_set_init(&u->code, CODE_PAGES);
    u->calls = calloc(CALL_SLOTS, sizeof *u->calls);
    u->prologues = calloc(PROLOGUES, sizeof *u->prologues);
    if (!u->cfi || !pages || !code || !u->calls || !u->prologues) {
        ss_unwinder_destroy(u);
        return NULL;
    }
    return u;
}

void ss_unwinder_destroy(ss_unwinder *u) {
    if (!u)
        return;
    ss_cfi_destroy(u->cfi);
    page_set_free(&u->pages);
    page_set_free(&u->code);
    free(u->calls);
    free(u->prologues);
    free(u);
}

void ss_unwinder_round(ss_unwinder *u) {
    /* code may have been unloaded and other code loaded at its address */
    if (ss_cfi_refresh(u->cfi)) {
        memset(u->calls, 0, CALL_SLOTS * sizeof *u->calls);
        memset(u->prologues, 0, PROLOGUES * sizeof *u->prologues);
        page_set_empty(&u->code);
    }
}

void ss_unwinder_set_maps(ss_unwinder *u, const ss_maps *m) { u->maps = m; }

void ss_unwinder_set_refresh(ss_unwinder *u, ss_unwinder_refresh_fn fn, void *arg) {
    u->refresh = fn;
    u->refresh_arg = arg;
}

void ss_unwinder_stats(const ss_unwinder *u, uint64_t *compiled, uint64_t *cached) {
    ss_cfi_stats(u->cfi, compiled, cached);
}

/* ---- memory -------------------------------------------------------- */

typedef enum mem_rc { MEM_OK = 0, MEM_CUT, MEM_BAD } mem_rc;

/* Grow a live stack view to hold [base, base + need). */
static mem_rc fill_stack(ss_uw_stack *s, size_t need) {
    if (need > s->cap)
        return MEM_CUT;
    size_t want = s->len ? s->len * 2 : 2 * PAGE;
    if (want < need)
        want = need;
    /* end on a page boundary: the reads after it start a page */
    uint64_t end = (s->base + want + PAGE - 1) & ~(uint64_t)(PAGE - 1);
    want = (size_t)(end - s->base);
    if (want > s->cap)
        want = s->cap;
    long got = ss_uw_read_memory(s->data + s->len, s->base + s->len, want - s->len);
    if (got > 0)
        s->len += (size_t)got;
    if (s->len < need) {
        /* the mapping ended before the copy limit: nothing is above it */
        s->cap = s->len;
        s->map_hi = s->base + s->len;
        return MEM_BAD;
    }
    return MEM_OK;
}

static mem_rc read_direct(uint64_t addr, void *out, size_t n) {
    return ss_uw_read_memory(out, addr, n) == (long)n ? MEM_OK : MEM_BAD;
}

static mem_rc read_paged(page_set *p, uint64_t addr, void *out, size_t n) {
    uint64_t page = addr & ~(uint64_t)(PAGE - 1);
    size_t at = (size_t)(addr - page);
    if (at + n > PAGE) /* across two pages: rare, read directly */
        return read_direct(addr, out, n);
    uint32_t i = (uint32_t)((page / PAGE) % p->n);
    if (p->addr[i] != page + 1) {
        p->addr[i] = 0;
        if (!p->data[i] && !(p->data[i] = malloc(PAGE)))
            return read_direct(addr, out, n); /* no memory: uncached */
        if (ss_uw_read_memory(p->data[i], page, PAGE) != (long)PAGE)
            return read_direct(addr, out, n);
        p->addr[i] = page + 1;
    }
    memcpy(out, p->data[i] + at, n);
    return MEM_OK;
}

static mem_rc read_live(ss_unwinder *u, uint64_t addr, void *out, size_t n) {
    return read_paged(&u->pages, addr, out, n);
}

static mem_rc read_mem(ss_unwinder *u, ss_uw_stack *s, uint64_t addr, void *out, size_t n) {
    if (addr >= s->base && addr - s->base < s->cap) {
        size_t off = (size_t)(addr - s->base);
        if (off + n > s->cap)
            return MEM_CUT;
        if (off + n > s->len) {
            if (!s->live)
                return MEM_CUT;
            mem_rc rc = fill_stack(s, off + n);
            if (rc != MEM_OK)
                return rc;
        }
        memcpy(out, s->data + off, n);
        return MEM_OK;
    }
    if (addr >= s->base && addr < s->map_hi)
        return MEM_CUT; /* the same stack, past what was copied */
    return read_live(u, addr, out, n);
}

static mem_rc read_u64(ss_unwinder *u, ss_uw_stack *s, uint64_t addr, uint64_t *v) {
    return read_mem(u, s, addr, v, 8);
}

/* ---- DWARF expressions (the subset CFI uses) ----------------------- */

#define EXPR_STACK 16

static bool reg_known(const ss_uw_regs *r, unsigned reg) {
    return reg < SS_UW_NREGS && (r->known & (1u << reg));
}

typedef struct expr_ctx {
    ss_unwinder *u;
    ss_uw_stack *s;
    const ss_uw_regs *regs;
    mem_rc mem;
    bool need_reg; /* failed for an unknown register */
} expr_ctx;

static uint64_t uleb(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (unsigned shift = 0; *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end) {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64)
            v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    if (shift < 64 && (b & 0x40))
        v |= -((int64_t)1 << shift);
    return v;
}

static uint64_t fixed(const uint8_t **p, const uint8_t *end, unsigned n, bool *bad) {
    if ((size_t)(end - *p) < n) {
        *bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)(*p)[i] << (8 * i);
    *p += n;
    return v;
}

/* Evaluate; `push` is put on the stack first (the CFA for register rules). */
static bool eval(expr_ctx *x, const uint8_t *p, uint32_t len, bool has_push, uint64_t push,
                 uint64_t *out) {
    const uint8_t *end = p + len;
    uint64_t st[EXPR_STACK];
    int sp = 0;
    bool bad = false;
    if (has_push)
        st[sp++] = push;
#define NEED(k) do { if (sp < (k)) return false; } while (0)
#define PUSH(v) do { uint64_t v_ = (v); if (sp == EXPR_STACK) return false; st[sp++] = v_; } while (0)
    while (p < end) {
        uint8_t op = *p++;
        if (op >= 0x30 && op <= 0x4f) { /* lit0..31 */
            PUSH((uint64_t)(op - 0x30));
            continue;
        }
        if (op >= 0x70 && op <= 0x8f) { /* breg0..31 */
            int64_t off = sleb(&p, end);
            unsigned reg = op - 0x70;
            if (!reg_known(x->regs, reg)) {
                x->need_reg = true;
                return false;
            }
            PUSH(x->regs->r[reg] + (uint64_t)off);
            continue;
        }
        switch (op) {
        case 0x03: PUSH(fixed(&p, end, 8, &bad)); break;                       /* addr */
        case 0x06: NEED(1); {                                                  /* deref */
            uint64_t v;
            if ((x->mem = read_u64(x->u, x->s, st[sp - 1], &v)) != MEM_OK)
                return false;
            st[sp - 1] = v;
            break;
        }
        case 0x08: PUSH(fixed(&p, end, 1, &bad)); break;                           /* const1u */
        case 0x09: PUSH((uint64_t)(int64_t)(int8_t)fixed(&p, end, 1, &bad)); break; /* const1s */
        case 0x0a: PUSH(fixed(&p, end, 2, &bad)); break;
        case 0x0b: PUSH((uint64_t)(int64_t)(int16_t)fixed(&p, end, 2, &bad)); break;
        case 0x0c: PUSH(fixed(&p, end, 4, &bad)); break;
        case 0x0d: PUSH((uint64_t)(int64_t)(int32_t)fixed(&p, end, 4, &bad)); break;
        case 0x0e: case 0x0f: PUSH(fixed(&p, end, 8, &bad)); break;
        case 0x10: PUSH(uleb(&p, end)); break;                                  /* constu */
        case 0x11: PUSH((uint64_t)sleb(&p, end)); break;                        /* consts */
        case 0x12: NEED(1); PUSH(st[sp - 1]); break;                            /* dup */
        case 0x13: NEED(1); sp--; break;                                        /* drop */
        case 0x14: NEED(2); PUSH(st[sp - 2]); break;                            /* over */
        case 0x15: {                                                            /* pick */
            unsigned i = (unsigned)fixed(&p, end, 1, &bad);
            NEED((int)i + 1);
            PUSH(st[sp - 1 - (int)i]);
            break;
        }
        case 0x16: NEED(2); { uint64_t t = st[sp - 1]; st[sp - 1] = st[sp - 2]; st[sp - 2] = t; } break;
        case 0x17: NEED(3); {                                                   /* rot */
            uint64_t t = st[sp - 1];
            st[sp - 1] = st[sp - 2];
            st[sp - 2] = st[sp - 3];
            st[sp - 3] = t;
            break;
        }
        case 0x19: NEED(1); if ((int64_t)st[sp - 1] < 0) st[sp - 1] = -st[sp - 1]; break;
        case 0x1a: NEED(2); st[sp - 2] &= st[sp - 1]; sp--; break;
        case 0x1c: NEED(2); st[sp - 2] -= st[sp - 1]; sp--; break;
        case 0x1e: NEED(2); st[sp - 2] *= st[sp - 1]; sp--; break;
        case 0x1f: NEED(1); st[sp - 1] = -st[sp - 1]; break;
        case 0x20: NEED(1); st[sp - 1] = ~st[sp - 1]; break;
        case 0x21: NEED(2); st[sp - 2] |= st[sp - 1]; sp--; break;
        case 0x22: NEED(2); st[sp - 2] += st[sp - 1]; sp--; break;
        case 0x23: NEED(1); st[sp - 1] += uleb(&p, end); break;                 /* plus_uconst */
        case 0x24: NEED(2); st[sp - 2] = st[sp - 1] < 64 ? st[sp - 2] << st[sp - 1] : 0; sp--; break;
        case 0x25: NEED(2); st[sp - 2] = st[sp - 1] < 64 ? st[sp - 2] >> st[sp - 1] : 0; sp--; break;
        case 0x26: NEED(2);
            st[sp - 2] = (uint64_t)((int64_t)st[sp - 2] >> (st[sp - 1] < 63 ? st[sp - 1] : 63));
            sp--;
            break;
        case 0x27: NEED(2); st[sp - 2] ^= st[sp - 1]; sp--; break;
        case 0x29: NEED(2); st[sp - 2] = st[sp - 2] == st[sp - 1]; sp--; break;  /* eq */
        case 0x2a: NEED(2); st[sp - 2] = (int64_t)st[sp - 2] >= (int64_t)st[sp - 1]; sp--; break;
        case 0x2b: NEED(2); st[sp - 2] = (int64_t)st[sp - 2] > (int64_t)st[sp - 1]; sp--; break;
        case 0x2c: NEED(2); st[sp - 2] = (int64_t)st[sp - 2] <= (int64_t)st[sp - 1]; sp--; break;
        case 0x2d: NEED(2); st[sp - 2] = (int64_t)st[sp - 2] < (int64_t)st[sp - 1]; sp--; break;
        case 0x2e: NEED(2); st[sp - 2] = st[sp - 2] != st[sp - 1]; sp--; break;
        case 0x2f: {                                                            /* skip */
            int16_t d = (int16_t)fixed(&p, end, 2, &bad);
            if (d < 0 ? (size_t)(-d) > (size_t)(p - (end - len)) : d > end - p)
                return false;
            p += d;
            break;
        }
        case 0x28: {                                                            /* bra */
            int16_t d = (int16_t)fixed(&p, end, 2, &bad);
            NEED(1);
            if (st[--sp]) {
                if (d < 0 ? (size_t)(-d) > (size_t)(p - (end - len)) : d > end - p)
                    return false;
                p += d;
            }
            break;
        }
        case 0x92: {                                                            /* bregx */
            uint64_t reg = uleb(&p, end);
            int64_t off = sleb(&p, end);
            if (!reg_known(x->regs, (unsigned)reg)) {
                x->need_reg = true;
                return false;
            }
            PUSH(x->regs->r[reg] + (uint64_t)off);
            break;
        }
        case 0x94: {                                                            /* deref_size */
            unsigned n = (unsigned)fixed(&p, end, 1, &bad);
            NEED(1);
            uint64_t v = 0;
            if (n == 0 || n > 8 || (x->mem = read_mem(x->u, x->s, st[sp - 1], &v, n)) != MEM_OK)
                return false;
            st[sp - 1] = v;
            break;
        }
        case 0x96: break;                                                       /* nop */
        default: return false;
        }
        if (bad)
            return false;
    }
#undef NEED
#undef PUSH
    if (sp < 1)
        return false;
    *out = st[sp - 1];
    return true;
}

/* ---- is this a return address? ------------------------------------- */

static bool is_code(ss_unwinder *u, uint64_t addr) {
    if (ss_cfi_in_module(u->cfi, addr))
        return true;
    const ss_map_range *m = ss_maps_find(u->maps, addr);
    return m && (m->prot & SS_MAP_X);
}

/* A return address a step gave (CFI or frame pointer, not a guess): when
 * no executable mapping of the table holds it, the table may be older
 * than the code and is read again, at most once per round (stack_walk.c).
 * A JIT maps new code pages as it goes, and flips the protection of its
 * code pages between writable and executable (V8 under node does: a table
 * read while a page was writable saw no code there, and every walk through
 * that page ended at its first frame until something else refreshed it). */
static bool is_return_code(ss_unwinder *u, uint64_t addr) {
    if (is_code(u, addr))
        return true;
    if (!u->refresh || !u->refresh(u->refresh_arg))
        return false;
    return is_code(u, addr);
}

/* Code of a loaded module does not change: its pages are kept across
 * walks (until a module is unloaded). Other code (JIT) is read anew. */
static bool read_code(ss_unwinder *u, uint64_t addr, uint8_t *out, size_t n) {
    if (ss_cfi_in_module(u->cfi, addr))
        return read_paged(&u->code, addr, out, n) == MEM_OK;
    return read_live(u, addr, out, n) == MEM_OK;
}

static int32_t le32(const uint8_t *b) {
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24);
}

/* Where a PLT-style stub jumps: jmp *[rip+disp32], with or without endbr64
 * and a bnd prefix. 0 when target is not such a stub. */
static uint64_t through_stub(ss_unwinder *u, uint64_t target) {
    uint8_t b[16];
    if (!read_code(u, target, b, sizeof b))
        return 0;
    size_t at = 0;
    if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa)
        at = 4; /* endbr64 */
    if (b[at] == 0xf2)
        at++; /* bnd */
    if (b[at] != 0xff || b[at + 1] != 0x25)
        return 0;
    uint64_t slot = target + at + 6 + (uint64_t)(int64_t)le32(b + at + 2);
    uint64_t dest;
    return read_live(u, slot, &dest, 8) == MEM_OK ? dest : 0;
}

/* Decode the call instruction that ends just before ra. is_call false:
 * not after a call. target 0: an indirect call whose target is unknown. */
static call_slot *call_before(ss_unwinder *u, uint64_t ra) {
    call_slot *c = &u->calls[(ra * 0x9e3779b97f4a7c15ull >> 54) % CALL_SLOTS];
    if (c->ra == ra)
        return c;
    c->ra = ra;
    c->is_call = false;
    c->target = 0;
    uint8_t b[8]; /* b[7] is the byte at ra - 1 */
    if (ra < 8 || !read_code(u, ra - 8, b, 8))
        return c;
    if (b[3] == 0xe8) { /* call rel32 */
        c->is_call = true;
        c->target = ra + (uint64_t)(int64_t)le32(b + 4);
        return c;
    }
    if (b[2] == 0xff && b[3] == 0x15) { /* call *[rip+disp32] */
        uint64_t dest;
        c->is_call = true;
        c->target = read_live(u, ra + (uint64_t)(int64_t)le32(b + 4), &dest, 8) == MEM_OK ? dest : 0;
        return c;
    }
    /* call through a register or memory: ff /2 with modrm (and sib,
     * displacement), optionally after a REX prefix */
    for (unsigned len = 2; len <= 7; len++) {
        const uint8_t *i = b + 8 - len;
        if (i[0] != 0xff || ((i[1] >> 3) & 7) != 2)
            continue;
        unsigned mod = i[1] >> 6, rm = i[1] & 7;
        unsigned need = 2;
        if (mod != 3 && rm == 4)
            need++; /* sib */
        if (mod == 1)
            need += 1;
        else if (mod == 2)
            need += 4;
        else if (mod == 0 && rm == 5)
            continue; /* rip-relative: handled above */
        else if (mod == 0 && rm == 4 && (i[2] & 7) == 5)
            need += 4;
        if (need == len) {
            c->is_call = true;
            return c;
        }
    }
    return c;
}

/* Does the code at target jump to fn within its first bytes? gcc splits
 * functions (`f` testing a flag and tail-jumping to `f.part.0`, partial
 * inlining), so a call of f runs in f.part.0's frame. */
static bool jumps_to(ss_unwinder *u, uint64_t target, uint64_t fn) {
    uint8_t b[64];
    if (!target || !read_code(u, target, b, sizeof b))
        return false;
    for (size_t i = 0; i + 5 <= sizeof b; i++) {
        if (b[i] == 0xe9 && target + i + 5 + (uint64_t)(int64_t)le32(b + i + 1) == fn)
            return true;
        if (b[i] == 0xeb && target + i + 2 + (uint64_t)(int64_t)(int8_t)b[i + 1] == fn)
            return true;
    }
    return false;
}

/* Does ra follow a call of the function starting at fn? `verified`: only
 * a call known to go there (directly, through a PLT stub or a GOT slot,
 * or to a function that tail-jumps there); else also one whose target
 * is unknown (through a register or memory). */
static bool calls_fn(ss_unwinder *u, uint64_t ra, uint64_t fn, bool verified) {
    if (!is_code(u, ra))
        return false;
    call_slot *c = call_before(u, ra);
    if (!c->is_call)
        return false;
    if (c->target == 0)
        return !verified;
    if (c->target == fn)
        return true;
    uint64_t dest = through_stub(u, c->target);
    if (dest == fn)
        return true;
    return jumps_to(u, dest ? dest : c->target, fn);
}

/* The size of a frame-pointer prologue's frame below rbp: push rbp;
 * mov rbp, rsp; then the pushes of callee-saved registers (their number
 * is the CFI's: the registers it says are saved), and sub rsp, n, looked
 * for among the first instructions (compilers interleave moves with the
 * pushes). -1 when the code does not start that way. */
static int64_t decode_prologue(ss_unwinder *u, uint64_t fn, uint32_t pushes) {
    uint8_t b[64];
    if (!read_code(u, fn, b, sizeof b))
        return -1;
    size_t i = 0;
    if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa)
        i = 4; /* endbr64 */
    if (b[i] != 0x55)
        return -1;
    i++;
    if (!(b[i] == 0x48 && ((b[i + 1] == 0x89 && b[i + 2] == 0xe5) ||
                           (b[i + 1] == 0x8b && b[i + 2] == 0xec))))
        return -1;
    i += 3;
    int64_t size = 8 * (int64_t)pushes;
    for (; i + 7 <= sizeof b; i++) {
        if (b[i] == 0x48 && b[i + 1] == 0x83 && b[i + 2] == 0xec)
            return size + b[i + 3];
        if (b[i] == 0x48 && b[i + 1] == 0x81 && b[i + 2] == 0xec)
            return size + le32(b + i + 3);
    }
    return size; /* no sub: a frame of pushes only */
}

static int64_t prologue_frame(ss_unwinder *u, uint64_t fn, uint32_t pushes) {
    prologue_slot *p = &u->prologues[(fn * 0x9e3779b97f4a7c15ull >> 56) % PROLOGUES];
    if (p->fn != fn) {
        p->fn = fn;
        p->size = decode_prologue(u, fn, pushes);
    }
    return p->size;
}

/* Registers the row says were saved besides rbp and the return address:
 * a frame-pointer function pushed them after setting rbp. */
static uint32_t saved_pushes(const ss_cfi_row *row) {
    uint32_t n = 0;
    for (uint8_t i = 0; i < row->n_rules; i++)
        if (row->rules[i].kind == SS_RULE_OFFSET && row->rules[i].reg != SS_UW_RBP &&
            row->rules[i].reg != SS_UW_RIP)
            n++;
    return n;
}

/* rbp for frame F (SP sp, row `row`: CFA = rbp + cfa_off, return address
 * at CFA + ra_off). Candidates, in order: the one F's prologue gives;
 * the first slot above SP holding a return address of a call verified to
 * go to F (directly, through a PLT stub or a GOT slot); only then one of
 * a call through a register or memory, which cannot be checked (F called
 * through a pointer: a thread's function, a callback), so that a stale
 * address of such a call in F's own frame is not taken before the right
 * one. */
static bool guess_frame_pointer(ss_unwinder *u, ss_uw_stack *s, uint64_t sp,
                                const ss_cfi_row *row, int64_t ra_off, uint64_t *rbp) {
    uint64_t fn = row->fn_start;
    int64_t cfa_off = row->cfa_off;
    uint64_t ra;
    int64_t size = fn ? prologue_frame(u, fn, saved_pushes(row)) : -1;
    if (size >= 0) {
        uint64_t cand = sp + (uint64_t)size;
        if (read_u64(u, s, cand + (uint64_t)cfa_off + (uint64_t)ra_off, &ra) == MEM_OK &&
            calls_fn(u, ra, fn, true)) {
            *rbp = cand;
            return true;
        }
    }
    if (!fn)
        return false;
    for (int pass = 0; pass < 2; pass++) {
        bool verified = pass == 0;
        for (uint64_t cfa = (sp + 16 + 15) & ~(uint64_t)15; cfa < sp + GUESS_SPAN; cfa += 16) {
            mem_rc rc = read_u64(u, s, cfa + (uint64_t)ra_off, &ra);
            if (rc == MEM_CUT)
                break;
            if (rc != MEM_OK)
                continue;
            if (calls_fn(u, ra, fn, verified)) {
                *rbp = cfa - (uint64_t)cfa_off;
                return true;
            }
        }
    }
    return false;
}

/* ---- stepping ------------------------------------------------------ */

#define CALLEE_SAVED ((1u << SS_UW_RBX) | (1u << SS_UW_RBP) | (1u << SS_UW_R12) | \
                      (1u << SS_UW_R13) | (1u << SS_UW_R14) | (1u << SS_UW_R15))

static ss_uw_end mem_end(mem_rc rc) { return rc == MEM_CUT ? SS_UW_CUT_COPY : SS_UW_BAD_MEMORY; }

static int64_t ra_offset(const ss_cfi_row *row) {
    for (uint8_t i = 0; i < row->n_rules; i++)
        if (row->rules[i].reg == SS_UW_RIP)
            return row->rules[i].kind == SS_RULE_OFFSET ? row->rules[i].off : INT64_MIN;
    return INT64_MIN;
}

/* One step with CFI: regs become the caller's. 0 or how the walk ends. */
static int step_cfi(ss_unwinder *u, ss_uw_stack *s, ss_uw_regs *regs, const ss_cfi_row *row,
                    bool may_guess, ss_uw_result *res) {
    expr_ctx x = {u, s, regs, MEM_OK, false};
    uint64_t cfa;
    if (row->cfa_kind == SS_CFA_REG) {
        if (!reg_known(regs, row->cfa_reg)) {
            int64_t ra_off = ra_offset(row);
            uint64_t rbp;
            if (!may_guess || row->cfa_reg != SS_UW_RBP || ra_off == INT64_MIN ||
                !guess_frame_pointer(u, s, regs->r[SS_UW_RSP], row, ra_off, &rbp))
                return SS_UW_NO_REGISTER;
            regs->r[SS_UW_RBP] = rbp;
            regs->known |= 1u << SS_UW_RBP;
            res->fp_guessed = true;
        }
        cfa = regs->r[row->cfa_reg] + (uint64_t)(int64_t)row->cfa_off;
    } else if (!eval(&x, row->cfa_expr, row->cfa_expr_len, false, 0, &cfa)) {
        return x.need_reg ? SS_UW_NO_REGISTER : x.mem != MEM_OK ? mem_end(x.mem) : SS_UW_BAD_FRAME;
    }
    ss_uw_regs next = *regs;
    /* callee-saved registers keep their values unless saved; the others
     * are lost across a call (a signal frame restores them all) */
    next.known &= CALLEE_SAVED;
    next.r[SS_UW_RSP] = cfa;
    next.known |= 1u << SS_UW_RSP;
    next.known &= ~(1u << SS_UW_RIP);
    for (uint8_t i = 0; i < row->n_rules; i++) {
        const ss_cfi_reg_rule *r = &row->rules[i];
        uint64_t v = 0, addr;
        switch (r->kind) {
        case SS_RULE_SAME:
            if (!reg_known(regs, r->reg))
                continue;
            v = regs->r[r->reg];
            break;
        case SS_RULE_UNDEF:
            next.known &= ~(1u << r->reg);
            continue;
        case SS_RULE_OFFSET: {
            mem_rc rc = read_u64(u, s, cfa + (uint64_t)(int64_t)r->off, &v);
            if (rc != MEM_OK)
                return mem_end(rc);
            break;
        }
        case SS_RULE_VAL_OFFSET:
            v = cfa + (uint64_t)(int64_t)r->off;
            break;
        case SS_RULE_REG:
            if (!reg_known(regs, (unsigned)r->off)) {
                next.known &= ~(1u << r->reg);
                continue;
            }
            v = regs->r[r->off];
            break;
        case SS_RULE_EXPR:
        case SS_RULE_VAL_EXPR:
            if (!eval(&x, row->arena + r->off, r->len, true, cfa, &addr)) {
                if (x.need_reg) { /* a register the caller does not need, maybe */
                    next.known &= ~(1u << r->reg);
                    continue;
                }
                return x.mem != MEM_OK ? mem_end(x.mem) : SS_UW_BAD_FRAME;
            }
            if (r->kind == SS_RULE_VAL_EXPR) {
                v = addr;
            } else {
                mem_rc rc = read_u64(u, s, addr, &v);
                if (rc != MEM_OK)
                    return mem_end(rc);
            }
            break;
        default:
            continue;
        }
        next.r[r->reg] = v;
        next.known |= 1u << r->reg;
    }
    *regs = next;
    return -1;
}

/* One step by frame pointer (code without CFI). */
static int step_fp(ss_unwinder *u, ss_uw_stack *s, ss_uw_regs *regs) {
    if (!reg_known(regs, SS_UW_RBP))
        return SS_UW_NO_CFI;
    uint64_t fp = regs->r[SS_UW_RBP];
    if (fp & 7 || fp < regs->r[SS_UW_RSP])
        return SS_UW_NO_CFI;
    uint64_t link[2];
    mem_rc rc = read_mem(u, s, fp, link, sizeof link);
    if (rc != MEM_OK)
        return rc == MEM_CUT ? SS_UW_CUT_COPY : SS_UW_NO_CFI;
    regs->r[SS_UW_RBP] = link[0];
    regs->r[SS_UW_RIP] = link[1];
    regs->r[SS_UW_RSP] = fp + 16;
    regs->known = (1u << SS_UW_RBP) | (1u << SS_UW_RIP) | (1u << SS_UW_RSP);
    return -1;
}

ss_uw_end ss_unwind(ss_unwinder *u, const ss_uw_regs *start, ss_uw_stack *stack, bool at_syscall,
                    uint64_t *ips, uint32_t max, ss_uw_result *res) {
    memset(res, 0, sizeof *res);
    page_set_empty(&u->pages);
    ss_uw_regs regs = *start;
    bool exact = true; /* the leaf pc is where the thread is, not a return address */
    if (!reg_known(&regs, SS_UW_RIP) || !reg_known(&regs, SS_UW_RSP))
        return res->end = SS_UW_NO_REGISTER;
    for (uint32_t steps = 0; steps < MAX_STEPS; steps++) {
        uint64_t pc = regs.r[SS_UW_RIP];
        if (res->n == max)
            return res->end = SS_UW_CUT_DEPTH;
        ips[res->n++] = pc | (exact ? SS_UW_EXACT : 0);
        /* a return address is looked up in its call instruction; so is a
         * pc just after a syscall instruction (the row there is the same,
         * and the instruction may end its FDE) */
        uint64_t look = exact && !(at_syscall && steps == 0) ? pc : pc - 1;
        ss_cfi_row row;
        ss_cfi_lookup(u->cfi, look, &row);
        uint64_t sp = regs.r[SS_UW_RSP];
        int rc;
        if (row.found) {
            if (row.ra_undefined)
                return res->end = SS_UW_COMPLETE;
            rc = step_cfi(u, stack, &regs, &row, at_syscall, res);
        } else {
            rc = step_fp(u, stack, &regs);
            res->fp_frames++;
        }
        if (rc >= 0)
            return res->end = (ss_uw_end)rc;
        if (!reg_known(&regs, SS_UW_RIP) || regs.r[SS_UW_RIP] == 0)
            return res->end = SS_UW_COMPLETE; /* the outermost frame */
        /* the stack grows down: callers are above, except across a
         * signal frame (an alternate signal stack may be anywhere) */
        if (!row.signal_frame && regs.r[SS_UW_RSP] <= sp)
            return res->end = SS_UW_BAD_FRAME;
        if (!is_return_code(u, regs.r[SS_UW_RIP]))
            return res->end = SS_UW_BAD_FRAME;
        exact = row.found && row.signal_frame;
    }
    return res->end = SS_UW_BAD_FRAME;
}
