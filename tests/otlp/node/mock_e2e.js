// mock_e2e.js: otlp_logs against a receiver this project did not write.
//
//   node mock_e2e.js <case> [grpc|http|http-gzip]
//
// Starts @elastic/mockotlpserver (its own bundled official protos) on a
// free loopback port, runs a program with the agent exporting to it
// (STACKSHOT_EXPORTERS=otlp_logs,text) and checks what the server decoded:
// the resource, the scope, every attribute, one record per thread per
// round, each body equal to the text exporter's block for the same thread
// in the same round, trace/span ids on the thread that set a span.
//
// Cases (add one to the table below: e.g. a Java demo run with
// -agentpath; `program`/`args`/`env` say how to run it, the rest what to
// expect):
//   driver   the agent core with a scripted source (tests/otlp/otlp_driver)
//   preload  the native demo with LD_PRELOAD=libstackshot.so (real sampler)
// Paths come from the environment: OTLP_DRIVER, OTLP_DEMO, STACKSHOT_LIB.
//
// Transports: grpc (the default), http (OTEL_EXPORTER_OTLP_PROTOCOL=
// http/protobuf to the server's OTLP/HTTP port: the general endpoint, so
// the agent appends /v1/logs), http-gzip (the same with gzip: a proxy in
// front of the server checks "Content-Encoding: gzip" on every request and
// gunzips it, the server decoding what the agent compressed).
'use strict';

const assert = require('assert/strict');
const http = require('http');
const os = require('os');
const zlib = require('zlib');
const lib = require('./lib');

lib.requireDeps();
const {MockOtlpServer, normalizeLogs} = require('@elastic/mockotlpserver');

const INTERVAL = 200;
const TRACE = '0102030405060708090a0b0c0d0e0f10';
const SPAN = 'a1a2a3a4a5a6a7a8';

const cases = {
    driver: () => ({
        program: process.env.OTLP_DRIVER,
        args: ['4'],
        env: {OTLP_DRIVER_THREADS: '1'},
        exeName: 'otlp_driver',
        rounds: 4, // exactly
        threads: ['otlp-spinner', 'otlp-sleeper', 'otlp-traced'],
        traced: 'otlp-traced',
    }),
    // The JVM agent (-agentpath) with examples/java/Demo.java, compiled here
    // with $OTLP_JAVA_HOME's javac. No thread is in a span (the Java side
    // has no span API), so no record may carry ids.
    java: () => {
        const jh = process.env.OTLP_JAVA_HOME;
        if (!jh) return {};
        const classes = lib.tmpDir('java-classes');
        const javac = require('child_process').spawnSync(`${jh}/bin/javac`,
            ['-d', classes, process.env.OTLP_JAVA_DEMO], {stdio: 'inherit'});
        if (javac.status !== 0) throw new Error('javac failed');
        return {
            program: `${jh}/bin/java`,
            args: [`-agentpath:${process.env.STACKSHOT_LIB}`, '-cp', classes, 'Demo', '2'],
            env: {},
            exeName: 'java',
            rounds: 0,
            threads: ['busy-worker', 'sleeper', 'parked', 'monitor-waiter', 'main'],
            traced: null,
            runtime: true,
        };
    },
    preload: () => ({
        program: process.env.OTLP_DEMO,
        args: ['1500'],
        env: {LD_PRELOAD: process.env.STACKSHOT_LIB},
        exeName: 'otlp_demo',
        rounds: 0, // at least one; the sampler decides how many
        threads: ['otlp-spinner', 'otlp-sleeper', 'otlp-traced'],
        traced: 'otlp-traced',
        // The sampler may not be built into this tree yet.
        skipIf: (res) =>
            /sampler did not start/.test(res.stderr) && 'the native sampler did not start',
    }),
};

function attrsOf(rec) {
    return rec.attributes || {};
}

function checkResource(res, c, pid) {
    const a = res.attributes;
    assert.equal(a['service.name'], 'otlp-e2e', 'OTEL_SERVICE_NAME wins');
    assert.equal(a['deployment.environment'], 'test,ci', 'percent-decoded attribute');
    assert.equal(String(a['process.pid']), String(pid));
    assert.equal(a['process.executable.name'], c.exeName);
    assert.ok(a['process.executable.path'].endsWith('/' + c.exeName));
    assert.ok(a['process.command_line'].includes(c.exeName));
    assert.equal(a['host.name'], os.hostname());
    assert.equal(a['telemetry.sdk.name'], 'stackshot');
    assert.equal(a['telemetry.sdk.language'], 'cpp');
    assert.match(a['telemetry.sdk.version'], /^\d+\.\d+\.\d+$/);
    assert.equal(a['telemetry.distro.name'], 'stackshot');
    assert.equal(a['telemetry.distro.version'], a['telemetry.sdk.version']);
    if (c.runtime) {
        // the JVM agent fills process.runtime.* from the VM's properties;
        // java.runtime.name/version are library properties JVMTI may not
        // have yet: checked when present, the description always
        assert.match(a['process.runtime.description'], /VM/);
        if (a['process.runtime.name']) assert.match(a['process.runtime.name'], /Runtime/);
        if (a['process.runtime.version']) assert.match(a['process.runtime.version'], /^\d+/);
    }
}

function checkRecord(rec, block) {
    const a = attrsOf(rec);
    assert.equal(rec.body, block, 'body = the text exporter block');
    assert.equal(a['com.splunk.sourcetype'], 'otel.profiling');
    assert.equal(String(a['source.event.period']), String(INTERVAL));
    assert.equal(a['source.event.name'], 'wall');
    const head = /^"(.*)" #\d+ .* nid=0x([0-9a-f]+) /.exec(block);
    assert.ok(head, `thread line of ${block}`);
    assert.equal(a['thread.name'], head[1]);
    assert.equal(Number(a['thread.id']), parseInt(head[2], 16), 'thread.id = nid');
    const state = /Thread\.State: (\w+)/.exec(block);
    assert.equal(a['thread.state'], state[1]);
}

// In front of the OTLP/HTTP server: every request must come gzipped; it is
// passed on gunzipped (without the Content-Encoding header).
function gunzipProxy(port, seen) {
    const proxy = http.createServer((req, res) => {
        const chunks = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', () => {
            const body = Buffer.concat(chunks);
            seen.push({encoding: req.headers['content-encoding'], type: req.headers['content-type'],
                path: req.url, bytes: body.length});
            let plain;
            try {
                plain = zlib.gunzipSync(body);
            } catch (e) {
                res.writeHead(400);
                return res.end();
            }
            const headers = {...req.headers, 'content-length': String(plain.length)};
            delete headers['content-encoding'];
            const up = http.request({host: '127.0.0.1', port, method: 'POST', path: req.url, headers},
                (r) => {
                    res.writeHead(r.statusCode, r.headers);
                    r.pipe(res);
                });
            up.end(plain);
        });
    });
    return new Promise((resolve) => proxy.listen(0, '127.0.0.1', () => resolve(proxy)));
}

async function main() {
    const name = process.argv[2] || 'driver';
    const transport = process.argv[3] || 'grpc';
    const c = cases[name]();
    if (!c.program) lib.skip(`no program for case ${name} (environment not set)`);
    const got = [];
    const viaHttp = transport !== 'grpc';
    const server = new MockOtlpServer({
        services: [viaHttp ? 'http' : 'grpc'],
        grpcHostname: '127.0.0.1',
        grpcPort: 0,
        httpHostname: '127.0.0.1',
        httpPort: 0,
        logLevel: 'warn',
        onLogs: (logs) => got.push(normalizeLogs(logs)),
    });
    await server.start();
    let port = viaHttp ? server.httpUrl.port : server.grpcUrl.port;
    const seen = [];
    let proxy = null;
    const env = {};
    if (viaHttp) env.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/protobuf';
    if (transport === 'http-gzip') {
        proxy = await gunzipProxy(port, seen);
        port = proxy.address().port;
        env.OTEL_EXPORTER_OTLP_COMPRESSION = 'gzip';
    }
    const out = lib.tmpDir(name);
    const res = await lib.run(c.program, c.args, {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: String(INTERVAL),
        STACKSHOT_EXPORTERS: 'otlp_logs,text',
        STACKSHOT_OUTPUT_DIR: out,
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_SERVICE_NAME: 'otlp-e2e',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test%2Cci',
        ...env,
        ...c.env,
    });
    await lib.sleep(200);
    if (proxy) proxy.close();
    await server.close();
    if (viaHttp) {
        assert.match(res.stderr, /otlp_logs: sending call stacks to http:\/\/127\.0\.0\.1:\d+\/v1\/logs over http\/protobuf/);
    }
    if (proxy) {
        assert.ok(seen.length >= 1, 'no request reached the gzip proxy');
        for (const s of seen) {
            assert.equal(s.encoding, 'gzip', 'Content-Encoding: gzip');
            assert.equal(s.type, 'application/x-protobuf');
            assert.equal(s.path, '/v1/logs');
        }
    }
    if (c.skipIf && c.skipIf(res)) lib.skip(c.skipIf(res));
    process.stderr.write(res.stderr);
    assert.equal(res.code, 0, 'the host program exits normally');

    const rounds = lib.parseTextDump(lib.textFile(out));
    if (c.rounds) assert.equal(rounds.length, c.rounds, 'rounds in the text file');
    assert.ok(rounds.length >= 1, 'at least one round');

    // Flatten: every request has one resource and one scope (otel.profiling only).
    const byTime = new Map();
    for (const req of got) {
        for (const rl of req.resourceLogs) {
            checkResource(rl.resource, c, res.pid);
            assert.equal(rl.scopeLogs.length, 1, 'one ScopeLogs per request');
            const sl = rl.scopeLogs[0];
            assert.deepEqual(sl.scope, {name: 'otel.profiling', version: '0.1.0'});
            for (const rec of sl.logRecords) {
                if (!byTime.has(rec.timeUnixNano)) byTime.set(rec.timeUnixNano, []);
                byTime.get(rec.timeUnixNano).push(rec);
            }
        }
    }
    const times = [...byTime.keys()].sort((x, y) => (BigInt(x) < BigInt(y) ? -1 : 1));
    assert.equal(times.length, rounds.length, 'one group of records per round');
    let total = 0;
    const seenNames = new Set();
    times.forEach((t, i) => {
        const round = rounds[i];
        const recs = byTime.get(t);
        assert.equal(lib.isoOfNs(t), round.iso, `round ${round.seq} time`);
        assert.equal(recs.length, round.threads.length, `one record per thread, round ${i}`);
        const names = recs.map((r) => attrsOf(r)['thread.name']).sort();
        assert.deepEqual(names, round.threads.map((x) => x.name).sort());
        if (c.rounds) {
            for (const want of c.threads) assert.ok(names.includes(want), `${want} in round ${i}`);
        }
        names.forEach((n) => seenNames.add(n));
        for (const n of names) assert.ok(!/^stackshot-/.test(n), `agent thread ${n} exported`);
        for (const rec of recs) {
            const th = round.threads.find((x) => x.name === attrsOf(rec)['thread.name']);
            checkRecord(rec, th.block);
            assert.ok(BigInt(rec.observedTimeUnixNano) >= BigInt(t), 'observed after sampled');
            if (c.traced && attrsOf(rec)['thread.name'] === c.traced) {
                assert.equal(rec.traceId, TRACE);
                assert.equal(rec.spanId, SPAN);
            } else {
                assert.ok(!rec.traceId, 'no trace id outside a span');
                assert.ok(!rec.spanId, 'no span id outside a span');
            }
            total++;
        }
    });
    // Real samplers: the program's threads start after the first rounds.
    for (const want of c.threads) assert.ok(seenNames.has(want), `${want} never sampled`);
    // gRPC's threads (started by the exporter thread) are registered as the
    // agent's own, so samplers leave them out; the host's main thread is not.
    const listed = res.stdout.split('\n').filter((l) => l.startsWith('thread '));
    if (c.env.OTLP_DRIVER_THREADS) {
        assert.ok(listed.length >= 4, res.stdout);
        for (const l of listed) {
            const [, tid, comm, internal] = /^thread (\d+) (.*) internal=(\d)$/.exec(l);
            if (Number(tid) === res.pid) assert.equal(internal, '0', `main thread: ${l}`);
            // other threads named like the program: the sanitizer runtime's
            else if (comm !== c.exeName) assert.equal(internal, '1', `not internal: ${l}`);
        }
        if (!viaHttp)
            assert.ok(listed.some((l) => /grpc|event_engine|executor/.test(l)), res.stdout);
        else
            assert.ok(listed.some((l) => /stackshot-ohttp internal=1/.test(l)), res.stdout);
    }
    const k = lib.counters(res.stderr);
    assert.equal(k.exported, total, 'counters: every record exported');
    assert.equal(k.dropped, 0);
    assert.equal(k.failures, 0);
    console.log(`ok: ${name} over ${transport}: ${rounds.length} rounds, ${total} records, decoded by mockotlpserver`);
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
