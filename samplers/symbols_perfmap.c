/* symbols_perfmap.c: names of JIT code from /tmp/perf-<pid>.map.
 *
 * JIT compilers that support perf (node --perf-basic-prof, the JVM with
 * perf-map-agent, LuaJIT, .NET with DOTNET_PerfMapEnabled, CPython 3.12's
 * -X perf) append one line per piece of code they generate:
 *
 *     <start hex> <size hex> <name up to the end of the line>
 *
 * perf reads it after the fact; the agent reads it while the JIT writes,
 * so it reads what was appended since last time, at most once per
 * PERFMAP_MIN_INTERVAL_NS and only when an address fell outside every
 * module (no JIT frame, no read). A later line for the same start wins,
 * as code is reused after a JIT frees it.
 *
 * Like perf, it trusts only a regular file owned by this user (or root),
 * opened without following a symlink: anyone can create files in /tmp. */
#include "agent/grow.h"
#include "agent/round.h"
#include "samplers/symbols_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PERFMAP_MIN_INTERVAL_NS 200000000ull /* 200 ms between reads */
#define PERFMAP_MAX_ENTRIES (1u << 22)       /* 4 M pieces of code */
#define PERFMAP_MAX_NAME 512

typedef struct perf_entry {
    uint64_t start, size;
    uint64_t seq;     /* line number: later lines win */
    const char *name; /* interned */
} perf_entry;

struct ss_perfmap {
    char path[64];
    off_t read_to;   /* bytes parsed so far */
    ino_t ino;       /* a new file (pid reused) starts over */
    uint64_t next_check_ns;
    uint64_t seq;
    perf_entry *e;
    size_t n, cap;
    char partial[PERFMAP_MAX_NAME + 64]; /* a line cut by the end of a read */
    size_t partial_len;
};

ss_perfmap *ss_perfmap_create(pid_t pid) {
    ss_perfmap *m = calloc(1, sizeof *m);
    if (m)
        snprintf(m->path, sizeof m->path, "/tmp/perf-%d.map", (int)pid);
    return m;
}

void ss_perfmap_destroy(ss_perfmap *m) {
    if (m) {
        free(m->e);
        free(m);
    }
}

size_t ss_perfmap_entries(const ss_perfmap *m) { return m ? m->n : 0; }

static int entry_cmp(const void *a, const void *b) {
    const perf_entry *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq > y->seq ? -1 : x->seq < y->seq ? 1 : 0; /* newest first */
}

static void add_line(ss_perfmap *m, char *line) {
    char *end;
    uint64_t start = strtoull(line, &end, 16);
    if (end == line || *end != ' ')
        return;
    char *p = end + 1;
    uint64_t size = strtoull(p, &end, 16);
    if (end == p || *end != ' ' || size == 0)
        return;
    const char *name = end + 1;
    if (!*name || m->n >= PERFMAP_MAX_ENTRIES)
        return;
    if (ss_grow((void **)&m->e, &m->cap, m->n + 1, sizeof *m->e, 1024) != 0)
        return;
    const char *interned = ss_intern(name);
    if (interned)
        m->e[m->n++] = (perf_entry){start, size, ++m->seq, interned};
}

/* Parse the bytes appended since the last read. */
static void parse(ss_perfmap *m, const char *buf, size_t len) {
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t take = nl ? (size_t)(nl - (buf + i)) : len - i;
        if (m->partial_len + take < sizeof m->partial) {
            memcpy(m->partial + m->partial_len, buf + i, take);
            m->partial_len += take;
        } else {
            m->partial_len = sizeof m->partial; /* too long: dropped */
        }
        i += take;
        if (!nl)
            break; /* the rest of the line comes with the next read */
        i++;
        if (m->partial_len < sizeof m->partial) {
            m->partial[m->partial_len] = '\0';
            add_line(m, m->partial);
        }
        m->partial_len = 0;
    }
}

/* Sort by start, newest first among equal starts, and keep the newest. */
static void settle(ss_perfmap *m) {
    qsort(m->e, m->n, sizeof *m->e, entry_cmp);
    size_t u = 0;
    for (size_t i = 0; i < m->n; i++)
        if (u == 0 || m->e[u - 1].start != m->e[i].start)
            m->e[u++] = m->e[i];
    m->n = u;
}

bool ss_perfmap_refresh(ss_perfmap *m, uint64_t now_ns) {
    if (!m || now_ns < m->next_check_ns)
        return false;
    m->next_check_ns = now_ns + PERFMAP_MIN_INTERVAL_NS;
    int fd = open(m->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_uid != geteuid() && st.st_uid != 0)) {
        close(fd);
        return false;
    }
    if (st.st_ino != m->ino || st.st_size < m->read_to) {
        m->n = 0; /* another file at that name: start over */
        m->read_to = 0;
        m->partial_len = 0;
        m->ino = st.st_ino;
    }
    bool added = false;
    if (st.st_size > m->read_to && lseek(fd, m->read_to, SEEK_SET) == m->read_to) {
        char buf[16384];
        ssize_t r;
        size_t before = m->n;
        while ((r = read(fd, buf, sizeof buf)) > 0) {
            parse(m, buf, (size_t)r);
            m->read_to += r;
        }
        added = m->n != before;
        if (added)
            settle(m);
    }
    close(fd);
    return added;
}

const char *ss_perfmap_lookup(const ss_perfmap *m, uint64_t addr) {
    if (!m || !m->n)
        return NULL;
    size_t lo = 0, hi = m->n; /* first entry with start > addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->e[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const perf_entry *e = &m->e[lo - 1];
    return addr - e->start < e->size ? e->name : NULL;
}
