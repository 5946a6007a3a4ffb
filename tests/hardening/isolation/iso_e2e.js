// iso_e2e.js: the agent's libraries stay the agent's (issue 7 point 2).
//
//   node iso_e2e.js        (ctest: hardening_isolation)
//
// Runs each host of $ISO_HOSTS (colon-separated: iso_host_rdynamic, whose
// fake grpc_init, unw_backtrace, deflate, absl::Mutex::Lock... are in the
// executable, exported; iso_host_linked, which has them in a library of
// its own) with libstackshot.so preloaded, exporting otlp_logs (gzip) to
// @elastic/mockotlpserver with gRPC in the host (STACKSHOT_GRPC_HELPER=
// false: the fallback where its helper process cannot be used; by default
// gRPC is not mapped into the host at all), qubership to tests/qubership/collector.py, and
// text and pprof files, and checks:
//   - none of the host's fakes was called by the agent, and the host's own
//     calls reached its own functions;
//   - the host's malloc replacement never saw a block it did not allocate
//     (the core forwards its malloc family to the host's allocator), and
//     the agent's libraries did allocate through it;
//   - the core was loaded isolated (RTLD_DEEPBIND, debug line); and with
//     the agent disabled nothing was loaded at all (no libgrpc mapped);
//   - every output got real frames of the host: iso_busy_outer ->
//     iso_busy_inner in the text dump, in an OTLP record, in the pprof
//     file (deflated by the real zlib), in the Qubership dictionary.
'use strict';

const assert = require('assert/strict');
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const {spawn} = require('child_process');

const otlpNode = path.join(__dirname, '../../otlp/node');
const lib = require(path.join(otlpNode, 'lib'));
lib.requireDeps();
const {MockOtlpServer, normalizeLogs} = require(
    path.join(otlpNode, 'node_modules/@elastic/mockotlpserver'));

const RUN_MS = 2500;
const INTERVAL = 200;

function startCollector(out) {
    return new Promise((resolve, reject) => {
        const py = spawn(process.env.PYTHON || 'python3',
            [process.env.QB_COLLECTOR, '--out', out], {stdio: ['ignore', 'pipe', 'inherit']});
        let buf = '';
        py.stdout.on('data', (d) => {
            buf += d;
            const m = /^(\d+)\n/.exec(buf);
            if (m) resolve({py, port: Number(m[1])});
        });
        py.on('exit', (code) => reject(new Error(`collector exited ${code}`)));
    });
}

function line(stdout, re) {
    const m = re.exec(stdout);
    assert.ok(m, `no ${re} in the host's output:\n${stdout}`);
    return m;
}

function filesUnder(dir) {
    const out = [];
    for (const e of fs.readdirSync(dir, {withFileTypes: true})) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) out.push(...filesUnder(p));
        else out.push(p);
    }
    return out;
}

async function runHost(host) {
    const name = path.basename(host);
    const got = [];
    const server = new MockOtlpServer({
        services: ['grpc'], grpcHostname: '127.0.0.1', grpcPort: 0, logLevel: 'warn',
        onLogs: (logs) => got.push(normalizeLogs(logs)),
    });
    await server.start();
    const out = lib.tmpDir(`iso-${name}`);
    const qbOut = path.join(out, 'qb');
    fs.mkdirSync(qbOut);
    const col = await startCollector(qbOut);
    let res;
    try {
        res = await lib.run(host, [String(RUN_MS)], {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: String(INTERVAL),
        STACKSHOT_EXPORTERS: 'otlp_logs,text,pprof,qubership',
        STACKSHOT_OUTPUT_DIR: out,
        STACKSHOT_LOG_LEVEL: 'debug',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.grpcUrl.port}`,
        OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip',
        STACKSHOT_GRPC_HELPER: 'false',
        REMOTE_DUMP_HOST: '127.0.0.1',
        REMOTE_DUMP_PORT_PLAIN: String(col.port),
        LD_PRELOAD: process.env.STACKSHOT_LIB,
        // another core (e.g. one built without its malloc family, to see
        // this test fail): lib.run passes no STACKSHOT_* of ours through
        ...(process.env.ISO_CORE ? {STACKSHOT_CORE: process.env.ISO_CORE} : {}),
    }, {timeoutMs: 60000});
        await lib.sleep(200);
    } finally {
        await server.close();
        col.py.removeAllListeners('exit');
        col.py.kill();
    }
    process.stdout.write(`--- ${name}: exit ${res.code} ${res.signal || ''}\n${res.stdout}`);
    const fakeLines = res.stderr.split('\n').filter((l) => /FAKE/.test(l));

    // the host's own view
    assert.deepEqual(fakeLines, [], `${name}: the agent called the host's functions`);
    assert.equal(res.code, 0, `${name}: exits normally\n${res.stderr.slice(-3000)}`);
    const self = line(res.stdout, /self calls (\d+)\/(\d+)/);
    assert.equal(self[1], self[2], `${name}: the host's own calls reach its own functions`);
    assert.equal(line(res.stdout, /fakes called by the agent (\d+)/)[1], '0');
    assert.equal(line(res.stdout, /foreign blocks (\d+)/)[1], '0',
        `${name}: a block not from the host's malloc reached its free/realloc`);
    const m = line(res.stdout, /mallocs (\d+), (\d+) of them from the agent's libraries/);
    assert.ok(Number(m[2]) > 0, `${name}: the agent's libraries allocate through the host's malloc`);
    assert.match(res.stderr, /core loaded isolated \(RTLD_DEEPBIND\)/);
    assert.equal(line(res.stdout, /libgrpc mapped (\w+)/)[1], 'yes');

    // text: real frames of the busy thread
    const rounds = lib.parseTextDump(lib.textFile(out));
    assert.ok(rounds.length >= 3, `${name}: ${rounds.length} rounds in the text file`);
    const busy = rounds.flatMap((r) => r.threads).filter((t) => t.name === 'iso-busy');
    assert.ok(busy.some((t) => /at global\.iso_busy_inner\(iso_host\.c:\d+\)\n\tat global\.iso_busy_outer\(iso_host\.c:\d+\)/.test(t.block)),
        `${name}: iso-busy's frames in the text dump:\n${busy.map((t) => t.block).join('\n')}`);

    // OTLP: delivered (gzip by gRPC with the real zlib), same frames
    const c = lib.counters(res.stderr, 'otlp_logs');
    assert.ok(c.exported > 0 && c.failures === 0 && c.dropped === 0, `${name}: otlp_logs ${JSON.stringify(c)}`);
    const bodies = got.flatMap((req) => req.resourceLogs.flatMap((rl) =>
        rl.scopeLogs.flatMap((sl) => sl.logRecords.map((r) => String(r.body)))));
    assert.ok(bodies.length >= c.exported, `${name}: ${bodies.length} OTLP records received`);
    assert.ok(bodies.some((b) => /iso_busy_inner\(iso_host\.c:\d+\)/.test(b)),
        `${name}: iso_busy_inner in an OTLP record`);

    // pprof: written and deflated (real zlib), with the frames
    const pprof = filesUnder(out).filter((f) => /\.pb\.gz$|\.pprof$/.test(f));
    assert.ok(pprof.length >= 1, `${name}: a pprof file in ${out}`);
    const raw = zlib.gunzipSync(fs.readFileSync(pprof[0]));
    assert.ok(raw.includes('iso_busy_inner'), `${name}: iso_busy_inner in the pprof file`);

    // Qubership: the collector got data, and the dictionary names the frame
    const q = lib.counters(res.stderr, 'qubership');
    assert.ok(q.exported > 0 && q.failures === 0, `${name}: qubership ${JSON.stringify(q)}`);
    const qbFiles = filesUnder(qbOut).filter((f) => f.endsWith('.bin'));
    const dict = Buffer.concat(qbFiles.filter((f) => /dictionary/.test(f)).map((f) => fs.readFileSync(f)));
    const utf16 = Buffer.from('iso_busy_inner', 'utf16le');
    const utf16be = Buffer.from(utf16).swap16();
    assert.ok(dict.includes('iso_busy_inner') || dict.includes(utf16) || dict.includes(utf16be),
        `${name}: iso_busy_inner in the Qubership dictionary (${qbFiles.length} files)`);
    console.log(`${name}: ok (${rounds.length} rounds, ${bodies.length} OTLP records, ` +
        `${q.exported} qubership records, ${m[2]} agent mallocs through the host's allocator)`);
}

// Disabled: the loader opens nothing (no gRPC mapped, no constructor of
// the agent's libraries run); the host's functions and malloc untouched.
async function runDisabled(host) {
    const name = path.basename(host);
    // OFF is not a spelling the documentation gives: off, with one line
    // (only `true` turns the agent on); nothing is loaded either way
    for (const value of [undefined, 'false', 'FALSE', 'OFF']) {
        const env = {LD_PRELOAD: process.env.STACKSHOT_LIB};
        if (value !== undefined) env.SPLUNK_PROFILER_ENABLED = value;
        const res = await lib.run(host, ['300'], env, {timeoutMs: 30000});
        const what = `${name} with SPLUNK_PROFILER_ENABLED=${value}`;
        assert.equal(res.code, 0, `${what}: exits normally\n${res.stderr}`);
        if (value === 'OFF')
            assert.match(res.stderr, /^stackshot: SPLUNK_PROFILER_ENABLED=OFF: only true turns the agent on; the agent stays off\n$/, `${what}: one line`);
        else
            assert.equal(res.stderr, '', `${what}: says nothing`);
        assert.equal(line(res.stdout, /libgrpc mapped (\w+)/)[1], 'no', `${what}: gRPC not loaded`);
        assert.equal(line(res.stdout, /fakes called by the agent (\d+)/)[1], '0');
        assert.equal(line(res.stdout, /foreign blocks (\d+)/)[1], '0');
    }
    console.log(`${name}: disabled ok (nothing loaded)`);
}

async function main() {
    const hosts = (process.env.ISO_HOSTS || '').split(':').filter(Boolean);
    if (!hosts.length || !process.env.STACKSHOT_LIB) lib.skip('ISO_HOSTS / STACKSHOT_LIB not set');
    await runDisabled(hosts[0]);
    for (const h of hosts) await runHost(h);
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
