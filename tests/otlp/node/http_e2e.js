// http_e2e.js: otlp_logs over OTLP/HTTP (http/protobuf) against scripted
// receivers (node's http/https/net only, requests decoded with this
// repository's .proto files by protobufjs).
//
//   node http_e2e.js <case>
//
// Each case runs the agent core with a scripted source (OTLP_DRIVER: 3
// threads a round, one in a span) exporting to a receiver that answers as
// the case says, then checks what arrived, the agent's lines and that the
// accounting line balances (records taken = exported + dropped +
// rejected). Short intervals and timeouts keep every case within seconds.
'use strict';

const assert = require('assert/strict');
const fs = require('fs');
const http = require('http');
const https = require('https');
const net = require('net');
const path = require('path');
const zlib = require('zlib');
const lib = require('./lib');

lib.requireDeps();
const protobuf = require('protobufjs');

const INTERVAL = 150;
const THREADS = 3;
const TLS_DIR = path.join(__dirname, '..', 'tls');
const PROTO_ROOT =
    process.env.SS_PROTO_ROOT || path.join(__dirname, '..', '..', '..', 'exporters', 'otlp', 'proto');

// ---- the wire ------------------------------------------------------------

const root = new protobuf.Root();
root.resolvePath = (origin, target) => path.join(PROTO_ROOT, target);
root.loadSync('opentelemetry/proto/collector/logs/v1/logs_service.proto', {keepCase: true});
const Req = root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest');
// profiles, for the forked child's profiles (their protos import ours)
const PROFILES_ROOT = path.join(PROTO_ROOT, '..', '..', 'profiles', 'proto');
const proot = new protobuf.Root();
proot.resolvePath = (origin, target) => {
    const p = path.join(PROFILES_ROOT, target);
    return fs.existsSync(p) ? p : path.join(PROTO_ROOT, target);
};
proot.loadSync('opentelemetry/proto/collector/profiles/v1development/profiles_service.proto',
    {keepCase: true});
const ProfReq = proot.lookupType(
    'opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest');

// The pids of the resources of a profiles request, one entry per Profile.
function profilesOf(body) {
    const req = ProfReq.toObject(ProfReq.decode(body), {longs: String});
    const out = [];
    for (const rp of req.resource_profiles || []) {
        const pid = ((rp.resource || {}).attributes || []).find((kv) => kv.key === 'process.pid');
        for (const sp of rp.scope_profiles || [])
            for (const p of sp.profiles || [])
                out.push({pid: pid ? Number(pid.value.int_value) : 0, samples: (p.samples || []).length});
    }
    return out;
}
const Resp = root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse');

// google.rpc.Status{code=1, message=2}, by hand (no schema needed)
function status(code, message) {
    const msg = Buffer.from(message);
    return Buffer.concat([Buffer.from([0x08, code, 0x12, msg.length]), msg]);
}

function recordsOf(body) {
    const req = Req.toObject(Req.decode(body), {longs: String});
    const out = [];
    for (const rl of req.resource_logs || []) {
        const pid = ((rl.resource || {}).attributes || []).find((kv) => kv.key === 'process.pid');
        for (const sl of rl.scope_logs || [])
            for (const rec of sl.log_records || []) {
                const name = (rec.attributes || []).find((kv) => kv.key === 'thread.name');
                out.push({time: rec.time_unix_nano, name: name.value.string_value,
                    pid: pid ? Number(pid.value.int_value) : 0});
            }
    }
    return out;
}

// ---- a scripted receiver -------------------------------------------------

// answer(i, req) for the i-th request: {status, headers, body} or
// {stall: true} (never answers) or {reset: true} (drops the connection).
class HttpReceiver {
    constructor(answer, tls) {
        this.answer = answer;
        this.tls = tls;
        this.requests = []; // {t, path, headers, body (gunzipped), records}
        this.sockets = new Set();
    }

    start() {
        const handler = (req, res) => {
            const chunks = [];
            req.on('data', (c) => chunks.push(c));
            req.on('end', () => {
                let body = Buffer.concat(chunks);
                if (req.headers['content-encoding'] === 'gzip') body = zlib.gunzipSync(body);
                const i = this.requests.length;
                const r = {t: Date.now(), path: req.url, headers: req.headers, body,
                    peer: this.tls && req.socket.getPeerCertificate ? req.socket.getPeerCertificate() : null};
                if (req.url.includes('profiles')) {
                    r.profiles = profilesOf(body);
                    r.records = [];
                } else {
                    r.records = recordsOf(body);
                }
                this.requests.push(r);
                const a = this.answer(i, r);
                if (a.stall) return;
                if (a.reset) return req.socket.destroy();
                res.writeHead(a.status || 200, {'content-type': 'application/x-protobuf',
                    ...(a.headers || {})});
                res.end(a.body || Buffer.alloc(0));
            });
        };
        this.server = this.tls ? https.createServer(this.tls, handler) : http.createServer(handler);
        this.server.on('connection', (s) => {
            this.sockets.add(s);
            s.on('close', () => this.sockets.delete(s));
        });
        this.server.on('secureConnection', (s) => this.sockets.add(s));
        return new Promise((resolve) =>
            this.server.listen(0, '127.0.0.1', () => resolve(this.server.address().port)));
    }

    // Every record delivered (answered 2xx), flattened.
    delivered(okStatus = (i) => true) {
        return this.requests.filter((r, i) => okStatus(i)).flatMap((r) => r.records);
    }

    close() {
        for (const s of this.sockets) s.destroy();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }
}

// A TCP server that answers every request with bytes that are not HTTP.
function garbageServer() {
    const server = net.createServer((s) => {
        s.on('data', () => s.write(Buffer.from('\x00\x01garbage\xff\xfe not http at all\r\n\r\n')));
        s.on('error', () => {});
    });
    return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// ---- the agent -------------------------------------------------------------

function baseEnv(port, extra = {}) {
    return {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: String(INTERVAL),
        STACKSHOT_EXPORTERS: 'otlp_logs',
        STACKSHOT_OUTPUT_DIR: lib.tmpDir('http'),
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
        STACKSHOT_OTLP_RETRY_INITIAL: '100',
        STACKSHOT_OTLP_RETRY_MAX: '400',
        STACKSHOT_SHUTDOWN_TIMEOUT: '3000',
        // debug: the sender's accounting line is info only when something
        // was lost or failed; cases that count lines said once per state
        // ask for info (debug repeats them)
        STACKSHOT_LOG_LEVEL: 'debug',
        ...extra,
    };
}

// The pid of every forked child the driver made ("... started in pid N"
// lines that are not the driver's own).
function childPids(res) {
    const pids = new Set();
    for (const m of res.stderr.matchAll(/started in pid (\d+)/g)) pids.add(Number(m[1]));
    pids.delete(res.pid);
    return [...pids];
}

async function driver(rounds, env) {
    for (const k of Object.keys(env)) if (env[k] === '') delete env[k]; // "unset"
    const res = await lib.run(process.env.OTLP_DRIVER, [String(rounds), String(THREADS)], env);
    process.stderr.write(res.stderr); // the agent's lines, for a failing case's log
    return res;
}

// The exit's accounting line, otlp_logs' part: R rounds consumed, N
// records taken = X exported + Y dropped + Z rejected.
function accounting(stderr, rounds) {
    const all = lib.exitAccounting(stderr);
    assert.ok(all.length, 'no accounting line');
    const a = all[all.length - 1];
    const [consumed, taken, exported, dropped, rejected] =
        [a.consumed, a.recordsTaken, a.exported, a.dropped, a.rejected];
    const m = [a.line];
    assert.equal(consumed, rounds, 'rounds consumed');
    assert.equal(taken, rounds * THREADS, 'records taken');
    assert.equal(taken, exported + dropped + rejected, `accounting does not balance: ${m[0]}`);
    return {exported, dropped, rejected};
}

function assertExactlyOnce(records, rounds) {
    lib.assertExactlyOnce(records, rounds, THREADS);
}

function lines(stderr, re) {
    return stderr.split('\n').filter((l) => re.test(l));
}

// ---- the cases ---------------------------------------------------------------

const cases = {
    // A host that forks, over OTLP/HTTP: the child sets up its own
    // transport after the fork and its records arrive too.
    async fork_http() {
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const res = await driver(4, baseEnv(port, {OTLP_DRIVER_FORK: '1'}));
        await recv.close();
        assert.equal(res.code, 0);
        const kids = childPids(res);
        assert.equal(kids.length, 1, res.stderr);
        const all = recv.delivered();
        const parent = all.filter((r) => r.pid === res.pid);
        const child = all.filter((r) => r.pid === kids[0]);
        assert.equal(parent.length, 4 * THREADS, 'the parent\'s records');
        assert.ok(child.length >= THREADS, `the child's records: ${child.length}`);
        assert.equal(parent.length + child.length, all.length, 'records of another process');
        assert.ok(!/forked child/.test(res.stderr), 'a fork line over HTTP');
        assert.ok(res.ms < 6000, `no hang (${res.ms} ms)`);
    },

    // The same with otlp_profiles (a period a second): the child's profiles
    // arrive too, over its own connection.
    async fork_http_profiles() {
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const res = await driver(8, baseEnv(port, {OTLP_DRIVER_FORK: '1',
            STACKSHOT_EXPORTERS: 'otlp_profiles', STACKSHOT_PROFILES_PERIOD: '1'}));
        await recv.close();
        assert.equal(res.code, 0);
        const kids = childPids(res);
        assert.equal(kids.length, 1, res.stderr);
        const profiles = recv.requests.flatMap((r) => r.profiles || []);
        assert.ok(recv.requests.every((r) => r.path === '/v1development/profiles'));
        assert.ok(profiles.some((p) => p.pid === res.pid && p.samples > 0), 'the parent\'s profiles');
        assert.ok(profiles.some((p) => p.pid === kids[0] && p.samples > 0), 'the child\'s profiles');
    },

    // A real native host under LD_PRELOAD (the native sampler, the real
    // modules) that forks: its child's call-stack logs and profiles arrive
    // over OTLP/HTTP like the parent's.
    async fork_preload() {
        if (!process.env.OTLP_DEMO || !process.env.STACKSHOT_LIB) lib.skip('OTLP_DEMO not set');
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const res = await lib.run(process.env.OTLP_DEMO, ['2400'], baseEnv(port, {
            LD_PRELOAD: process.env.STACKSHOT_LIB, OTLP_DEMO_FORK: '1500',
            STACKSHOT_EXPORTERS: 'otlp_logs,otlp_profiles', STACKSHOT_PROFILES_PERIOD: '1',
            SPLUNK_PROFILER_CALL_STACK_INTERVAL: '100'}));
        process.stderr.write(res.stderr);
        await recv.close();
        assert.equal(res.code, 0);
        const kids = childPids(res);
        assert.equal(kids.length, 1, 'one child started its agent');
        const child = kids[0];
        const logs = recv.requests.flatMap((r) => r.records);
        const profiles = recv.requests.flatMap((r) => r.profiles || []);
        assert.ok(logs.some((r) => r.pid === res.pid && r.name === 'otlp-spinner'), 'parent logs');
        assert.ok(logs.some((r) => r.pid === child && r.name === 'otlp-child'), 'child logs');
        assert.ok(profiles.some((p) => p.pid === res.pid && p.samples > 0), 'parent profiles');
        assert.ok(profiles.some((p) => p.pid === child && p.samples > 0), 'child profiles');
        for (const a of lib.exitAccounting(res.stderr))
            assert.equal(a.recordsTaken, a.exported + a.dropped + a.rejected, a.line);
    },

    // gRPC chosen: the child cannot use gRPC; with STACKSHOT_OTLP_FORK_ENDPOINT
    // it sends over OTLP/HTTP there (said once) while the parent goes on
    // over gRPC.
    async fork_grpc_to_http() {
        const {Receiver} = require('./receiver');
        const grpcRecv = new Receiver(() => ({}));
        const gport = await grpcRecv.start();
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const res = await driver(4, baseEnv(gport, {OTLP_DRIVER_FORK: '1',
            OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
            STACKSHOT_OTLP_FORK_ENDPOINT: `http://127.0.0.1:${port}`}));
        await grpcRecv.close();
        await recv.close();
        assert.equal(res.code, 0);
        const kids = childPids(res);
        assert.equal(kids.length, 1, res.stderr);
        const said = lines(res.stderr, /forked child/);
        assert.equal(said.length, 1, said.join(' | '));
        assert.match(said[0], new RegExp(`cannot be used in this forked child \\(pid ${kids[0]}\\); ` +
            `sending over http/protobuf to http://127\\.0\\.0\\.1:${port}/v1/logs ` +
            '\\(STACKSHOT_OTLP_FORK_ENDPOINT\\)'));
        const viaGrpc = grpcRecv.delivered();
        assert.equal(viaGrpc.length, 4 * THREADS, 'the parent over gRPC');
        const viaHttp = recv.delivered();
        assert.ok(viaHttp.length >= THREADS, `the child over HTTP: ${viaHttp.length}`);
        assert.ok(viaHttp.every((r) => r.pid === kids[0]), 'only the child over HTTP');
    },

    // 429 with Retry-After: 1 (s), then 200: the retry waits the server's
    // second (a floor above the 100-400 ms backoff), every record once.
    async retry_after_429() {
        const recv = new HttpReceiver((i) => (i === 0
            ? {status: 429, headers: {'retry-after': '1'}, body: status(8, 'slow down')}
            : {}));
        const port = await recv.start();
        // the retry a second later comes before the exit (which does not
        // wait for a backend that is failing)
        const res = await driver(12, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        assert.match(res.stderr, /export to http:\/\/127\.0\.0\.1:\d+\/v1\/logs failed: HTTP 429: slow down; retrying in (\d+) ms/);
        const delay = Number(/HTTP 429: slow down; retrying in (\d+) ms/.exec(res.stderr)[1]);
        assert.ok(delay >= 1000, `retry in ${delay} ms, before Retry-After`);
        assert.ok(recv.requests[1].t - recv.requests[0].t >= 950, 'the retry came too early');
        assertExactlyOnce(recv.delivered((i) => i > 0), 12);
        const k = accounting(res.stderr, 12);
        assert.equal(k.exported, 36);
    },

    // 503 twice: retried with backoff, then delivered; one line per state.
    async unavailable_503() {
        const recv = new HttpReceiver((i) => (i < 2 ? {status: 503, body: status(14, 'warming up')} : {}));
        const port = await recv.start();
        const res = await driver(3, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));  // info: one line per state (debug repeats them)
        await recv.close();
        assert.equal(res.code, 0);
        assert.equal(lines(res.stderr, /failed: HTTP 503: warming up; retrying in \d+ ms/).length, 1);
        assert.match(res.stderr, /otlp_logs: delivering to .* again/);
        assertExactlyOnce(recv.delivered((i) => i >= 2), 3);
        assert.equal(accounting(res.stderr, 3).exported, 9);
    },

    // 400: not retried, dropped and counted, said once.
    async bad_request_400() {
        const recv = new HttpReceiver(() => ({status: 400, body: status(3, 'bad data')}));
        const port = await recv.start();
        const res = await driver(3, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));  // info: one line per state (debug repeats them)
        await recv.close();
        assert.equal(res.code, 0);
        assert.equal(lines(res.stderr, /failed: HTTP 400: bad data; dropping the batch/).length, 1);
        const sent = recv.requests.flatMap((r) => r.records);
        assertExactlyOnce(sent, 3); // each record sent once: no retry
        const k = accounting(res.stderr, 3);
        assert.equal(k.dropped, 9);
        assert.equal(k.exported, 0);
    },

    // 404: one line saying it is not an OTLP/HTTP logs receiver.
    async not_found_404() {
        const recv = new HttpReceiver(() => ({status: 404}));
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));  // info: one line per state (debug repeats them)
        await recv.close();
        assert.equal(res.code, 0);
        const l = lines(res.stderr, /HTTP 404/);
        assert.equal(l.length, 1, l.join(' | '));
        assert.match(l[0], /answers HTTP 404: it is not an OTLP\/HTTP receiver with a logs pipeline/);
        assert.equal(accounting(res.stderr, 2).dropped, 6);
    },

    // A partial success in the 200's body: counted as rejected, not retried.
    async partial_success() {
        const body = Buffer.from(Resp.encode(Resp.fromObject({
            partial_success: {rejected_log_records: 1, error_message: 'one bad record'}})).finish());
        const recv = new HttpReceiver((i) => (i === 0 ? {body} : {}));
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));  // info: one line per state (debug repeats them)
        await recv.close();
        assert.equal(res.code, 0);
        assert.equal(lines(res.stderr, /accepted a batch partially: 1 of \d+ records rejected \(one bad record\); not retried/).length, 1);
        assertExactlyOnce(recv.delivered(), 2);
        const k = accounting(res.stderr, 2);
        assert.equal(k.rejected, 1);
        assert.equal(k.exported, 5);
    },

    // 200 with a body that is not an ExportLogsServiceResponse: the batch
    // was taken (counted exported, not sent again), the call counts as a
    // failure, said once.
    async ok_unreadable_body() {
        const body = Buffer.from([0x7f, 0xff, 0xff, 1, 2, 3]); // field 15, wire type 7
        const recv = new HttpReceiver(() => ({body}));
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {STACKSHOT_LOG_LEVEL: 'info'}));
        await recv.close();
        assert.equal(res.code, 0);
        assert.equal(lines(res.stderr, /answered OK with a body that is not an OTLP export response \(6 bytes\); the batch is counted as delivered/).length, 1);
        assertExactlyOnce(recv.requests.flatMap((r) => r.records), 2);
        assert.equal(accounting(res.stderr, 2).exported, 6);
        assert.match(res.stderr, /otlp_logs: rounds 2 taken = 2 delivered \+ 0 dropped \+ 0 refused \+ 0 held \(2 in, 0 dropped queued, 2 consumed\); records 6 taken = 6 exported \+ 0 dropped \+ 0 rejected; 0 retries, [12] failures/);
    },

    // A receiver that takes the request and never answers: each call ends
    // at its deadline and is retried; the host exits within the shutdown
    // deadline with everything counted.
    async stall() {
        const recv = new HttpReceiver(() => ({stall: true}));
        const port = await recv.start();
        // long enough for a retry during the run; the exit then does not
        // wait for the stalled backend at all
        const res = await driver(6, baseEnv(port, {OTEL_EXPORTER_OTLP_TIMEOUT: '300',
            STACKSHOT_SHUTDOWN_TIMEOUT: '1000'}));
        await recv.close();
        assert.equal(res.code, 0);
        assert.ok(res.ms < 8000, `the host took ${res.ms} ms`);
        assert.ok(recv.requests.length >= 2, 'retried');
        assert.match(res.stderr, /export to .* failed: .*(timed out|Timeout|deadline).*; retrying in/i);
        assert.match(res.stderr, /records not delivered before the shutdown deadline \(the backend (was failing|did not answer)\)/);
        const k = accounting(res.stderr, 6);
        assert.equal(k.exported, 0);
        assert.equal(k.dropped, 18);
    },

    // The receiver drops the connection on every request: retried, counted.
    async reset() {
        const recv = new HttpReceiver((i) => (i < 3 ? {reset: true} : {}));
        const port = await recv.start();
        // the retries end before the exit (which does not wait for a
        // backend that is failing)
        const res = await driver(8, baseEnv(port));
        await recv.close();
        assert.equal(res.code, 0);
        assert.match(res.stderr, /export to .* failed: .*; retrying in \d+ ms/);
        assertExactlyOnce(recv.delivered((i) => i >= 3), 8);
        assert.equal(accounting(res.stderr, 8).exported, 24);
    },

    // Bytes that are not HTTP: failed calls, retried, nothing crashes.
    async garbage() {
        const server = await garbageServer();
        const res = await driver(2, baseEnv(server.address().port, {STACKSHOT_SHUTDOWN_TIMEOUT: '1000'}));
        server.close();
        assert.equal(res.code, 0);
        assert.match(res.stderr, /export to .* failed: .*; retrying in \d+ ms/);
        assert.equal(accounting(res.stderr, 2).dropped, 6);
    },

    // Headers: x-sf-token and another header reach the receiver; our user
    // agent, the content type; no value appears in any line, at debug.
    async headers() {
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const res = await driver(2, baseEnv(port, {
            OTEL_EXPORTER_OTLP_HEADERS: 'X-SF-Token=s3cr3t-t0ken,x-team=alpha%20beta',
            STACKSHOT_LOG_LEVEL: 'debug',
        }));
        await recv.close();
        assert.equal(res.code, 0);
        const h = recv.requests[0].headers;
        assert.equal(h['x-sf-token'], 's3cr3t-t0ken');
        assert.equal(h['x-team'], 'alpha beta');
        assert.equal(h['content-type'], 'application/x-protobuf');
        assert.match(h['user-agent'], /^stackshot\/\d+\.\d+\.\d+$/);
        assert.equal(recv.requests[0].path, '/v1/logs');
        assert.ok(!/s3cr3t|alpha beta/.test(res.stderr + res.stdout), 'a header value was printed');
        assert.equal(accounting(res.stderr, 2).exported, 6);
    },

    // Splunk: SPLUNK_ACCESS_TOKEN goes as x-sf-token, over HTTP and gRPC,
    // and is in no line (debug level); a header the user wrote wins;
    // SPLUNK_REALM without an endpoint names the realm's ingest of profiling
    // logs over http/protobuf (nothing listens there in a test: no
    // network); with an endpoint set the realm is not used; a bad realm
    // gets one line.
    async splunk() {
        const TOKEN = 'sf-Tok3n-0123456789';
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const viaHttp = await driver(1, baseEnv(port, {SPLUNK_ACCESS_TOKEN: TOKEN,
            STACKSHOT_LOG_LEVEL: 'debug'}));
        const userWins = await driver(1, baseEnv(port, {SPLUNK_ACCESS_TOKEN: TOKEN,
            OTEL_EXPORTER_OTLP_HEADERS: 'X-SF-Token=from-headers'}));
        await recv.close();
        assert.equal(recv.requests[0].headers['x-sf-token'], TOKEN);
        assert.equal(recv.requests[recv.requests.length - 1].headers['x-sf-token'], 'from-headers');
        const {Receiver} = require('./receiver');
        const grpcRecv = new Receiver(() => ({}));
        const gport = await grpcRecv.start();
        const viaGrpc = await driver(1, baseEnv(gport, {SPLUNK_ACCESS_TOKEN: TOKEN,
            OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', STACKSHOT_LOG_LEVEL: 'debug'}));
        await grpcRecv.close();
        assert.deepEqual(grpcRecv.calls[0].metadata['x-sf-token'], TOKEN);
        const realm = await driver(1, baseEnv(port, {SPLUNK_ACCESS_TOKEN: TOKEN,
            SPLUNK_REALM: 'us0', OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_PROTOCOL: '',
            OTEL_EXPORTER_OTLP_TIMEOUT: '300', STACKSHOT_SHUTDOWN_TIMEOUT: '500',
            STACKSHOT_LOG_LEVEL: 'debug'}));
        assert.match(realm.stderr, /otlp_logs: sending call stacks to https:\/\/ingest\.us0\.signalfx\.com\/v1\/log over http\/protobuf \(ingest\.us0\.signalfx\.com:443, TLS, 1 headers,/);
        const notUsed = await driver(1, baseEnv(port, {SPLUNK_REALM: 'us0',
            STACKSHOT_SHUTDOWN_TIMEOUT: '500', STACKSHOT_LOG_LEVEL: 'debug'}));
        assert.match(notUsed.stderr, /sending call stacks to http:\/\/127\.0\.0\.1:\d+\/v1\/logs/);
        const bad = await driver(1, baseEnv(port, {SPLUNK_REALM: 'us0/../x',
            OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_PROTOCOL: '',
            OTEL_EXPORTER_OTLP_TIMEOUT: '300', STACKSHOT_SHUTDOWN_TIMEOUT: '500'}));
        // a bad realm is a mistake: the exporter is off, nothing is sent to
        // a default, and with nothing left the agent stays off (exit 2)
        assert.equal(lines(bad.stderr, /SPLUNK_REALM=us0\/\.\.\/x: not a realm name.*the otlp_logs exporter is off/).length, 1);
        assert.equal(bad.code, 2);
        assert.ok(!bad.stderr.includes(TOKEN), 'the token was printed');
        for (const r of [viaHttp, userWins, viaGrpc, realm, notUsed]) {
            assert.equal(r.code, 0);
            assert.ok(!(r.stderr + r.stdout).includes(TOKEN), 'the token was printed');
            assert.ok(!(r.stderr + r.stdout).includes('from-headers'), 'a header value was printed');
            accounting(r.stderr, 1);
        }
    },

    // Endpoints: the general one gets /v1/logs after its own path; a
    // signal-specific one is used as it is; http/json is refused in one
    // line and http/protobuf used.
    async endpoints() {
        const recv = new HttpReceiver(() => ({}));
        const port = await recv.start();
        const general = await driver(1, baseEnv(port, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}/otlp/`,
            OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json'}));
        const own = await driver(1, baseEnv(port, {
            OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: `http://127.0.0.1:${port}/custom/logs`}));
        await recv.close();
        assert.equal(general.code, 0);
        assert.equal(lines(general.stderr, /OTEL_EXPORTER_OTLP_PROTOCOL=http\/json: http\/json is not supported by this agent; using http\/protobuf/).length, 1);
        const paths = recv.requests.map((r) => r.path);
        assert.ok(paths.includes('/otlp/v1/logs'), paths.join(' '));
        assert.ok(paths.includes('/custom/logs'), paths.join(' '));
        assert.ok(paths.every((p) => p === '/otlp/v1/logs' || p === '/custom/logs'), paths.join(' '));
    },

    // TLS: https verified against OTEL_EXPORTER_OTLP_CERTIFICATE; an
    // untrusted server gets nothing (all counted); a client certificate
    // when the server asks for one.
    async tls() {
        const key = fs.readFileSync(path.join(TLS_DIR, 'server.key'));
        const cert = fs.readFileSync(path.join(TLS_DIR, 'server.crt'));
        const ca = path.join(TLS_DIR, 'server.crt');
        const recv = new HttpReceiver(() => ({}), {key, cert});
        const port = await recv.start();
        const ok = await driver(2, baseEnv(port, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${port}`,
            OTEL_EXPORTER_OTLP_CERTIFICATE: ca, STACKSHOT_LOG_LEVEL: 'debug'}));  // the endpoint line is debug
        assert.equal(ok.code, 0);
        assert.match(ok.stderr, /over http\/protobuf \(localhost:\d+, TLS,/);
        assert.equal(accounting(ok.stderr, 2).exported, 6);
        const n = recv.requests.length;
        const bad = await driver(2, baseEnv(port, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${port}`,
            STACKSHOT_SHUTDOWN_TIMEOUT: '800'}));
        await recv.close();
        assert.equal(bad.code, 0);
        assert.equal(recv.requests.length, n, 'an untrusted server got data');
        assert.match(bad.stderr, /export to https:\/\/localhost:\d+\/v1\/logs failed: .*(certificate|SSL|TLS)/i);
        assert.equal(accounting(bad.stderr, 2).dropped, 6);

        // mutual TLS: the server requires a client certificate signed by
        // the test certificate (itself); the agent presents it
        const mtls = new HttpReceiver(() => ({}), {key, cert, ca: [cert], requestCert: true,
            rejectUnauthorized: true});
        const mport = await mtls.start();
        const with_ = await driver(1, baseEnv(mport, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${mport}`,
            OTEL_EXPORTER_OTLP_CERTIFICATE: ca,
            OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: ca,
            OTEL_EXPORTER_OTLP_CLIENT_KEY: path.join(TLS_DIR, 'server.key')}));
        const without = await driver(1, baseEnv(mport, {
            OTEL_EXPORTER_OTLP_ENDPOINT: `https://localhost:${mport}`,
            OTEL_EXPORTER_OTLP_CERTIFICATE: ca,
            STACKSHOT_SHUTDOWN_TIMEOUT: '800'}));
        await mtls.close();
        assert.equal(accounting(with_.stderr, 1).exported, 3);
        assert.equal(mtls.requests.length, 1, 'one request, from the agent with its certificate');
        assert.equal(mtls.requests[0].peer.subject.CN, 'localhost');
        assert.equal(accounting(without.stderr, 1).dropped, 3);
    },
};

lib.runCases(cases);
