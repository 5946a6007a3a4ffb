/* encode.c: records to bytes (spec §4): ss_qb_write_call and
 * ss_qb_write_event, what the agent's stream writers use. Re-encoding a
 * whole decoded file (ss_qb_encode) is the decoder's:
 * tools/stackshot-dump/reencode.c. */
#include "agent/buf.h"
#include "exporters/qubership/records.h"

#include <errno.h>

void ss_qb_write_event(ss_buf *b, const ss_qb_event *e) {
    int32_t d = e->delta;
    uint8_t type = e->type & 3;
    /* One byte when the delta fits the header's 5 bits; otherwise the low
     * 5 bits stay in the header and delta >> 5 (arithmetic) follows. */
    if (!e->extended && d >= 0 && d <= 31) {
        ss_qb_put_u8(b, (uint8_t)(type | (uint32_t)d << 2));
    } else {
        ss_qb_put_u8(b, (uint8_t)(0x80 | type | ((uint32_t)d & 0x1F) << 2));
        ss_qb_put_varint(b, (uint32_t)(d >> 5));
    }
    switch (type) {
    case SS_QB_ENTER:
        ss_qb_put_varint(b, e->id);
        break;
    case SS_QB_TAG:
        ss_qb_put_varint(b, e->id);
        ss_qb_put_u8(b, e->param_type);
        if (e->param_type == SS_QB_PARAM_BIG || e->param_type == SS_QB_PARAM_BIG_DEDUP) {
            ss_qb_put_varint(b, e->file_index);
            ss_qb_put_varint(b, e->value_offset);
        } else {
            ss_qb_put_varstring_be16(b, e->value.be16, e->value.units);
        }
        break;
    default:
        break;
    }
}

void ss_qb_write_call(ss_buf *b, const ss_qb_call *c, uint32_t format) {
    ss_qb_put_zigzag(b, c->time);
    ss_qb_put_varint(b, c->method);
    ss_qb_put_varlong(b, c->duration);
    ss_qb_put_varint(b, c->calls);
    if (format >= 1) {
        ss_qb_put_varint(b, c->thread_index);
        if (c->has_name)
            ss_qb_put_varstring_be16(b, c->thread_name.be16, c->thread_name.units);
        ss_qb_put_varint(b, c->logs_written);
        ss_qb_put_varint(b, c->logs_diff);
    }
    ss_qb_put_varint(b, c->trace_file_index);
    ss_qb_put_varint(b, c->buffer_offset);
    ss_qb_put_varint(b, c->record_index);
    if (format >= 2) {
        ss_qb_put_varlong(b, c->cpu);
        ss_qb_put_varlong(b, c->wait);
        ss_qb_put_varlong(b, c->memory);
    }
    if (format >= 3) {
        ss_qb_put_varlong(b, c->file_read);
        ss_qb_put_varlong(b, c->file_written);
        ss_qb_put_varlong(b, c->net_read);
        ss_qb_put_varlong(b, c->net_written);
    }
    if (format >= 4) {
        ss_qb_put_varint(b, c->transactions);
        ss_qb_put_varint(b, c->queue_wait);
    }
    ss_qb_put_varint(b, c->n_params);
    for (uint32_t i = 0; i < c->n_params; i++) {
        const ss_qb_call_param *p = &c->params[i];
        ss_qb_put_varint(b, p->id);
        ss_qb_put_varint(b, p->count);
        for (uint32_t k = 0; k < p->count; k++)
            ss_qb_put_varstring_be16(b, p->values[k].be16, p->values[k].units);
    }
}
