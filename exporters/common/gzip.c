/* gzip.c: RFC 1952 gzip in one call (zlib), for pprof files and pprof log
 * bodies. */
#include "agent/buf.h"
#include "exporters/common/common.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

int ss_gzip(const void *in, size_t n, ss_buf *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 window bits + 16: a gzip header and trailer, not zlib's. */
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    size_t bound = deflateBound(&z, (uLong)n);
    if (ss_buf_reserve(out, bound) != 0) {
        deflateEnd(&z);
        return -ENOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out->data + out->len;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    size_t produced = bound - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END)
        return -EIO;
    out->len += produced;
    return 0;
}
