/* proclock.c: a tiny lock for state that lives as long as the process and
 * that two exporter threads share (the pod name, the command mailbox).
 *
 * A pthread mutex cannot be used here: after fork() the child has none of
 * the parent's threads, and a mutex one of them held at the fork stays held
 * forever in the child. This lock records the pid of the process that holds
 * it; a process that finds it held by another pid inherited it through
 * fork() (the holder is not among its threads) and takes it over. Critical
 * sections are short (no I/O but a bind() or a memcpy), so waiters spin
 * with sched_yield. */
#include "exporters/qubership/qb.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

void qb_proclock_lock(qb_proclock *l) {
    pid_t self = (pid_t)syscall(SYS_getpid);
    for (;;) {
        pid_t cur = atomic_load(&l->holder);
        if (cur == 0 || cur != self) {
            /* free, or held by the parent at the fork: ours now */
            if (atomic_compare_exchange_weak(&l->holder, &cur, self))
                return;
            continue;
        }
        sched_yield(); /* another thread of this process holds it */
    }
}

void qb_proclock_unlock(qb_proclock *l) { atomic_store(&l->holder, 0); }
