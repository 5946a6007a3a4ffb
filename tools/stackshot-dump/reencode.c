/* reencode.c: decoded records back into the bytes they were read from
 * (ss_qb_encode, tools/stackshot-dump/decode.h), for the round-trip checks
 * of the decoder, the tests and the fuzzers; the record writers are the
 * agent's (exporters/qubership/encode.c). */
#include "agent/buf.h"
#include "exporters/qubership/codec.h"
#include "tools/stackshot-dump/decode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void encode_records(const ss_qb_file *f, ss_buf *b) {
    switch (f->type) {
    case SS_QB_DICTIONARY:
    case SS_QB_POS_DICTIONARY:
        for (size_t i = 0; i < f->n_words; i++) {
            if (f->type == SS_QB_POS_DICTIONARY)
                ss_qb_put_varint(b, f->words[i].id);
            ss_qb_put_varstring_be16(b, f->words[i].word.be16, f->words[i].word.units);
        }
        break;
    case SS_QB_PARAMS:
        ss_qb_put_u8(b, f->params_version);
        for (size_t i = 0; i < f->n_params; i++) {
            const ss_qb_param *p = &f->params[i];
            ss_qb_put_varstring_be16(b, p->name.be16, p->name.units);
            ss_qb_put_u8(b, p->index);
            ss_qb_put_u8(b, p->list);
            ss_qb_put_varint(b, p->order);
            ss_qb_put_varstring_be16(b, p->signature.be16, p->signature.units);
        }
        break;
    case SS_QB_SUSPEND:
        ss_qb_put_be64(b, (uint64_t)f->suspend_base);
        for (size_t i = 0; i < f->n_suspends; i++) {
            ss_qb_put_varint(b, f->suspends[i].delta);
            ss_qb_put_varint(b, f->suspends[i].duration);
        }
        break;
    case SS_QB_CALLS:
        if (f->calls_format > 0) {
            ss_qb_put_be64(b, (uint64_t)SS_QB_CALLS_MAGIC << 32 | f->calls_format);
        }
        ss_qb_put_be64(b, (uint64_t)f->calls_start);
        for (size_t i = 0; i < f->n_calls; i++)
            ss_qb_write_call(b, &f->calls[i], f->calls_format);
        break;
    case SS_QB_TRACE:
        ss_qb_put_be64(b, (uint64_t)f->trace_start);
        for (size_t i = 0; i < f->n_chunks; i++) {
            const ss_qb_chunk *c = &f->chunks[i];
            ss_qb_put_be64(b, (uint64_t)c->thread_id);
            ss_qb_put_be64(b, (uint64_t)c->real_time);
            for (uint32_t k = 0; k < c->n_events; k++)
                ss_qb_write_event(b, &f->events[c->first_event + k]);
            ss_qb_put_u8(b, SS_QB_FINISH);
        }
        break;
    case SS_QB_SQL:
    case SS_QB_XML:
        for (size_t i = 0; i < f->n_values; i++)
            ss_qb_put_varstring_be16(b, f->values[i].value.be16, f->values[i].value.units);
        break;
    default:
        break;
    }
}

int ss_qb_encode(const ss_qb_file *f, ss_buf *out) {
    if (f->payload.len == 0)
        return 0; /* an empty file has not even its header */
    if (!f->framed) {
        encode_records(f, out);
        return out->failed ? -ENOMEM : 0;
    }
    ss_buf payload;
    ss_buf_init(&payload);
    encode_records(f, &payload);
    /* Same phrase sizes as decoded; a payload that differs in length
     * cannot be framed the same way. */
    size_t pos = 0;
    int rc = 0;
    for (size_t i = 0; i < f->n_phrases && rc == 0; i++) {
        if (f->phrases[i] > payload.len - pos) {
            rc = -EBADMSG;
            break;
        }
        ss_qb_put_be32(out, f->phrases[i]);
        ss_buf_append(out, payload.data + pos, f->phrases[i]);
        pos += f->phrases[i];
    }
    if (rc == 0 && pos != payload.len)
        rc = -EBADMSG;
    if (rc == 0 && (payload.failed || out->failed))
        rc = -ENOMEM;
    ss_buf_free(&payload);
    return rc;
}
