/*
 * agent/exporter.h: the exporter interface, the exporter table and the fan-out of
 * rounds to the exporters.
 */
#ifndef SS_AGENT_EXPORTER_H
#define SS_AGENT_EXPORTER_H

#include "agent/config.h"
#include "agent/exporter_stats.h"
#include "agent/log.h"
#include "agent/round.h"

#include <stddef.h>
#include <stdint.h>

/* Part of the core's API for its modules (agent/module_abi.h): default
 * visibility, exported by loader/core.map. */
#pragma GCC visibility push(default)

typedef struct ss_exporter_ops {
    const char *name;   /* as written in STACKSHOT_EXPORTERS, "otlp_logs" */
    const char *role;   /* thread name suffix, at most 5 characters */
    uint32_t tick_ms;   /* call tick at least this often (0: never) */
    /* On the exporter thread, before the first round. 0 or -errno; on
     * failure the exporter is disabled (one line says why; -ENOPKG: a
     * module it needs cannot be opened, and ss_module_api said so). */
    int (*open)(void **state, const ss_config *cfg, ss_exporter_stats *stats);
    /* One round. The exporter borrows it; ss_round_ref to keep it. */
    void (*consume)(void *state, ss_round *round);
    /* Periodic work (flush, retry); may be NULL. */
    void (*tick)(void *state, uint64_t mono_now_ns);
    /* Flush what is held before deadline (monotonic ns), then free. */
    void (*close)(void *state, uint64_t deadline_ns);
} ss_exporter_ops;

/* One row of the exporter table: everything the agent needs to know of an
 * exporter (exporters/registry.c fills the table; configuration, the
 * start-up line and the fan-out iterate it). */
typedef struct ss_exporter_def {
    const char *name;          /* as written in STACKSHOT_EXPORTERS; NULL ends the table */
    const ss_exporter_ops *ops; /* NULL when it lives in a module */
    const char *module;        /* ... this one (libstackshot-<module>.so), or NULL */
    const char *const *keys;   /* the configuration keys it reads, NULL-terminated */
    const char *with;          /* also runs whenever the exporter of this name is
                                  selected (NULL: only when named itself) */
    /* Configuration time, before anything starts: 0 when its destination
     * can be used; else it has said why in one line and is left out (a
     * mistake never falls back to a default destination). NULL: nothing
     * to check. */
    int (*check)(void);
} ss_exporter_def;

/* Row i is bit 1u << i of ss_config.exporters (at most 32 rows). */
extern const ss_exporter_def ss_exporter_table[];

/* The row named name[0..n) (case-insensitive), or NULL; its bit. */
const ss_exporter_def *ss_exporter_by_name(const char *name, size_t n);
uint32_t ss_exporter_bit(const char *name); /* 0: no such exporter */
/* The ops of a row: its own, or its module's (opened now, on the calling
 * exporter thread); NULL after one line when the module cannot be opened. */
const ss_exporter_ops *ss_exporter_ops_of(const ss_exporter_def *def);

/* Start the exporters selected in cfg (one thread and one bounded queue
 * each). Returns the number started. */
int ss_exporters_start(const ss_config *cfg);
/* Hand a round (one reference) to every running exporter. Never blocks on
 * an exporter: when queued memory passes the limit the oldest rounds go. */
void ss_exporters_publish(ss_round *round);
/* Flush and stop every exporter before deadline (monotonic ns); prints
 * the counters line of each. */
void ss_exporters_stop(uint64_t deadline_ns);
/* After ss_exporters_stop, when the agent leaves a process that goes on:
 * the threads the exporters' libraries keep end (gRPC's). */
void ss_exporters_release(void);
/* 0 while the exporters run; once their stop has begun, its deadline
 * (monotonic; *began_ns when not NULL: when it began): for waits on a
 * backend that must hear of the exit. */
uint64_t ss_exporters_exit_deadline(uint64_t *began_ns);
/* Print each exporter's counters (level: SS_LOG_INFO at exit). */
void ss_exporters_report(ss_log_level level);

#pragma GCC visibility pop

/* The core's own (hidden from modules). */
void ss_exporters_forget(void);

#endif /* SS_AGENT_EXPORTER_H */
