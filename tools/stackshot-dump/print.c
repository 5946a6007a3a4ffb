/* print.c: decoded streams as the tables of the spec. */
#include "agent/buf.h"
#include "tools/stackshot-dump/qbdump.h"
#include "tools/stackshot-dump/codec_read.h"

#include <inttypes.h>
#include <stdlib.h>

/* Print a varstring as UTF-8, with control characters escaped so one
 * record stays on one line. */
static void put_str(FILE *out, ss_qb_str s) {
    ss_buf b;
    ss_buf_init(&b);
    ss_qb_str_utf8(s, &b);
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.data[i];
        if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '\\')
            fputs("\\\\", out);
        else if (c < 0x20 || c == 0x7F)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    ss_buf_free(&b);
}

static void put_id(FILE *out, const ss_qb_file *dict, uint32_t id) {
    fprintf(out, "%" PRIu32, id);
    if (dict && id < dict->n_words) {
        fputs(" ", out);
        put_str(out, dict->words[id].word);
    }
}

static void summary(FILE *out, const ss_qbd_input *in) {
    const ss_qb_file *f = &in->f;
    fprintf(out, "%s: %s", in->name, ss_qb_stream_name(f->type));
    if (f->framed)
        fprintf(out, ", %zu phrases", f->n_phrases);
    switch (f->type) {
    case SS_QB_DICTIONARY:
    case SS_QB_POS_DICTIONARY:
        fprintf(out, ", %zu words", f->n_words);
        break;
    case SS_QB_PARAMS:
        fprintf(out, ", version %u, %zu params", f->params_version, f->n_params);
        break;
    case SS_QB_SUSPEND:
        fprintf(out, ", base %" PRId64 ", %zu records", f->suspend_base, f->n_suspends);
        break;
    case SS_QB_CALLS: {
        size_t with = 0;
        for (size_t i = 0; i < f->n_calls; i++)
            with += f->calls[i].n_params > 0;
        fprintf(out, ", format %" PRIu32 ", start %" PRId64 ", %zu calls (%zu with params)",
                f->calls_format, f->calls_start, f->n_calls, with);
        break;
    }
    case SS_QB_TRACE: {
        size_t cnt[3] = {0};
        for (size_t i = 0; i < f->n_events; i++)
            cnt[f->events[i].type < 3 ? f->events[i].type : 0]++;
        fprintf(out, ", header %" PRId64 ", %zu chunks, %zu ENTER, %zu EXIT, %zu TAG",
                f->trace_start, f->n_chunks, cnt[SS_QB_ENTER], cnt[SS_QB_EXIT], cnt[SS_QB_TAG]);
        break;
    }
    case SS_QB_SQL:
    case SS_QB_XML:
        fprintf(out, ", %zu values", f->n_values);
        break;
    default:
        break;
    }
    if (f->err)
        fprintf(out, ", ERROR at payload offset %zu", f->err_offset);
    else
        fprintf(out, ", %zu bytes consumed", in->raw_len);
    fputc('\n', out);
}

static void print_call(FILE *out, const ss_qb_call *c, const ss_qb_file *dict) {
    fprintf(out, "%8" PRIu32 " %6" PRId32 " %" PRId64 " ", c->offset, c->time, c->start_ms);
    put_id(out, dict, c->method);
    fprintf(out, " dur=%" PRIu64 " calls=%" PRIu32 " thread=%" PRIu32 ":", c->duration, c->calls,
            c->thread_index);
    put_str(out, c->thread_name);
    fprintf(out,
            " logs=%" PRIu32 "/%" PRIu32 " trace=%" PRIu32 "@%" PRIu32 "#%" PRIu32
            " cpu=%" PRIu64 " wait=%" PRIu64 " mem=%" PRIu64 " io=%" PRIu64 "/%" PRIu64
            " net=%" PRIu64 "/%" PRIu64 " tx=%" PRIu32 " qwait=%" PRIu32,
            c->logs_written, c->logs_written + c->logs_diff, c->trace_file_index,
            c->buffer_offset, c->record_index, c->cpu, c->wait, c->memory, c->file_read,
            c->file_written, c->net_read, c->net_written, c->transactions, c->queue_wait);
    for (uint32_t i = 0; i < c->n_params; i++) {
        fputs(" [", out);
        put_id(out, dict, c->params[i].id);
        fputs("]=", out);
        for (uint32_t k = 0; k < c->params[i].count; k++) {
            fputs(k ? "," : "", out);
            fputc('"', out);
            put_str(out, c->params[i].values[k]);
            fputc('"', out);
        }
    }
    fputc('\n', out);
}

static void print_event(FILE *out, const ss_qb_event *e, const ss_qb_file *dict) {
    static const char *const names[] = {"ENTER", "EXIT", "TAG", "FINISH"};
    fprintf(out, "    %-5s %6" PRId32 " %" PRId64, names[e->type & 3], e->delta, e->time_ms);
    if (e->type == SS_QB_ENTER || e->type == SS_QB_TAG) {
        fputc(' ', out);
        put_id(out, dict, e->id);
    }
    if (e->type == SS_QB_TAG) {
        if (e->param_type == SS_QB_PARAM_BIG || e->param_type == SS_QB_PARAM_BIG_DEDUP) {
            fprintf(out, " -> %s %" PRIu32 "@%" PRIu32,
                    e->param_type == SS_QB_PARAM_BIG ? "xml" : "sql", e->file_index,
                    e->value_offset);
        } else {
            fputs(" = \"", out);
            put_str(out, e->value);
            fputc('"', out);
        }
    }
    fputc('\n', out);
}

void ss_qbd_print(FILE *out, const ss_qbd_input *in, const ss_qb_file *dict,
                  bool summary_only) {
    const ss_qb_file *f = &in->f;
    summary(out, in);
    if (summary_only)
        return;
    switch (f->type) {
    case SS_QB_DICTIONARY:
    case SS_QB_POS_DICTIONARY:
        fprintf(out, "%8s %8s word\n", "id", "offset");
        for (size_t i = 0; i < f->n_words; i++) {
            fprintf(out, "%8" PRIu32 " %8" PRIu32 " ", f->words[i].id, f->words[i].offset);
            put_str(out, f->words[i].word);
            fputc('\n', out);
        }
        break;
    case SS_QB_PARAMS:
        fprintf(out, "name index list order signature\n");
        for (size_t i = 0; i < f->n_params; i++) {
            put_str(out, f->params[i].name);
            fprintf(out, " %u %u %" PRIu32 " \"", f->params[i].index, f->params[i].list,
                    f->params[i].order);
            put_str(out, f->params[i].signature);
            fputs("\"\n", out);
        }
        break;
    case SS_QB_SUSPEND:
        fprintf(out, "%15s %8s %8s\n", "end_ms", "delta", "duration");
        for (size_t i = 0; i < f->n_suspends; i++)
            fprintf(out, "%15" PRId64 " %8" PRIu32 " %8" PRIu32 "\n", f->suspends[i].end_ms,
                    f->suspends[i].delta, f->suspends[i].duration);
        break;
    case SS_QB_CALLS:
        fprintf(out, "  offset   time start method ...\n");
        for (size_t i = 0; i < f->n_calls; i++)
            print_call(out, &f->calls[i], dict);
        break;
    case SS_QB_TRACE:
        for (size_t i = 0; i < f->n_chunks; i++) {
            const ss_qb_chunk *c = &f->chunks[i];
            fprintf(out, "chunk @%" PRIu32 " thread %" PRId64 " realTime %" PRId64 " %" PRIu32
                         " events\n",
                    c->offset, c->thread_id, c->real_time, c->n_events);
            for (uint32_t k = 0; k < c->n_events; k++)
                print_event(out, &f->events[c->first_event + k], dict);
        }
        break;
    case SS_QB_SQL:
    case SS_QB_XML:
        for (size_t i = 0; i < f->n_values; i++) {
            fprintf(out, "%8" PRIu32 " ", f->values[i].offset);
            put_str(out, f->values[i].value);
            fputc('\n', out);
        }
        break;
    default:
        break;
    }
}
