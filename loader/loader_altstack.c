/* loader_altstack.c: an alternate signal stack for every host thread, so
 * that the agent's sampling signal never lands on a thread's own stack.
 *
 * The sampling handler runs with SA_ONSTACK. A thread without an
 * alternate signal stack would take the kernel's signal frame (about
 * 3.3 KiB with AVX-512, AT_MINSIGSTKSZ) and our handler on whatever stack
 * it runs on: a thread near the end of its stack dies of SIGSEGV, a
 * coroutine on a small heap stack gets bytes written below it, a Go
 * program aborts (its runtime requires SA_ONSTACK and an alternate stack
 * on every thread a signal may reach), a Rust thread that overflows its
 * stack dies silently. So, while the agent is enabled for this process
 * (the condition under which the loader arms its start):
 *
 *   - every thread created with pthread_create starts in a trampoline
 *     that installs an alternate stack of ours (mmap'd, a PROT_NONE guard
 *     page below it, max(64 KiB, 4 * AT_MINSIGSTKSZ)) unless the thread
 *     already has one (then that one is used, judged like a host's), then
 *     calls the host's start routine. The main thread gets
 *     one from the loader's constructor. Go (cgo) and Rust adopt an
 *     existing alternate stack on a new thread instead of making their own;
 *   - at thread exit a pthread key's destructor forgets the thread in the
 *     registry, disables our stack if it is still the thread's, and keeps
 *     it for the next thread (up to 64 kept) or unmaps it (never while
 *     the thread runs on it);
 *   - the stacks are MADV_DONTFORK: a forked child has only the thread
 *     that forked, whose stack is made inheritable for its fork (at-fork
 *     handlers of our own); a fork of a host with many threads no longer
 *     copies two mappings per thread. A child made by a raw clone()
 *     without CLONE_VM (no at-fork handler runs) lacks the stack its
 *     thread's alternate stack names: a signal with SA_ONSTACK there
 *     would kill it (the agent's own never goes there);
 *   - sigaltstack is interposed: a host that installs its own large
 *     enough stack keeps it (the thread is marked HOST), one that disables
 *     it or installs one too small makes the thread unsafe;
 *   - the registry, one byte per tid (SS_SIGNAL_ROOM_*; pages of 4,096
 *     tids mapped as tids come), tells the core
 *     which threads can take the signal (ss_core_host.thread_signal_room):
 *     a thread not known safe is not signalled, it is counted.
 *
 * Disabled, pthread_create is a pass-through (one branch) and sigaltstack
 * forwards untouched; nothing is mapped.
 *
 * Not covered: threads made by raw clone() or created before the loader's
 * constructor ran (not registered: never signalled), threads whose start
 * routine ends with a raw SYS_exit (no key destructor: their 64 KiB stay
 * mapped, and their registry byte stays until the tid is used again), and
 * threads that replaced or disabled our stack (it stays mapped at exit,
 * see release). */
#include "loader/ss_loader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

#define ALT_MIN_SIZE (64u * 1024u)
#define REGISTRY_MAX (4u * 1024u * 1024u) /* the kernel's largest pid_max */

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*sigaltstack_fn)(const stack_t *, stack_t *);

static _Atomic bool enabled;
static _Atomic(create_fn) next_create;
static _Atomic(sigaltstack_fn) next_sigaltstack;
/* The registry: one byte per tid, in pages mapped as tids come (a
 * process uses a few ranges of tids; pid_max is 4 Mi on most systems, and
 * a process that locks its memory would lock every page of a flat
 * table). A page is never unmapped once installed (a reader may hold it). */
#define REG_PAGE 4096u
#define REG_PAGES (REGISTRY_MAX / REG_PAGE)
static _Atomic(_Atomic unsigned char *) reg_pages[REG_PAGES];
static size_t registry_len; /* tids below this are registered */
static size_t page_size;
static size_t alt_size;  /* usable bytes of one of our stacks */
static size_t host_need; /* a host's stack this large can take our signal */
static pthread_key_t key; /* our mapping's base, or NOT_OURS */
static _Atomic bool leaving; /* ss_altstack_leave: no stack kept for later */

/* The key's value of a thread registered without a stack of ours: its
 * destructor must still forget the thread in the registry. */
#define NOT_OURS ((void *)1)

/* Stacks of exited threads, kept for the next ones (as glibc keeps thread
 * stacks): a program that creates and joins threads all the time would
 * otherwise map and unmap one per thread, and every munmap of a
 * multi-threaded process stops the others' CPUs (TLB shootdown). */
#define CACHE_MAX 64u
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cache[CACHE_MAX];
static unsigned n_cached;

static pid_t my_tid(void) { return (pid_t)syscall(SYS_gettid); }

/* Our own calls go straight to the kernel, not through our wrapper. */
static int raw_sigaltstack(const stack_t *ss, stack_t *old) {
    return (int)syscall(SYS_sigaltstack, ss, old);
}

/* The page that holds tid's byte; mapped here if `make` (NULL if it
 * cannot be). */
static _Atomic unsigned char *reg_page(pid_t tid, bool make) {
    size_t i = (size_t)tid / REG_PAGE;
    _Atomic unsigned char *p = atomic_load_explicit(&reg_pages[i], memory_order_acquire);
    if (p || !make)
        return p;
    void *m = mmap(NULL, REG_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    _Atomic unsigned char *none = NULL;
    if (atomic_compare_exchange_strong_explicit(&reg_pages[i], &none, m, memory_order_acq_rel,
                                                memory_order_acquire))
        return m;
    munmap(m, REG_PAGE); /* another thread installed it first */
    return none;
}

static void mark(pid_t tid, int room) {
    if (tid <= 0 || (size_t)tid >= registry_len)
        return;
    /* NONE is what a missing page reads as */
    _Atomic unsigned char *p = reg_page(tid, room != SS_SIGNAL_ROOM_NONE);
    if (p)
        atomic_store_explicit(&p[(size_t)tid % REG_PAGE], (unsigned char)room, memory_order_release);
}

static int room_of(pid_t tid) {
    if (tid <= 0 || (size_t)tid >= registry_len)
        return SS_SIGNAL_ROOM_NONE;
    _Atomic unsigned char *p = reg_page(tid, false);
    return p ? atomic_load_explicit(&p[(size_t)tid % REG_PAGE], memory_order_acquire)
             : SS_SIGNAL_ROOM_NONE;
}

/* What an alternate stack that is not ours is worth. */
static int judge(const stack_t *ss) {
    if (ss->ss_flags & SS_DISABLE)
        return SS_SIGNAL_ROOM_NONE;
    return ss->ss_size >= host_need ? SS_SIGNAL_ROOM_HOST : SS_SIGNAL_ROOM_NONE;
}

static bool is_ours(const stack_t *ss, void *base) {
    return base && base != NOT_OURS && !(ss->ss_flags & SS_DISABLE) &&
           (char *)ss->ss_sp == (char *)base + page_size;
}

/* A mapping for one stack: a guard page, then alt_size bytes. */
static void *map_stack(void) {
    void *base = NULL;
    pthread_mutex_lock(&cache_lock);
    if (n_cached)
        base = cache[--n_cached];
    pthread_mutex_unlock(&cache_lock);
    if (base)
        return base;
    base = mmap(NULL, page_size + alt_size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    if (mprotect(base, page_size, PROT_NONE) != 0) {
        munmap(base, page_size + alt_size);
        return NULL;
    }
    /* not copied by fork: the child has only the forking thread, whose
     * stack is made inheritable around the fork (fork_prepare); two
     * mappings fewer per thread for every fork to copy */
    (void)madvise(base, page_size + alt_size, MADV_DONTFORK);
    return base;
}

/* Around a fork, on the forking thread: its stack of ours comes along
 * (the child's thread keeps it as its alternate stack), then is not
 * copied again. */
static void fork_inherit_own(int advice) {
    void *base = ss_altstack_enabled() ? pthread_getspecific(key) : NULL;
    if (base && base != NOT_OURS)
        (void)madvise(base, page_size + alt_size, advice);
}

static void fork_prepare(void) { fork_inherit_own(MADV_DOFORK); }
static void fork_parent(void) { fork_inherit_own(MADV_DONTFORK); }

/* A stack no thread uses any more (nor can: it is nobody's alternate
 * stack): kept for the next thread, or unmapped. */
static void put_stack(void *base) {
    pthread_mutex_lock(&cache_lock);
    if (n_cached < CACHE_MAX && !atomic_load_explicit(&leaving, memory_order_relaxed)) {
        cache[n_cached++] = base;
        base = NULL;
    }
    pthread_mutex_unlock(&cache_lock);
    if (base)
        munmap(base, page_size + alt_size);
}

/* Key destructor, at thread exit: forget the thread first (the sampler
 * stops choosing it), then, if our stack is still the thread's alternate
 * stack, disable it and unmap it. Left mapped: a stack the thread is on
 * (it exits from inside a handler: the kernel refuses to change it), and
 * one the thread replaced or disabled meanwhile: whoever did learnt its
 * address (sigaltstack's old value) and may have unmapped it already (a
 * sanitizer runtime unmaps the stack it finds at thread exit), and the
 * range may be another mapping by now. */
static void release(void *base) {
    mark(my_tid(), SS_SIGNAL_ROOM_NONE);
    if (!base || base == NOT_OURS)
        return;
    stack_t cur;
    if (raw_sigaltstack(NULL, &cur) != 0 || (cur.ss_flags & SS_ONSTACK) || !is_ours(&cur, base))
        return;
    stack_t off = {.ss_flags = SS_DISABLE};
    if (raw_sigaltstack(&off, NULL) == 0)
        put_stack(base);
}

/* On the thread itself: use the alternate stack it has, else install
 * `base` (already mapped, may be NULL), and register the thread. */
static void settle(void *base) {
    pid_t tid = my_tid();
    stack_t cur;
    if (raw_sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) {
        if (base)
            put_stack(base);
        if (pthread_setspecific(key, NOT_OURS) == 0)
            mark(tid, judge(&cur));
        return;
    }
    if (!base) {
        mark(tid, SS_SIGNAL_ROOM_NONE);
        return;
    }
    stack_t ss = {.ss_sp = (char *)base + page_size, .ss_size = alt_size, .ss_flags = 0};
    if (raw_sigaltstack(&ss, NULL) != 0) {
        put_stack(base);
        mark(tid, SS_SIGNAL_ROOM_NONE);
        return;
    }
    if (pthread_setspecific(key, base) != 0) {
        /* nobody would free it at exit: not kept */
        stack_t off = {.ss_flags = SS_DISABLE};
        raw_sigaltstack(&off, NULL);
        put_stack(base);
        mark(tid, SS_SIGNAL_ROOM_NONE);
        return;
    }
    mark(tid, SS_SIGNAL_ROOM_OURS);
}

static size_t registry_size(void) {
    char buf[32];
    int fd = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return REGISTRY_MAX;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return REGISTRY_MAX;
    buf[n] = '\0';
    unsigned long v = strtoul(buf, NULL, 10);
    return v == 0 || v > REGISTRY_MAX ? REGISTRY_MAX : (size_t)v;
}

void ss_altstack_enable(void) {
    long page = sysconf(_SC_PAGESIZE);
    page_size = page > 0 ? (size_t)page : 4096;
    size_t min = (size_t)getauxval(AT_MINSIGSTKSZ);
    if (min < 2048) /* the legacy MINSIGSTKSZ: an old kernel gives no AT_MINSIGSTKSZ */
        min = 2048;
    alt_size = 4 * min > ALT_MIN_SIZE ? 4 * min : ALT_MIN_SIZE;
    alt_size = (alt_size + page_size - 1) & ~(page_size - 1);
    host_need = min + SS_SIGNAL_ROOM_NEED;
    size_t len = registry_size();
    create_fn create = (create_fn)ss_loader_next("pthread_create");
    if (!create || pthread_key_create(&key, release) != 0)
        return;
    atomic_store(&next_create, create);
    registry_len = len;
    pthread_atfork(fork_prepare, fork_parent, NULL);
    atomic_store_explicit(&enabled, true, memory_order_release);
    settle(map_stack()); /* the main thread (the constructor runs on it) */
}

int ss_altstack_room(pid_t tid) { return room_of(tid); }

void ss_altstack_leave(void) {
    if (!atomic_exchange(&enabled, false))
        return;
    atomic_store(&leaving, true);
    pthread_mutex_lock(&cache_lock);
    void *kept[CACHE_MAX];
    unsigned n = n_cached;
    for (unsigned i = 0; i < n; i++)
        kept[i] = cache[i];
    n_cached = 0;
    pthread_mutex_unlock(&cache_lock);
    for (unsigned i = 0; i < n; i++)
        munmap(kept[i], page_size + alt_size);
    /* the calling thread's, unless it runs on it */
    void *base = pthread_getspecific(key);
    stack_t cur;
    if (raw_sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_ONSTACK) && is_ours(&cur, base)) {
        stack_t off = {.ss_flags = SS_DISABLE};
        if (raw_sigaltstack(&off, NULL) == 0 && pthread_setspecific(key, NOT_OURS) == 0)
            munmap(base, page_size + alt_size);
    }
    mark(my_tid(), SS_SIGNAL_ROOM_NONE);
}

void ss_altstack_come_back(void) {
    atomic_store(&leaving, false);
    if (registry_len) /* it was enabled once */
        atomic_store(&enabled, true);
}

void ss_altstack_never_signal_self(void) {
    if (ss_altstack_enabled())
        mark(my_tid(), SS_SIGNAL_ROOM_NONE);
}

bool ss_altstack_enabled(void) { return atomic_load_explicit(&enabled, memory_order_acquire); }

void ss_altstack_after_fork_child(void) {
    if (!ss_altstack_enabled())
        return;
    /* another thread may have held it at the fork; the cache itself is
     * at worst one stack short (lost, never handed out twice) */
    pthread_mutex_init(&cache_lock, NULL);
    n_cached = 0; /* not here (MADV_DONTFORK): leaked in the parent's count only */
    /* the parent's threads are not here; a private anonymous mapping
     * reads as zeros (NONE) again after MADV_DONTNEED */
    for (size_t i = 0; i < REG_PAGES; i++) {
        _Atomic unsigned char *p = atomic_load_explicit(&reg_pages[i], memory_order_relaxed);
        if (p && madvise((void *)p, REG_PAGE, MADV_DONTNEED) != 0)
            for (size_t j = 0; j < REG_PAGE; j++)
                atomic_store_explicit(&p[j], SS_SIGNAL_ROOM_NONE, memory_order_relaxed);
    }
    /* the calling thread kept its alternate stack and its key value */
    stack_t cur;
    if (raw_sigaltstack(NULL, &cur) != 0)
        return;
    void *base = pthread_getspecific(key);
    mark(my_tid(), is_ours(&cur, base) ? SS_SIGNAL_ROOM_OURS : judge(&cur));
}

/* ---- the wrappers ---------------------------------------------------- */

/* What the trampoline needs, written at the top of the new thread's
 * alternate stack (read before the stack is installed; the page the first
 * signal frame takes anyway): no malloc in pthread_create, which a host's
 * allocator may itself call. */
typedef struct start_call {
    void *(*fn)(void *);
    void *arg;
    void *base;
    bool agent; /* created by one of the agent's threads (loader_short.c) */
} start_call;

static void *altstack_thread_start(void *p) {
    start_call c = *(start_call *)p;
    if (c.agent)
        ss_agent_thread_set(true);
    settle(c.base);
    return c.fn(c.arg);
}

/* Enabled: the thread starts in the trampoline, on an alternate stack of
 * ours. */
static int create_registered(create_fn create, pthread_t *thread, const pthread_attr_t *attr,
                             void *(*fn)(void *), void *arg) {
    void *base = map_stack();
    if (!base) /* the thread runs unregistered: never signalled */
        return create(thread, attr, fn, arg);
    start_call *c = (start_call *)((char *)base + page_size + alt_size) - 1;
    c->fn = fn;
    c->arg = arg;
    c->base = base;
    c->agent = ss_agent_thread_is();
    int rc = create(thread, attr, altstack_thread_start, c);
    if (rc != 0)
        put_stack(base);
    return rc;
}

SS_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                             void *(*fn)(void *), void *arg) {
    create_fn create = atomic_load_explicit(&next_create, memory_order_relaxed);
    bool registering = atomic_load_explicit(&enabled, memory_order_relaxed);
    if (!create) { /* resolved when enabled */
        create = (create_fn)ss_loader_next("pthread_create");
        if (!create)
            return EAGAIN;
        atomic_store_explicit(&next_create, create, memory_order_relaxed);
    }
    int rc = registering ? create_registered(create, thread, attr, fn, arg)
                         : create(thread, attr, fn, arg);
    /* the agent's threads may be what the host is short of (or were, a
     * moment ago): they leave, and the call is made again (loader_short.c) */
    int state = 0;
    if (rc == EAGAIN && ss_short_of_tasks("pthread_create"))
        while ((rc = create(thread, attr, fn, arg)) == EAGAIN && ss_short_retry_wait(&state))
            ;
    return rc;
}

SS_EXPORT int sigaltstack(const stack_t *ss, stack_t *old) {
    sigaltstack_fn next = atomic_load_explicit(&next_sigaltstack, memory_order_relaxed);
    if (!next) {
        next = (sigaltstack_fn)ss_loader_next("sigaltstack");
        if (!next)
            return -1;
        atomic_store_explicit(&next_sigaltstack, next, memory_order_relaxed);
    }
    int rc = next(ss, old);
    if (rc != 0 || !ss || !ss_altstack_enabled())
        return rc;
    int saved = errno;
    void *base = pthread_getspecific(key);
    if (!base) /* not started by us: forgotten at exit all the same */
        pthread_setspecific(key, NOT_OURS);
    mark(my_tid(), is_ours(ss, base) ? SS_SIGNAL_ROOM_OURS : judge(ss));
    errno = saved;
    return rc;
}
