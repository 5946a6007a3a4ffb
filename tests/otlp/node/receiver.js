// receiver.js: scriptable OTLP/gRPC logs receivers for the failure tests.
//
// Receiver: @grpc/grpc-js + @grpc/proto-loader loading this repository's
// .proto files (opentelemetry-proto v1.11.0 wire) at run time. A script
// decides the answer of every call: OK, a status (with RetryInfo in
// grpc-status-details-bin if asked), a partial success, or no answer at all.
//
// RawReceiver: node's http2 module speaking gRPC by hand, to see the wire
// as sent: header names exactly as they arrived, the compressed-flag byte
// and grpc-encoding of the message, the user agent.
'use strict';

const http2 = require('http2');
const path = require('path');
const zlib = require('zlib');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT =
    process.env.SS_PROTO_ROOT || path.join(__dirname, '..', '..', '..', 'exporters', 'otlp', 'proto');
const SERVICE_PROTO = 'opentelemetry/proto/collector/logs/v1/logs_service.proto';

function loadLogsPackage() {
    const def = protoLoader.loadSync(SERVICE_PROTO, {
        keepCase: true,
        longs: String,
        enums: String,
        defaults: false,
        oneofs: true,
        includeDirs: [PROTO_ROOT],
    });
    return grpc.loadPackageDefinition(def).opentelemetry.proto.collector.logs.v1;
}

// --- a tiny protobuf writer for google.rpc.Status + RetryInfo ----------
function varint(n) {
    const out = [];
    let v = BigInt(n);
    while (v >= 0x80n) {
        out.push(Number(v & 0x7fn) | 0x80);
        v >>= 7n;
    }
    out.push(Number(v));
    return Buffer.from(out);
}
function fieldBytes(num, buf) {
    return Buffer.concat([varint((num << 3) | 2), varint(buf.length), buf]);
}
function fieldVarint(num, v) {
    return Buffer.concat([varint(num << 3), varint(v)]);
}
function statusWithRetryInfo(code, message, delayMs) {
    const duration = Buffer.concat([
        fieldVarint(1, Math.floor(delayMs / 1000)),
        fieldVarint(2, (delayMs % 1000) * 1000000),
    ]);
    const retryInfo = fieldBytes(1, duration);
    const any = Buffer.concat([
        fieldBytes(1, Buffer.from('type.googleapis.com/google.rpc.RetryInfo')),
        fieldBytes(2, retryInfo),
    ]);
    return Buffer.concat([
        fieldVarint(1, code),
        fieldBytes(2, Buffer.from(message)),
        fieldBytes(3, any),
    ]);
}

// A flat view of one request's records: [{time, name, rec}].
function recordsOf(req) {
    const out = [];
    for (const rl of req.resource_logs || []) {
        for (const sl of rl.scope_logs || []) {
            for (const rec of sl.log_records || []) {
                const attrs = {};
                for (const kv of rec.attributes || []) {
                    const v = kv.value || {};
                    attrs[kv.key] = v[v.value] ?? null;
                }
                out.push({time: rec.time_unix_nano, name: attrs['thread.name'], attrs, rec,
                    scope: sl.scope, resource: rl.resource});
            }
        }
    }
    return out;
}

class Receiver {
    // script(i, records, metadata) -> {code?, details?, retryDelayMs?,
    //   partial?: {rejected, message}, hang?: true}; code 0 / undefined = OK.
    constructor(script, opts = {}) {
        this.script = script;
        this.withService = opts.withService !== false;
        this.calls = [];
        this.held = [];
    }

    async start(port = 0) {
        this.server = new grpc.Server();
        if (this.withService) {
            const pkg = loadLogsPackage();
            this.server.addService(pkg.LogsService.service, {
                Export: (call, callback) => this._export(call, callback),
            });
        }
        this.port = await new Promise((resolve, reject) =>
            this.server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(),
                (err, p) => (err ? reject(err) : resolve(p)))
        );
        return this.port;
    }

    _export(call, callback) {
        const i = this.calls.length;
        const records = recordsOf(call.request);
        const md = call.metadata.getMap();
        const action = this.script(i, records, md) || {};
        const entry = {i, t: Date.now(), records, metadata: md, action, answered: null};
        this.calls.push(entry);
        if (action.hang) {
            this.held.push(callback);
            return;
        }
        if (action.code) {
            const metadata = new grpc.Metadata();
            if (action.retryDelayMs != null) {
                metadata.set('grpc-status-details-bin',
                    statusWithRetryInfo(action.code, action.details || '', action.retryDelayMs));
            }
            entry.answered = action.code;
            callback({code: action.code, details: action.details || 'scripted', metadata});
            return;
        }
        entry.answered = 0;
        const resp = {};
        if (action.partial) {
            resp.partial_success = {
                rejected_log_records: String(action.partial.rejected),
                error_message: action.partial.message,
            };
        }
        callback(null, resp);
    }

    // Records of calls answered OK: what the exporter saw delivered.
    delivered() {
        return this.calls.filter((c) => c.answered === 0).flatMap((c) => c.records);
    }

    async close() {
        this.server.forceShutdown();
    }
}

class RawReceiver {
    // opts.tls = {key, cert} (PEM): serve over TLS (h2) instead of plaintext.
    constructor(opts = {}) {
        this.calls = [];
        this.tls = opts.tls;
    }

    async start(port = 0) {
        this.server = this.tls ? http2.createSecureServer(this.tls) : http2.createServer();
        this.sessions = new Set();
        this.server.on('session', (s) => {
            this.sessions.add(s);
            s.on('close', () => this.sessions.delete(s));
        });
        this.server.on('stream', (stream, headers, flags, rawHeaders) => {
            const chunks = [];
            stream.on('data', (d) => chunks.push(d));
            stream.on('end', () => {
                const body = Buffer.concat(chunks);
                const names = [];
                for (let k = 0; k < rawHeaders.length; k += 2) names.push(rawHeaders[k]);
                const compressed = body.length >= 5 ? body[0] : -1;
                const len = body.length >= 5 ? body.readUInt32BE(1) : -1;
                let message = body.subarray(5, 5 + Math.max(len, 0));
                if (compressed === 1 && headers['grpc-encoding'] === 'gzip') {
                    message = zlib.gunzipSync(message);
                }
                this.calls.push({headers, names, compressed, wireLength: len, message});
                stream.respond({':status': 200, 'content-type': 'application/grpc'},
                    {waitForTrailers: true});
                stream.on('wantTrailers', () => stream.sendTrailers({'grpc-status': '0'}));
                stream.end(Buffer.from([0, 0, 0, 0, 0])); // an empty response message
            });
        });
        await new Promise((resolve) => this.server.listen(port, '127.0.0.1', resolve));
        this.port = this.server.address().port;
        return this.port;
    }

    // Decode a received message with the same protos.
    static decode(message) {
        const protobuf = require('protobufjs');
        const root = new protobuf.Root();
        root.resolvePath = (origin, target) =>
            path.isAbsolute(target) ? target : path.join(PROTO_ROOT, target);
        root.loadSync(SERVICE_PROTO, {keepCase: true});
        const T = root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest');
        return T.toObject(T.decode(message), {longs: String, oneofs: true});
    }

    async close() {
        for (const s of this.sessions) s.destroy();
        await new Promise((resolve) => this.server.close(resolve));
    }
}

module.exports = {Receiver, RawReceiver, recordsOf, statusWithRetryInfo};
