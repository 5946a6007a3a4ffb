/* loader_jvm_threads.c: a JVM short of threads gets the agent's.
 *
 * In a JVM the agent's threads (the JVMTI sampler, the exporter, gRPC's)
 * count against the same limits as in a native host (RLIMIT_NPROC, a
 * container's pids.max): a JVM that starts threads up to its limit got
 * "OutOfMemoryError: unable to create native thread" 2 to 9 threads
 * earlier with the agent (loader_short.c serves native hosts). The JVM
 * creates every thread, Java or its own, through pthread_create from
 * libjvm.so, bound when libjvm was loaded, before the agent: a wrapper by
 * name never sees those calls. So once the agent samples the JVM (the
 * core says so through ss_core_host.jvm_live), libjvm's own reference to
 * pthread_create (its GOT slot, read-only after relocation: made writable
 * for the one store, then read-only again) is pointed at jvm_create
 * below. When libjvm's call fails with EAGAIN, the agent leaves the JVM
 * as in a native host (its threads stopped, what it collected flushed,
 * gRPC shut down: one line says so) and the call is made again while the
 * agent's threads end (ss_short_retry_wait).
 *
 * The JVM creates a Java thread holding its Threads_lock: the leave waits
 * for the sampler's round to end (a handshake with the creating thread
 * waits for that thread: STACKSHOT_SHUTDOWN_TIMEOUT at most), and the
 * retries for gRPC's threads to end (about a second). A safepoint asked
 * for meanwhile waits with it: once, against an OutOfMemoryError.
 * The VM thread's calls (GC workers added at a safepoint, which the JVM
 * does without when it cannot) are left as they are: a leave there would
 * wait for a sampler that waits for the safepoint's end. */
#include "loader/ss_loader.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static _Atomic(create_fn) real_create;

#if defined(__x86_64__)
#define SLOT_TYPE_PLT R_X86_64_JUMP_SLOT
#define SLOT_TYPE_GOT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define SLOT_TYPE_PLT R_AARCH64_JUMP_SLOT
#define SLOT_TYPE_GOT R_AARCH64_GLOB_DAT
#endif

/* Is the calling thread HotSpot's VM thread? */
static bool on_vm_thread(void) {
    char name[16] = "";
    return prctl(PR_GET_NAME, name) == 0 && strcmp(name, "VM Thread") == 0;
}

static int jvm_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    create_fn real = atomic_load_explicit(&real_create, memory_order_acquire);
    int rc = real(t, attr, fn, arg);
    if (rc != EAGAIN || ss_agent_thread_is() || on_vm_thread() ||
        !ss_short_of_tasks_jvm("pthread_create (a Java thread)"))
        return rc;
    int state = 0;
    while ((rc = real(t, attr, fn, arg)) == EAGAIN && ss_short_retry_wait(&state))
        ;
    return rc;
}

#ifdef SLOT_TYPE_PLT
/* The dynamic section's address entries, absolute (glibc relocates them
 * in place on these architectures; not where the section is read-only) */
static uintptr_t dyn_addr(const struct dl_phdr_info *info, ElfW(Addr) v) {
    return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

/* Points the slot at jvm_create; the page is read-only when it lies in
 * PT_GNU_RELRO's whole pages (glibc protects those after relocation). */
static bool patch_slot(void **slot, uintptr_t relro_lo, uintptr_t relro_hi) {
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(getpagesize() - 1);
    bool ro = page >= relro_lo && page < relro_hi;
    if (ro && mprotect((void *)page, (size_t)getpagesize(), PROT_READ | PROT_WRITE) != 0)
        return false;
    create_fn was = (create_fn)__atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (was && was != jvm_create) {
        atomic_store_explicit(&real_create, was, memory_order_release);
        __atomic_store_n(slot, (void *)jvm_create, __ATOMIC_RELEASE);
    }
    if (ro)
        mprotect((void *)page, (size_t)getpagesize(), PROT_READ);
    return was != NULL;
}

static int patch_module(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *name = info->dlpi_name;
    size_t n = name ? strlen(name) : 0;
    if (n < 10 || strcmp(name + n - 10, "/libjvm.so") != 0)
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t ps = (uintptr_t)getpagesize(), relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            relro_lo = (info->dlpi_addr + ph->p_vaddr) & ~(ps - 1);
            relro_hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(ps - 1);
        }
    }
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    const ElfW(Rela) *tables[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    bool rela = true;
    for (const ElfW(Dyn) *d = dyn; d && d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: syms = (const ElfW(Sym) *)dyn_addr(info, d->d_un.d_ptr); break;
        case DT_STRTAB: strs = (const char *)dyn_addr(info, d->d_un.d_ptr); break;
        case DT_JMPREL: tables[0] = (const ElfW(Rela) *)dyn_addr(info, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
        case DT_RELA: tables[1] = (const ElfW(Rela) *)dyn_addr(info, d->d_un.d_ptr); break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!syms || !strs || !rela)
        return 1;
    int *patched = data;
    for (int t = 0; t < 2; t++) {
        for (size_t i = 0; tables[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tables[t][i];
            unsigned type = (unsigned)ELF64_R_TYPE(r->r_info);
            if ((type != SLOT_TYPE_PLT && type != SLOT_TYPE_GOT) || ELF64_R_SYM(r->r_info) == 0)
                continue;
            if (strcmp(strs + syms[ELF64_R_SYM(r->r_info)].st_name, "pthread_create") != 0)
                continue;
            *patched += patch_slot((void **)(info->dlpi_addr + r->r_offset), relro_lo, relro_hi);
        }
    }
    return 1;
}
#endif

bool ss_jvm_watch_threads(void) {
#ifdef SLOT_TYPE_PLT
    static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
    int patched = 0;
    pthread_mutex_lock(&once);
    if (!atomic_load(&real_create))
        dl_iterate_phdr(patch_module, &patched);
    else
        patched = 1;
    pthread_mutex_unlock(&once);
    return patched > 0;
#else
    return false;
#endif
}
