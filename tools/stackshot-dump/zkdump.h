/*
 * zkdump.h: the Zorka/ZICO decoder of `stackshot-dump zorka` (and of its
 * fuzz target and tests).
 *
 * It reads agd and trc bodies the way the Java reader of zorka-common does
 * (specs/zorka-wire.md §2-§5: a flat event reader, one-byte tags only,
 * 32-bit fields refusing the 8-byte form) and prints its events in the
 * form the spec's oracle printed them (the vectors' expected.txt files);
 * Gen B bodies (typed string definitions, tag 8 records, prolog and epilog
 * words, §8) in the form of zorka-tdb's reader. Like a collector it keeps
 * sessions (the symbols and methods agd defined), answers each request
 * ("RES 200 OK", or "RES 500 <why>" when the reader or the indexer would
 * fail) and prints the span ("chunk") ZICO's indexer would store for every
 * record with a TraceBegin.
 */
#ifndef SS_ZKDUMP_H
#define SS_ZKDUMP_H

#include <stddef.h>
#include <stdint.h>

#include "agent/buf.h"

typedef struct zkd zkd;

/* One request, as a dump file or a capture gives it. */
typedef struct zkd_request {
    const char *uri;      /* "/agent/submit/agd" or "/agent/submit/trc" */
    const char *sid;      /* X-Zorka-Session-ID as printed: a value, "null" or "-" */
    const char *reset;    /* X-Zorka-Session-Reset, likewise */
    const char *trace_id; /* X-Zorka-Trace-ID, likewise */
    const uint8_t *body;
    size_t len;
} zkd_request;

zkd *zkd_new(void);
void zkd_free(zkd *d);

/* Decode one request and append what it says to out. Returns 0 when the
 * body decoded completely, -1 when the reader stopped on an error (said
 * in out), -ENOMEM. */
int zkd_request_print(zkd *d, const zkd_request *rq, ss_buf *out);

/* Every request of a ZICO dump (JSON lines: uri, headers, base64 body).
 * Returns 0, or 1 when a line or a body did not decode (said in out). */
int zkd_dump_jsonl(zkd *d, const char *name, const ss_buf *text, ss_buf *out);

/* `stackshot-dump zorka ...` (argv[0] is "zorka"). */
int ss_zorka_dump_main(int argc, char **argv);

#endif
