/* fuzz_qb_reply.c: libFuzzer target for the collector-reply parser: the
 * handshake reply, the INIT reply and a stream of acks with commands. */
#include "exporters/qubership/qb.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t v;
    qb_reply_handshake(data, size, &v);
    qb_init_reply r;
    size_t need;
    if (qb_reply_init(data, size, &r, &need) == 0 && (size < 36 || r.seq < 0))
        abort();
    size_t used = 0, n_cmds = 0, total = 0;
    qb_reply_cmd ids[4];
    while (total < size) {
        int acks = qb_reply_acks(data + total, size - total, &used, ids, 4, &n_cmds);
        if (acks < 0)
            break;
        if (used > size - total || (acks == 0) != (used == 0))
            abort();
        if (acks == 0)
            break;
        total += used;
    }
    return 0;
}
