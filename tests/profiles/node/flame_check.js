// flame_check.js: open a flame graph page in headless Chromium and check it
// as a person would see it.
//
//   node flame_check.js <page.html> <function> [screenshot.png]
//
// Checks: the page renders boxes; box widths are proportional to their
// sample counts; <function>'s box is the widest at its depth; hovering it
// shows "<function>: N samples (P%)" with N and P matching the data;
// clicking zooms so it spans the full width; "Reset zoom" goes back.
// Prints one JSON line with what it saw; exits 1 on a failed check, 77
// when Chromium is missing (ctest SKIP_RETURN_CODE).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const CHROMIUM = '/usr/bin/chromium';

function fail(msg) {
  console.error('flame_check: ' + msg);
  process.exit(1);
}

async function main() {
  const [page_file, fn, shot] = process.argv.slice(2);
  if (!page_file || !fn) fail('usage: flame_check.js <page.html> <function> [shot.png]');
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
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // Self-contained: any network request is a defect.
    const requests = [];
    page.on('request', (r) => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
    await page.goto('file://' + path.resolve(page_file));
    if (errors.length) fail('script errors: ' + errors.join('; '));
    const boxes = await page.$$eval('svg g.f', (gs) => gs.map((g) => ({
      name: g.getAttribute('data-name'),
      value: Number(g.getAttribute('data-value')),
      depth: Number(g.getAttribute('data-depth')),
      width: Number(g.querySelector('rect').getAttribute('width')),
      x: Number(g.querySelector('rect').getAttribute('x')),
    })));
    if (boxes.length < 2) fail('only ' + boxes.length + ' boxes drawn');
    const root = boxes.find((b) => b.depth === 0);
    if (!root || root.name !== 'all') fail('no root box "all"');
    for (const b of boxes) {
      const want = b.value * 1200 / root.value;
      if (Math.abs(want - b.width) > 0.02) fail(`box ${b.name} width ${b.width}, want ${want}`);
    }
    const mine = boxes.filter((b) => b.name === fn).sort((p, q) => q.width - p.width);
    if (!mine.length) fail('no box for ' + fn);
    const target = mine[0];
    const others = boxes.filter((b) => b.depth === target.depth && b !== target);
    for (const o of others) {
      if (o.width >= target.width) fail(`at depth ${target.depth}, ${o.name} (${o.value}) is as wide as ${fn} (${target.value})`);
    }
    if (shot) {
      await page.screenshot({ path: shot, fullPage: true });
      if (fs.statSync(shot).size < 1000) fail('screenshot too small');
    }
    // Hover the widest box of the function.
    const sel = `svg g.f[data-name="${fn}"][data-depth="${target.depth}"] rect`;
    const handles = await page.$$(sel);
    let hovered = null;
    for (const h of handles) {
      if (Math.abs(Number(await h.getAttribute('width')) - target.width) < 0.01) hovered = h;
    }
    await hovered.hover();
    const status = (await page.textContent('#status')).trim();
    const pct = (100 * target.value / root.value).toFixed(2);
    const want = `${fn}: ${target.value} sample${target.value === 1 ? '' : 's'} (${pct}%)`;
    if (status !== want) fail(`hover shows "${status}", want "${want}"`);
    // Click zooms into it; reset goes back.
    await hovered.click();
    const zoomed = await page.$$eval(`svg g.f[data-name="${fn}"] rect`,
      (rs) => Math.max(...rs.map((r) => Number(r.getAttribute('width')))));
    const focus = await page.getAttribute('svg', 'data-focus');
    if (focus !== fn || Math.abs(zoomed - 1200) > 0.02) fail(`zoom: focus ${focus}, width ${zoomed}`);
    await page.click('#reset');
    if ((await page.getAttribute('svg', 'data-focus')) !== 'all') fail('reset did not go back');
    if (requests.length) fail('network requests: ' + requests.join(' '));
    console.log(JSON.stringify({ boxes: boxes.length, fn, depth: target.depth, value: target.value,
      total: root.value, status, screenshot: shot || null }));
  } finally {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => fail(String(e && e.stack || e)));
