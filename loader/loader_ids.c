/* loader_ids.c: the set*id family, initgroups and capset, wrapped so that
 * the agent's threads never make a host abort or keep privileges the host
 * gave up.
 *
 * Ids and capabilities are per thread in Linux. glibc makes setuid,
 * setgid, seteuid, setegid, setreuid, setregid, setresuid, setresgid and
 * setgroups process-wide: the calling thread signals every other thread
 * (SIGSETXID), each makes the same system call, and if their results
 * differ glibc aborts the process (nptl/nptl_setxid.c, setxid_error).
 * Results differ when a thread's own state differs from the caller's:
 * setpriv and libcap-ng set PR_SET_KEEPCAPS and call capset on the calling
 * thread only, so after setresuid the caller keeps capabilities that a
 * thread started earlier (the agent's) has lost, and the setresgid that
 * follows succeeds on the caller and fails on that thread: exit 134.
 * initgroups calls setgroups inside libc, out of our reach, so it is
 * wrapped itself. capset changes the caller alone: a host that drops
 * capabilities with it believes its process has dropped them.
 *
 * Each wrapper steps aside around the call (loader_start.c):
 *   - the start thread, still waiting for the first round, is joined and
 *     spawned again after the call by the caller, whose credentials it
 *     inherits (microseconds; setpriv and daemons that drop privileges at
 *     start meet only this);
 *   - a forked child's restart thread likewise (core/lifecycle.c);
 *   - a running agent: for the set*id family its threads take part in
 *     the call when their credentials are the caller's (same result, and
 *     they follow the host's change, with nothing stopped); otherwise the
 *     agent stops first and starts again afterwards from the caller. After
 *     the call (set*id or capset), if the agent's threads hold a
 *     capability the caller no longer has, the agent stops and starts
 *     again from the caller.
 *
 * setfsuid/setfsgid are per thread and not broadcast by glibc: they pass
 * untouched (the loader does not export them). */
#include "loader/ss_loader.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/types.h>
#include <unistd.h>

#define SS_EXPORT __attribute__((visibility("default")))

/* glibc exports capset but no header of its declares it */
int capset(cap_user_header_t header, const cap_user_data_t data);

/* The wrapper of `name` with parameter list `params`, which calls
 * libc's with `args` between ss_start_quiesce(kind) and ss_start_resume. */
#define STEP_ASIDE_AROUND(kind, name, params, args)                          \
    SS_EXPORT int name params {                                              \
        static int(*fn) params;                                              \
        if (!fn && !(fn = (int(*) params)ss_loader_next(#name)))             \
            return -1;                                                       \
        int token = ss_start_quiesce(kind);                                  \
        int rc = fn args;                                                    \
        int saved = errno;                                                   \
        ss_start_resume(token);                                              \
        errno = saved;                                                       \
        return rc;                                                           \
    }

STEP_ASIDE_AROUND(SS_ASIDE_IDS, setuid, (uid_t u), (u))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setgid, (gid_t g), (g))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, seteuid, (uid_t u), (u))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setegid, (gid_t g), (g))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setreuid, (uid_t r, uid_t e), (r, e))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setregid, (gid_t r, gid_t e), (r, e))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, setgroups, (size_t n, const gid_t *list), (n, list))
STEP_ASIDE_AROUND(SS_ASIDE_IDS, initgroups, (const char *user, gid_t group), (user, group))
STEP_ASIDE_AROUND(SS_ASIDE_CAPS, capset, (cap_user_header_t h, const cap_user_data_t d), (h, d))
