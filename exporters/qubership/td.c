/* td.c: a round as the thread dump jstack prints (the .td.txt upload).
 *
 *   2026-11-24 10:41:33
 *   Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):
 *
 *   "main" #1 prio=5 os_prio=0 cpu=... elapsed=... tid=0x... nid=0x... waiting on condition
 *      java.lang.Thread.State: TIMED_WAITING (sleeping)
 *   	at java.lang.Thread.sleep(java.base@17.0.15/Native Method)
 *   ...
 *
 * The first line is the local time of the round, as the VM prints its
 * own (os::local_time_string); the second names the VM as jstack does.
 * The thread blocks are the ones the text exporter writes, which equal
 * jstack's for every thread the agent samples. What jstack adds and a
 * round does not know is left out: the "Threads class SMR info" list, lock
 * lines ("- locked <0x...>"), the stack address after the status, the VM's
 * own threads (VM Thread, GC and compiler threads) and the JNI references
 * line. Virtual threads, which jstack does not list, are left out too.
 * A native process gets the same shape, its threads in
 * "native.Thread.State:" blocks. */
#include "agent/buf.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/version.h"
#include "exporters/qubership/dumps.h"

#include "exporters/common/common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int qb_td_format(const ss_round *r, ss_buf *out) {
    time_t secs = (time_t)(r->time_ns / 1000000000ull);
    struct tm tm;
    localtime_r(&secs, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    const ss_process_info *p = ss_process();
    /* the runtime's own banner when its source gave one (a JVM's) */
    if (p->runtime_banner[0])
        ss_buf_printf(out, "%s\nFull thread dump %s:\n\n", when, p->runtime_banner);
    else
        ss_buf_printf(out, "%s\nFull thread dump %s (native process %d, stackshot %s):\n\n",
                      when, p->exe_name[0] ? p->exe_name : "process", (int)p->pid, SS_VERSION);
    /* JDK 21 added the os thread id after the number and prints nid in
     * decimal: the dump takes the spelling of the VM it comes from, as
     * its source says (ss_process_info.dump_os_tid) */
    bool new_header = p->dump_os_tid;
    for (uint32_t i = 0; i < r->n_threads; i++) {
        const ss_thread_sample *t = &r->threads[i];
        if (t->is_virtual)
            continue;
        if (new_header)
            ss_text_format_thread_jdk21(r, t, out);
        else
            ss_text_format_thread(r, t, out);
        ss_buf_putc(out, '\n');
    }
    return out->failed ? -12 : 0;
}
