/*
 * collapsed.c: collapsed stacks, the input format of flamegraph.pl and of
 * most flame graph tools: one line per distinct stack,
 *
 *     thread name;root frame;...;leaf frame <count>
 *
 * The thread name is the root-most element, so each thread is its own
 * tower. Frames are named as in every profile (aggregate.h: Java
 * "pkg.Class.method", native plain names, "libfoo.so+0x1234" for native
 * code without a symbol); inlined frames
 * appear as frames of their own, callers first. ';' and line breaks inside
 * names would break the format and become '_'. Lines are sorted bytewise
 * and equal lines (same stack and thread name, different thread state or
 * id) are merged.
 */
#include "agent/buf.h"
#include "exporters/profiles/encode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct line_ref {
    uint32_t off, len;
    uint64_t count;
    const char *base;
} line_ref;

static void put_clean(ss_buf *b, const char *s, size_t n) {
    if (ss_buf_reserve(b, n) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        b->data[b->len++] = (c == ';' || c == '\n' || c == '\r') ? '_' : c;
    }
}

static int cmp_line(const void *x, const void *y) {
    const line_ref *p = x, *q = y;
    size_t n = p->len < q->len ? p->len : q->len;
    int c = memcmp(p->base + p->off, q->base + q->off, n);
    if (c)
        return c;
    return p->len < q->len ? -1 : p->len > q->len;
}

int ss_collapsed_encode(ss_agg *a, bool cpu, ss_buf *out) {
    ss_buf text;
    ss_buf_init(&text);
    line_ref *refs = calloc(a->n_samples ? a->n_samples : 1, sizeof *refs);
    if (!refs)
        return -ENOMEM;
    uint32_t n = 0;
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        uint64_t count = cpu ? s->cpu : s->wall;
        if (!count)
            continue;
        uint32_t off = (uint32_t)text.len;
        uint32_t name = a->attrsets[s->attrset].name;
        put_clean(&text, ss_agg_str(a, name), ss_agg_strlen(a, name));
        const agg_stack *st = &a->stacks[s->stack];
        for (uint32_t k = st->n; k-- > 0;) {
            const agg_location *lc = &a->locations[a->stack_locs[st->start + k]];
            for (uint32_t j = lc->n_lines; j-- > 0;) {
                uint32_t fname = a->functions[a->lines[lc->line_start + j].function].name;
                ss_buf_putc(&text, ';');
                put_clean(&text, ss_agg_str(a, fname), ss_agg_strlen(a, fname));
            }
        }
        refs[n++] = (line_ref){off, (uint32_t)text.len - off, count, NULL};
    }
    int rc = text.failed ? -ENOMEM : 0;
    for (uint32_t i = 0; i < n; i++)
        refs[i].base = text.data;
    if (rc == 0 && n > 1)
        qsort(refs, n, sizeof *refs, cmp_line);
    for (uint32_t i = 0; rc == 0 && i < n;) {
        uint64_t count = refs[i].count;
        uint32_t j = i + 1;
        while (j < n && cmp_line(&refs[i], &refs[j]) == 0)
            count += refs[j++].count;
        ss_buf_append(out, text.data + refs[i].off, refs[i].len);
        ss_buf_printf(out, " %llu\n", (unsigned long long)count);
        i = j;
    }
    if (out->failed)
        rc = -ENOMEM;
    free(refs);
    ss_buf_free(&text);
    if (rc == 0 && n == 0)
        rc = -ENODATA;
    return rc;
}
