/*
 * qbdump.h: the pieces of stackshot-dump, in a small library that the
 * tests link too: reading (and gunzipping) input files, printing decoded
 * streams as tables, and the cross-reference check.
 */
#ifndef SS_QBDUMP_H
#define SS_QBDUMP_H

#include "agent/buf.h"
#include "tools/stackshot-dump/decode.h"

#include <stdio.h>

/* One input file, decoded. `file_index` is the rolling file index the
 * other streams use to reference it (sequence id + 1): taken from a
 * ".<seq>." in the name, else 1. */
typedef struct ss_qbd_input {
    const char *name;
    uint32_t file_index;
    size_t raw_len;     /* bytes read (after gunzip) */
    ss_qb_file f;
} ss_qbd_input;

/* Read a whole file; gzip input (1F 8B), even unterminated or sync-flushed
 * as the collector stores it, is inflated. 0 or -errno. */
int ss_qbd_read(const char *path, ss_buf *out);
int ss_qbd_gunzip(const uint8_t *in, size_t len, ss_buf *out);

/* Rolling file index from a file name ("x.calls.0.bin" -> 1, "000003" -> 3). */
uint32_t ss_qbd_index_from_name(const char *name);

/* One summary line, then (unless summary_only) the records as a table.
 * `dict` (may be NULL) names dictionary ids. */
void ss_qbd_print(FILE *out, const ss_qbd_input *in, const ss_qb_file *dict,
                  bool summary_only);

/* Cross-references between the given files (spec §4.4-4.6, §7): calls ->
 * trace ENTER, trace tags -> sql/xml value starts, ids -> dictionary.
 * Prints one line per check and per problem; returns the problem count. */
size_t ss_qbd_check(FILE *out, const ss_qbd_input *in, size_t n);

#endif
