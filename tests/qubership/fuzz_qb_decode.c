/* fuzz_qb_decode.c: libFuzzer target for the stream decoders. The first
 * byte picks the stream and the framing; the rest is the file. Whatever
 * decodes must re-encode, and the re-encoding must decode to the same
 * number of records (non-canonical varints may change the bytes). */
#include "agent/buf.h"
#include "tools/stackshot-dump/decode.h"

#include <stdlib.h>

static size_t records(const ss_qb_file *f) {
    return f->n_words + f->n_params + f->n_suspends + f->n_calls + f->n_events + f->n_chunks +
           f->n_values;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    ss_qb_stream type = (ss_qb_stream)(1 + data[0] % 8);
    int framing = (int)((data[0] >> 3) % 3) - 1;
    ss_qb_file f;
    if (ss_qb_decode(&f, type, data + 1, size - 1, framing) == 0) {
        ss_buf out;
        ss_buf_init(&out);
        if (ss_qb_encode(&f, &out) == 0) {
            ss_qb_file g;
            if (ss_qb_decode(&g, type, (const uint8_t *)out.data, out.len, f.framed) != 0 ||
                records(&g) != records(&f))
                abort();
            ss_qb_file_free(&g);
        }
        ss_buf_free(&out);
    }
    ss_qb_file_free(&f);
    return 0;
}
