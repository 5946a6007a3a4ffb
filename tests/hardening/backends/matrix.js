// matrix.js: every exporter against every dead or hostile backend, with a
// real native host (bk_host) under the agent, then the backend recovers.
//
//   node matrix.js [--only <substring>] [--cases <name,name...>] [--jobs N]
//   env: BK_HOST (the host program), STACKSHOT_LIB (libstackshot.so; unset
//        when BK_HOST links the agent itself), QB_COLLECTOR (collector.py),
//        PYTHON (python3); BK_JAVA (a java launcher) and BK_JAVA_CP (where
//        BkHost.class is): the host is a JVM, BkHost.java, the agent loaded
//        with -agentpath:$STACKSHOT_LIB instead of LD_PRELOAD
//
// --cases: only the cases so named ("otlp_logs/http/silent",
// "qubership/silent (down to the end)": as the summary lines name them).
//
// One case = one exporter x one mode (the OTLP exporters over gRPC, and
// over OTLP/HTTP: "otlp_logs/http"). The host runs with the agent
// sampling every 50 ms; the backend misbehaves until the agent has said it
// failed (PHASE1_MS at least), then a good server takes the same port
// until it has the host's data, and DRAIN_MS more; then the host is told to
// end (its standard input closes). Asserted for every case:
//   - the host ends normally, its exit delayed by at most the shutdown
//     timeout (STACKSHOT_SHUTDOWN_TIMEOUT) plus slack;
//   - its resident set grows by less than the memory bound allows;
//   - the counters account for every round and every record:
//     rounds in = consumed + dropped, records taken = exported + dropped
//     + rejected (the exporter's accounting line against the counters);
//   - no message floods the log: the same line (numbers aside) at most
//     MAX_REPEAT times, and few lines in all;
//   - after recovery the good server gets the host's data (its thread
//     name), and the agent counts records exported.
// Text cases have no backend: the output directory is unusable, and the
// host must not notice.
// Cases run BK_JOBS (3) at a time (they mostly wait); exit 0 when all pass, 1
// otherwise, 77 when a prerequisite is missing.
'use strict';

const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const {GrpcServer, HttpServer, RawServer, freePort, RAW_MODES, GRPC_MODES, HTTP_MODES} =
    require('./hostile.js');
// Exporters that bring their own backend and cases: every cases_*.js here
// exports {exporter, goodServer(dir, {Collector}), env(port, dir), needle,
// cases()}.
const PLUGINS = fs.readdirSync(__dirname).filter((f) => /^cases_.*\.js$/.test(f))
    .map((f) => require(`./${f}`));
const plugin = (exporter) => PLUGINS.find((p) => p.exporter === exporter);

const RUN_MS = Number(process.env.BK_RUN_MS || 5000); // cases without phases
const PHASE1_MS = Number(process.env.BK_PHASE1_MS || 2500); // hostile, at least
const MAX_PHASE_MS = 15000; // a phase's bound when its event does not come
const DRAIN_MS = 2500; // after the first delivery: the backlog's time to drain
const MAX_RUN_MS = 2 * MAX_PHASE_MS + DRAIN_MS + RUN_MS;
const SHUTDOWN_MS = 1000;
const EXIT_SLACK_MS = 1500;
const MAX_MEMORY = 4 << 20;
const RSS_SLACK_KB = 24 * 1024;
const MAX_REPEAT = 3;
const MAX_LINES = 24;
// The host's data, as a backend sees it: an idle thread's name for OTLP
// (the 16 sleepers are in every round, even when the busy worker misses
// one on a starved machine), the worker's name for qubership (which skips
// idle threads), in UTF-16 as Java's writeChars writes it.
const NEEDLE = Buffer.from('bk-sleeper');
// modes whose answers gRPC may take as a success (a response it cannot
// parse, or one cut short at the end of the stream), so no failure need be
// counted
const ANSWERS_OK = new Set(['grpc-badproto', 'grpc-badframe', 'http-badproto']);
// ... and over OTLP/HTTP, midclose: libcurl (as curl(1)) takes a status
// line followed by a close in the middle of the headers as a whole answer,
// and the good server behind the proxy did get the request
const answersOk = (c) => ANSWERS_OK.has(c.mode) || (c.transport === 'http' && c.mode === 'midclose');
// what the exporters say when a backend fails them
const FAILURE_LINE = /export to .* failed|reconnecting in/;
const NEEDLE16 = Buffer.from('bk-worker', 'utf16le').swap16();

const HOST = process.env.BK_HOST;
const JAVA = process.env.BK_JAVA || '';
const JAVA_CP = process.env.BK_JAVA_CP || '';
// The JVM's heap taken in full at its start (AlwaysPreTouch), so that the
// resident set measures what the agent adds, not the heap's first touches.
const JAVA_ARGS = ['-Xms32m', '-Xmx32m', '-XX:+AlwaysPreTouch', '-XX:-UsePerfData'];
const LIB = process.env.STACKSHOT_LIB || '';
const COLLECTOR = process.env.QB_COLLECTOR;
const PYTHON = process.env.PYTHON || 'python3';

function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}

// ---- the qubership collector (tests/qubership/collector.py) -----------
// (or another Python collector that prints its port first: opts.script,
// opts.python, opts.args; plugins get this class)

// Every process the matrix starts, killed when the matrix exits, however
// it ends: a collector writes to our stderr, so one left running would
// keep ctest waiting on the test's output until its timeout.
const spawned = new Set();
function track(p) {
    spawned.add(p);
    p.on('exit', () => spawned.delete(p));
    return p;
}
process.on('exit', () => {
    for (const p of spawned) {
        try {
            p.kill('SIGKILL');
        } catch (e) {
            // gone already
        }
    }
});

class Collector {
    constructor(dir, opts = {}) {
        this.dir = dir;
        this.opts = opts;
    }
    start(port) {
        return new Promise((resolve, reject) => {
            this.proc = track(spawn(this.opts.python || PYTHON, [this.opts.script || COLLECTOR,
                '--port', String(port), '--out', this.dir, ...(this.opts.args || [])],
                {stdio: ['ignore', 'pipe', 'inherit']}));
            this.proc.on('error', reject);
            this.proc.stdout.once('data', (d) => {
                this.port = Number(String(d).trim());
                resolve(this.port);
            });
        });
    }
    // Rolling files the collector wrote (modified after `since`, ms) that
    // hold `needle`.
    delivered(needle, since = 0) {
        if (!fs.existsSync(this.dir)) return [];
        return fs.readdirSync(this.dir).filter((f) => {
            const p = path.join(this.dir, f);
            return f.endsWith('.bin') && fs.statSync(p).mtimeMs >= since &&
                fs.readFileSync(p).includes(needle);
        });
    }
    async close() {
        if (!this.proc || this.proc.exitCode !== null) return;
        const gone = new Promise((r) => this.proc.once('exit', r));
        this.proc.kill('SIGKILL');
        await gone;
    }
}

// ---- backends per exporter ---------------------------------------------

// The good server behind a case: a gRPC server, or the qubership test
// collector (started once per case, before the host: Python takes a while
// to start on a busy machine). Raw modes front it where they need one, and
// after recovery a transparent proxy on the case's port leads to it.
async function goodServer(exporter, dir, transport) {
    if (plugin(exporter)) return plugin(exporter).goodServer(dir, {Collector});
    const srv = exporter === 'qubership' ? new Collector(path.join(dir, 'good'))
        : transport === 'http' ? new HttpServer('ok') : new GrpcServer('ok');
    await srv.start(0);
    return srv;
}

// The misbehaving backend on `port`; returns {close()}.
async function hostile(mode, port, upstream) {
    const srv = GRPC_MODES.includes(mode) ? new GrpcServer(mode)
        : HTTP_MODES.includes(mode) ? new HttpServer(mode) : new RawServer(mode, upstream);
    await srv.start(port);
    return srv;
}

// After recovery: the good server on the case's port.
async function recovered(port, upstream) {
    const srv = new RawServer('pass', upstream);
    for (let i = 0; ; i++) {
        try {
            await srv.start(port);
            return srv;
        } catch (e) {
            if (i > 20) throw e; // the port is still held: try again shortly
            await sleep(100);
        }
    }
}

function envFor(exporter, port, dir, transport) {
    const env = {
        ...process.env,
        SPLUNK_PROFILER_ENABLED: 'true',
        STACKSHOT_EXPORTERS: exporter,
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: '50',
        STACKSHOT_SHUTDOWN_TIMEOUT: String(SHUTDOWN_MS),
        STACKSHOT_MAX_MEMORY: String(MAX_MEMORY),
        STACKSHOT_LOG_LEVEL: process.env.BK_LOG_LEVEL || 'info',
        STACKSHOT_OUTPUT_DIR: path.join(dir, 'out'),
        OTEL_SERVICE_NAME: 'bk-host',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
        STACKSHOT_OTLP_RETRY_INITIAL: '200',
        STACKSHOT_OTLP_RETRY_MAX: '1000',
        STACKSHOT_PROFILES_PERIOD: '1',
        REMOTE_DUMP_HOST: '127.0.0.1',
        REMOTE_DUMP_PORT_PLAIN: String(port),
        STACKSHOT_QUBERSHIP_WINDOW: '1',
        STACKSHOT_QUBERSHIP_RECONNECT: '300',
        STACKSHOT_QUBERSHIP_TIMEOUT: '1000',
    };
    for (const p of PLUGINS) Object.assign(env, p.env(port, dir));
    if (transport === 'http') env.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/protobuf';
    if (LIB && !JAVA) env.LD_PRELOAD = LIB;
    return env;
}

// ---- one run of the host -------------------------------------------------

// Runs the host; resolves {code, signal, stdout, stderr, opsAt, endAt}.
// The promise has stderrSoFar() for watching the run.
function runHost(env, args) {
    const out = {stdout: '', stderr: '', opsAt: 0, start: Date.now()};
    const done = new Promise((resolve) => {
        const p = track(JAVA
            ? spawn(JAVA, [`-agentpath:${LIB}`, ...JAVA_ARGS, '-cp', JAVA_CP, 'BkHost', ...args],
                {env, stdio: ['pipe', 'pipe', 'pipe']})
            : spawn(HOST, args, {env, stdio: ['pipe', 'pipe', 'pipe']}));
        out.pid = p.pid;
        out.finish = () => p.stdin.end();
        out.mark = () => p.stdin.write('m\n');
        p.stdout.on('data', (d) => {
            out.stdout += d;
            if (!out.opsAt && out.stdout.includes('\n')) out.opsAt = Date.now();
        });
        p.stderr.on('data', (d) => (out.stderr += d));
        // a hang is a failure, not a stuck test
        const kill = setTimeout(() => p.kill('SIGKILL'), MAX_RUN_MS + 20000);
        p.on('close', (code, signal) => {
            clearTimeout(kill);
            resolve({...out, code, signal, endAt: Date.now()});
        });
    });
    done.stderrSoFar = () => out.stderr;
    // has the host mapped one of the agent's modules (libstackshot-grpc.so,
    // -http.so...)? An OTLP exporter opens its module when it starts.
    done.moduleLoaded = () => {
        try {
            return /libstackshot-(grpc|http)\.so/.test(fs.readFileSync(`/proc/${out.pid}/maps`, 'utf8'));
        } catch (e) {
            return false;
        }
    };
    done.finish = () => out.finish();
    // the host takes its early resident set again now (see bk_host.c)
    done.mark = () => out.mark();
    return done;
}

// The exit's one accounting line, the exporter's part: "pid P accounting:
// ... <exporter>: rounds T taken = D delivered + X dropped + F refused + H
// held (I in, Q dropped queued, C consumed); records K taken = E exported
// + R dropped + J rejected; r retries, f failures".
function parseExit(stderr, exporter) {
    const m = stderr.match(new RegExp(`pid \\d+ accounting: (?:.* \\| )?${exporter}: rounds ` +
        '(\\d+) taken = (\\d+) delivered \\+ (\\d+) dropped \\+ (\\d+) refused \\+ (\\d+) held ' +
        '\\((\\d+) in, (\\d+) dropped queued, (\\d+) consumed\\); records (\\d+) taken = (\\d+) ' +
        'exported \\+ (\\d+) dropped \\+ (\\d+) rejected; (\\d+) retries, (\\d+) failures'));
    return m ? m.slice(1).map(Number) : null;
}

function parseCounters(stderr, exporter) {
    const v = parseExit(stderr, exporter);
    if (!v) return null;
    return {in: v[5], roundsDropped: v[6], exported: v[9], dropped: v[10], rejected: v[11],
        retries: v[12], failures: v[13]};
}

// The fan-out's equation: T rounds taken = D delivered + X dropped + F
// refused + H held.
function parseFanout(stderr, exporter) {
    const v = parseExit(stderr, exporter);
    return v ? {taken: v[0], delivered: v[1], dropped: v[2], refused: v[3], held: v[4]} : null;
}

function parseAccounting(stderr, exporter) {
    const v = parseExit(stderr, exporter);
    return v ? {consumed: v[7], taken: v[8]} : null;
}

// Lines of the agent, each normalised (numbers out) and counted.
// (Lines of the debug level are left out: per-round counters, and the
// exit's accounting and memory lines.)
const DEBUG_LINE = /: rounds \d+ in, \d+ dropped; records | accounting: |memory: peak |native sampler: \d+ rounds|core loaded |module \w+ loaded |: sending |OTLP wire of /;
// A state said once at warn is repeated at debug each time it recurs: at
// debug, the repeats are no flood (at info the host sees the line once).
const REPEATED_AT_DEBUG = /answered OK with a body that is not an OTLP export response|accepted a batch partially/;
function floods(stderr, level) {
    const lines = stderr.split('\n').filter((l) => l.startsWith('stackshot:') && !DEBUG_LINE.test(l));
    if (level === 'debug') {
        const first = new Set();
        for (let i = 0; i < lines.length; i++) {
            const m = REPEATED_AT_DEBUG.exec(lines[i]);
            if (!m) continue;
            if (first.has(m[0])) lines.splice(i--, 1);
            else first.add(m[0]);
        }
    }
    const seen = new Map();
    for (const l of lines) {
        const k = l.replace(/[0-9]+/g, 'N');
        seen.set(k, (seen.get(k) || 0) + 1);
    }
    const repeated = [...seen].filter(([, n]) => n > MAX_REPEAT);
    return {lines: lines.length, repeated};
}

function needleFor(exporter) {
    if (plugin(exporter)) return plugin(exporter).needle;
    return exporter === 'qubership' ? NEEDLE16 : NEEDLE;
}

async function runCase(c) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `bk-${c.exporter}-${c.mode}-`));
    const port = await freePort();
    const problems = [];
    const env = envFor(c.exporter, port, dir, c.transport);
    // the exit counters are printed at info only when something was lost:
    // where the backend's answers may all count as delivered, read them at
    // debug (floods() leaves out the per-round counters debug adds)
    if (ANSWERS_OK.has(c.mode) && !process.env.BK_LOG_LEVEL) env.STACKSHOT_LOG_LEVEL = 'debug';
    if (c.setup) c.setup(env, dir);
    let bad = null, goodSrv = null, front = null;
    if (c.exporter !== 'text') {
        goodSrv = await goodServer(c.exporter, dir, c.transport);
        bad = await hostile(c.mode, port, goodSrv.port);
    }
    // The host runs until we close its input: the phases follow what the
    // backends and the agent's log show, not the clock (on a busy machine
    // the first round may come seconds late).
    const run = runHost(env, ['0', '1', '16', '24', '2000']);
    const t0 = Date.now();
    // The resident set's baseline: once the exporter has opened (an OTLP
    // exporter loads its module then, gRPC's libraries with it, a start-up
    // cost and not growth; on a busy machine that can come after the host's
    // own early sample at 300 ms)
    if (c.exporter.startsWith('otlp')) {
        // module mapped, then its first export attempted: the exporter is
        // set up (a failure line, a connection to the hostile server, or
        // data at the good one)
        const tried = () => FAILURE_LINE.test(run.stderrSoFar()) || (bad && bad.accepted > 0) ||
            (goodSrv && goodSrv.delivered(needleFor(c.exporter), 0).length > 0);
        while (Date.now() - t0 < MAX_PHASE_MS && !(run.moduleLoaded() && tried()))
            await sleep(50);
        await sleep(200);
        run.mark();
    }
    let recoveredAt = 0;
    if (bad && !c.norecover) {
        // the hostile phase lasts until the exporter has met it
        const met = () => FAILURE_LINE.test(run.stderrSoFar()) ||
            (answersOk(c) && bad.accepted > 0);
        while (Date.now() - t0 < MAX_PHASE_MS && (Date.now() - t0 < PHASE1_MS || !met()))
            await sleep(100);
        await bad.close();
        front = await recovered(port, goodSrv.port);
        recoveredAt = Date.now();
        // then until the good server has the host's data, and the backlog
        // had DRAIN_MS to go
        const needle = needleFor(c.exporter);
        const t1 = Date.now();
        while (Date.now() - t1 < MAX_PHASE_MS && !goodSrv.delivered(needle, recoveredAt).length)
            await sleep(100);
        await sleep(DRAIN_MS);
    } else {
        await sleep(RUN_MS);
    }
    run.finish();
    const r = await run;
    if (c.norecover) await bad.close();
    if (front) {
        await sleep(200);
        await front.close();
    }

    // the host ends normally and in time
    if (r.code !== 0) problems.push(`host exited with ${r.code ?? r.signal}`);
    const m = r.stdout.match(/ops (\d+) run_ms (\d+) rss_early_kb (-?\d+) rss_end_kb (-?\d+)/);
    if (!m) problems.push('host printed no ops line');
    const exitDelay = r.opsAt ? r.endAt - r.opsAt : -1;
    if (exitDelay > SHUTDOWN_MS + EXIT_SLACK_MS)
        problems.push(`exit took ${exitDelay} ms after the run (shutdown timeout ${SHUTDOWN_MS})`);
    // memory stays bounded
    let growKb = 0;
    if (m) {
        growKb = Number(m[4]) - Number(m[3]);
        if (growKb > MAX_MEMORY / 1024 + RSS_SLACK_KB)
            problems.push(`resident set grew by ${growKb} kB during the run`);
    }
    // counters account for every round and record
    const ctr = parseCounters(r.stderr, c.exporter);
    const acc = parseAccounting(r.stderr, c.exporter);
    if (!ctr) {
        problems.push('no counters line');
    } else {
        if (c.disabled) {
            if (ctr.in !== 0) problems.push(`${ctr.in} rounds went to a disabled exporter`);
        } else if (ctr.in < 10) { // a busy machine may starve the sampler
            problems.push(`only ${ctr.in} rounds reached the exporter`);
        }
        if (c.exporter !== 'text') {
            const fan = parseFanout(r.stderr, c.exporter);
            if (!fan) problems.push('no fan-out accounting line');
            else if (fan.held) problems.push(`${fan.held} rounds held at exit`);
            // a round whose records were dropped or rejected on the way is
            // not "delivered": the equation counts it dropped (OTLP and
            // Zorka count their losses in records, qubership in rounds)
            if (fan && ctr && c.exporter !== 'qubership') {
                const lostRecords = ctr.dropped + ctr.rejected > 0;
                const lostRounds = fan.dropped > ctr.roundsDropped;
                if (lostRecords !== lostRounds)
                    problems.push(`fan-out: ${fan.dropped} rounds dropped (${ctr.roundsDropped} ` +
                        `from the queue) with ${ctr.dropped + ctr.rejected} records dropped or ` +
                        'rejected');
            }
            if (!acc) {
                problems.push('no accounting line');
            } else {
                // qubership counts as dropped, besides what its queue
                // dropped, rounds it consumed whose data never reached the
                // collector (and rounds refused while blacklisted): the
                // fan-out's equation holds, and every round consumed was in
                if (c.exporter === 'qubership') {
                    if (acc.consumed > ctr.in)
                        problems.push(`rounds: ${acc.consumed} consumed > ${ctr.in} in`);
                } else if (acc.consumed + ctr.roundsDropped !== ctr.in) {
                    problems.push(`rounds: ${ctr.in} in != ${acc.consumed} consumed + ` +
                        `${ctr.roundsDropped} dropped`);
                }
                const out = ctr.exported + ctr.dropped + ctr.rejected;
                if (acc.taken !== out)
                    problems.push(`records: ${acc.taken} taken != ${out} exported+dropped+rejected`);
            }
        } else if (c.writes && ctr.exported + ctr.dropped === 0) {
            problems.push('text: no record counted');
        }
    }
    // the hostile phase was met and counted
    if (bad && !c.norecover && ctr && ctr.failures === 0 && !answersOk(c))
        problems.push('no failure counted: the exporter never met the hostile backend');
    // one line per failure kind, not one per round
    const peak = r.stderr.match(/memory: peak (\d+) bytes queued, limit (\d+)/);
    if (peak && Number(peak[1]) > Number(peak[2]) * 1.5)
        problems.push(`agent memory peaked at ${peak[1]} bytes, limit ${peak[2]}`);
    const fl = floods(r.stderr, env.STACKSHOT_LOG_LEVEL);
    if (fl.lines > MAX_LINES) problems.push(`${fl.lines} log lines`);
    for (const [k, n] of fl.repeated) problems.push(`log line repeated ${n} times: ${k}`);
    if (c.expectLine && !c.expectLine.test(r.stderr))
        problems.push(`missing the line ${c.expectLine}`);
    // the exporter came back to the exit in time, with everything it held
    const abandoned = r.stderr.match(/.*did not finish within the shutdown deadline.*/);
    if (abandoned) problems.push(`exporter thread abandoned at exit: ${abandoned[0]}`);
    // recovery
    if (goodSrv && !c.norecover) {
        const got = goodSrv.delivered(needleFor(c.exporter), recoveredAt);
        if (!got.length)
            problems.push('nothing of the host reached the good server after recovery (it got ' +
                `${goodSrv.calls ? goodSrv.calls.length + ' calls' : 'no file'}, the front ` +
                `${front ? front.accepted : 0} connections)`);
        if (ctr && ctr.exported === 0) problems.push('no record counted as exported');
        // what piled up during the outage drains once the backend is back,
        // well before the run ends: nothing is left for the exit to drop
        // (otlp_profiles flushes its last period at exit: that one may be
        // caught by the deadline on a busy machine, an older one may not)
        const left = r.stderr.match(/.*: (\d+) (records|periods) not delivered before the shutdown deadline.*/);
        if (left && !(left[2] === 'periods' && Number(left[1]) <= 1))
            problems.push(`the backlog did not drain after recovery: ${left[0]}`);
    }
    if (goodSrv) await goodSrv.close();
    const summary = `${c.exporter}${c.transport ? '/' + c.transport : ''}/${c.mode}${c.norecover ? ' (down to the end)' : ''}: exit +${exitDelay} ms, rss +${growKb} kB, ` +
        (ctr ? `rounds ${ctr.in} in/${ctr.roundsDropped} dropped, records ` +
            `${ctr.exported} exported/${ctr.dropped} dropped, ${ctr.failures} failures` : '') +
        `, ${fl.lines} log lines`;
    if (problems.length || process.env.BK_VERBOSE) {
        console.log(`${problems.length ? 'FAIL' : 'ok  '} ${summary}\n  - ${problems.join('\n  - ')}\n  stderr:\n` +
            r.stderr.split('\n').map((l) => '    ' + l).join('\n'));
    } else {
        console.log(`ok   ${summary}`);
        fs.rmSync(dir, {recursive: true, force: true});
    }
    return problems.length === 0;
}

function caseName(c) {
    return `${c.exporter}${c.transport ? '/' + c.transport : ''}/${c.mode}` +
        (c.norecover ? ' (down to the end)' : '');
}

function cases() {
    const list = [];
    for (const exporter of ['otlp_logs', 'otlp_profiles', 'qubership'])
        for (const mode of RAW_MODES.concat(exporter === 'qubership' ? [] : GRPC_MODES))
            list.push({exporter, mode});
    // down to the end, with the default timeouts (10 s per OTLP call, 30 s
    // per qubership reply, a 5 s window): longer than the run and than the
    // shutdown timeout, so the exit meets the exporter mid-wait
    const defaults = (env) => {
        for (const k of ['OTEL_EXPORTER_OTLP_TIMEOUT', 'STACKSHOT_QUBERSHIP_WINDOW',
            'STACKSHOT_QUBERSHIP_TIMEOUT', 'STACKSHOT_QUBERSHIP_RECONNECT'])
            delete env[k];
    };
    list.push({exporter: 'otlp_logs', mode: 'grpc-stall', norecover: true, setup: defaults});
    list.push({exporter: 'otlp_profiles', mode: 'grpc-stall', norecover: true, setup: defaults});
    list.push({exporter: 'qubership', mode: 'silent', norecover: true, setup: defaults});
    // OTLP/HTTP (http/protobuf): otlp_logs against every raw and HTTP mode,
    // otlp_profiles against a few; both stalled to the end
    for (const mode of RAW_MODES.concat(HTTP_MODES))
        list.push({exporter: 'otlp_logs', transport: 'http', mode});
    for (const mode of ['absent', 'garbage', 'http-503'])
        list.push({exporter: 'otlp_profiles', transport: 'http', mode});
    list.push({exporter: 'otlp_logs', transport: 'http', mode: 'http-stall', norecover: true,
        setup: defaults});
    list.push({exporter: 'otlp_profiles', transport: 'http', mode: 'http-stall', norecover: true,
        setup: defaults});
    for (const p of PLUGINS) list.push(...p.cases());
    // text: the output directory cannot be used
    // the text file is created at the first write: a directory that cannot
    // be made is said once, and every round is counted lost
    list.push({exporter: 'text', mode: 'proc-dir', writes: true,
        setup: (env) => (env.STACKSHOT_OUTPUT_DIR = '/proc/self/stackshot-out'),
        expectLine: /output directory \/proc\/self\/stackshot-out cannot be created/});
    list.push({exporter: 'text', mode: 'file-as-dir', writes: true, setup: (env, dir) => {
        fs.writeFileSync(path.join(dir, 'file'), 'x');
        env.STACKSHOT_OUTPUT_DIR = path.join(dir, 'file', 'out');
    }, expectLine: /has a path component that is not a directory/});
    // text: every write fails (file size limit, SIGXFSZ ignored by the host)
    list.push({exporter: 'text', mode: 'full', writes: true, setup: (env) => {
        env.BK_FSIZE_LIMIT = '4096';
    }, expectLine: /text: write to .* failed/});
    return list;
}

async function main() {
    let only = null, named = null, jobs = Number(process.env.BK_JOBS || 3);
    for (let i = 2; i < process.argv.length; i++) {
        if (process.argv[i] === '--only') only = process.argv[++i];
        else if (process.argv[i] === '--cases') named = process.argv[++i].split(',');
        else if (process.argv[i] === '--jobs') jobs = Number(process.argv[++i]);
    }
    if (JAVA ? !fs.existsSync(JAVA) || !fs.existsSync(path.join(JAVA_CP, 'BkHost.class'))
        : !HOST || !fs.existsSync(HOST)) {
        console.log('SKIP: BK_HOST (or BK_JAVA and BK_JAVA_CP) not set or missing');
        process.exit(77);
    }
    let todo = cases().filter((c) => !only ||
        `${c.exporter}${c.transport ? '/' + c.transport : ''}/${c.mode}`.includes(only));
    if (named) {
        todo = todo.filter((c) => named.includes(caseName(c)));
        const missing = named.filter((n) => !todo.some((c) => caseName(c) === n));
        if (missing.length) {
            console.log(`no such case: ${missing.join(', ')}`);
            process.exit(1);
        }
    }
    if (!COLLECTOR || !fs.existsSync(COLLECTOR)) {
        console.log('note: QB_COLLECTOR missing: qubership cases skipped');
        todo = todo.filter((c) => c.exporter !== 'qubership');
    }
    const start = Date.now();
    let failed = 0, next = 0;
    async function worker() {
        while (next < todo.length) {
            const c = todo[next++];
            if (!(await runCase(c))) failed++;
        }
    }
    await Promise.all(Array.from({length: Math.min(jobs, todo.length)}, worker));
    console.log(`${todo.length - failed}/${todo.length} cases passed in ` +
        `${((Date.now() - start) / 1000).toFixed(1)} s`);
    process.exit(failed ? 1 : 0);
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
