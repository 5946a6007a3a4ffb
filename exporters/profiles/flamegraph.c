/*
 * flamegraph.c: a self-contained interactive flame graph (one HTML file,
 * inline CSS and JavaScript, no external resource) of one period.
 *
 * The page carries the period's call trees as JSON (function names and
 * kinds, thread names, and per sample its thread, wall and CPU
 * observation counts and its frames root first) and draws the SVG itself:
 * roots at the bottom (the thread names; the top with "Invert"), callees
 * above their callers, box width proportional to samples, children in name
 * order, the full width of the window (redrawn when it changes).
 *
 * Controls: hover shows "name: N samples (P%)" in the status line and a
 * tooltip; click zooms into a box, "Reset zoom" goes back; "Search" takes
 * a regular expression, highlights the matching boxes and shows the share
 * of all samples under them; "Invert" draws an icicle; the CPU/wall switch
 * appears when some thread was on CPU. A period without CPU samples opens
 * on the wall view with one line saying why. Boxes are coloured by kind
 * (native, Java, JIT, kernel; the thread roots grey).
 *
 * Every name reaches the page as a JSON string that cannot close the
 * script (<, >, & escaped) and the page only ever sets names as text or
 * attribute values (textContent, setAttribute), never as markup.
 *
 * Each box is a <g class="f"> with data-name, data-value, data-depth and
 * data-kind attributes; the svg has data-focus, data-view and
 * data-inverted: the tests read them.
 */
#include "agent/buf.h"
#include "exporters/profiles/encode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width\">\n<title>";

static const char page_style[] =
    "</title>\n<style>\n"
    "body{font:12px Verdana,sans-serif;margin:8px;background:#fff;color:#000}\n"
    "h1{font-size:16px;margin:4px 0}\n"
    "#bar{margin:4px 0;min-height:22px;display:flex;flex-wrap:wrap;gap:10px;align-items:center}\n"
    "#status{font-family:monospace;min-height:16px;margin:2px 0}\n"
    "#note{color:#a40;margin:2px 0}\n"
    "#matched{font-family:monospace}\n"
    "#matched.bad{color:#c00}\n"
    "#search{width:18em}\n"
    ".legend span{display:inline-block;padding:0 6px;margin-right:3px;border-radius:2px}\n"
    "#tip{position:absolute;display:none;pointer-events:none;background:#ffe;"
    "border:1px solid #888;padding:2px 5px;font-family:monospace;white-space:pre}\n"
    "svg{display:block}\n"
    "svg .f rect{stroke:#fff;stroke-width:0.5;cursor:pointer}\n"
    "svg .f text{font:11px Verdana,sans-serif;pointer-events:none;fill:#000}\n"
    "svg .f:hover rect{stroke:#000}\n"
    "svg .dim rect{opacity:0.45}\n"
    "svg .match rect{fill:rgb(230,0,230)}\n"
    "</style></head>\n<body>\n<h1 id=\"title\">";

static const char page_body[] =
    "</h1>\n<div id=\"bar\">"
    "<button id=\"reset\" type=\"button\">Reset zoom</button>"
    "<label>Search <input id=\"search\" type=\"text\" placeholder=\"regular expression\" "
    "spellcheck=\"false\"></label><button id=\"clear\" type=\"button\">Clear</button>"
    "<span id=\"matched\"></span>"
    "<label><input id=\"invert\" type=\"checkbox\"> Invert (icicle)</label>"
    "<label id=\"viewbox\">View <select id=\"view\"><option value=\"cpu\">CPU</option>"
    "<option value=\"wall\">wall</option></select></label>"
    "<span id=\"viewname\"></span><span id=\"total\"></span>"
    "<span class=\"legend\"><span style=\"background:rgb(225,140,30)\">native</span>"
    "<span style=\"background:rgb(70,200,70)\">Java</span>"
    "<span style=\"background:rgb(60,200,220)\">JIT</span>"
    "<span style=\"background:rgb(170,95,55)\">kernel</span></span>"
    "</div>\n<div id=\"note\"></div><div id=\"status\"></div>\n"
    "<svg id=\"fg\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"100\"></svg>\n"
    "<div id=\"tip\"></div>\n"
    "<script>\nconst DATA = ";

static const char page_script[] =
    ";\n"
    "(function () {\n"
    "  'use strict';\n"
    "  var ROW = 17, NS = 'http://www.w3.org/2000/svg';\n"
    "  var KIND_NAMES = ['native', 'java', 'jit', 'kernel', 'thread'];\n"
    "  var svg = document.getElementById('fg');\n"
    "  var status = document.getElementById('status');\n"
    "  var tip = document.getElementById('tip');\n"
    "  var note = document.getElementById('note');\n"
    "  var matched = document.getElementById('matched');\n"
    "  var search = document.getElementById('search');\n"
    "  var viewSel = document.getElementById('view');\n"
    "  var invertBox = document.getElementById('invert');\n"
    "\n"
    "  /* The call tree of every sample: each node counts wall and CPU\n"
    "   * observations, so the view switch needs no rebuild. */\n"
    "  function node(name, kind, parent) {\n"
    "    return { name: name, kind: kind, wall: 0, cpu: 0, kids: new Map(), parent: parent,\n"
    "             depth: parent ? parent.depth + 1 : 0 };\n"
    "  }\n"
    "  var root = node('all', 4, null);\n"
    "  function child(n, name, kind) {\n"
    "    var key = kind + ':' + name;\n"
    "    var k = n.kids.get(key);\n"
    "    if (!k) { k = node(name, kind, n); n.kids.set(key, k); }\n"
    "    return k;\n"
    "  }\n"
    "  DATA.samples.forEach(function (s) {\n"
    "    var w = s[1], c = s[2];\n"
    "    var n = child(root, DATA.threads[s[0]], 4);\n"
    "    var path = [n];\n"
    "    for (var i = 3; i < s.length; i++) {\n"
    "      n = child(n, DATA.names[s[i]], Number(DATA.kinds.charAt(s[i])));\n"
    "      path.push(n);\n"
    "    }\n"
    "    root.wall += w; root.cpu += c;\n"
    "    path.forEach(function (p) { p.wall += w; p.cpu += c; });\n"
    "  });\n"
    "\n"
    "  /* The CPU view when some thread was on CPU (and asked for), else wall. */\n"
    "  var hasCpu = root.cpu > 0;\n"
    "  var view = DATA.view === 'cpu' && hasCpu ? 'cpu' : 'wall';\n"
    "  if (hasCpu) {\n"
    "    viewSel.value = view;\n"
    "    viewSel.addEventListener('change', function () { view = viewSel.value; focus = root; redraw(); });\n"
    "  } else {\n"
    "    document.getElementById('viewbox').style.display = 'none';\n"
    "    viewSel.disabled = true;\n"
    "    if (DATA.view === 'cpu')\n"
    "      note.textContent = 'No thread was on CPU in this period (an idle process): ' +\n"
    "        'showing the wall view, every thread in every round.';\n"
    "  }\n"
    "  var inverted = false, focus = root, re = null;\n"
    "\n"
    "  function value(n) { return view === 'cpu' ? n.cpu : n.wall; }\n"
    "  function share(n) {\n"
    "    var v = value(n), t = value(root);\n"
    "    return n.name + ': ' + v + ' sample' + (v === 1 ? '' : 's') + ' (' +\n"
    "      (t ? 100 * v / t : 0).toFixed(2) + '%)';\n"
    "  }\n"
    "  var PALETTE = [\n"
    "    [205, 50, 80, 130, 0, 55],    /* native: red to yellow */\n"
    "    [50, 60, 170, 60, 50, 50],    /* java: green */\n"
    "    [40, 50, 170, 60, 200, 55],   /* jit: aqua */\n"
    "    [150, 40, 80, 30, 40, 30],    /* kernel: brown */\n"
    "  ];\n"
    "  function color(n) {\n"
    "    if (n.kind === 4) return 'rgb(200,200,215)';\n"
    "    var h = 0;\n"
    "    for (var i = 0; i < n.name.length; i++) h = (h * 31 + n.name.charCodeAt(i)) >>> 0;\n"
    "    var p = PALETTE[n.kind] || PALETTE[0];\n"
    "    return 'rgb(' + (p[0] + h % p[1]) + ',' + (p[2] + (h >>> 8) % p[3]) + ',' +\n"
    "      (p[4] + (h >>> 16) % p[5]) + ')';\n"
    "  }\n"
    "  function width() {\n"
    "    return Math.max(200, document.documentElement.clientWidth - 16);\n"
    "  }\n"
    "  var W = width(), height = 0;\n"
    "\n"
    "  function box(n, x, w, dim) {\n"
    "    var g = document.createElementNS(NS, 'g');\n"
    "    var cls = 'f';\n"
    "    if (dim) cls += ' dim';\n"
    "    if (re && n !== root && re.test(n.name)) cls += ' match';\n"
    "    g.setAttribute('class', cls);\n"
    "    g.setAttribute('data-name', n.name);\n"
    "    g.setAttribute('data-value', String(value(n)));\n"
    "    g.setAttribute('data-depth', String(n.depth));\n"
    "    g.setAttribute('data-kind', n === root ? 'all' : KIND_NAMES[n.kind]);\n"
    "    var y = inverted ? n.depth * ROW : height - (n.depth + 1) * ROW;\n"
    "    var t = document.createElementNS(NS, 'title');\n"
    "    t.textContent = share(n);\n"
    "    var r = document.createElementNS(NS, 'rect');\n"
    "    r.setAttribute('x', x.toFixed(2));\n"
    "    r.setAttribute('y', String(y));\n"
    "    r.setAttribute('width', w.toFixed(2));\n"
    "    r.setAttribute('height', String(ROW - 1));\n"
    "    r.setAttribute('fill', n === root ? 'rgb(230,230,230)' : color(n));\n"
    "    g.appendChild(t);\n"
    "    g.appendChild(r);\n"
    "    var chars = Math.floor((w - 6) / 7);\n"
    "    if (chars >= 3) {\n"
    "      var tx = document.createElementNS(NS, 'text');\n"
    "      tx.setAttribute('x', (x + 3).toFixed(2));\n"
    "      tx.setAttribute('y', String(y + ROW - 5));\n"
    "      tx.textContent = n.name.length <= chars ? n.name : n.name.slice(0, chars - 2) + '..';\n"
    "      g.appendChild(tx);\n"
    "    }\n"
    "    g.addEventListener('mouseover', function () { status.textContent = share(n); });\n"
    "    g.addEventListener('mousemove', function (e) {\n"
    "      tip.textContent = share(n);\n"
    "      tip.style.display = 'block';\n"
    "      var tx = e.pageX + 12, tw = tip.offsetWidth;\n"
    "      if (tx + tw > document.documentElement.clientWidth) tx = Math.max(0, e.pageX - tw - 12);\n"
    "      tip.style.left = tx + 'px';\n"
    "      tip.style.top = (e.pageY + 14) + 'px';\n"
    "    });\n"
    "    g.addEventListener('mouseout', function () { status.textContent = ''; tip.style.display = 'none'; });\n"
    "    g.addEventListener('click', function () { focus = n; redraw(); });\n"
    "    svg.appendChild(g);\n"
    "  }\n"
    "  function sortedKids(n) {\n"
    "    return Array.from(n.kids.values()).filter(function (k) { return value(k) > 0; })\n"
    "      .sort(function (p, q) { return p.name < q.name ? -1 : p.name > q.name ? 1 : p.kind - q.kind; });\n"
    "  }\n"
    "  function layout(n, x, scale) {\n"
    "    var w = value(n) * scale;\n"
    "    if (w < 0.3) return;\n"
    "    box(n, x, w, false);\n"
    "    var cx = x;\n"
    "    sortedKids(n).forEach(function (k) { layout(k, cx, scale); cx += value(k) * scale; });\n"
    "  }\n"
    "  /* Matched share: samples under the matching frames, each sample once\n"
    "   * (a match inside a match adds nothing), of all samples of the view. */\n"
    "  function matchedValue(n) {\n"
    "    if (n !== root && re.test(n.name)) return value(n);\n"
    "    var s = 0;\n"
    "    n.kids.forEach(function (k) { s += matchedValue(k); });\n"
    "    return s;\n"
    "  }\n"
    "  /* The deepest stack of the view sets the height. */\n"
    "  function depthOf(n) {\n"
    "    var d = n.depth;\n"
    "    n.kids.forEach(function (k) { if (value(k) > 0) d = Math.max(d, depthOf(k)); });\n"
    "    return d;\n"
    "  }\n"
    "  function redraw() {\n"
    "    W = width();\n"
    "    height = (depthOf(root) + 1) * ROW + 4;\n"
    "    while (svg.firstChild) svg.removeChild(svg.firstChild);\n"
    "    svg.setAttribute('width', String(W));\n"
    "    svg.setAttribute('height', String(height));\n"
    "    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + height);\n"
    "    if (value(focus) === 0) focus = root;\n"
    "    for (var a = focus.parent; a; a = a.parent) box(a, 0, W, true);\n"
    "    layout(focus, 0, value(focus) ? W / value(focus) : 0);\n"
    "    svg.setAttribute('data-focus', focus.name);\n"
    "    svg.setAttribute('data-view', view);\n"
    "    svg.setAttribute('data-inverted', String(inverted));\n"
    "    document.getElementById('viewname').textContent = view === 'cpu' ?\n"
    "      'CPU: threads on CPU' : 'wall: every thread in every round';\n"
    "    document.getElementById('total').textContent = value(root) + ' samples';\n"
    "    if (re) {\n"
    "      var m = matchedValue(root), t = value(root);\n"
    "      matched.textContent = 'Matched: ' + m + ' of ' + t + ' samples (' +\n"
    "        (t ? 100 * m / t : 0).toFixed(2) + '%)';\n"
    "    } else if (!matched.classList.contains('bad')) {\n"
    "      matched.textContent = '';\n"
    "    }\n"
    "  }\n"
    "  function doSearch() {\n"
    "    var s = search.value;\n"
    "    matched.classList.remove('bad');\n"
    "    re = null;\n"
    "    if (s) {\n"
    "      try { re = new RegExp(s); } catch (e) {\n"
    "        matched.textContent = 'Not a regular expression: ' + e.message;\n"
    "        matched.classList.add('bad');\n"
    "      }\n"
    "    }\n"
    "    redraw();\n"
    "  }\n"
    "  search.addEventListener('input', doSearch);\n"
    "  document.getElementById('clear').addEventListener('click', function () {\n"
    "    search.value = ''; doSearch();\n"
    "  });\n"
    "  document.getElementById('reset').addEventListener('click', function () { focus = root; redraw(); });\n"
    "  invertBox.addEventListener('change', function () { inverted = invertBox.checked; redraw(); });\n"
    "  var pending = 0;\n"
    "  window.addEventListener('resize', function () {\n"
    "    if (pending) return;\n"
    "    pending = requestAnimationFrame(function () { pending = 0; if (width() !== W) redraw(); });\n"
    "  });\n"
    "  redraw();\n"
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

/* {"view":..,"names":[..],"kinds":"..","threads":[..],"samples":[[thread,
 * wall, cpu, function, ...], ...]}: names and kinds by function index,
 * threads by attribute set index, frames root first (inlined frames as
 * frames of their own, callers first, as in the collapsed stacks). */
static uint32_t put_data(const ss_agg *a, bool cpu, ss_buf *out) {
    ss_buf_printf(out, "{\"view\":\"%s\",\n\"names\":[", cpu ? "cpu" : "wall");
    for (uint32_t i = 0; i < a->n_functions; i++) {
        if (i)
            ss_buf_puts(out, i % 8 ? "," : ",\n");
        uint32_t s = a->functions[i].name;
        put_json(out, ss_agg_str(a, s), ss_agg_strlen(a, s));
    }
    ss_buf_puts(out, "],\n\"kinds\":\"");
    for (uint32_t i = 0; i < a->n_functions; i++)
        ss_buf_putc(out, (char)('0' + (a->functions[i].kind & 3)));
    ss_buf_puts(out, "\",\n\"threads\":[");
    for (uint32_t i = 0; i < a->n_attrsets; i++) {
        if (i)
            ss_buf_putc(out, ',');
        uint32_t s = a->attrsets[i].name;
        put_json(out, ss_agg_str(a, s), ss_agg_strlen(a, s));
    }
    ss_buf_puts(out, "],\n\"samples\":[");
    uint32_t n = 0;
    for (uint32_t i = 1; i < a->n_samples; i++) {
        const agg_sample *s = &a->samples[i];
        if (!s->wall)
            continue;
        ss_buf_printf(out, "%s[%u,%u,%u", n++ ? ",\n" : "\n", s->attrset, s->wall, s->cpu);
        const agg_stack *st = &a->stacks[s->stack];
        for (uint32_t k = st->n; k-- > 0;) {
            const agg_location *lc = &a->locations[a->stack_locs[st->start + k]];
            for (uint32_t j = lc->n_lines; j-- > 0;)
                ss_buf_printf(out, ",%u", a->lines[lc->line_start + j].function);
        }
        ss_buf_putc(out, ']');
    }
    ss_buf_puts(out, "]}");
    return n;
}

int ss_flamegraph_html(ss_agg *a, bool cpu, const char *title, ss_buf *out) {
    if (a->failed)
        return -ENOMEM;
    size_t start = out->len;
    ss_buf_puts(out, page_head);
    put_html(out, title);
    ss_buf_puts(out, page_style);
    put_html(out, title);
    ss_buf_puts(out, page_body);
    uint32_t n = put_data(a, cpu, out);
    ss_buf_puts(out, page_script);
    if (out->failed) {
        out->len = start;
        return -ENOMEM;
    }
    if (n == 0) {
        out->len = start;
        return -ENODATA;
    }
    return 0;
}
