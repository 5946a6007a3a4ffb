/*
 * stackshot dump (also installed as stackshot-dump): decode Qubership profiler streams (spec
 * specs/qubership-wire.md §4) into tables, check their cross-references,
 * and re-encode them to prove the decoding lossless.
 *
 *   stackshot-dump [options] FILE...
 *     --type=STREAM   stream of every following file (default: from the
 *                     file name: dictionary, params, suspend, calls,
 *                     trace(s), sql, xml, posDictionary)
 *     --phrases / --no-phrases
 *                     phrase headers present or not (default: detected,
 *                     for the dictionary, params and suspend streams)
 *     --summary       one line per file, no tables
 *     --check         cross-reference check over all the files
 *     --roundtrip     re-encode each file; it must come back byte for byte
 *   stackshot-dump zorka ...   Zorka/ZICO bodies (zorka_dump.c)
 *
 * gzip input is inflated first. Exit status: 0 all decoded (and checked),
 * 1 a file did not decode or a check failed, 2 usage.
 */
#include "agent/buf.h"
#include "tools/stackshot-dump/qbdump.h"
#include "tools/stackshot-dump/zkdump.h"

#include <stdlib.h>
#include <string.h>

static const char dump_usage[] =
    "usage: stackshot dump [--type=STREAM] [--phrases|--no-phrases] [--summary] "
    "[--check] [--roundtrip] FILE...\n"
    "       stackshot dump zorka [options] FILE...\n";

static const char dump_help[] =
    "Decode Qubership profiler streams into tables, check their cross-references and\n"
    "re-encode them to prove the decoding lossless (gzip input is inflated first).\n"
    "  --type=STREAM   stream of every following file (default: from the file name:\n"
    "                  dictionary, params, suspend, calls, trace(s), sql, xml, posDictionary)\n"
    "  --phrases, --no-phrases\n"
    "                  phrase headers present or not (default: detected)\n"
    "  --summary       one line per file, no tables\n"
    "  --check         cross-reference check over all the files\n"
    "  --roundtrip     re-encode each file; it must come back byte for byte\n"
    "`zorka` decodes Zorka/ZICO agd and trc bodies (stackshot dump zorka --help).\n"
    "Exit status: 0 all decoded (and checked), 1 a file did not decode or a check\n"
    "failed, 2 bad usage.\n";

static int usage(void) {
    fputs(dump_usage, stderr);
    return 2;
}

static ss_qb_stream parse_type(const char *s) {
    ss_qb_stream t = ss_qb_stream_guess(s);
    return strchr(s, '.') || strchr(s, '/') ? SS_QB_UNKNOWN : t;
}

int ss_dump_main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(dump_usage, stdout);
        fputs(dump_help, stdout);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "zorka")) /* Zorka/ZICO bodies: zorka_dump.c */
        return ss_zorka_dump_main(argc - 1, argv + 1);
    bool summary = false, check = false, roundtrip = false;
    int framing = -1;
    ss_qb_stream forced = SS_QB_UNKNOWN;
    ss_qbd_input *in = calloc((size_t)argc, sizeof *in);
    size_t n = 0;
    int status = 0;
    if (!in)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--summary")) {
            summary = true;
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else if (!strcmp(a, "--roundtrip")) {
            roundtrip = true;
        } else if (!strcmp(a, "--phrases")) {
            framing = 1;
        } else if (!strcmp(a, "--no-phrases")) {
            framing = 0;
        } else if (!strncmp(a, "--type=", 7)) {
            forced = parse_type(a + 7);
            if (forced == SS_QB_UNKNOWN) {
                fprintf(stderr, "stackshot-dump: %s: unknown stream\n", a + 7);
                free(in);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            free(in);
            return usage();
        } else {
            ss_qbd_input *x = &in[n];
            x->name = a;
            x->file_index = ss_qbd_index_from_name(a);
            ss_qb_stream type = forced ? forced : ss_qb_stream_guess(a);
            if (type == SS_QB_UNKNOWN) {
                fprintf(stderr, "stackshot-dump: %s: cannot tell the stream from the name; "
                                "use --type=\n", a);
                status = 1;
                continue;
            }
            ss_buf data;
            ss_buf_init(&data);
            int rc = ss_qbd_read(a, &data);
            if (rc) {
                fprintf(stderr, "stackshot-dump: %s: %s\n", a, strerror(-rc));
                ss_buf_free(&data);
                status = 1;
                continue;
            }
            x->raw_len = data.len;
            ss_qb_decode(&x->f, type, (const uint8_t *)data.data, data.len, framing);
            if (x->f.err)
                status = 1;
            if (roundtrip && !x->f.err) {
                ss_buf back;
                ss_buf_init(&back);
                int e = ss_qb_encode(&x->f, &back);
                bool same = e == 0 && back.len == data.len &&
                            (data.len == 0 || !memcmp(back.data, data.data, data.len));
                printf("roundtrip: %s: %s (%zu bytes)\n", a, same ? "identical" : "DIFFERS",
                       back.len);
                if (!same)
                    status = 1;
                ss_buf_free(&back);
            }
            ss_buf_free(&data);
            n++;
        }
    }
    if (n == 0 && status == 0) {
        free(in);
        return usage();
    }
    const ss_qb_file *dict = NULL;
    for (size_t i = 0; i < n && !dict; i++)
        if (in[i].f.type == SS_QB_DICTIONARY && !in[i].f.err)
            dict = &in[i].f;
    for (size_t i = 0; i < n; i++)
        ss_qbd_print(stdout, &in[i], dict, summary || check);
    if (check && ss_qbd_check(stdout, in, n) > 0)
        status = 1;
    for (size_t i = 0; i < n; i++)
        ss_qb_file_free(&in[i].f);
    free(in);
    return status;
}
