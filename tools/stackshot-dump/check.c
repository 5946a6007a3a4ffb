/* check.c: cross-references between decoded streams (spec §4.4-4.6, §7). */
#include "tools/stackshot-dump/qbdump.h"

#include <inttypes.h>

#define MAX_REPORTED 10 /* problems printed per check; all are counted */

static const ss_qbd_input *find(const ss_qbd_input *in, size_t n, ss_qb_stream type,
                                uint32_t index) {
    for (size_t i = 0; i < n; i++)
        if (in[i].f.type == type && in[i].f.err == 0 && (index == 0 || in[i].file_index == index))
            return &in[i];
    return NULL;
}

static bool is_value_start(const ss_qb_file *f, uint32_t off) {
    size_t lo = 0, hi = f->n_values;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->values[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n_values && f->values[lo].offset == off;
}

/* Every call lands on an ENTER of its method at its start millisecond. */
static size_t check_calls(FILE *out, const ss_qbd_input *c, const ss_qbd_input *in, size_t n) {
    size_t bad = 0, ok = 0, missing = 0;
    for (size_t i = 0; i < c->f.n_calls; i++) {
        const ss_qb_call *call = &c->f.calls[i];
        const ss_qbd_input *t = find(in, n, SS_QB_TRACE, call->trace_file_index);
        if (!t) {
            missing++;
            continue;
        }
        const ss_qb_event *e = ss_qb_trace_event_at(&t->f, call->buffer_offset, call->record_index);
        const char *why = !e                         ? "no such chunk or event"
                          : e->type != SS_QB_ENTER   ? "not an ENTER"
                          : e->id != call->method    ? "another method"
                          : e->time_ms != call->start_ms ? "another millisecond"
                                                         : NULL;
        if (!why) {
            ok++;
            continue;
        }
        if (bad++ < MAX_REPORTED)
            fprintf(out, "check: %s: call at offset %" PRIu32 " -> trace %" PRIu32 "@%" PRIu32
                         "#%" PRIu32 ": %s\n",
                    c->name, call->offset, call->trace_file_index, call->buffer_offset,
                    call->record_index, why);
    }
    fprintf(out, "check: %s: %zu/%zu calls land on their ENTER", c->name, ok, c->f.n_calls);
    if (missing)
        fprintf(out, " (%zu reference trace files not given)", missing);
    fputc('\n', out);
    return bad;
}

/* Trace tags that reference sql/xml land on a value start. */
static size_t check_tags(FILE *out, const ss_qbd_input *t, const ss_qbd_input *in, size_t n) {
    size_t bad = 0, ok = 0, missing = 0;
    for (size_t i = 0; i < t->f.n_events; i++) {
        const ss_qb_event *e = &t->f.events[i];
        if (e->type != SS_QB_TAG ||
            (e->param_type != SS_QB_PARAM_BIG && e->param_type != SS_QB_PARAM_BIG_DEDUP))
            continue;
        ss_qb_stream st = e->param_type == SS_QB_PARAM_BIG ? SS_QB_XML : SS_QB_SQL;
        const ss_qbd_input *v = find(in, n, st, e->file_index);
        if (!v) {
            missing++;
            continue;
        }
        if (is_value_start(&v->f, e->value_offset)) {
            ok++;
        } else if (bad++ < MAX_REPORTED) {
            fprintf(out, "check: %s: tag -> %s %" PRIu32 "@%" PRIu32 ": not a value start\n",
                    t->name, ss_qb_stream_name(st), e->file_index, e->value_offset);
        }
    }
    fprintf(out, "check: %s: %zu sql/xml references land on a value start", t->name, ok);
    if (missing)
        fprintf(out, " (%zu reference files not given)", missing);
    fputc('\n', out);
    return bad;
}

/* Method and tag ids (trace), method and param ids (calls) are words. */
static size_t check_ids(FILE *out, const ss_qbd_input *x, const ss_qb_file *dict) {
    size_t bad = 0, seen = 0;
    uint32_t n = (uint32_t)dict->n_words;
    for (size_t i = 0; i < x->f.n_events; i++) {
        const ss_qb_event *e = &x->f.events[i];
        if (e->type != SS_QB_ENTER && e->type != SS_QB_TAG)
            continue;
        seen++;
        if (e->id >= n && bad++ < MAX_REPORTED)
            fprintf(out, "check: %s: event id %" PRIu32 " not in the dictionary\n", x->name, e->id);
    }
    for (size_t i = 0; i < x->f.n_calls; i++) {
        const ss_qb_call *c = &x->f.calls[i];
        seen++;
        if (c->method >= n && bad++ < MAX_REPORTED)
            fprintf(out, "check: %s: call method %" PRIu32 " not in the dictionary\n", x->name,
                    c->method);
        for (uint32_t k = 0; k < c->n_params; k++) {
            seen++;
            if (c->params[k].id >= n && bad++ < MAX_REPORTED)
                fprintf(out, "check: %s: call param %" PRIu32 " not in the dictionary\n",
                        x->name, c->params[k].id);
        }
    }
    fprintf(out, "check: %s: %zu ids, %zu outside the dictionary (%u words)\n", x->name, seen,
            bad, n);
    return bad;
}

size_t ss_qbd_check(FILE *out, const ss_qbd_input *in, size_t n) {
    size_t bad = 0;
    const ss_qbd_input *dict = find(in, n, SS_QB_DICTIONARY, 0);
    for (size_t i = 0; i < n; i++) {
        if (in[i].f.err) {
            fprintf(out, "check: %s: did not decode\n", in[i].name);
            bad++;
            continue;
        }
        if (in[i].f.type == SS_QB_CALLS)
            bad += check_calls(out, &in[i], in, n);
        if (in[i].f.type == SS_QB_TRACE)
            bad += check_tags(out, &in[i], in, n);
        if (dict && (in[i].f.type == SS_QB_CALLS || in[i].f.type == SS_QB_TRACE))
            bad += check_ids(out, &in[i], &dict->f);
    }
    fprintf(out, "check: %s (%zu problems)\n", bad ? "FAILED" : "OK", bad);
    return bad;
}
