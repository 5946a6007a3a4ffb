/* top.c: the process's threads as `top -H -b -n1 -w 512 -p <pid>` prints
 * them (procps-ng 4), for the .top.txt upload.
 *
 *   top - 10:41:36 up 41 min,  0 user,  load average: 11.42, 16.12, 10.95
 *   Threads:  13 total,   0 running,  13 sleeping,   0 stopped,   0 zombie
 *   %Cpu(s):  0.0 us,  0.0 sy,  0.0 ni,100.0 id,  0.0 wa,  0.0 hi,  0.0 si,  0.0 st
 *   MiB Mem :  24105.6 total,  21880.6 free,    773.9 used,   1752.6 buff/cache
 *   MiB Swap:      0.0 total,      0.0 free,      0.0 used.  23331.6 avail Mem
 *
 *     PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND
 *   20193 root      20   0    5252   4260   3128 S   0.0   0.0   0:00.31 bash
 *
 * Every thread of /proc/self/task is a row (the agent's own threads too:
 * their names start with "stackshot-"), PID being the thread id (the nid
 * of the thread dump). %CPU is the thread's CPU time (utime + stime, the
 * clock top reads) since the previous top dump over the wall time between
 * the two, as top shows with a delay of one dump interval; the first dump
 * covers the time since the exporter started. %Cpu(s) is the machine's
 * over the same interval. Rows are sorted by %CPU, then TIME+. Names are
 * the kernel's (15 bytes), never cut further (top's -w 512). */
#include "agent/buf.h"
#include "agent/time.h"
#include "exporters/qubership/dumps.h"
#include "proc/threads.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <utmp.h>

typedef struct tick_entry {
    pid_t tid;
    uint64_t ticks;
} tick_entry;

typedef struct cpu_times {
    uint64_t v[8]; /* user nice system idle iowait irq softirq steal */
} cpu_times;

struct qb_top {
    tick_entry *prev;
    size_t n_prev;
    uint64_t prev_ns; /* monotonic time of the previous snapshot */
    cpu_times prev_cpu;
    long hz;
};

typedef struct row {
    pid_t tid;
    char name[64];
    char state;
    long prio, nice;
    uint64_t ticks;
    double cpu;
} row;

static int by_tid(const void *a, const void *b) {
    pid_t x = ((const tick_entry *)a)->tid, y = ((const tick_entry *)b)->tid;
    return (x > y) - (x < y);
}

static int by_cpu(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->cpu != y->cpu)
        return x->cpu < y->cpu ? 1 : -1;
    if (x->ticks != y->ticks)
        return x->ticks < y->ticks ? 1 : -1;
    return (x->tid > y->tid) - (x->tid < y->tid);
}

/* One thread's stat (proc/): name, state, utime + stime, priority, nice. */
static bool read_task(pid_t tid, row *r) {
    ss_proc_stat st;
    if (ss_proc_read_stat(tid, &st) != 0)
        return false;
    snprintf(r->name, sizeof r->name, "%s", st.name);
    r->tid = tid;
    r->state = st.state;
    r->ticks = st.utime + st.stime;
    r->prio = st.priority;
    r->nice = st.nice;
    return true;
}

static void read_cpu(cpu_times *c) {
    char buf[512];
    memset(c, 0, sizeof *c);
    if (qb_read_small("/proc/stat", buf, sizeof buf) <= 0)
        return;
    unsigned long long v[8] = {0};
    if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) >= 4)
        for (int i = 0; i < 8; i++)
            c->v[i] = v[i];
}

/* Every thread of the process, each with the ticks it had at snapshot time. */
static row *read_rows(size_t *n) {
    *n = 0;
    pid_t *tids = NULL;
    size_t cap = 0;
    int count = ss_proc_list_tids(&tids, &cap);
    row *rows = count > 0 ? malloc((size_t)count * sizeof *rows) : NULL;
    for (int i = 0; rows && i < count; i++)
        if (read_task(tids[i], &rows[*n]))
            (*n)++;
    free(tids);
    return rows;
}

static void snapshot(qb_top *t, const row *rows, size_t n) {
    tick_entry *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return;
    for (size_t i = 0; i < n; i++)
        p[i] = (tick_entry){rows[i].tid, rows[i].ticks};
    qsort(p, n, sizeof *p, by_tid);
    free(t->prev);
    t->prev = p;
    t->n_prev = n;
}

qb_top *qb_top_create(void) {
    qb_top *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->hz = sysconf(_SC_CLK_TCK);
    if (t->hz <= 0)
        t->hz = 100;
    size_t n;
    row *rows = read_rows(&n);
    snapshot(t, rows, n);
    free(rows);
    read_cpu(&t->prev_cpu);
    t->prev_ns = ss_mono_ns();
    return t;
}

void qb_top_destroy(qb_top *t) {
    if (!t)
        return;
    free(t->prev);
    free(t);
}

/* ---- the summary ----------------------------------------------------- */

static unsigned count_users(void) {
    int fd = open("/var/run/utmp", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct utmp u;
    unsigned n = 0;
    while (read(fd, &u, sizeof u) == (ssize_t)sizeof u)
        if (u.ut_type == USER_PROCESS && u.ut_user[0])
            n++;
    close(fd);
    return n;
}

static void put_uptime_line(ss_buf *out) {
    char buf[256];
    double up = 0, l1 = 0, l5 = 0, l15 = 0;
    if (qb_read_small("/proc/uptime", buf, sizeof buf) > 0)
        sscanf(buf, "%lf", &up);
    if (qb_read_small("/proc/loadavg", buf, sizeof buf) > 0)
        sscanf(buf, "%lf %lf %lf", &l1, &l5, &l15);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    ss_buf_printf(out, "top - %02d:%02d:%02d up ", tm.tm_hour, tm.tm_min, tm.tm_sec);
    unsigned long mins = (unsigned long)up / 60;
    unsigned long days = mins / 1440, hours = mins / 60 % 24, minutes = mins % 60;
    if (days)
        ss_buf_printf(out, "%lu %s, ", days, days > 1 ? "days" : "day");
    if (hours)
        ss_buf_printf(out, "%2lu:%02lu, ", hours, minutes);
    else
        ss_buf_printf(out, "%lu min, ", minutes);
    unsigned users = count_users();
    ss_buf_printf(out, "%2u %s,  load average: %.2f, %.2f, %.2f\n", users,
                  users > 1 ? "users" : "user", l1, l5, l15);
}

static void put_cpu_line(qb_top *t, ss_buf *out) {
    cpu_times now;
    read_cpu(&now);
    double d[8], total = 0;
    for (int i = 0; i < 8; i++) {
        d[i] = now.v[i] >= t->prev_cpu.v[i] ? (double)(now.v[i] - t->prev_cpu.v[i]) : 0;
        total += d[i];
    }
    if (total <= 0)
        total = 1;
    /* top's order: us sy ni id wa hi si st */
    static const int order[8] = {0, 2, 1, 3, 4, 5, 6, 7};
    static const char *const names[8] = {"us", "sy", "ni", "id", "wa", "hi", "si", "st"};
    ss_buf_puts(out, "%Cpu(s):");
    for (int i = 0; i < 8; i++)
        ss_buf_printf(out, "%5.1f %s%s", d[order[i]] * 100 / total, names[i], i < 7 ? "," : " ");
    ss_buf_putc(out, '\n');
    t->prev_cpu = now;
}

static uint64_t meminfo(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static void put_mem_lines(ss_buf *out, uint64_t *mem_total_kib) {
    char buf[4096];
    if (qb_read_small("/proc/meminfo", buf, sizeof buf) <= 0)
        buf[0] = '\0';
    double total = (double)meminfo(buf, "MemTotal:"), free_ = (double)meminfo(buf, "MemFree:");
    double avail = (double)meminfo(buf, "MemAvailable:");
    double cache = (double)(meminfo(buf, "Buffers:") + meminfo(buf, "\nCached:") +
                            meminfo(buf, "SReclaimable:"));
    double swap_total = (double)meminfo(buf, "SwapTotal:");
    double swap_free = (double)meminfo(buf, "SwapFree:");
    *mem_total_kib = (uint64_t)total;
    ss_buf_printf(out, "MiB Mem : %8.1f total, %8.1f free, %8.1f used, %8.1f buff/cache     \n",
                  total / 1024, free_ / 1024, (total - avail) / 1024, cache / 1024);
    ss_buf_printf(out, "MiB Swap: %8.1f total, %8.1f free, %8.1f used. %8.1f avail Mem \n",
                  swap_total / 1024, swap_free / 1024, (swap_total - swap_free) / 1024,
                  avail / 1024);
}

/* ---- the rows -------------------------------------------------------- */

/* A KiB amount in `width` columns: whole KiB, else scaled (m, g, t, ...)
 * with as many decimals as fit, as top does. */
static void mem_field(uint64_t kib, int width, char *out, size_t n) {
    if (snprintf(out, n, "%llu", (unsigned long long)kib) <= width)
        return;
    static const char units[] = "mgtpe";
    double v = (double)kib;
    for (const char *u = units; *u; u++) {
        v /= 1024;
        for (int dec = 3; dec >= 0; dec--)
            if (snprintf(out, n, "%.*f%c", dec, v, *u) <= width)
                return;
    }
}

/* TIME+: minutes:seconds.hundredths, or hours,minutes when that is too wide. */
static void time_field(uint64_t ticks, long hz, char *out, size_t n) {
    uint64_t cs = ticks * 100 / (uint64_t)hz;
    uint64_t secs = cs / 100, mins = secs / 60;
    if (snprintf(out, n, "%llu:%02llu.%02llu", (unsigned long long)mins,
                 (unsigned long long)(secs % 60), (unsigned long long)(cs % 100)) <= 9)
        return;
    snprintf(out, n, "%llu,%02llu", (unsigned long long)(mins / 60),
             (unsigned long long)(mins % 60));
}

/* The effective user's name, from /etc/passwd (no NSS module is loaded
 * into the host for it), cut to 8 columns with '+' as top does. */
static void user_name(char *out, size_t n) {
    unsigned uid = (unsigned)geteuid();
    snprintf(out, n, "%u", uid);
    FILE *f = fopen("/etc/passwd", "re");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *save = NULL;
            char *name = strtok_r(line, ":", &save);
            strtok_r(NULL, ":", &save);
            char *id = strtok_r(NULL, ":", &save);
            if (name && id && (unsigned)strtoul(id, NULL, 10) == uid) {
                snprintf(out, n, "%s", name);
                break;
            }
        }
        fclose(f);
    }
    if (strlen(out) > 8) {
        out[7] = '+';
        out[8] = '\0';
    }
}

static int pid_width(void) {
    char buf[32];
    int w = 5;
    if (qb_read_small("/proc/sys/kernel/pid_max", buf, sizeof buf) > 0) {
        int digits = (int)strspn(buf, "0123456789");
        if (digits > w)
            w = digits;
    }
    return w;
}

int qb_top_format(qb_top *t, ss_buf *out) {
    size_t n;
    row *rows = read_rows(&n);
    if (!rows)
        return -12;
    uint64_t now_ns = ss_mono_ns();
    double secs = (double)(now_ns - t->prev_ns) / 1e9;
    if (secs <= 0)
        secs = 1e-3;
    unsigned running = 0, sleeping = 0, stopped = 0, zombie = 0;
    for (size_t i = 0; i < n; i++) {
        row *r = &rows[i];
        tick_entry key = {r->tid, 0};
        tick_entry *was = bsearch(&key, t->prev, t->n_prev, sizeof key, by_tid);
        uint64_t d = was && was->ticks <= r->ticks ? r->ticks - was->ticks : r->ticks;
        r->cpu = (double)d * 100.0 / ((double)t->hz * secs);
        switch (r->state) {
        case 'R': running++; break;
        case 'T': case 't': stopped++; break;
        case 'Z': zombie++; break;
        default: sleeping++; break;
        }
    }
    qsort(rows, n, sizeof *rows, by_cpu);
    put_uptime_line(out);
    ss_buf_printf(out, "Threads: %3u total, %3u running, %3u sleeping, %3u stopped, %3u zombie\n",
                  (unsigned)n, running, sleeping, stopped, zombie);
    put_cpu_line(t, out);
    uint64_t mem_total = 0;
    put_mem_lines(out, &mem_total);
    char buf[128];
    unsigned long long size = 0, resident = 0, shared = 0;
    if (qb_read_small("/proc/self/statm", buf, sizeof buf) > 0)
        sscanf(buf, "%llu %llu %llu", &size, &resident, &shared);
    uint64_t page_kib = (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
    char virt[16], res[16], shr[16], user[64];
    mem_field(size * page_kib, 7, virt, sizeof virt);
    mem_field(resident * page_kib, 6, res, sizeof res);
    mem_field(shared * page_kib, 6, shr, sizeof shr);
    double mem_pct = mem_total ? (double)(resident * page_kib) * 100.0 / (double)mem_total : 0;
    user_name(user, sizeof user);
    int w = pid_width();
    ss_buf_printf(out, "\n%*s USER      PR  NI    VIRT    RES    SHR S  %%CPU  %%MEM     TIME+ COMMAND\n",
                  w, "PID");
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        char pr[24], tm[24];
        if (r->prio < -99)
            snprintf(pr, sizeof pr, "rt");
        else
            snprintf(pr, sizeof pr, "%ld", r->prio);
        time_field(r->ticks, t->hz, tm, sizeof tm);
        ss_buf_printf(out, "%*d %-8s %3s %3ld %7s %6s %6s %c %5.1f %5.1f %9s %s\n", w,
                      (int)r->tid, user, pr, r->nice, virt, res, shr, r->state, r->cpu, mem_pct,
                      tm, r->name);
    }
    snapshot(t, rows, n);
    t->prev_ns = now_ns;
    free(rows);
    return out->failed ? -12 : 0;
}
