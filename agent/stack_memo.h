/*
 * agent/stack_memo.h: what an exporter made of a stack, kept by stack_id.
 */
#ifndef SS_AGENT_STACK_MEMO_H
#define SS_AGENT_STACK_MEMO_H

#include <stddef.h>
#include <stdint.h>

/* What an exporter made of a stack, kept by stack_id from round to round:
 * bytes (the frames' text) and/or a number (a table index). An entry not
 * used (found or put) during a round is forgotten at the round's sweep,
 * so a memo holds at most the stacks of the last round; its bytes are
 * charged to ss_mem and capped (a put over the cap, or while ss_mem is
 * over its limit, keeps nothing: the caller formats again next time).
 * One owner thread; not thread-safe. */
typedef struct ss_stack_memo ss_stack_memo;
typedef struct ss_memo_entry {
    uint64_t id;
    uint64_t value;
    char *data;
    size_t len;
    uint64_t used; /* sweep generation of its last use */
} ss_memo_entry;

/* max_bytes: the cap of the memo (entries and their bytes). */
ss_stack_memo *ss_stack_memo_create(size_t max_bytes);
void ss_stack_memo_destroy(ss_stack_memo *m);
/* The entry of id, marked used; NULL when none (id 0: always NULL). */
const ss_memo_entry *ss_stack_memo_get(ss_stack_memo *m, uint64_t id);
/* Keep a copy of data[0..len) and value for id (replacing an entry of
 * that id). 0, -EINVAL (id 0), -ENOSPC (over the cap) or -ENOMEM. */
int ss_stack_memo_put(ss_stack_memo *m, uint64_t id, uint64_t value, const void *data,
                      size_t len);
/* Forget the entries not used since the previous sweep. */
void ss_stack_memo_sweep(ss_stack_memo *m);
/* Forget everything (a profile period's table indices). */
void ss_stack_memo_clear(ss_stack_memo *m);
typedef struct ss_memo_stats {
    uint64_t hits, misses, refused; /* gets found, gets not found, puts not kept */
    uint32_t entries;
    size_t bytes;                   /* charged to ss_mem now */
} ss_memo_stats;
void ss_stack_memo_stats(const ss_stack_memo *m, ss_memo_stats *st);

#endif /* SS_AGENT_STACK_MEMO_H */
