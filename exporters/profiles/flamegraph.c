/*
 * flamegraph.c: a self-contained interactive flame graph (one HTML file,
 * inline CSS and JavaScript, no external resource) of the collapsed stacks.
 *
 * The page carries the collapsed lines as a JSON array and draws the SVG
 * itself: roots at the bottom (the thread names), callees above their
 * callers, box width proportional to samples, children in name order.
 * Hovering a box shows "name: N samples (P%)" in the status line and in a
 * tooltip; clicking zooms into it; "Reset zoom" (or clicking the bottom
 * box "all") goes back. Each box is a <g class="f"> with data-name,
 * data-value and data-depth attributes, which the tests read.
 */
#include "encode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>";

static const char page_style[] =
    "</title>\n<style>\n"
    "body{font:12px Verdana,sans-serif;margin:8px;background:#fff;color:#000}\n"
    "h1{font-size:16px;margin:4px 0}\n"
    "#bar{margin:4px 0;min-height:20px}\n"
    "#status{margin-left:12px;font-family:monospace}\n"
    "svg .f rect{stroke:#fff;stroke-width:0.5;cursor:pointer}\n"
    "svg .f text{font:11px Verdana,sans-serif;pointer-events:none;fill:#000}\n"
    "svg .f:hover rect{stroke:#000}\n"
    "svg .dim rect{opacity:0.45}\n"
    "</style></head>\n<body>\n<h1 id=\"title\">";

static const char page_body[] =
    "</h1>\n<div id=\"bar\"><button id=\"reset\" type=\"button\">Reset zoom</button>"
    "<span id=\"status\"></span></div>\n"
    "<svg id=\"fg\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"100\"></svg>\n"
    "<script>\nconst STACKS = ";

static const char page_script[] =
    ";\n"
    "(function () {\n"
    "  'use strict';\n"
    "  const W = 1200, ROW = 17, NS = 'http://www.w3.org/2000/svg';\n"
    "  const svg = document.getElementById('fg');\n"
    "  const status = document.getElementById('status');\n"
    "  const root = { name: 'all', value: 0, kids: new Map(), parent: null, depth: 0 };\n"
    "  let maxDepth = 0;\n"
    "  for (const line of STACKS) {\n"
    "    const sp = line.lastIndexOf(' ');\n"
    "    const n = Number(line.slice(sp + 1));\n"
    "    if (!(n > 0)) continue;\n"
    "    root.value += n;\n"
    "    let node = root;\n"
    "    for (const name of line.slice(0, sp).split(';')) {\n"
    "      let k = node.kids.get(name);\n"
    "      if (!k) {\n"
    "        k = { name: name, value: 0, kids: new Map(), parent: node, depth: node.depth + 1 };\n"
    "        node.kids.set(name, k);\n"
    "      }\n"
    "      k.value += n;\n"
    "      node = k;\n"
    "      if (node.depth > maxDepth) maxDepth = node.depth;\n"
    "    }\n"
    "  }\n"
    "  const height = (maxDepth + 1) * ROW + 4;\n"
    "  svg.setAttribute('height', String(height));\n"
    "  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + height);\n"
    "  function color(name) {\n"
    "    let h = 0;\n"
    "    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;\n"
    "    const r = 205 + (h % 50), g = 80 + ((h >>> 8) % 130), b = (h >>> 16) % 55;\n"
    "    return 'rgb(' + r + ',' + g + ',' + b + ')';\n"
    "  }\n"
    "  function share(node) {\n"
    "    const pct = root.value ? (100 * node.value / root.value) : 0;\n"
    "    return node.name + ': ' + node.value + ' sample' + (node.value === 1 ? '' : 's') +\n"
    "      ' (' + pct.toFixed(2) + '%)';\n"
    "  }\n"
    "  function box(node, x, w, dim) {\n"
    "    const g = document.createElementNS(NS, 'g');\n"
    "    g.setAttribute('class', dim ? 'f dim' : 'f');\n"
    "    g.setAttribute('data-name', node.name);\n"
    "    g.setAttribute('data-value', String(node.value));\n"
    "    g.setAttribute('data-depth', String(node.depth));\n"
    "    const y = height - (node.depth + 1) * ROW;\n"
    "    const t = document.createElementNS(NS, 'title');\n"
    "    t.textContent = share(node);\n"
    "    const r = document.createElementNS(NS, 'rect');\n"
    "    r.setAttribute('x', x.toFixed(2));\n"
    "    r.setAttribute('y', String(y));\n"
    "    r.setAttribute('width', w.toFixed(2));\n"
    "    r.setAttribute('height', String(ROW - 1));\n"
    "    r.setAttribute('fill', node === root ? 'rgb(230,230,230)' : color(node.name));\n"
    "    g.appendChild(t);\n"
    "    g.appendChild(r);\n"
    "    const chars = Math.floor((w - 6) / 7);\n"
    "    if (chars >= 3) {\n"
    "      const tx = document.createElementNS(NS, 'text');\n"
    "      tx.setAttribute('x', (x + 3).toFixed(2));\n"
    "      tx.setAttribute('y', String(y + ROW - 5));\n"
    "      tx.textContent = node.name.length <= chars ? node.name :\n"
    "        node.name.slice(0, chars - 2) + '..';\n"
    "      g.appendChild(tx);\n"
    "    }\n"
    "    g.addEventListener('mouseover', function () { status.textContent = share(node); });\n"
    "    g.addEventListener('mouseout', function () { status.textContent = ''; });\n"
    "    g.addEventListener('click', function () { draw(node); });\n"
    "    svg.appendChild(g);\n"
    "  }\n"
    "  function layout(node, x, scale) {\n"
    "    const w = node.value * scale;\n"
    "    if (w < 0.3) return;\n"
    "    box(node, x, w, false);\n"
    "    const names = Array.from(node.kids.keys()).sort();\n"
    "    let cx = x;\n"
    "    for (const name of names) {\n"
    "      const k = node.kids.get(name);\n"
    "      layout(k, cx, scale);\n"
    "      cx += k.value * scale;\n"
    "    }\n"
    "  }\n"
    "  function draw(focus) {\n"
    "    while (svg.firstChild) svg.removeChild(svg.firstChild);\n"
    "    for (let a = focus.parent; a; a = a.parent) box(a, 0, W, true);\n"
    "    layout(focus, 0, focus.value ? W / focus.value : 0);\n"
    "    svg.setAttribute('data-focus', focus.name);\n"
    "  }\n"
    "  document.getElementById('reset').addEventListener('click', function () { draw(root); });\n"
    "  draw(root);\n"
    "})();\n"
    "</script>\n</body></html>\n";

static void put_html(ss_buf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': ss_buf_puts(b, "&amp;"); break;
        case '<': ss_buf_puts(b, "&lt;"); break;
        case '>': ss_buf_puts(b, "&gt;"); break;
        case '"': ss_buf_puts(b, "&quot;"); break;
        default: ss_buf_putc(b, *s);
        }
    }
}

/* A JSON string that is also safe inside <script>: no "</script>", no
 * HTML-significant characters, no raw control characters. */
static void put_json(ss_buf *b, const char *s, size_t n) {
    ss_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            ss_buf_putc(b, '\\');
            ss_buf_putc(b, (char)c);
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f) {
            ss_buf_printf(b, "\\u%04x", c);
        } else {
            ss_buf_putc(b, (char)c);
        }
    }
    ss_buf_putc(b, '"');
}

int ss_flamegraph_html(ss_agg *a, bool cpu, const char *title, ss_buf *out) {
    ss_buf lines;
    ss_buf_init(&lines);
    int rc = ss_collapsed_encode(a, cpu, &lines);
    if (rc != 0) {
        ss_buf_free(&lines);
        return rc;
    }
    ss_buf_puts(out, page_head);
    put_html(out, title);
    ss_buf_puts(out, page_style);
    put_html(out, title);
    ss_buf_puts(out, page_body);
    ss_buf_puts(out, "[\n");
    const char *p = lines.data, *end = lines.data + lines.len;
    bool first = true;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            nl = end;
        if (!first)
            ss_buf_puts(out, ",\n");
        put_json(out, p, (size_t)(nl - p));
        first = false;
        p = nl + 1;
    }
    ss_buf_puts(out, "\n]");
    ss_buf_puts(out, page_script);
    ss_buf_free(&lines);
    return out->failed ? -ENOMEM : 0;
}
