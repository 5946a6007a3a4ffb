// harness.js: what the forkload tests share: the OTLP receiver and helpers
// of tests/otlp/node, the Qubership test collector, running a host with
// the agent preloaded, and the accounting lines of exporters/fanout.c.
'use strict';

const fs = require('fs');
const path = require('path');
const {spawn} = require('child_process');

const OTLP_NODE = path.join(__dirname, '..', '..', 'otlp', 'node');

function otlpLib() {
    const lib = require(path.join(OTLP_NODE, 'lib.js'));
    lib.requireDeps(); // exits 77 (skip) when `npm ci` was not run there
    return lib;
}

function otlpReceiver() {
    return require(path.join(OTLP_NODE, 'receiver.js'));
}

// tests/qubership/collector.py on a free port; handshakes() lists the pod
// names it was greeted with.
function startCollector() {
    const out = fs.mkdtempSync(path.join(require('os').tmpdir(), 'stackshot-qb-'));
    const py = spawn('python3', [process.env.SS_COLLECTOR, '--out', out],
        {stdio: ['ignore', 'pipe', 'inherit']});
    return new Promise((resolve, reject) => {
        let buf = '';
        py.stdout.on('data', (d) => {
            buf += d;
            const m = /^(\d+)\n/.exec(buf);
            if (m) {
                resolve({
                    port: Number(m[1]),
                    stop: () => py.kill('SIGKILL'),
                    handshakes: () => {
                        const f = path.join(out, 'events.log');
                        const text = fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : '';
                        return [...text.matchAll(/ handshake version=\d+ pod=(\S+)/g)].map((x) => x[1]);
                    },
                });
            }
        });
        py.on('exit', (code) => reject(new Error(`collector exited ${code}`)));
    });
}

// Run a host with the agent preloaded (after the sanitizer runtime when
// the build has one); {code, signal, stdout, stderr, ms}. At debug level:
// the accounting lines at exit are printed only there when nothing was lost.
// The process tree's stderr goes to a file, read back as res.stderr: a
// pipe that this (loaded) test reads too slowly fills up with the debug
// lines of a few dozen processes, and the agent's log drops a line rather
// than wait (by design), so assertions on lines would fail for the test's
// sake. /bin/sh (not preloaded) execs the program at once, preloaded.
async function runPreloaded(program, args, env, timeoutMs) {
    const lib = require(path.join(OTLP_NODE, 'lib.js'));
    const pre = [process.env.SS_PRELOAD_PREFIX, process.env.STACKSHOT_LIB].filter(Boolean);
    const errFile = path.join(require('os').tmpdir(),
        `ss-forkload-${process.pid}-${Date.now()}.stderr`);
    const res = await lib.run('/bin/sh', ['-c',
        'LD_PRELOAD="$SS_FORKLOAD_PRELOAD" exec "$0" "$@" 2>"$SS_FORKLOAD_STDERR"', program, ...args],
    {SS_FORKLOAD_PRELOAD: pre.join(':'), STACKSHOT_LOG_LEVEL: 'debug', SS_FORKLOAD_STDERR: errFile,
        ...env}, {timeoutMs});
    try {
        res.stderr = fs.readFileSync(errFile, 'utf8') + res.stderr;
        fs.unlinkSync(errFile);
    } catch (e) { /* the shell could not start it: its own stderr says why */ }
    return res;
}

// The text exporter's file of one process: <exe>.<pid>.txt
function textFileOf(dir, pid) {
    const f = fs.readdirSync(dir).filter((n) => n.endsWith(`.${pid}.txt`));
    if (f.length !== 1) throw new Error(`no text file for pid ${pid} in ${dir}: ${f}`);
    return path.join(dir, f[0]);
}

// process.pid of a record's resource (receiver.js recordsOf entry)
function resourcePid(rec) {
    for (const kv of (rec.resource && rec.resource.attributes) || []) {
        if (kv.key === 'process.pid') {
            const v = kv.value || {};
            return Number(v[v.value]);
        }
    }
    return null;
}

// "pid P accounting: NAME: rounds T taken = D delivered + X dropped + R
// refused + H held (...); ... | NAME2: ..." (the exit's one line)
function accounting(stderr, pid) {
    const out = {};
    const re = /(\w+): rounds (\d+) taken = (\d+) delivered \+ (\d+) dropped \+ (\d+) refused \+ (\d+) held/g;
    for (const line of stderr.matchAll(/pid (\d+) accounting: (.*)/g)) {
        if (Number(line[1]) !== pid) continue;
        for (const m of line[2].matchAll(re))
            out[m[1]] = {line: m[0], taken: Number(m[2]), delivered: Number(m[3]),
                dropped: Number(m[4]), refused: Number(m[5]), held: Number(m[6])};
    }
    return out;
}

// "pid P memory: peak N bytes queued, limit L (T transiently; largest round R bytes)"
function memoryLine(stderr, pid) {
    const m = new RegExp(`pid ${pid} memory: peak (\\d+) bytes queued, limit (\\d+) ` +
        `\\((\\d+) transiently; largest round (\\d+) bytes\\)`).exec(stderr);
    return m ? {peak: Number(m[1]), limit: Number(m[2]), transient: Number(m[3]),
        largest: Number(m[4])} : null;
}

// seq -> the threads a round header counts but does not list: "<k>
// skipped" plus "<b> blocking the signal"
function skippedBySeq(file) {
    const text = fs.readFileSync(file, 'utf8');
    const out = new Map();
    const re = /^Full thread dump stackshot round (\d+) at \S+ \(pid \d+, \d+ threads, (\d+) skipped(?:, (\d+) blocking the signal)?/gm;
    for (const m of text.matchAll(re)) out.set(Number(m[1]), Number(m[2]) + Number(m[3] || 0));
    return out;
}

module.exports = {skippedBySeq, otlpLib, otlpReceiver, startCollector, runPreloaded, textFileOf, resourcePid,
    accounting, memoryLine};
