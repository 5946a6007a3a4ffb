/*
 * pprof.h: pprof encoding (profile.proto of github.com/google/pprof), for
 * the pprof file exporter and for any exporter that ships pprof bodies (the
 * Splunk "pprof-gzip-base64" log body).
 *
 * A Profile is written from the samples of one or more rounds: one sample
 * per distinct (stack, thread name/id/state, span), locations with lines
 * (inlined frames are several lines of one location, innermost first),
 * functions named "ns.name" as the thread-dump text spells them, mappings
 * with file name and GNU build id. Labels: thread.name, thread.id (numeric),
 * thread.state, and trace_id / span_id (lowercase hex) when in a span.
 */
#ifndef SS_PROFILES_PPROF_H
#define SS_PROFILES_PPROF_H

#include "agent/buf.h"
#include "agent/round.h"
#include "exporters/common/aggregate.h"

typedef enum ss_pprof_view {
    /* samples/count, wall/nanoseconds, cpu/nanoseconds: every thread of
     * every round (count and wall time), with its CPU time. */
    SS_PPROF_ALL = 0,
    /* samples/count, wall/nanoseconds: every thread of every round. */
    SS_PPROF_WALL = 1,
    /* samples/count, cpu/nanoseconds: only threads on CPU in a round. */
    SS_PPROF_CPU = 2,
} ss_pprof_view;

/* Encode the rounds rounds[0..n) as one uncompressed pprof Profile
 * appended to out. 0, -ENOMEM, or -ENODATA when the view has no sample. */
int ss_pprof_encode_rounds(ss_round *const *rounds, size_t n, ss_pprof_view view,
                           ss_buf *out);

/* Encode a period's aggregate as one uncompressed pprof Profile appended
 * to out. 0, -ENOMEM, or -ENODATA when the view has no sample. */
int ss_pprof_encode_agg(ss_agg *a, ss_pprof_view view, ss_buf *out);

#endif
