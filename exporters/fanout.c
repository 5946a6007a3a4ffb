/* fanout.c: hands every round to every exporter, each on its own thread
 * with its own bounded queue.
 *
 * The sampler only ever takes a queue's mutex for a push; exporters may be
 * slow, stalled or retrying, and the sampler never waits for them. Memory
 * is bounded globally: after a push, while everything queued (rounds and
 * whatever exporters charged) exceeds STACKSHOT_MAX_MEMORY, the oldest
 * rounds are dropped from the queues, and each drop is counted. */
#include "agent/buf.h"
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/mem.h"
#include "proc/process.h"
#include "agent/round.h"
#include "agent/thread.h"
#include "agent/time.h"
#include "exporters/otlp/otlp.h"
#include "agent/kept_fd.h"
#include "exporters/common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_EXPORTERS 32 /* one bit of ss_config.exporters each */
#define QUEUE_CAP 4096 /* rounds; the memory cap usually bites first */

typedef struct exporter_slot {
    const ss_exporter_def *def;
    const char *name;
    ss_config cfg; /* what ss_exporters_start was given: the exporter opens with it */
    const ss_exporter_ops *ops; /* set by its thread (a module's are opened there) */
    void *state;
    ss_exporter_stats stats;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ss_round *ring[QUEUE_CAP];
    size_t head, count;
    bool stopping;
    uint64_t deadline_ns;
    _Atomic bool accepting; /* open succeeded and not stopped */
    bool started;
    /* Round accounting, checked by the tests: every round published while
     * the slot exists is offered to it and ends delivered (handed to
     * consume, and not lost by the exporter after that), dropped
     * (stats.rounds_dropped, or stats.rounds_lost: consumed but its data
     * never reached the backend) or refused (the exporter
     * was disabled or stopping); at stop, offered = delivered + dropped +
     * refused + held (still queued by an exporter abandoned at the
     * deadline). */
    _Atomic uint64_t offered, delivered, refused;
    struct exporter_slot *forgotten_next; /* see ss_exporters_forget */
} exporter_slot;

static exporter_slot *slots[MAX_EXPORTERS];
static int n_slots;
static _Atomic size_t largest_round; /* bytes, for the exit report */
static _Atomic uint64_t exit_deadline, exit_began; /* ss_exporters_exit_deadline */

/* ---- the queue ----------------------------------------------------- */

static ss_round *pop_locked(exporter_slot *s) {
    if (s->count == 0)
        return NULL;
    ss_round *r = s->ring[s->head];
    s->head = (s->head + 1) % QUEUE_CAP;
    s->count--;
    return r;
}

static void drop_oldest_locked(exporter_slot *s) {
    ss_round *r = pop_locked(s);
    if (r) {
        atomic_fetch_add(&s->stats.rounds_dropped, 1);
        ss_round_unref(r);
    }
}

static void wait_locked(exporter_slot *s, uint64_t wait_ns) {
    ss_cond_wait_until(&s->cv, &s->mu, ss_mono_ns() + wait_ns);
}

/* ---- the exporter thread ------------------------------------------- */

static void *exporter_main(void *arg) {
    exporter_slot *s = arg;
    const ss_exporter_ops *ops = ss_exporter_ops_of(s->def);
    s->ops = ops;
    int rc = ops ? ops->open(&s->state, &s->cfg, &s->stats) : -ENOPKG;
    if (rc != 0) {
        if (rc != -ENOPKG) /* a module it needs is missing: that was said */
            ss_error("%s: exporter disabled (%s)", s->name, strerror(-rc));
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->accepting, false);
        while (s->count)
            drop_oldest_locked(s);
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    uint64_t tick_ns = (uint64_t)(ops->tick_ms ? ops->tick_ms : 1000) * 1000000ull;
    uint64_t next_tick = ss_mono_ns() + tick_ns;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->count == 0 && !s->stopping) {
            uint64_t now = ss_mono_ns();
            if (ops->tick && now >= next_tick)
                break;
            wait_locked(s, ops->tick ? next_tick - now : tick_ns);
        }
        ss_round *r = pop_locked(s);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (r) {
            if (stopping && ss_mono_ns() >= s->deadline_ns) {
                atomic_fetch_add(&s->stats.rounds_dropped, 1);
            } else {
                ops->consume(s->state, r);
                atomic_fetch_add(&s->delivered, 1);
            }
            ss_round_unref(r);
        }
        uint64_t now = ss_mono_ns();
        if (ops->tick && now >= next_tick) {
            ops->tick(s->state, now);
            next_tick = now + tick_ns;
        }
        if (stopping && !r)
            break;
    }
    ops->close(s->state, s->deadline_ns);
    return NULL;
}

/* ---- public -------------------------------------------------------- */

int ss_exporters_start(const ss_config *cfg) {
    int started = 0;
    for (int i = 0; ss_exporter_table[i].name && i < 32 && n_slots < MAX_EXPORTERS; i++) {
        if (!(cfg->exporters & (1u << i)))
            continue;
        const ss_exporter_def *def = &ss_exporter_table[i];
        if (!def->ops && !def->module) {
            ss_error("%s: not in this build; skipping it", def->name);
            continue;
        }
        exporter_slot *s = calloc(1, sizeof *s);
        if (!s) {
            ss_error("%s: out of memory; exporter disabled", def->name);
            continue;
        }
        s->def = def;
        s->name = def->name;
        s->cfg = *cfg;
        pthread_mutex_init(&s->mu, NULL);
        ss_cond_init_mono(&s->cv);
        atomic_store(&s->accepting, true);
        /* thread "stackshot-<role>"; an exporter in a module: its name */
        int rc = ss_thread_start(&s->thread, def->ops ? def->ops->role : def->name,
                                 exporter_main, s);
        if (rc != 0) {
            ss_error("%s: cannot start its thread (%s); exporter disabled",
                     def->name, strerror(-rc));
            free(s);
            continue;
        }
        s->started = true;
        slots[n_slots++] = s;
        started++;
    }
    return started;
}

static void enforce_memory_limit(void) {
    size_t limit = ss_mem_limit();
    while (ss_mem_used() > limit) {
        bool dropped = false;
        for (int i = 0; i < n_slots; i++) {
            exporter_slot *s = slots[i];
            pthread_mutex_lock(&s->mu);
            if (s->count) {
                drop_oldest_locked(s);
                dropped = true;
            }
            pthread_mutex_unlock(&s->mu);
        }
        if (!dropped)
            break; /* what is left is held by exporters themselves */
    }
}

void ss_exporters_publish(ss_round *round) {
    for (int i = 0; i < n_slots; i++) {
        exporter_slot *s = slots[i];
        atomic_fetch_add(&s->offered, 1);
        if (!atomic_load(&s->accepting)) {
            atomic_fetch_add(&s->refused, 1);
            continue;
        }
        pthread_mutex_lock(&s->mu);
        /* accepting again under the lock: a failed open drains the queue
         * under it, and nothing may be queued after that */
        if (s->stopping || !atomic_load(&s->accepting)) {
            pthread_mutex_unlock(&s->mu);
            atomic_fetch_add(&s->refused, 1);
            continue;
        }
        if (s->count == QUEUE_CAP)
            drop_oldest_locked(s);
        ss_round_ref(round);
        s->ring[(s->head + s->count) % QUEUE_CAP] = round;
        s->count++;
        atomic_fetch_add(&s->stats.rounds_in, 1);
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    size_t bytes = round->bytes;
    if (bytes > atomic_load(&largest_round))
        atomic_store(&largest_round, bytes);
    ss_round_unref(round);
    enforce_memory_limit();
    ss_mem_note_settled();
    if (ss_log_enabled(SS_LOG_DEBUG))
        ss_exporters_report(SS_LOG_DEBUG);
}

static void report_slot(exporter_slot *s, ss_log_level level) {
    ss_exporter_stats *st = &s->stats;
    ss_log(level,
           "%s: rounds %llu in, %llu dropped; records %llu exported, %llu "
           "dropped, %llu rejected; %llu retries, %llu failures; %llu bytes sent",
           s->name, (unsigned long long)atomic_load(&st->rounds_in),
           (unsigned long long)atomic_load(&st->rounds_dropped),
           (unsigned long long)atomic_load(&st->records_exported),
           (unsigned long long)atomic_load(&st->records_dropped),
           (unsigned long long)atomic_load(&st->records_rejected),
           (unsigned long long)atomic_load(&st->retries),
           (unsigned long long)atomic_load(&st->failures),
           (unsigned long long)atomic_load(&st->bytes_sent));
}

void ss_exporters_report(ss_log_level level) {
    for (int i = 0; i < n_slots; i++)
        report_slot(slots[i], level);
}

/* At exit an exporter is told about only when something was lost or
 * failed; the rest is debug (a host's log is not ours to fill). */
static bool slot_lost_something(exporter_slot *s) {
    ss_exporter_stats *st = &s->stats;
    uint64_t offered = atomic_load(&s->offered);
    uint64_t accounted = atomic_load(&s->delivered) + atomic_load(&st->rounds_dropped) +
                         atomic_load(&s->refused);
    return atomic_load(&st->rounds_dropped) || atomic_load(&st->rounds_lost) ||
           atomic_load(&st->records_dropped) ||
           atomic_load(&st->records_rejected) || atomic_load(&st->failures) ||
           atomic_load(&s->refused) || offered > accounted;
}

/* One exporter's part of the exit's line: the rounds equation the tests
 * check (taken = delivered + dropped + refused + held; dropped counts the
 * rounds consumed whose data never reached the backend), the queue's and
 * the exporter's share of it, and its records. */
static void append_slot(ss_buf *b, exporter_slot *s) {
    ss_exporter_stats *st = &s->stats;
    uint64_t offered = atomic_load(&s->offered);
    uint64_t delivered = atomic_load(&s->delivered);
    uint64_t queue_dropped = atomic_load(&st->rounds_dropped);
    uint64_t lost = atomic_load(&st->rounds_lost);
    lost = lost < delivered ? lost : delivered;
    uint64_t consumed = atomic_load(&st->rounds_consumed);
    if (!consumed)
        consumed = delivered;
    delivered -= lost;
    uint64_t dropped = queue_dropped + lost;
    uint64_t refused = atomic_load(&s->refused);
    uint64_t accounted = delivered + dropped + refused;
    uint64_t exported = atomic_load(&st->records_exported);
    uint64_t rdropped = atomic_load(&st->records_dropped);
    uint64_t rejected = atomic_load(&st->records_rejected);
    uint64_t taken = atomic_load(&st->records_taken);
    if (!taken)
        taken = exported + rdropped + rejected;
    ss_buf_printf(b,
                  "%s: rounds %llu taken = %llu delivered + %llu dropped + %llu refused + %llu "
                  "held (%llu in, %llu dropped queued, %llu consumed); records %llu taken = %llu "
                  "exported + %llu dropped + %llu rejected; %llu retries, %llu failures",
                  s->name, (unsigned long long)offered,
                  (unsigned long long)delivered, (unsigned long long)dropped,
                  (unsigned long long)refused,
                  (unsigned long long)(offered > accounted ? offered - accounted : 0),
                  (unsigned long long)atomic_load(&st->rounds_in),
                  (unsigned long long)queue_dropped, (unsigned long long)consumed,
                  (unsigned long long)taken, (unsigned long long)exported,
                  (unsigned long long)rdropped, (unsigned long long)rejected,
                  (unsigned long long)atomic_load(&st->retries),
                  (unsigned long long)atomic_load(&st->failures));
}

/* A log line holds about 1000 bytes: parts that would not fit in the
 * current line go to the next one (many exporters), each whole. */
#define ACCOUNTING_LINE_MAX 900

static void flush_line(ss_buf *line, ss_log_level level, int pid) {
    if (line->len && !line->failed)
        ss_log(level, "pid %d accounting: %.*s", pid, (int)line->len, line->data);
    ss_buf_reset(line);
}

static void add_part(ss_buf *line, const ss_buf *part, ss_log_level level, int pid) {
    if (line->len && line->len + 3 + part->len > ACCOUNTING_LINE_MAX)
        flush_line(line, level, pid);
    if (line->len)
        ss_buf_append(line, " | ", 3);
    ss_buf_append(line, part->data, part->len);
}

/* One line at exit for every exporter: info when something was lost or
 * failed (or the host took a kept descriptor or an output file over),
 * else debug; and one debug line for memory. The pid tells a forked
 * child's line from its parent's. */
static void report_accounting(void) {
    int pid = (int)ss_process()->pid;
    uint64_t fds = ss_kept_fd_lost(), reopened = ss_output_reopened();
    bool lost = fds || reopened;
    for (int i = 0; i < n_slots; i++)
        lost |= slot_lost_something(slots[i]);
    ss_log_level level = lost ? SS_LOG_INFO : SS_LOG_DEBUG;
    ss_buf line, part;
    ss_buf_init(&line);
    ss_buf_init(&part);
    for (int i = 0; i < n_slots; i++) {
        ss_buf_reset(&part);
        append_slot(&part, slots[i]);
        add_part(&line, &part, level, pid);
    }
    if (fds || reopened) {
        ss_buf_reset(&part);
        ss_buf_printf(&part, "%llu kept descriptors taken over by the host, %llu output files "
                             "reopened",
                      (unsigned long long)fds, (unsigned long long)reopened);
        add_part(&line, &part, level, pid);
    }
    flush_line(&line, level, pid);
    ss_buf_free(&line);
    ss_buf_free(&part);
    ss_log(SS_LOG_DEBUG,
           "pid %d memory: peak %zu bytes queued, limit %zu (%zu transiently; largest "
           "round %zu bytes)",
           pid, ss_mem_peak(), ss_mem_limit(), ss_mem_peak_transient(),
           atomic_load(&largest_round));
}

uint64_t ss_exporters_exit_deadline(uint64_t *began_ns) {
    uint64_t d = atomic_load(&exit_deadline);
    if (began_ns)
        *began_ns = atomic_load(&exit_began);
    return d;
}

void ss_exporters_stop(uint64_t deadline_ns) {
    atomic_store(&exit_began, ss_mono_ns());
    atomic_store(&exit_deadline, deadline_ns ? deadline_ns : 1);
    for (int i = 0; i < n_slots; i++) {
        exporter_slot *s = slots[i];
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        s->deadline_ns = deadline_ns;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    for (int i = 0; i < n_slots; i++) {
        exporter_slot *s = slots[i];
        if (ss_thread_join(s->thread, deadline_ns + 100000000ull) != 0) {
            ss_warn("%s: did not finish within the shutdown deadline; "
                    "abandoning what it still holds",
                    s->name);
            s->started = false; /* still running: never free its slot */
        }
    }
    report_accounting();
    for (int i = 0; i < n_slots; i++) {
        exporter_slot *s = slots[i];
        if (!s->started)
            continue;
        while (s->count)
            drop_oldest_locked(s);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
    }
    n_slots = 0;
    atomic_store(&exit_deadline, 0); /* a restart runs again */
}

void ss_exporters_release(void) { ss_grpc_release(); }

/* In a forked child the exporter threads do not exist and their locks may
 * be held forever: forget the slots without touching them. Their memory
 * stays allocated (a child cannot know what is safe to free) and
 * reachable, through a list linked in the slots themselves (no allocation
 * in an at-fork handler), generation after generation. */
static exporter_slot *forgotten;

void ss_exporters_forget(void) {
    for (int i = 0; i < n_slots; i++) {
        slots[i]->forgotten_next = forgotten;
        forgotten = slots[i];
    }
    n_slots = 0;
    atomic_store(&largest_round, 0);
    atomic_store(&exit_deadline, 0);
    memset(slots, 0, sizeof slots);
}
