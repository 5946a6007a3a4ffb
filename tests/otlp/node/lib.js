// lib.js: what the otlp_logs end-to-end tests share: running a program with
// the agent, reading the text exporter's thread dumps, the counters line.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {spawn} = require('child_process');

// Exit code ctest treats as "skipped" (SKIP_RETURN_CODE).
const SKIP = 77;

function skip(why) {
    console.log(`SKIP: ${why}`);
    process.exit(SKIP);
}

// The npm packages are installed by `npm ci` in this folder (.ci/install-deps).
function requireDeps() {
    const nm = path.join(__dirname, 'node_modules');
    for (const p of ['@elastic/mockotlpserver', '@grpc/grpc-js', '@grpc/proto-loader',
        'protobufjs']) {
        if (!fs.existsSync(path.join(nm, p))) {
            skip(`${p} is not installed: run "npm ci" in ${__dirname}`);
        }
    }
}

function tmpDir(tag) {
    return fs.mkdtempSync(path.join(os.tmpdir(), `stackshot-otlp-${tag}-`));
}

// Run `program args` with env added to a clean copy of ours; resolve with
// {code, signal, stdout, stderr, pid, ms}. Killed after timeoutMs.
// opts.onStderr(all so far) is called as its stderr arrives. With the
// argument "helper" after the case (see runCases), gRPC runs in the
// helper process (OTLP_GRPC_HELPER) in programs of the static core too.
function run(program, args, env, opts = {}) {
    const full = {...process.env};
    for (const k of Object.keys(full)) {
        if (/^(OTEL_|SPLUNK_|STACKSHOT_)/.test(k)) delete full[k];
    }
    // the exporters' counters at exit are debug lines when nothing was lost
    full.STACKSHOT_LOG_LEVEL = 'debug';
    if (process.argv[3] === 'helper') full.STACKSHOT_TEST_GRPC_HELPER = process.env.OTLP_GRPC_HELPER;
    Object.assign(full, env);
    const t0 = Date.now();
    return new Promise((resolve) => {
        const child = spawn(program, args, {env: full, stdio: ['ignore', 'pipe', 'pipe']});
        let stdout = '', stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => {
            stderr += d;
            if (opts.onStderr) opts.onStderr(stderr);
        });
        const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs || 60000);
        child.on('exit', (code, signal) => {
            clearTimeout(timer);
            resolve({code, signal, stdout, stderr, pid: child.pid, ms: Date.now() - t0});
        });
    });
}

// The text exporter's file: rounds of thread blocks.
//   Full thread dump stackshot round <seq> at <ISO> (pid <p>, <n> threads, <k> skipped)
//   <blank>
//   <block> <blank> <block> <blank> ...
function parseTextDump(file) {
    const text = fs.readFileSync(file, 'utf8');
    const rounds = [];
    const headerRe = /^Full thread dump stackshot round (\d+) at (\S+) \(pid (\d+), (\d+) threads/;
    const parts = text.split(/^(?=Full thread dump stackshot round )/m);
    for (const part of parts) {
        const m = headerRe.exec(part);
        if (!m) continue;
        const body = part.slice(part.indexOf('\n\n') + 2);
        const blocks = body.split(/\n\n/).filter((b) => b.length).map((b) => b + '\n');
        const threads = blocks.map((block) => ({name: /^"(.*)" #/.exec(block)[1], block}));
        rounds.push({seq: Number(m[1]), iso: m[2], pid: Number(m[3]), n: Number(m[4]), threads});
    }
    return rounds;
}

function textFile(dir) {
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.txt'));
    if (files.length !== 1) throw new Error(`expected one .txt in ${dir}, got ${files}`);
    return path.join(dir, files[0]);
}

// The exporter's part of the exit's one accounting line ("pid P
// accounting: otlp_logs: rounds T taken = D delivered + X dropped + F
// refused + H held (I in, Q dropped queued, C consumed); records K taken =
// E exported + R dropped + J rejected; r retries, f failures | ..."), the
// last one (a forked child's comes first).
function exitAccounting(stderr, name = 'otlp_logs') {
    const re = new RegExp(
        `pid (\\d+) accounting: (?:.* \\| )?${name}: rounds (\\d+) taken = (\\d+) delivered \\+ ` +
            `(\\d+) dropped \\+ (\\d+) refused \\+ (\\d+) held \\((\\d+) in, (\\d+) dropped queued, ` +
            `(\\d+) consumed\\); records (\\d+) taken = (\\d+) exported \\+ (\\d+) dropped \\+ ` +
            `(\\d+) rejected; (\\d+) retries, (\\d+) failures`,
        'g'
    );
    return [...stderr.matchAll(re)].map((m) => {
        const v = m.map(Number);
        return {line: m[0], pid: v[1], taken: v[2], delivered: v[3], droppedRounds: v[4],
            refused: v[5], held: v[6], roundsIn: v[7], roundsDropped: v[8], consumed: v[9],
            recordsTaken: v[10], exported: v[11], dropped: v[12], rejected: v[13],
            retries: v[14], failures: v[15]};
    });
}

function counters(stderr, name = 'otlp_logs') {
    const all = exitAccounting(stderr, name);
    if (!all.length) throw new Error(`no ${name} accounting line in:\n${stderr}`);
    return all[all.length - 1];
}

// ns (string) -> the ISO time the text header prints (milliseconds, Z).
function isoOfNs(ns) {
    return new Date(Number(BigInt(ns) / 1000000n)).toISOString();
}

function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}

// A loopback port nothing listens on (yet).
function freePort() {
    const net = require('net');
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.listen(0, '127.0.0.1', () => {
            const port = srv.address().port;
            srv.close(() => resolve(port));
        });
        srv.on('error', reject);
    });
}

// Every (round, thread) of `records` ({time, name}) delivered exactly
// once: `rounds` rounds of `threads` records, nothing else.
function assertExactlyOnce(records, rounds, threads) {
    const assert = require('assert/strict');
    const seen = new Map();
    for (const r of records) {
        const key = `${r.time}/${r.name}`;
        seen.set(key, (seen.get(key) || 0) + 1);
    }
    for (const [key, n] of seen) assert.equal(n, 1, `${key} delivered ${n} times`);
    const times = new Set([...seen.keys()].map((k) => k.split('/')[0]));
    assert.equal(times.size, rounds, 'every round delivered');
    assert.equal(seen.size, rounds * threads, 'every record delivered');
}

// The main of a test script: run the case named by argv[2] (an async
// function of `cases`) with the driver; exit 1 with the error when it throws.
function runCases(cases) {
    (async () => {
        const name = process.argv[2];
        if (!cases[name]) throw new Error(`unknown case ${name}; cases: ${Object.keys(cases)}`);
        if (!process.env.OTLP_DRIVER) skip('OTLP_DRIVER is not set');
        if (process.argv[3] === 'helper' && !process.env.OTLP_GRPC_HELPER)
            skip('OTLP_GRPC_HELPER is not set');
        await cases[name]();
        console.log(`ok: ${name}`);
    })().catch((e) => {
        console.error(e);
        process.exit(1);
    });
}

module.exports = {SKIP, skip, requireDeps, tmpDir, run, parseTextDump, textFile, counters,
    exitAccounting,    isoOfNs, sleep, freePort, runCases, assertExactlyOnce};
