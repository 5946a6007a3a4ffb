/* commands.c: the collector's commands, from the TCP exporter to the
 * dumps exporter and their results back (spec §3.4.4, §3.4.5).
 *
 * A collector may put commands ("td", "top", "heap") into its ack bytes.
 * The Java agent runs diagtools for them and answers each with
 * REPORT_COMMAND_RESULT once it is done; this agent runs them itself: the
 * TCP exporter posts them here, the dumps exporter takes and runs them
 * (a thread dump or top dump uploaded at once, a heap dump in a JVM) and
 * marks them done; the TCP exporter sends the results on the connection
 * the commands came on. A result for an older connection is discarded, as
 * the Java agent forgets its commands when it reconnects. When the dumps
 * exporter is not running, every command fails. */
#include "exporters/qubership/dumps.h"

#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_COMMANDS 64

static qb_proclock lock;
static struct {
    pid_t pid; /* the process the box belongs to: a forked child starts empty */
    bool served;
    qb_command slot[MAX_COMMANDS];
    size_t n;
} box;

static void enter(void) {
    qb_proclock_lock(&lock);
    pid_t self = (pid_t)syscall(SYS_getpid);
    if (box.pid != self) {
        memset(&box, 0, sizeof box);
        box.pid = self;
    }
}

static int kind(const char *what) {
    if (strcmp(what, "td") == 0)
        return QB_CMD_TD;
    if (strcmp(what, "top") == 0)
        return QB_CMD_TOP;
    if (strcmp(what, "heap") == 0)
        return QB_CMD_HEAP;
    return 0;
}

void qb_commands_serve(bool on) {
    enter();
    box.served = on;
    if (!on)
        for (size_t i = 0; i < box.n; i++)
            if (box.slot[i].state != 2) {
                box.slot[i].state = 2;
                box.slot[i].ok = false;
            }
    qb_proclock_unlock(&lock);
}

bool qb_commands_post(const uint8_t id[16], const char *what, uint64_t conn) {
    int k = kind(what);
    bool posted = false;
    enter();
    if (k && box.served && box.n < MAX_COMMANDS) {
        qb_command *c = &box.slot[box.n++];
        memset(c, 0, sizeof *c);
        memcpy(c->id, id, 16);
        c->what = k;
        c->conn = conn;
        posted = true;
    }
    qb_proclock_unlock(&lock);
    return posted;
}

size_t qb_commands_results(uint64_t conn, qb_command *out, size_t max) {
    size_t got = 0, keep = 0;
    enter();
    for (size_t i = 0; i < box.n; i++) {
        qb_command *c = &box.slot[i];
        bool done = c->state == 2;
        if (done && c->conn == conn && got < max)
            out[got++] = *c;
        else if (done && c->conn != conn && c->conn < conn)
            ; /* an older connection's: nobody to tell */
        else
            box.slot[keep++] = *c;
    }
    box.n = keep;
    qb_proclock_unlock(&lock);
    return got;
}

size_t qb_commands_take(qb_command *out, size_t max) {
    size_t got = 0;
    enter();
    for (size_t i = 0; i < box.n && got < max; i++)
        if (box.slot[i].state == 0) {
            box.slot[i].state = 1;
            out[got++] = box.slot[i];
        }
    qb_proclock_unlock(&lock);
    return got;
}

void qb_commands_done(const uint8_t id[16], bool ok) {
    enter();
    for (size_t i = 0; i < box.n; i++)
        if (memcmp(box.slot[i].id, id, 16) == 0 && box.slot[i].state != 2) {
            box.slot[i].state = 2;
            box.slot[i].ok = ok;
            break;
        }
    qb_proclock_unlock(&lock);
}
