// failure_e2e.js: otlp_logs when the backend misbehaves.
//
//   node failure_e2e.js <case>
//
// Each case starts a scripted receiver (receiver.js) and runs the agent core
// with a scripted source (OTLP_DRIVER: 3 threads a round, one in a span)
// exporting to it, then checks what arrived, the counters line printed at
// exit and the agent's messages. Short intervals and timeouts keep every
// case within a few seconds.
'use strict';

const assert = require('assert/strict');
const lib = require('./lib');

lib.requireDeps();
const {Receiver, RawReceiver} = require('./receiver');

const INTERVAL = 150;
const THREADS = 3;

function baseEnv(port, extra = {}) {
    return {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: String(INTERVAL),
        STACKSHOT_EXPORTERS: 'otlp_logs',
        STACKSHOT_OUTPUT_DIR: lib.tmpDir('fail'),
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
        STACKSHOT_OTLP_RETRY_INITIAL: '100',
        STACKSHOT_OTLP_RETRY_MAX: '400',
        STACKSHOT_SHUTDOWN_TIMEOUT: '3000',
        ...extra,
    };
}

async function driver(rounds, env, threads = THREADS) {
    const res = await lib.run(process.env.OTLP_DRIVER, [String(rounds), String(threads)], env);
    // with "helper", a client made over gRPC is the helper's
    if (process.argv[3] === 'helper' && /sending call stacks to/.test(res.stderr) &&
        !/^http/.test(env.OTEL_EXPORTER_OTLP_PROTOCOL || '')) {
        assert.match(res.stderr, /gRPC calls made by stackshot-grpc-helper, pid \d+/);
    }
    return res;
}

// Every (round, thread) delivered exactly once, and nothing else.
function assertExactlyOnce(recv, rounds, threads = THREADS) {
    lib.assertExactlyOnce(recv.delivered(), rounds, threads);
}

const cases = {
    // UNAVAILABLE twice, then OK: retried with backoff, each record once.
    async unavailable_then_ok() {
        const recv = new Receiver((i) => (i < 2 ? {code: 14, details: 'warming up'} : {}));
        const port = await recv.start();
        const res = await driver(3, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        assertExactlyOnce(recv, 3);
        const k = lib.counters(res.stderr);
        assert.equal(k.exported, 9);
        assert.equal(k.dropped, 0);
        assert.equal(k.failures, 2);
        assert.equal(k.retries, 2);
        assert.match(res.stderr, /export to .* failed: UNAVAILABLE: warming up; retrying in \d+ ms/);
        assert.match(res.stderr, /delivering to .* again/);
        // the retries were spaced by the backoff (100 ms initial, jittered down to half)
        assert.ok(recv.calls[1].t - recv.calls[0].t >= 40, 'backoff before the 1st retry');
        assert.ok(recv.calls[2].t - recv.calls[1].t >= 90, 'longer backoff before the 2nd');
        // the request carries event_name (v1.11 field 12): our protos decode it
        const rec = recv.delivered()[0].rec;
        assert.equal(rec.event_name, 'otel.profiling');
    },

    // RESOURCE_EXHAUSTED with RetryInfo: retried no earlier than asked.
    async resource_exhausted_retry_info() {
        const recv = new Receiver((i) =>
            i === 0 ? {code: 8, details: 'slow down', retryDelayMs: 800} : {});
        const port = await recv.start();
        // the retry 800 ms later comes before the exit (which does not
        // wait for a backend that is failing)
        const res = await driver(10, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        assertExactlyOnce(recv, 10);
        const gap = recv.calls[1].t - recv.calls[0].t;
        assert.ok(gap >= 780, `server delay honoured (${gap} ms)`);
        const k = lib.counters(res.stderr);
        assert.equal(k.retries, 1);
        assert.equal(k.dropped, 0);
        assert.match(res.stderr, /RESOURCE_EXHAUSTED: slow down; retrying in (\d+) ms/);
        const ms = Number(/RESOURCE_EXHAUSTED: slow down; retrying in (\d+) ms/.exec(res.stderr)[1]);
        assert.ok(ms >= 800, `announced delay ${ms} >= 800`);
    },

    // RESOURCE_EXHAUSTED without RetryInfo is not retryable: dropped, counted.
    async resource_exhausted_plain() {
        const recv = new Receiver((i) => (i === 0 ? {code: 8, details: 'quota'} : {}));
        const port = await recv.start();
        const res = await driver(3, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        const k = lib.counters(res.stderr);
        assert.equal(k.dropped, 3);
        assert.equal(k.exported, 6);
        assert.equal(k.retries, 0);
        // the rejected batch was not sent again: every record crossed the
        // wire once (waiting batches may have been merged into one call)
        lib.assertExactlyOnce(recv.calls.flatMap((c) => c.records), 3, THREADS);
        assert.match(res.stderr, /RESOURCE_EXHAUSTED: quota; dropping the batch/);
    },

    // INVALID_ARGUMENT: dropped and counted, never retried.
    async invalid_argument() {
        const recv = new Receiver(() => ({code: 3, details: 'bad request'}));
        const port = await recv.start();
        // info: the drops put the counters at info; debug would repeat the status
        const res = await driver(3, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));
        await recv.close();
        assert.equal(res.code, 0);
        const k = lib.counters(res.stderr);
        assert.equal(k.exported, 0);
        assert.equal(k.dropped, 9);
        // one failure per call; waiting batches may have been merged
        assert.equal(k.failures, recv.calls.length);
        assert.equal(k.retries, 0);
        lib.assertExactlyOnce(recv.calls.flatMap((c) => c.records), 3, THREADS);
        // logged once at warning level, not once per batch
        assert.equal(res.stderr.match(/INVALID_ARGUMENT/g).length, 1);
    },

    // Partial success: rejected records counted, the rest exported, no retry.
    async partial_success() {
        const recv = new Receiver(() => ({partial: {rejected: 1, message: 'one bad record'}}));
        const port = await recv.start();
        const res = await driver(3, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));
        await recv.close();
        assert.equal(res.code, 0);
        const k = lib.counters(res.stderr);
        // one record rejected per call; waiting batches may have been merged
        const n = recv.calls.length;
        assert.ok(n >= 1 && n <= 3, `${n} calls`);
        assert.equal(k.rejected, n);
        assert.equal(k.exported, 9 - n);
        assert.equal(k.retries, 0);
        lib.assertExactlyOnce(recv.calls.flatMap((c) => c.records), 3, THREADS);
        assert.equal(res.stderr.match(/accepted a batch partially: 1 of \d+ records rejected \(one bad record\); not retried/g).length, 1);
    },

    // A receiver that never answers the first call: the deadline ends it,
    // it is retried, and the retry is delivered.
    async deadline() {
        const recv = new Receiver((i) => (i === 0 ? {hang: true} : {}));
        const port = await recv.start();
        // long enough for the retry to come before the exit, which does
        // not wait for a backend that is failing
        const res = await driver(6, baseEnv(port, {OTEL_EXPORTER_OTLP_TIMEOUT: '300'}));
        await recv.close();
        assert.equal(res.code, 0);
        assert.match(res.stderr, /DEADLINE_EXCEEDED.*retrying in/);
        assertExactlyOnce(recv, 6); // the held call was never answered OK
        const k = lib.counters(res.stderr);
        assert.equal(k.exported, 18);
        assert.ok(k.retries >= 1);
        assert.ok(res.ms < 6000, `no long stall (${res.ms} ms)`);
    },

    // No receiver for a while, then one appears: data after the gap arrives,
    // what the gap costs is bounded by STACKSHOT_MAX_MEMORY and counted.
    async gap_then_receiver() {
        const port = await lib.freePort();
        const threads = 300, rounds = 24;
        const running = driver(rounds, baseEnv(port, {
            STACKSHOT_MAX_MEMORY: '1M',
            STACKSHOT_OTLP_RETRY_ATTEMPTS: '1000',
            STACKSHOT_OTLP_RETRY_MAX: '200',
            STACKSHOT_SHUTDOWN_TIMEOUT: '5000',
        }), threads);
        await lib.sleep(2000);
        const recv = new Receiver(() => ({}));
        await recv.start(port);
        const upNs = BigInt(Date.now()) * 1000000n;
        const res = await running;
        await recv.close();
        assert.equal(res.code, 0);
        const k = lib.counters(res.stderr);
        const total = rounds * threads;
        // the gap cost something, and it was bounded by the memory cap
        assert.ok(k.dropped > 0 || k.roundsDropped > 0, 'the gap cost something');
        assert.match(res.stderr, /dropping the oldest batches to stay within STACKSHOT_MAX_MEMORY/);
        // nothing lost silently: every record exported or counted as dropped
        assert.equal(k.exported + k.dropped + k.roundsDropped * threads, total,
            JSON.stringify(k));
        assert.equal(k.exported, recv.delivered().length);
        // rounds sampled after the receiver came up arrived
        const after = new Set(recv.delivered().map((r) => r.time).filter((t) => BigInt(t) > upNs));
        assert.ok(after.size >= 1, `rounds after the gap delivered: ${after.size}`);
    },

    // Headers: lowercase keys, decoded values; never printed. User agent.
    async headers() {
        const recv = new RawReceiver();
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {
            OTEL_EXPORTER_OTLP_HEADERS: 'X-SF-Token=s3cr%3Dt%2Cvalue,Other-Key=1',
            OTEL_EXPORTER_OTLP_LOGS_HEADERS: 'other-key=logs',
            STACKSHOT_LOG_LEVEL: 'debug',
        }));
        await recv.close();
        assert.equal(res.code, 0);
        assert.ok(recv.calls.length >= 2);
        const c = recv.calls[0];
        assert.ok(c.names.includes('x-sf-token'), `header names on the wire: ${c.names}`);
        assert.ok(!c.names.includes('X-SF-Token'));
        assert.equal(c.headers['x-sf-token'], 's3cr=t,value');
        assert.equal(c.headers['other-key'], 'logs', 'per-signal headers win');
        assert.match(c.headers['user-agent'], /^stackshot\/\d+\.\d+\.\d+ /);
        assert.equal(c.headers['content-type'], 'application/grpc');
        assert.ok(!/s3cr/.test(res.stderr), 'a header value appeared in the logs');
        assert.equal(c.compressed, 0);
        const req = RawReceiver.decode(c.message);
        assert.equal(req.resource_logs[0].scope_logs[0].log_records.length, 3);
    },

    // gzip: the message goes compressed and decodes to the same request.
    async gzip() {
        const recv = new RawReceiver();
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip'}));
        await recv.close();
        assert.equal(res.code, 0);
        const c = recv.calls[0];
        assert.equal(c.headers['grpc-encoding'], 'gzip');
        assert.equal(c.compressed, 1, 'compressed-flag byte');
        assert.ok(c.wireLength < c.message.length, 'smaller on the wire');
        const req = RawReceiver.decode(c.message);
        const recs = req.resource_logs[0].scope_logs[0].log_records;
        assert.equal(recs.length, 3);
        assert.match(recs[0].body.string_value, /^"otlp-spinner" #2 /);
    },

    // A gRPC server without LogsService: one clear line, data dropped.
    async unimplemented() {
        const recv = new Receiver(() => ({}), {withService: false});
        const port = await recv.start();
        const res = await driver(3, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        const lines = res.stderr.split('\n').filter((l) => /UNIMPLEMENTED/.test(l));
        assert.equal(lines.length, 1, lines.join('\n'));
        assert.match(lines[0], /not an OTLP\/gRPC receiver with a logs pipeline/);
        const k = lib.counters(res.stderr);
        assert.equal(k.dropped, 9);
        assert.equal(k.retries, 0);
    },
};

// Bad configuration: one line per bad value, safe fallbacks, the host
// program runs on and exits 0, secrets never printed.
cases.bad_config = async () => {
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const res = await driver(2, baseEnv(port, {
        OTEL_EXPORTER_OTLP_HEADERS: 'tokenwithoutequals,x-ok=1',
        OTEL_EXPORTER_OTLP_TIMEOUT: 'ten',
        OTEL_RESOURCE_ATTRIBUTES: 'a=1,b=%zz',
        STACKSHOT_LOGS_BATCH_SIZE: 'many',
        STACKSHOT_SHUTDOWN_TIMEOUT: '1000',
    }));
    await recv.close();
    assert.equal(res.code, 0, 'the host keeps running and exits 0');
    const lines = res.stderr.split('\n');
    const one = (re) => {
        const hits = lines.filter((l) => re.test(l));
        assert.equal(hits.length, 1, `${re}: ${hits.join(' | ')}`);
        return hits[0];
    };
    one(/OTEL_EXPORTER_OTLP_HEADERS: header item 1 has no '='; skipping that header/);
    one(/OTEL_EXPORTER_OTLP_TIMEOUT=ten: not an integer number of milliseconds; using 10000/);
    one(/OTEL_RESOURCE_ATTRIBUTES=.*ignoring the whole variable/);
    one(/STACKSHOT_LOGS_BATCH_SIZE=many/);
    assert.ok(!/tokenwithoutequals/.test(res.stderr), 'a header item was printed');
    lib.counters(res.stderr); // the counters line is there
    assertExactlyOnce(recv, 2); // the fallbacks still deliver, to the endpoint configured

    // credentials in a URL: not supported, one line, never printed
    const cred = await driver(1, baseEnv(port, {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'https://user:hunter2@collector:4317',
        STACKSHOT_SHUTDOWN_TIMEOUT: '300',
    }));
    assert.ok(!/hunter2/.test(cred.stderr), 'a password in a URL was printed');
    assert.match(cred.stderr, /OTEL_EXPORTER_OTLP_ENDPOINT=https:\/\/\*\*\*@collector:4317: not an endpoint/);
};

// A destination that is a mistake (an endpoint or protocol that does not
// parse) sends nothing anywhere, never to the default: the exporter is off
// with one line naming the value, and with nothing left the agent stays
// off (the driver, which needs it on, says so and exits 2). A receiver on
// the default port would have got the records before.
cases.bad_destination = async () => {
    for (const [extra, re] of [
        [{OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: 'http://bad host name:1'},
         /OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=http:\/\/bad host name:1: not an endpoint.*the otlp_logs exporter is off: nothing is sent/],
        [{OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc/web'},
         /OTEL_EXPORTER_OTLP_PROTOCOL=grpc\/web: not a protocol \(grpc or http\/protobuf\); the otlp_logs exporter is off/],
    ]) {
        const recv = new Receiver(() => ({}));
        const port = await recv.start();
        const res = await driver(1, baseEnv(port, extra));
        await recv.close();
        const hits = res.stderr.split('\n').filter((l) => re.test(l));
        assert.equal(hits.length, 1, `${re}: ${res.stderr}`);
        assert.match(res.stderr, /no exporter has a usable destination: the agent stays off/);
        assert.equal(res.code, 2, 'the agent stayed off');
        assert.equal(recv.delivered().length, 0, 'nothing was sent');
    }
};

// The endpoint precedence, end to end: SPLUNK_PROFILER_LOGS_ENDPOINT beats
// the OTEL variables (which point nowhere here).
cases.splunk_endpoint = async () => {
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const dead = await lib.freePort();
    const res = await driver(2, baseEnv(dead, {
        OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: `http://127.0.0.1:${dead}`,
        SPLUNK_PROFILER_LOGS_ENDPOINT: `http://127.0.0.1:${port}`,
    }));
    await recv.close();
    assert.equal(res.code, 0);
    assert.equal(recv.delivered().length, 6);
    assert.equal(lib.counters(res.stderr).exported, 6);
};

// TLS: https:// endpoint, the server's certificate trusted through
// OTEL_EXPORTER_OTLP_CERTIFICATE; without it (system roots) the handshake
// fails and the data are counted as dropped, never sent in clear.
cases.tls = async () => {
    const fs = require('fs');
    const path = require('path');
    const dir = path.join(__dirname, '..', 'tls');
    const tls = {key: fs.readFileSync(path.join(dir, 'server.key')),
        cert: fs.readFileSync(path.join(dir, 'server.crt'))};
    const recv = new RawReceiver({tls});
    const port = await recv.start();
    const res = await driver(2, baseEnv(port, {
        OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${port}`,
        OTEL_EXPORTER_OTLP_CERTIFICATE: path.join(dir, 'server.crt'),
    }));
    assert.equal(res.code, 0);
    assert.match(res.stderr, /\(localhost:\d+, TLS,/);
    assert.equal(lib.counters(res.stderr).exported, 6);
    const req = RawReceiver.decode(recv.calls[0].message);
    assert.equal(req.resource_logs[0].scope_logs[0].log_records.length, 3);
    // untrusted: nothing delivered, all counted
    const before = recv.calls.length;
    const bad = await driver(2, baseEnv(port, {
        OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${port}`,
        OTEL_EXPORTER_OTLP_CERTIFICATE: '/nonexistent/ca.pem',
        STACKSHOT_OTLP_RETRY_ATTEMPTS: '2',
        STACKSHOT_SHUTDOWN_TIMEOUT: '1000',
    }));
    await recv.close();
    assert.equal(bad.code, 0);
    assert.match(bad.stderr, /OTEL_EXPORTER_OTLP_CERTIFICATE=\/nonexistent\/ca.pem: .*; using the system's trusted roots/);
    assert.equal(recv.calls.length, before, 'nothing accepted without trust');
    const k = lib.counters(bad.stderr);
    assert.equal(k.exported, 0);
    assert.equal(k.dropped, 6);
};

// A host that forks. gRPC in the process: the child cannot use the
// parent's; it says so once and its OTLP export stays off, while the
// parent goes on exporting. gRPC in a helper ("helper"): the child joins
// its parent's helper through the door it inherited and exports over it
// too, with no line of its own, and no second helper.
cases.fork = async () => {
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const res = await driver(4, baseEnv(port, {OTLP_DRIVER_FORK: '1', STACKSHOT_LOG_LEVEL: 'debug'}));
    await recv.close();
    assert.equal(res.code, 0);
    const lines = res.stderr.split('\n').filter((l) => /forked child/.test(l));
    // the parent's counters: all of its 4 rounds exported (the exit's
    // accounting line: the child's, if any, comes first)
    const all = lib.exitAccounting(res.stderr);
    const parent = all.filter((a) => a.roundsIn === 4);
    assert.ok(parent.length >= 1, res.stderr);
    assert.match(parent[parent.length - 1].line, /records 12 taken = 12 exported \+ 0 dropped/);
    assert.ok(res.ms < 5000, `no hang (${res.ms} ms)`);
    if (process.argv[3] !== 'helper') {
        assert.equal(lines.length, 1, res.stderr);
        assert.match(lines[0], /gRPC was started in pid \d+ and cannot be used in this forked child \(pid \d+\); OTLP export disabled here/);
        return;
    }
    assert.deepEqual(lines, [], 'no refusal in the child');
    const helpers = [...res.stderr.matchAll(/gRPC calls made by stackshot-grpc-helper, pid (\d+)( \(joined\))?/g)];
    assert.equal(helpers.length, 2, res.stderr);
    assert.equal(helpers[0][2], undefined, 'the parent started it');
    assert.equal(helpers[1][2], " (joined)", 'the child joined it');
    assert.equal(helpers[1][1], helpers[0][1], 'one helper for both');
    // the child's rounds (it restarted its agent and exported some) went
    // over the same helper: every record it counted as exported arrived
    const child = all.filter((a) => a.pid !== parent[parent.length - 1].pid);
    assert.equal(child.length, 1, res.stderr);
    assert.ok(child[0].exported > 0, child[0].line);
    assert.equal(child[0].exported, child[0].recordsTaken, child[0].line);
    assert.equal(recv.delivered().length, child[0].exported + 12, 'every record of both processes');
};

// STACKSHOT_LOGS_BATCH_SIZE: a round of 5 threads with batches of 2 goes
// as 2 + 2 + 1 records, each record once.
cases.batching = async () => {
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const res = await driver(3, baseEnv(port, {STACKSHOT_LOGS_BATCH_SIZE: '2'}), 5);
    await recv.close();
    assert.equal(res.code, 0);
    assert.deepEqual(recv.calls.map((c) => c.records.length), [2, 2, 1, 2, 2, 1, 2, 2, 1]);
    assertExactlyOnce(recv, 3, 5);
    assert.equal(lib.counters(res.stderr).exported, 15);
};

// STACKSHOT_LOGS_FORMAT=pprof: one record per round, body = base64 of a
// gzip'd pprof holding the round's threads, Splunk's attributes.
cases.pprof_format = async () => {
    const zlib = require('zlib');
    // profile.proto (github.com/google/pprof) field numbers, the part read here
    const Profile = require('protobufjs').Root.fromJSON({nested: {
        Profile: {fields: {
            sample: {rule: 'repeated', type: 'Sample', id: 2},
            string_table: {rule: 'repeated', type: 'string', id: 6}}},
        Sample: {fields: {
            location_id: {rule: 'repeated', type: 'uint64', id: 1},
            value: {rule: 'repeated', type: 'int64', id: 2},
            label: {rule: 'repeated', type: 'Label', id: 3}}},
        Label: {fields: {
            key: {type: 'int64', id: 1}, str: {type: 'int64', id: 2}, num: {type: 'int64', id: 3}}},
    }}).lookupType('Profile');
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const res = await driver(3, baseEnv(port, {STACKSHOT_LOGS_FORMAT: 'pprof'}));
    await recv.close();
    assert.equal(res.code, 0);
    if (/no pprof encoder/.test(res.stderr)) lib.skip('this build has no pprof encoder');
    const recs = recv.delivered();
    assert.equal(recs.length, 3, 'one record per round');
    for (const r of recs) {
        assert.equal(r.attrs['com.splunk.sourcetype'], 'otel.profiling');
        assert.equal(r.attrs['profiling.data.format'], 'pprof-gzip-base64');
        assert.equal(r.attrs['profiling.data.type'], 'cpu');
        assert.equal(r.attrs['profiling.instrumentation.source'], 'continuous');
        assert.equal(Number(r.attrs['profiling.data.total.frame.count']), 3 + 4 + 4);
        assert.equal(Number(r.attrs['source.event.period']), INTERVAL);
        assert.ok(!r.rec.trace_id || r.rec.trace_id.length === 0, 'no ids on the record');
        assert.equal(r.scope.name, 'otel.profiling');
        const body = r.rec.body.string_value;
        assert.match(body, /^[A-Za-z0-9+/]+=*$/, 'base64');
        const raw = zlib.gunzipSync(Buffer.from(body, 'base64'));
        const p = Profile.toObject(Profile.decode(raw), {longs: Number, defaults: true});
        const str = (i) => p.string_table[i];
        assert.equal(p.string_table[0], '', 'pprof string table starts with ""');
        assert.equal(p.sample.length, 3, 'one sample per thread');
        const byName = {};
        for (const smp of p.sample) {
            const labels = {};
            for (const l of smp.label) labels[str(l.key)] = l.str ? str(l.str) : l.num;
            byName[labels['thread.name']] = labels;
            assert.ok(smp.location_id.length >= 3, 'a stack');
            assert.ok(smp.value[0] >= 1, 'counted');
        }
        assert.deepEqual(Object.keys(byName).sort(), ['otlp-sleeper', 'otlp-spinner', 'otlp-traced']);
        assert.equal(byName['otlp-spinner']['thread.id'], 4001);
        assert.equal(byName['otlp-traced']['trace_id'], '0102030405060708090a0b0c0d0e0f10');
        assert.equal(byName['otlp-traced']['span_id'], 'a1a2a3a4a5a6a7a8');
        assert.ok(!byName['otlp-spinner']['trace_id']);
        assert.ok(p.string_table.some((x) => /spin_work/.test(x)), 'function names');
    }
    assert.equal(lib.counters(res.stderr).exported, 3);
};

// A receiver that never answers and no timeout (OTEL_EXPORTER_OTLP_TIMEOUT=0):
// the exporter thread is never stuck in the call, so at exit the call is
// cancelled at the shutdown deadline, the host exits on time and every
// record is counted.
cases.hang_no_timeout = async () => {
    const recv = new Receiver(() => ({hang: true}));
    const port = await recv.start();
    const res = await driver(4, baseEnv(port, {
        OTEL_EXPORTER_OTLP_TIMEOUT: '0',
        STACKSHOT_SHUTDOWN_TIMEOUT: '800',
    }));
    await recv.close();
    assert.equal(res.code, 0);
    assert.ok(res.ms < 4 * INTERVAL + 800 + 1500, `exit on time (${res.ms} ms)`);
    assert.equal(recv.calls.length, 1, 'one call in flight at a time');
    const k = lib.counters(res.stderr);
    assert.equal(k.exported, 0);
    assert.equal(k.dropped, 12);
    assert.match(res.stderr, /12 records not delivered before the shutdown deadline/);
};

// Three rounds through the gRPC helper ("helper" argument) to a receiver
// whose script(i, kill) may kill the agent's first helper (kill() does);
// after the run: every record exactly once, two helpers named (the first
// and the one started after the kill). Resolves with {res, pids}.
async function killHelper(script, extraEnv = {}) {
    if (process.argv[3] !== 'helper') lib.skip('only with the helper');
    let seen = '';
    const helpers = () => [...seen.matchAll(/gRPC calls made by stackshot-grpc-helper, pid (\d+)/g)]
        .map((m) => Number(m[1]));
    const recv = new Receiver((i) => script(i, () => process.kill(helpers()[0], 'SIGKILL')));
    const port = await recv.start();
    const res = await lib.run(process.env.OTLP_DRIVER, ['3', String(THREADS)],
        baseEnv(port, extraEnv), {onStderr: (all) => (seen = all)});
    await recv.close();
    assert.equal(res.code, 0);
    assertExactlyOnce(recv, 3);
    const pids = helpers();
    assert.equal(pids.length, 2, `a new helper after the kill: ${pids}`);
    assert.notEqual(pids[0], pids[1]);
    assert.equal(lib.counters(res.stderr).exported, 9);
    return {res, pids};
}

// The helper killed while a call is in flight: the call ends UNAVAILABLE,
// once, and is retried through a new helper.
cases.helper_killed = async () => {
    const {res, pids} = await killHelper((i, kill) => {
        if (i === 0) kill();
        return i === 0 ? {code: 14, details: 'never seen: the helper is gone'} : {};
    });
    assert.match(res.stderr, new RegExp(`export to .* failed: UNAVAILABLE: the gRPC helper ` +
        `process ended \\(pid ${pids[0]}: its socket closed\\); retrying in \\d+ ms`));
    assert.doesNotMatch(res.stderr, /never seen/);
    const k = lib.counters(res.stderr);
    assert.equal(k.dropped, 0);
    assert.equal(k.failures, 1);
    assert.equal(k.retries, 1);
};

// The helper killed between calls: the next call finds its socket closed
// and starts a new helper first: no call fails.
cases.helper_killed_idle = async () => {
    const {res} = await killHelper((i, kill) => {
        // answered at once; killed while the exporter waits for the next round
        if (i === 0) setTimeout(kill, 60);
        return {};
    }, {SPLUNK_PROFILER_CALL_STACK_INTERVAL: '400'});
    assert.doesNotMatch(res.stderr, /failed: UNAVAILABLE/);
    const k = lib.counters(res.stderr);
    assert.equal(k.failures, 0);
    assert.equal(k.retries, 0);
};

lib.runCases(cases);
