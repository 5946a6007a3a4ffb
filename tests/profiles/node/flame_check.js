// flame_check.js: open a flame graph page in headless Chromium and use it
// as a person would.
//
//   node flame_check.js <page.html> <function> [screenshot.png] [--idle] [--xss=<name>]
//                       [--kinds=native,java,...]
//
// Checks: the page renders boxes at the window's full width (two window
// sizes: 1280 and 800 px); box widths are proportional to their sample
// counts; <function>'s box is the widest at its depth; hovering it shows
// "<function>: N samples (P%)" in the status line and the tooltip, N and P
// matching the data; clicking zooms so it spans the full width, "Reset
// zoom" goes back; searching ^<function>$ highlights exactly the matching
// boxes and shows the share of all samples under them (computed here from
// the page's data, each sample once); an invalid expression says so;
// "Invert" draws the roots at the top; the CPU/wall switch is there when
// the data has CPU samples and changes the totals; box colours follow the
// frame kinds. --idle: the data has no CPU sample: no switch, the wall
// view, one line saying why. --xss=<name>: a function of that name exists
// as a box whose text is the name, and no dialog opened (nothing ran).
// --kinds=...: boxes of each of these kinds were drawn (and coloured so).
// No network request, no script error. Prints one JSON line with what it
// saw; exits 1 on a failed check, 77 when Chromium is missing.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const CHROMIUM = '/usr/bin/chromium';
const ROW = 17;

function fail(msg) {
  console.error('flame_check: ' + msg);
  process.exit(1);
}
function check(c, msg) { if (!c) fail(msg); }

async function boxes(page) {
  return page.$$eval('svg g.f', (gs) => gs.map((g) => ({
    name: g.getAttribute('data-name'),
    value: Number(g.getAttribute('data-value')),
    depth: Number(g.getAttribute('data-depth')),
    kind: g.getAttribute('data-kind'),
    match: g.classList.contains('match'),
    dim: g.classList.contains('dim'),
    width: Number(g.querySelector('rect').getAttribute('width')),
    x: Number(g.querySelector('rect').getAttribute('x')),
    y: Number(g.querySelector('rect').getAttribute('y')),
    fill: g.querySelector('rect').getAttribute('fill'),
    text: (g.querySelector('text') || {}).textContent || '',
    title: g.querySelector('title').textContent,
  })));
}

async function svgWidth(page) { return Number(await page.getAttribute('svg', 'width')); }

// The full-width rule: the svg spans the page's width less the body margins.
async function checkWidth(page, vw) {
  const W = await svgWidth(page);
  const client = await page.evaluate(() => document.documentElement.clientWidth);
  check(client > vw - 30 && client <= vw, `client width ${client} for a ${vw} px window`);
  check(W === client - 16, `svg width ${W}, want the window's ${client} - 16`);
  const bs = await boxes(page);
  const root = bs.find((b) => b.depth === 0);
  check(root && root.name === 'all', 'no root box "all"');
  check(Math.abs(root.width - W) < 0.02, `root width ${root.width}, svg ${W}`);
  for (const b of bs) {
    if (b.dim) continue;
    const want = b.value * W / root.value;
    check(Math.abs(want - b.width) <= 0.02, `box ${b.name} width ${b.width}, want ${want}`);
  }
  return { W, bs, root };
}

// What the search should find: samples of the view with a matching frame or
// thread name, each once, from the page's own data (not from its tree).
function expectedMatch(data, view, re) {
  let m = 0, t = 0;
  for (const s of data.samples) {
    const v = view === 'cpu' ? s[2] : s[1];
    t += v;
    const names = [data.threads[s[0]]].concat(s.slice(3).map((f) => data.names[f]));
    if (names.some((n) => re.test(n))) m += v;
  }
  return { m, t };
}

function rgb(fill) { return (/rgb\((\d+),(\d+),(\d+)\)/.exec(fill) || []).slice(1).map(Number); }

// Colours by kind: the kind of every box is its function's in the data,
// and its colour is of that kind's family.
function checkKinds(bs, kindOf, kinds) {
  for (const b of bs) {
    if (b.depth === 0) continue;
    if (b.depth === 1) { check(b.kind === 'thread', `${b.name} at depth 1 is ${b.kind}`); continue; }
    check(b.kind === kindOf[b.name], `${b.name} drawn as ${b.kind}, data says ${kindOf[b.name]}`);
    const [r, g, bl] = rgb(b.fill);
    const ok = { native: r > bl && r >= 200, java: g > r && g > bl, jit: bl > r && g > r,
                 kernel: r > g && g > bl }[b.kind];
    check(ok, `${b.kind} box ${b.name} has colour ${b.fill}`);
    kinds.add(b.kind);
  }
}

async function main() {
  const args = process.argv.slice(2);
  const opts = args.filter((a) => a.startsWith('--'));
  const [page_file, fn, shot] = args.filter((a) => !a.startsWith('--'));
  const idle = opts.includes('--idle');
  const xssOpt = opts.find((o) => o.startsWith('--xss='));
  const xss = xssOpt ? xssOpt.slice(6) : null;
  const kindsOpt = opts.find((o) => o.startsWith('--kinds='));
  if (!page_file || !fn) fail('usage: flame_check.js <page.html> <function> [shot.png] [--idle] [--xss=name]');
  if (!fs.existsSync(CHROMIUM)) {
    console.log('flame_check: ' + CHROMIUM + ' not installed; skipped');
    process.exit(77);
  }
  const { chromium } = require('playwright-core');
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ss-chromium-'));
  // playwright passes the profile as --user-data-dir itself.
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 1200 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await ctx.newPage();
    const errors = [], dialogs = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    // Self-contained: any network request is a defect.
    const requests = [];
    page.on('request', (r) => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
    await page.goto('file://' + path.resolve(page_file));
    if (errors.length) fail('script errors: ' + errors.join('; '));
    const data = await page.evaluate('DATA');
    const hasCpu = data.samples.some((s) => s[2] > 0);
    const view = await page.getAttribute('svg', 'data-view');

    // The view: CPU when the data has CPU samples and the page asks for it;
    // an idle period opens on wall with a line saying why, without a switch.
    const switchShown = await page.isVisible('#view');
    const note = (await page.textContent('#note')).trim();
    if (idle) {
      check(!hasCpu, 'an idle run with CPU samples');
      check(view === 'wall' && !switchShown, `idle: view ${view}, switch shown ${switchShown}`);
      check(/No thread was on CPU/.test(note), `idle: note "${note}"`);
    } else {
      check(hasCpu && switchShown, 'the data has CPU samples but no CPU/wall switch');
      check(view === data.view, `opens on ${view}, the page asked for ${data.view}`);
      check(note === '', `a note without reason: ${note}`);
    }

    let { W, bs, root } = await checkWidth(page, 1280);
    check(bs.length >= 2, 'only ' + bs.length + ' boxes drawn');
    // Colours by kind: the kind of every box is its function's in the data.
    const kindOf = {};
    data.names.forEach((n, i) => { kindOf[n] = ['native', 'java', 'jit', 'kernel'][Number(data.kinds[i])]; });
    const kinds = new Set();
    checkKinds(bs, kindOf, kinds);

    const mine = bs.filter((b) => b.name === fn).sort((p, q) => q.width - p.width);
    check(mine.length, 'no box for ' + fn);
    const target = mine[0];
    for (const o of bs.filter((b) => b.depth === target.depth && b !== target)) {
      check(o.width < target.width, `at depth ${target.depth}, ${o.name} (${o.value}) is as wide as ${fn} (${target.value})`);
    }
    if (shot) {
      await page.screenshot({ path: shot, fullPage: true });
      check(fs.statSync(shot).size >= 1000, 'screenshot too small');
    }
    const rectOf = async (name, depth, width) => {
      for (const h of await page.$$(`svg g.f[data-depth="${depth}"] rect`)) {
        const g = await h.evaluateHandle((r) => r.parentNode);
        if ((await g.getAttribute('data-name')) === name &&
            Math.abs(Number(await h.getAttribute('width')) - width) < 0.01) return h;
      }
      return null;
    };
    // Hover: status line and tooltip.
    let hovered = await rectOf(fn, target.depth, target.width);
    await hovered.hover();
    const status = (await page.textContent('#status')).trim();
    const pct = (100 * target.value / root.value).toFixed(2);
    const want = `${fn}: ${target.value} sample${target.value === 1 ? '' : 's'} (${pct}%)`;
    check(status === want, `hover shows "${status}", want "${want}"`);
    check(await page.isVisible('#tip'), 'no tooltip');
    check((await page.textContent('#tip')) === want, 'tooltip text differs');

    // Click zooms into it; reset goes back.
    await hovered.click();
    const zoomed = await page.$$eval('svg g.f:not(.dim) rect', (rs) =>
      rs.map((r) => ({ n: r.parentNode.getAttribute('data-name'), w: Number(r.getAttribute('width')) })));
    const focus = await page.getAttribute('svg', 'data-focus');
    const zw = Math.max(...zoomed.filter((z) => z.n === fn).map((z) => z.w));
    check(focus === fn && Math.abs(zw - W) <= 0.02, `zoom: focus ${focus}, width ${zw} of ${W}`);
    await page.click('#reset');
    check((await page.getAttribute('svg', 'data-focus')) === 'all', 'reset did not go back');

    // Search: ^fn$ as a regular expression.
    const esc = fn.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    await page.fill('#search', '^' + esc + '$');
    const re = new RegExp('^' + esc + '$');
    bs = await boxes(page);
    const hits = bs.filter((b) => b.match);
    check(hits.length >= 1, 'search highlighted nothing');
    for (const b of bs) check(b.match === (b.depth > 0 && re.test(b.name)), `box ${b.name} match=${b.match}`);
    const { m, t } = expectedMatch(data, view, re);
    const wantM = `Matched: ${m} of ${t} samples (${(100 * m / t).toFixed(2)}%)`;
    const gotM = (await page.textContent('#matched')).trim();
    check(gotM === wantM, `search shows "${gotM}", want "${wantM}"`);
    const shownFill = await page.$eval('svg g.f.match rect', (r) => getComputedStyle(r).fill);
    check(shownFill === 'rgb(230, 0, 230)', `highlighted boxes drawn ${shownFill}`);
    // An invalid expression is told, highlights nothing, breaks nothing.
    await page.fill('#search', '(');
    check(/Not a regular expression/.test(await page.textContent('#matched')), 'invalid expression not told');
    check((await boxes(page)).every((b) => !b.match), 'invalid expression highlighted boxes');
    await page.fill('#search', '^' + esc + '$');
    await page.click('#clear');
    check((await boxes(page)).every((b) => !b.match) &&
          (await page.textContent('#matched')) === '', 'clear left highlights');

    // Invert: roots at the top.
    const height = Number(await page.getAttribute('svg', 'height'));
    check(root.y === height - ROW, `root at y ${root.y}, height ${height}`);
    await page.check('#invert');
    check((await page.getAttribute('svg', 'data-inverted')) === 'true', 'not inverted');
    for (const b of await boxes(page)) check(b.y === b.depth * ROW, `inverted: ${b.name} at y ${b.y}`);
    await page.uncheck('#invert');
    for (const b of await boxes(page)) check(b.y === height - (b.depth + 1) * ROW, `upright: ${b.name} at y ${b.y}`);

    // The CPU/wall switch changes the totals to the data's.
    const totals = { cpu: 0, wall: 0 };
    for (const s of data.samples) { totals.wall += s[1]; totals.cpu += s[2]; }
    check(root.value === totals[view], `root ${root.value}, ${view} total ${totals[view]}`);
    let switched = null;
    if (!idle) {
      const other = view === 'cpu' ? 'wall' : 'cpu';
      await page.selectOption('#view', other);
      const r2 = (await boxes(page)).find((b) => b.depth === 0);
      check((await page.getAttribute('svg', 'data-view')) === other && r2.value === totals[other],
            `switch to ${other}: root ${r2.value}, want ${totals[other]}`);
      switched = { [other]: r2.value };
      checkKinds(await boxes(page), kindOf, kinds);
      await page.selectOption('#view', view);
    }

    // The window's width, again at 800 px.
    await page.setViewportSize({ width: 800, height: 900 });
    await page.waitForFunction(() => Number(document.querySelector('svg').getAttribute('width')) < 800);
    const narrow = await checkWidth(page, 800);

    // Names are text, never markup.
    let xssSeen = null;
    if (xss) {
      const b = (await boxes(page)).concat(bs).find((x) => x.name === xss);
      check(b, 'no box named ' + JSON.stringify(xss));
      check(b.title.startsWith(xss + ': '), 'the tooltip does not show the name as text');
      const injected = await page.evaluate(() => document.querySelectorAll('img, iframe, body script').length);
      check(injected === 1, `${injected} img/iframe/script elements (the page's own script only)`);
      xssSeen = b.name;
    }
    if (kindsOpt) {
      for (const k of kindsOpt.slice(8).split(',')) check(kinds.has(k), `no ${k} box drawn: ${[...kinds]}`);
    }
    check(dialogs.length === 0, 'a dialog opened: ' + dialogs.join('; '));
    check(errors.length === 0, 'script errors: ' + errors.join('; '));
    check(requests.length === 0, 'network requests: ' + requests.join(' '));
    console.log(JSON.stringify({ boxes: bs.length, fn, depth: target.depth, value: target.value,
      total: root.value, view, width: [W, narrow.W], status, matched: gotM, switched,
      kinds: [...kinds], note, xss: xssSeen, screenshot: shot || null }));
  } finally {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => fail(String(e && e.stack || e)));
