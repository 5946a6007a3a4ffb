/* reply.c: the collector's replies (spec §3.4), parsed from bytes so that
 * hostile input can be fuzzed without a socket. */
#include "exporters/qubership/qb.h"

#include <errno.h>
#include <string.h>

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int qb_reply_handshake(const uint8_t *p, size_t len, int64_t *version) {
    if (len < 8)
        return -EAGAIN;
    *version = (int64_t)be64(p);
    if (*version == QB_BLACKLISTED)
        return -EACCES;
    /* A V3 reply is accepted like the agent does; we still send the V2
     * "dictionary" stream, which every collector of V3 also accepts. */
    if (*version == QB_PROTOCOL_V2 || *version == QB_PROTOCOL_V3)
        return 0;
    return -EPROTO;
}

int qb_reply_init(const uint8_t *p, size_t len, qb_init_reply *r, size_t *need) {
    static const uint8_t null_uuid[16];
    *need = 16;
    if (len < 16)
        return -EAGAIN;
    /* A null handle is the whole reply of a refusal: nothing follows. */
    if (memcmp(p, null_uuid, 16) == 0)
        return -EPROTO;
    *need = 36;
    if (len < 36)
        return -EAGAIN;
    memcpy(r->handle, p, 16);
    r->rotation_period_ms = (int64_t)be64(p + 16);
    r->required_size = (int64_t)be64(p + 24);
    r->seq = (int32_t)be32(p + 32);
    if (r->seq < 0)
        return -EPROTO;
    return 0;
}

int qb_reply_acks(const uint8_t *p, size_t len, size_t *consumed, qb_reply_cmd *cmds,
                  size_t max_cmds, size_t *n_cmds) {
    size_t pos = 0;
    int acks = 0;
    *n_cmds = 0;
    *consumed = 0;
    while (pos < len) {
        uint8_t a = p[pos];
        if (a == 0x00) {
            pos++;
        } else if (a >= 0x80) {
            return -EPROTO; /* 0xFF: "rotation requested"; others invalid */
        } else {
            /* n diagnostic commands: UUID + [S] each, all or nothing */
            size_t q = pos + 1;
            size_t n = a;
            size_t before = *n_cmds;
            for (size_t i = 0; i < n; i++) {
                if (len - q < 20) {
                    *n_cmds = before;
                    return acks;
                }
                uint32_t sl = be32(p + q + 16);
                if (sl > 1024)
                    return -EPROTO;
                if (len - q - 20 < sl) {
                    *n_cmds = before;
                    return acks;
                }
                if (*n_cmds < max_cmds && cmds) {
                    qb_reply_cmd *c = &cmds[*n_cmds];
                    memcpy(c->id, p + q, 16);
                    size_t w = sl < sizeof c->what - 1 ? sl : sizeof c->what - 1;
                    memcpy(c->what, p + q + 20, w);
                    c->what[w] = '\0';
                }
                (*n_cmds)++;
                q += 20 + sl;
            }
            pos = q;
        }
        acks++;
        *consumed = pos;
    }
    return acks;
}
