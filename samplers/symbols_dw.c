/* symbols_dw.c: the resolver's hold on libstackshot-dw.so, the module
 * that brings libdw and libelf in (samplers/symbols_dw.h).
 *
 * A resolver holds the module while it has a Dwfl (symbols.c): from the
 * first address that misses its cache to the release of libdw's tables.
 * The last hold given back closes the module, and with it libdw, libelf
 * and the compression libraries only they needed: a process whose stacks
 * are all in the resolver's cache maps none of them, and its forks copy
 * about 20 mappings fewer.
 *
 * Opening and closing change the dynamic loader's counters of objects
 * added and removed (dl_phdr_info's dlpi_adds, dlpi_subs), which the
 * resolver watches to forget cached addresses when the host loads or
 * unloads a library. Each open lists the objects it brought in (the list
 * of loaded objects before and after); the close counts those of them it
 * took away. The resolver discounts both (ss_dw_own_changes). An object
 * the host unloads while the module closes is not one of them, and still
 * flushes the cache; one the host loads while the module opens counts as
 * the module's (its addresses were never cached: they were not mapped).
 *
 * dlopen and dlclose take the dynamic loader's lock: a host thread that
 * loads a library, or unwinds a C++ exception, at that moment waits for
 * them (about a millisecond). That happens once per load of the tables:
 * at the first miss, then at the misses after each release, which come
 * further apart each time (symbols.c).
 *
 * A forked child inherits the module and its parent's holds with its
 * parent's resolvers, which it goes on using or ends (native_sampler.c);
 * one whose Dwfl it forgets unread (ss_symbols_adopt: the parent's tables
 * did not come with the fork) gives its hold back there. */
#include "samplers/symbols_dw.h"
#include "agent/log.h"
#include "agent/module.h"
#include "agent/time.h"

#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A module that could not be opened is asked for again after this. */
#define RETRY_NS (10ull * 1000000000ull)

const ss_dw_api *ss_dw;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned holders;
static bool changing; /* an open or a close is under way (a fork may cut it) */
static uint64_t retry_ns;
static bool said;
static _Atomic unsigned long long own_adds, own_subs; /* read by lookups, unlocked */
static uintptr_t *ours; /* the objects the open brought in, by load address */
static size_t n_ours;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ---- the list of loaded objects -------------------------------------- */

typedef struct objects {
    uintptr_t *at;
    size_t n, cap;
} objects;

static int note_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    objects *o = arg;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        uintptr_t *at = realloc(o->at, cap * sizeof *at);
        if (!at)
            return 1;
        o->at = at;
        o->cap = cap;
    }
    o->at[o->n++] = (uintptr_t)info->dlpi_addr;
    return 0;
}

static objects objects_now(void) {
    objects o = {NULL, 0, 0};
    dl_iterate_phdr(note_object, &o);
    return o;
}

static bool listed(const uintptr_t *at, size_t n, uintptr_t a) {
    for (size_t i = 0; i < n; i++)
        if (at[i] == a)
            return true;
    return false;
}

/* ---- open and close (under the lock) --------------------------------- */

static void open_module(void) {
    uint64_t now = ss_mono_ns();
    if (retry_ns && now < retry_ns)
        return;
    char why[512];
    objects before = objects_now();
    changing = true;
    const ss_dw_api *api = ss_module_open("dw", why, sizeof why);
    objects after = objects_now();
    free(ours);
    ours = malloc((after.n ? after.n : 1) * sizeof *ours);
    n_ours = 0;
    for (size_t i = 0; ours && i < after.n; i++)
        if (!listed(before.at, before.n, after.at[i]))
            ours[n_ours++] = after.at[i];
    own_adds += n_ours;
    changing = false;
    free(before.at);
    free(after.at);
    if (!api) {
        retry_ns = now + RETRY_NS;
        if (!said)
            ss_error("symbols: libdw could not be opened (%s); native frames stay "
                     "unnamed until it can",
                     why);
        said = true;
        return;
    }
    retry_ns = 0;
    ss_dw = api;
    elf_version(EV_CURRENT); /* libelf's, fresh with each load */
}

static void close_module(void) {
    objects before = objects_now();
    changing = true;
    ss_dw = NULL;
    ss_module_close("dw");
    objects after = objects_now();
    for (size_t i = 0; i < before.n; i++)
        if (!listed(after.at, after.n, before.at[i]) && listed(ours, n_ours, before.at[i]))
            own_subs++;
    changing = false;
    free(ours);
    ours = NULL;
    n_ours = 0;
    free(before.at);
    free(after.at);
}

/* ---- holds ------------------------------------------------------------ */

/* In a forked child: the lock may have been held by a thread that is not
 * here. An open or close cut by the fork leaves the module's state
 * unknown: it is opened again at the next hold (one reference more, so
 * it stays mapped in that child). */
static void after_fork_child(void) {
    pthread_mutex_init(&lock, NULL);
    if (changing) {
        ss_dw = NULL;
        changing = false;
    }
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, after_fork_child); }

bool ss_dw_hold(void) {
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&lock);
    if (!ss_dw)
        open_module();
    bool ok = ss_dw != NULL;
    if (ok)
        holders++;
    pthread_mutex_unlock(&lock);
    return ok;
}

void ss_dw_drop(void) {
    pthread_mutex_lock(&lock);
    if (holders > 0 && --holders == 0 && ss_dw)
        close_module();
    pthread_mutex_unlock(&lock);
}

void ss_dw_own_changes(unsigned long long *adds, unsigned long long *subs) {
    *adds = atomic_load_explicit(&own_adds, memory_order_relaxed);
    *subs = atomic_load_explicit(&own_subs, memory_order_relaxed);
}
