/* stack_walk.c: walks of stack copies and of sleeping threads for the
 * native sampler (see stack_walk.h). */
#include "agent/span.h"
#include "samplers/stack_walk.h"
#include "agent/main_arena.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#define PTHREAD_SCAN (16u * 1024u) /* top of a stack searched for its descriptor */
#define SELF_OFF 16                /* tcbhead_t.self (x86-64 glibc) */

struct ss_walker {
    ss_unwinder *uw;
    uint32_t copy_bytes, max_ips;
    uint8_t *stack_buf;   /* live reads of a sleeping thread's stack */
    uint64_t *ips;        /* its frames */
    ss_maps *maps;        /* the table walks check addresses with */
    bool maps_fresh;      /* read this round */
    int tid_off;          /* offset of the tid in glibc's thread descriptor; -1 unknown */
    bool main_looked;     /* the main thread's descriptor looked for (find_main_pthread) */
    int stack_off, stack_size_off; /* of stackblock and stackblock_size; -1 unknown */
    int64_t pd_below_top; /* the descriptor's distance from its stack's top; -1 unknown */
    uint64_t last_base;   /* what the last asleep walk read: [last_base, + last_len) */
    size_t last_len;
};

/* A sleeping thread's stack is read from SP to its mapping's top in one
 * go when that is at most this much (its thread descriptor, at the top,
 * comes with it); deeper stacks are read as the walk goes. */
#define WHOLE_STACK (32u * 1024u)

static _Atomic uint64_t main_pthread;

void ss_walker_note_main(uint64_t pthread) { atomic_store(&main_pthread, pthread); }
uint64_t ss_walker_main_pthread(void) { return atomic_load(&main_pthread); }

/* Where glibc keeps the tid and the stack (stackblock, stackblock_size)
 * in a thread descriptor (struct pthread, private): found in the calling
 * thread's own, against gettid and pthread_getattr_np (whose stack top
 * is stackblock + stackblock_size, its size that minus the guard), on
 * a thread glibc created (see learn_layout). */
static void *learn_here(void *arg) {
    ss_walker *w = arg;
    w->tid_off = w->stack_off = w->stack_size_off = -1;
    const char *pd = (const char *)(uintptr_t)pthread_self();
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (*(const uintptr_t *)(pd + SELF_OFF) != (uintptr_t)pd)
        return NULL;
    for (int off = SELF_OFF + 8; off < 2048 && w->tid_off < 0; off += 4)
        if (*(const pid_t *)(pd + off) == tid)
            w->tid_off = off;
    pthread_attr_t a;
    void *addr;
    size_t size, guard;
    if (tid == getpid() || pthread_getattr_np(pthread_self(), &a) != 0)
        return NULL; /* the main thread's descriptor records no stack */
    int ok = pthread_attr_getstack(&a, &addr, &size) == 0 &&
             pthread_attr_getguardsize(&a, &guard) == 0;
    pthread_attr_destroy(&a);
    if (!ok)
        return NULL;
    uint64_t top = (uint64_t)(uintptr_t)addr + size, block_size = size + guard;
    for (int off = SELF_OFF + 8; off + 8 <= 2048; off += 8) {
        uint64_t v = *(const uint64_t *)(pd + off);
        if (v == top - block_size && w->stack_off < 0)
            w->stack_off = off;
        else if (v == block_size && w->stack_size_off < 0)
            w->stack_size_off = off;
    }
    return NULL;
}

/* The short-lived thread: pthread_getattr_np allocates, so under an
 * RLIMIT_AS it goes on glibc's main arena first (agent/main_arena.c). */
static void *learn_apart(void *arg) {
    bool shared = ss_main_arena_attach();
    learn_here(arg);
    if (shared)
        ss_main_arena_detach();
    return NULL;
}

/* On a thread glibc created: the calling one, or (the main thread's
 * descriptor records no stack) a short-lived one of its own. */
static void learn_layout(ss_walker *w) {
    if ((pid_t)syscall(SYS_gettid) != getpid()) {
        learn_here(w);
        return;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, learn_apart, w) == 0)
        pthread_join(t, NULL);
    else
        w->tid_off = w->stack_off = w->stack_size_off = -1;
}

static bool refresh_maps(void *arg);

ss_walker *ss_walker_create(uint32_t copy_bytes, uint32_t max_ips) {
    ss_walker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->copy_bytes = copy_bytes;
    w->max_ips = max_ips;
    w->uw = ss_unwinder_create();
    w->stack_buf = malloc(copy_bytes);
    w->ips = malloc((size_t)max_ips * sizeof *w->ips);
    learn_layout(w);
    w->pd_below_top = -1;
    if (!w->uw || !w->stack_buf || !w->ips) {
        ss_walker_destroy(w);
        return NULL;
    }
    ss_unwinder_set_refresh(w->uw, refresh_maps, w);
    return w;
}

void ss_walker_destroy(ss_walker *w) {
    if (!w)
        return;
    free(w->maps);
    ss_unwinder_destroy(w->uw);
    free(w->stack_buf);
    free(w->ips);
    free(w);
}

void ss_walker_round(ss_walker *w) {
    ss_unwinder_round(w->uw);
    w->maps_fresh = false;
}

void ss_walker_descriptor_layout(const ss_walker *w, int *tid_off, int *stack_off,
                                 int *stack_size_off) {
    *tid_off = w->tid_off;
    *stack_off = w->stack_off;
    *stack_size_off = w->stack_size_off;
}

/* Replace the table (walks only read through ss_uw_read_memory: a table
 * a little out of date costs a failed read, never a fault). */
static void read_maps(ss_walker *w) {
    ss_maps *m = ss_maps_read();
    if (!m)
        return;
    free(w->maps);
    w->maps = m;
    w->maps_fresh = true;
    ss_unwinder_set_maps(w->uw, m);
}

/* The unwinder met a return address in no mapping of the table. */
static bool refresh_maps(void *arg) {
    ss_walker *w = arg;
    if (w->maps_fresh)
        return false;
    read_maps(w);
    return true;
}

bool ss_walker_bounds(ss_walker *w, uint64_t sp, uint64_t *lo, uint64_t *hi) {
    const ss_map_range *r = ss_maps_find(w->maps, sp);
    if (!r && !w->maps_fresh) {
        read_maps(w);
        r = ss_maps_find(w->maps, sp);
    }
    if (!r || !(r->prot & SS_MAP_W))
        return false;
    *lo = r->lo;
    *hi = r->hi;
    return true;
}

/* The thread is running code at pc, so pc is in an executable mapping:
 * when the table does not have one there, the table is older than that
 * code (JIT code written into pages mapped since, or made executable
 * since: V8's, HotSpot's) and is read again, once per round at most.
 * Without it, return addresses into those pages are not taken for code
 * and the walk ends at the first JIT frame. */
static void know_pc(ss_walker *w, uint64_t pc) {
    const ss_map_range *r = w->maps ? ss_maps_find(w->maps, pc) : NULL;
    if (!w->maps || (!(r && (r->prot & SS_MAP_X)) && !w->maps_fresh))
        read_maps(w);
}

ss_uw_end ss_walker_asleep(ss_walker *w, uint64_t sp, uint64_t pc, bool in_syscall, uint64_t hi,
                           const uint64_t **ips, ss_uw_result *res) {
    know_pc(w, pc);
    uint64_t room = hi > sp ? hi - sp : w->copy_bytes;
    ss_uw_stack st = {
        .base = sp,
        .data = w->stack_buf,
        .len = 0,
        .cap = room < w->copy_bytes ? (size_t)room : w->copy_bytes,
        .map_hi = hi > sp ? hi : sp + w->copy_bytes,
        .live = true,
    };
    if (hi > sp && st.cap <= WHOLE_STACK) {
        long got = ss_uw_read_memory(st.data, sp, st.cap);
        st.len = got > 0 ? (size_t)got : 0;
    }
    ss_uw_regs regs = {.known = (1u << SS_UW_RIP) | (1u << SS_UW_RSP)};
    regs.r[SS_UW_RIP] = pc;
    regs.r[SS_UW_RSP] = sp;
    *ips = w->ips;
    ss_uw_end end = ss_unwind(w->uw, &regs, &st, in_syscall, w->ips, w->max_ips, res);
    w->last_base = sp;
    w->last_len = st.len;
    return end;
}

/* REG_* of <sys/ucontext.h> for each DWARF register number. */
static const int greg_of[SS_UW_NREGS] = {
    REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
    REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP,
};

ss_uw_end ss_walker_copy(ss_walker *w, const ss_sig_copy *c, uint64_t hi, uint64_t *ips,
                         uint32_t cap, ss_uw_result *res) {
    ss_uw_regs regs = {.known = (1u << SS_UW_NREGS) - 1};
    for (int i = 0; i < SS_UW_NREGS; i++)
        regs.r[i] = c->gregs[greg_of[i]];
    ss_uw_stack st = {
        .base = c->sp,
        .data = (uint8_t *)c->stack,
        .len = c->len,
        .cap = c->len,
        /* the copy ends at the mapping's end or at the copy size: reads
         * past it on the same stack mean the stack was cut */
        .map_hi = hi > c->sp ? hi : c->map_hi ? c->map_hi : c->sp + c->len,
        .live = false,
    };
    know_pc(w, regs.r[SS_UW_RIP]); /* return addresses into JIT code are checked against it */
    return ss_unwind(w->uw, &regs, &st, false, ips, cap, res);
}

/* Does [pd, pd + tid_off + 4) look like tid's descriptor? Read from the
 * last asleep walk's bytes when they hold it. */
static bool is_descriptor(const ss_walker *w, uint64_t pd, pid_t tid) {
    uint8_t buf[2048];
    const uint8_t *b = buf;
    size_t n = (size_t)w->tid_off + 4;
    if (n > sizeof buf)
        return false;
    if (pd >= w->last_base && pd + n <= w->last_base + w->last_len)
        b = w->stack_buf + (pd - w->last_base);
    else if (ss_uw_read_memory(buf, pd, n) != (long)n)
        return false;
    uint64_t self;
    pid_t t;
    memcpy(&self, b + SELF_OFF, 8);
    memcpy(&t, b + w->tid_off, 4);
    return self == pd && t == tid;
}

/* One 8-byte word of this process's memory; false: unreadable. */
static bool read_word(uint64_t addr, uint64_t *v) {
    return ss_uw_read_memory(v, addr, 8) == 8;
}

/* Is pd the main thread's descriptor (its self pointer, its tid the pid)? */
static bool is_main_descriptor(const ss_walker *w, uint64_t pd) {
    uint64_t self, t;
    return read_word(pd + SELF_OFF, &self) && self == pd &&
           read_word(pd + (uint64_t)w->tid_off, &t) && (pid_t)(uint32_t)t == getpid();
}

#define LIST_STEPS 4096 /* threads looked through, at most */

/* The main thread's descriptor, for a main thread never signalled (one
 * only ever read asleep, when the agent started on another thread). glibc
 * links every descriptor into one of two lists whose heads sit side by
 * side in ld.so's data: threads on stacks glibc allocated (ours), and
 * threads on stacks of their own, the main thread among them. The link
 * is the field just before the tid (struct pthread: `list_t list; pid_t
 * tid;`). From our own descriptor, `next` leads round its list to the
 * head (the one node that is no descriptor); the neighbouring heads (16
 * and 32 bytes either side) are walked for a descriptor whose self
 * pointer is itself and whose tid is the pid. Every read goes through
 * ss_uw_read_memory (a wrong guess reads nothing, never faults), and
 * nothing is taken that does not pass that check: 0 when not found. */
static uint64_t find_main_pthread(const ss_walker *w) {
    if (w->tid_off < SELF_OFF + 8 + 16)
        return 0;
    uint64_t link = (uint64_t)w->tid_off - 16;
    uint64_t node = (uint64_t)(uintptr_t)pthread_self() + link, head = 0;
    for (int i = 0; i < LIST_STEPS && !head; i++) {
        uint64_t next, self;
        if (!read_word(node, &next))
            return 0;
        if (!read_word(next - link + SELF_OFF, &self) || self != next - link)
            head = next; /* not a descriptor: the list's head */
        else if (is_main_descriptor(w, next - link))
            return next - link; /* called on a thread of the main's own list */
        node = next;
    }
    static const int64_t nearby[] = {16, -16, 32, -32};
    for (size_t h = 0; head && h < sizeof nearby / sizeof nearby[0]; h++) {
        uint64_t other = head + (uint64_t)nearby[h], n = other;
        for (int i = 0; i < LIST_STEPS; i++) {
            if (!read_word(n, &n) || n == other || n == 0)
                break;
            if (is_main_descriptor(w, n - link))
                return n - link;
        }
    }
    return 0;
}

uint64_t ss_walker_pthread(ss_walker *w, pid_t tid, uint64_t stack_hi) {
    if (tid == getpid()) {
        if (!ss_walker_main_pthread() && !w->main_looked) {
            w->main_looked = true; /* once: the lists do not change for it */
            uint64_t pd = find_main_pthread(w);
            if (pd)
                ss_walker_note_main(pd);
        }
        return ss_walker_main_pthread();
    }
    if (w->tid_off < 0 || stack_hi < PTHREAD_SCAN)
        return 0;
    if (w->pd_below_top >= 0) {
        uint64_t pd = stack_hi - (uint64_t)w->pd_below_top;
        if (is_descriptor(w, pd, tid))
            return pd;
    }
    /* not where glibc puts it for the others: look through the top of
     * the stack (8-byte aligned), once per thread */
    static uint64_t top[PTHREAD_SCAN / 8];
    uint64_t base = stack_hi - PTHREAD_SCAN;
    if (ss_uw_read_memory(top, base, PTHREAD_SCAN) != (long)PTHREAD_SCAN)
        return 0;
    for (uint32_t i = PTHREAD_SCAN / 8; i-- > 0;) {
        uint64_t pd = base + (uint64_t)i * 8 - SELF_OFF;
        if (top[i] != pd || pd < base || pd + (uint64_t)w->tid_off + 4 > stack_hi)
            continue;
        pid_t t;
        memcpy(&t, (const uint8_t *)top + (pd - base) + (uint64_t)w->tid_off, 4);
        if (t == tid) {
            w->pd_below_top = (int64_t)(stack_hi - pd);
            return pd;
        }
    }
    return 0;
}

bool ss_walker_span(ss_walker *w, uint64_t pthread, ss_otel_cache *cache, ss_otel_rec *out) {
    (void)w;
    return pthread && ss_otel_read_thread(pthread, ss_uw_read_memory, cache, out);
}

void ss_walker_stats(const ss_walker *w, uint64_t *compiled, uint64_t *cached) {
    ss_unwinder_stats(w->uw, compiled, cached);
}
