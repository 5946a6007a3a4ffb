/* kept_fd.h: descriptors the agent keeps open across calls, checked before
 * every use.
 *
 * The agent shares a descriptor table with a host that owns it: a daemon
 * may close every descriptor >= 3 (closefrom, close_range, a loop) at any
 * moment and get the same numbers back for its own files. A number the
 * agent still holds may then be the host's: writing, reading or closing
 * it would touch the host's file. So a kept descriptor remembers what it
 * was opened on (device and inode, from fstat) and is used only while the
 * number still names that; otherwise it is forgotten, never closed (the
 * number is the host's now), counted, and the owner opens its file again.
 *
 * The check is one fstat; the window between it and the use is a few
 * instructions (a host that closes and reopens exactly then is not
 * caught). Not async-signal-safe (fstat is, the counter too, but nothing
 * here is meant for handlers). */
#ifndef SS_KEPT_FD_H
#define SS_KEPT_FD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#pragma GCC visibility push(default)

typedef struct ss_kept_fd {
    int fd;    /* -1: none */
    dev_t dev; /* what it was opened on */
    ino_t ino;
} ss_kept_fd;

#define SS_KEPT_FD_NONE {-1, 0, 0}

/* Keep `fd` (just opened by the agent): records its identity. 0, or
 * -errno (fd is then closed and k is none). fd < 0 is passed through as
 * its own error (-EBADF) with k none. */
int ss_kept_fd_adopt(ss_kept_fd *k, int fd);
/* The descriptor if it is still what was kept, else -1: a number that now
 * names something else is forgotten (k becomes none, nothing is closed)
 * and counted. */
int ss_kept_fd_get(ss_kept_fd *k);
/* Whether k still names what was kept, changing nothing (for a thread
 * other than k's owner: k is only read). */
bool ss_kept_fd_is_ours(const ss_kept_fd *k);
/* Closes it if it is still what was kept; forgets it either way. */
void ss_kept_fd_close(ss_kept_fd *k);
/* Forget without closing (a forked child's copy of a parent's
 * descriptor it must not use, a number known to be lost). */
void ss_kept_fd_forget(ss_kept_fd *k);
/* A forked child's copy of its parent's descriptor: closed if it still
 * names what was kept, forgotten either way, never counted. Not the
 * child's to lose: the child's host may have closed it, and at fork the
 * kernel copies the descriptor table before the memory, so a descriptor
 * the parent's threads adopted in between is in the child's copy of our
 * records but not in its table. */
void ss_kept_fd_close_inherited(ss_kept_fd *k);
/* Kept descriptors found taken over by the host in this process (a
 * forked child counts from 0). */
uint64_t ss_kept_fd_lost(void);

/* A count of what happened in this process: a forked child's copy of its
 * parent's count reads 0, as the pid it was counted in is not the
 * child's. The pid (high half) and the count (low half, saturating)
 * share one word. Zero-initialised. */
typedef _Atomic uint64_t ss_own_count;
void ss_own_count_add(ss_own_count *c);
uint64_t ss_own_count_read(ss_own_count *c);

/* A descriptor the agent keeps, moved into the top eighth of the table
 * (F_DUPFD_CLOEXEC from soft RLIMIT_NOFILE less an eighth, or from 1024
 * when that is lower: the kernel's table grows to the highest number in
 * use, and is copied at every fork; the original is closed): the host's open() takes the lowest free number, so a host
 * filling its table meets the agent's descriptors last, and a host that
 * lowers its limit later finds them above it, out of its way. Returns the
 * descriptor to keep: the new one, or fd itself when it is already that
 * high or no number is free up there. */
int ss_fd_move_high(int fd);
/* A close-on-exec duplicate of src in the same top eighth (3 or more when
 * none is free there), or -1: no descriptor to close in between. */
int ss_fd_dup_high(int src);

#pragma GCC visibility pop

#endif
