/* read.c: load an input file, inflating gzip (including the unterminated,
 * sync-flushed gzip the collector stores, spec §6.1 test14.calls.bin). */
#include "agent/buf.h"
#include "tools/stackshot-dump/qbdump.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int ss_qbd_gunzip(const uint8_t *in, size_t len, ss_buf *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -ENOMEM;
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    int rc = 0;
    for (;;) {
        if (ss_buf_reserve(out, 65536) != 0) {
            rc = -ENOMEM;
            break;
        }
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = 65536;
        int zr = inflate(&z, Z_SYNC_FLUSH);
        out->len += 65536 - z.avail_out;
        if (zr == Z_STREAM_END)
            break;
        if (zr == Z_BUF_ERROR || (zr == Z_OK && z.avail_in == 0 && z.avail_out != 0))
            break; /* input ended without a trailer: keep what inflated */
        if (zr != Z_OK) {
            rc = -EBADMSG;
            break;
        }
    }
    inflateEnd(&z);
    return rc;
}

int ss_qbd_read(const char *path, ss_buf *out) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -errno;
    ss_buf raw;
    ss_buf_init(&raw);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0)
        ss_buf_append(&raw, tmp, n);
    int rc = ferror(fp) ? -EIO : 0;
    fclose(fp);
    if (rc == 0 && raw.failed)
        rc = -ENOMEM;
    if (rc == 0) {
        if (raw.len >= 2 && (uint8_t)raw.data[0] == 0x1F && (uint8_t)raw.data[1] == 0x8B)
            rc = ss_qbd_gunzip((const uint8_t *)raw.data, raw.len, out);
        else
            ss_buf_append(out, raw.data, raw.len);
    }
    ss_buf_free(&raw);
    return rc ? rc : out->failed ? -ENOMEM : 0;
}

uint32_t ss_qbd_index_from_name(const char *name) {
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    /* "<svc>.<stream>.<seq>.bin": sequence id + 1 */
    for (const char *p = strchr(base, '.'); p; p = strchr(p + 1, '.')) {
        const char *q = p + 1;
        if (!isdigit((unsigned char)*q))
            continue;
        char *end;
        unsigned long v = strtoul(q, &end, 10);
        if (*end == '.' || *end == '\0')
            return (uint32_t)v + 1;
    }
    /* the agent's local names: "000001" is index 1 */
    char *end;
    unsigned long v = strtoul(base, &end, 10);
    if (end != base && (*end == '\0' || *end == '.') && v > 0)
        return (uint32_t)v;
    return 1;
}
