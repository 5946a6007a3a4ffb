/* fuzz_zorka_decode.c: libFuzzer target on the decoder of `stackshot-dump
 * zorka` (tools/stackshot-dump/zorka_decode.c, zorka_dump.c): what a
 * hostile capture or a broken agent could feed it.
 *
 * The first byte picks the input: 0 an agd body, 1 a trc body, 2 a ZICO
 * dump (JSON lines), 3 an agd and a trc (the rest split at its middle) in
 * one session, so that the collector's span bookkeeping runs on resolved
 * names. Invariants: the answer is 0 or -1, the text is NUL-terminated and
 * holds no control character but newlines, and a Gen C request always
 * gets its RES line. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/buf.h"
#include "tests/hardening/fuzz/fuzz_check.h"
#include "tools/stackshot-dump/zkdump.h"

static void check_text(const ss_buf *out) {
    if (!out->data)
        return;
    CHECK(strlen(out->data) == out->len);
    for (size_t i = 0; i < out->len; i++)
        CHECK((unsigned char)out->data[i] >= 0x20 || out->data[i] == '\n');
}

static void one(zkd *d, const char *uri, const uint8_t *p, size_t n, ss_buf *out) {
    zkd_request rq = {.uri = uri, .sid = "fuzz", .reset = "true", .trace_id = "-",
                      .body = p, .len = n};
    size_t before = out->len;
    int rc = zkd_request_print(d, &rq, out);
    CHECK(rc == 0 || rc == -1);
    if (out->data && strncmp(out->data + before, "REQ ", 4) == 0)
        CHECK(strstr(out->data + before, "\nRES ") != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    zkd *d = zkd_new();
    CHECK(d);
    ss_buf out;
    ss_buf_init(&out);
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] & 3) {
    case 0:
        one(d, "/agent/submit/agd", p, n, &out);
        break;
    case 1:
        one(d, "/agent/submit/trc", p, n, &out);
        break;
    case 2: {
        ss_buf text;
        ss_buf_init(&text);
        ss_buf_append(&text, p, n);
        int rc = zkd_dump_jsonl(d, "fuzz.jsonl", &text, &out);
        CHECK(rc == 0 || rc == 1);
        ss_buf_free(&text);
        break;
    }
    default:
        one(d, "/agent/submit/agd", p, n / 2, &out);
        one(d, "/agent/submit/trc", p + n / 2, n - n / 2, &out);
    }
    check_text(&out);
    ss_buf_free(&out);
    zkd_free(d);
    return 0;
}
