// hostile.js: backends that are down, stalled, broken or rude, and the good
// ones they are replaced by, for the dead-and-hostile-backend tests and the
// bench. Node's standard library only (net, http2): no npm install needed.
//
// Raw TCP modes (to gRPC, whose first bytes must be an HTTP/2 SETTINGS
// frame, anything raw is itself garbage):
//   absent    nothing listens on the port (reserved, then closed)
//   silent    accepts, reads and discards, never writes
//   reset     accepts and resets at once (SO_LINGER 0: the client sees RST)
//   garbage   answers every read with random bytes
//   slow      a proxy to a good server that passes its replies on at one
//             byte per second
//   midclose  a proxy to a good server that passes on half of the first
//             reply chunk and closes (and so closes in the middle of a
//             message, whatever the protocol)
//   pass      a transparent proxy to a good server (a good backend on a
//             port of our choosing, whatever the server behind it)
// The proxies keep node's socket defaults, Nagle's algorithm on (as many
// real relays): what a client sends in two pieces (an HTTP request's
// headers, then its body) reaches the server behind after its delayed ACK,
// ~40 ms later. A client that makes one call at a time and splits its
// requests is capped near 25 calls a second here (docs/java.md, Zorka).
// gRPC modes (valid HTTP/2 and gRPC framing, see GrpcServer):
//   grpc-stall     never answers a call
//   grpc-badproto  answers OK with a message that is not protobuf
//   grpc-badframe  answers with a gRPC frame shorter than its length prefix
// OTLP/HTTP modes (valid HTTP/1.1, see HttpServer):
//   http-stall     never answers a request
//   http-badproto  answers 200 with a body that is not protobuf
//   http-503       answers every request 503, Retry-After: 1
'use strict';

const crypto = require('crypto');
const http = require('http');
const http2 = require('http2');
const net = require('net');

// A port nobody listens on (bound once by us, then released).
function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.on('error', reject);
        s.listen(0, '127.0.0.1', () => {
            const p = s.address().port;
            s.close(() => resolve(p));
        });
    });
}

function listen(server, port) {
    return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, '127.0.0.1', () => resolve(server.address().port));
    });
}

// A good gRPC unary server on http2: every call to any path is answered
// OK with an empty message (a valid empty Export*ServiceResponse), unless
// `mode` makes it misbehave. Keeps what it received for the assertions.
class GrpcServer {
    constructor(mode = 'ok') {
        this.mode = mode;
        this.calls = []; // {t, path, bytes: Buffer}
        this.sessions = new Set();
        this.held = [];
    }

    async start(port = 0) {
        this.server = http2.createServer();
        this.accepted = 0;
        this.server.on('session', (s) => {
            this.accepted++;
            this.sessions.add(s);
            s.on('close', () => this.sessions.delete(s));
            s.on('error', () => {});
        });
        this.server.on('stream', (stream, headers) => this._stream(stream, headers));
        this.port = await listen(this.server, port);
        return this.port;
    }

    _stream(stream, headers) {
        const chunks = [];
        stream.on('error', () => {});
        stream.on('data', (d) => chunks.push(d));
        stream.on('end', () => {
            const body = Buffer.concat(chunks);
            this.calls.push({t: Date.now(), path: headers[':path'], bytes: body});
            if (this.mode === 'grpc-stall') {
                this.held.push(stream); // answered never
                return;
            }
            if (stream.destroyed || stream.closed) return; // the client gave up
            let msg = Buffer.from([0, 0, 0, 0, 0]); // an empty message
            if (this.mode === 'grpc-badproto') {
                // field 15, wire type 7 (invalid), then noise
                const junk = Buffer.concat([Buffer.from([0x7f, 0xff, 0xff]),
                    crypto.randomBytes(29)]);
                const head = Buffer.from([0, 0, 0, 0, junk.length]);
                msg = Buffer.concat([head, junk]);
            } else if (this.mode === 'grpc-badframe') {
                msg = Buffer.from([0, 0, 0, 4, 0, 1, 2, 3]); // says 1024, holds 3
            }
            try {
                stream.respond({':status': 200, 'content-type': 'application/grpc'},
                    {waitForTrailers: true});
                stream.on('wantTrailers', () => {
                    try {
                        stream.sendTrailers({'grpc-status': '0'});
                    } catch (e) { /* reset by the client meanwhile */ }
                });
                stream.end(msg);
            } catch (e) { /* reset by the client meanwhile */ }
        });
    }

    // Calls received after `since` (ms) that carried `needle` (a thread or
    // function name of the host).
    delivered(needle, since = 0) {
        return this.calls.filter((c) => c.t >= since && c.bytes.includes(needle));
    }

    async close() {
        for (const s of this.held) s.destroy();
        for (const s of this.sessions) s.destroy();
        await new Promise((resolve) => this.server.close(() => resolve()));
    }
}

// A good OTLP/HTTP server (HTTP/1.1): every POST to any path is answered
// 200 with an empty body (a valid empty Export*ServiceResponse), unless
// `mode` makes it misbehave. Keeps what it received (bodies as sent:
// the matrix sends uncompressed).
class HttpServer {
    constructor(mode = 'ok') {
        this.mode = mode;
        this.calls = []; // {t, path, bytes: Buffer}
        this.sockets = new Set();
        this.held = [];
    }

    async start(port = 0) {
        this.accepted = 0;
        this.server = http.createServer((req, res) => this._request(req, res));
        this.server.on('connection', (s) => {
            this.accepted++;
            this.sockets.add(s);
            s.on('close', () => this.sockets.delete(s));
            s.on('error', () => {});
        });
        this.port = await listen(this.server, port);
        return this.port;
    }

    _request(req, res) {
        const chunks = [];
        req.on('error', () => {});
        req.on('data', (d) => chunks.push(d));
        req.on('end', () => {
            this.calls.push({t: Date.now(), path: req.url, bytes: Buffer.concat(chunks)});
            if (this.mode === 'http-stall') {
                this.held.push(res); // answered never
                return;
            }
            try {
                if (this.mode === 'http-503') {
                    res.writeHead(503, {'retry-after': '1'});
                    return res.end();
                }
                res.writeHead(200, {'content-type': 'application/x-protobuf'});
                // badproto: field 15 with wire type 7 (invalid), then noise
                res.end(this.mode === 'http-badproto'
                    ? Buffer.concat([Buffer.from([0x7f, 0xff, 0xff]), crypto.randomBytes(29)])
                    : Buffer.alloc(0));
            } catch (e) { /* the client gave up meanwhile */ }
        });
    }

    delivered(needle, since = 0) {
        return this.calls.filter((c) => c.t >= since && c.bytes.includes(needle));
    }

    async close() {
        for (const s of this.sockets) s.destroy();
        await new Promise((resolve) => this.server.close(() => resolve()));
    }
}

// A raw TCP server misbehaving in one of the raw modes. For slow and
// midclose, `upstream` is the port of the good server it fronts.
class RawServer {
    constructor(mode, upstream = 0) {
        this.mode = mode;
        this.upstream = upstream;
        this.sockets = new Set();
        this.timers = new Set();
        this.accepted = 0;
        this.bytesIn = 0;
    }

    async start(port = 0) {
        if (this.mode === 'absent') {
            this.port = port || (await freePort());
            return this.port;
        }
        this.server = net.createServer((sock) => this._conn(sock));
        this.port = await listen(this.server, port);
        return this.port;
    }

    _track(sock) {
        this.sockets.add(sock);
        sock.on('close', () => this.sockets.delete(sock));
        sock.on('error', () => {});
    }

    _conn(sock) {
        this.accepted++;
        this._track(sock);
        sock.on('data', (d) => (this.bytesIn += d.length));
        switch (this.mode) {
        case 'silent':
            return; // reads (so the client's writes succeed), never answers
        case 'reset':
            sock.resetAndDestroy();
            return;
        case 'garbage':
            sock.on('data', () => sock.write(crypto.randomBytes(64)));
            return;
        case 'slow':
        case 'midclose':
        case 'pass':
            this._proxy(sock);
            return;
        default:
            throw new Error(`unknown mode ${this.mode}`);
        }
    }

    _proxy(sock) {
        const up = net.connect(this.upstream, '127.0.0.1');
        this._track(up);
        sock.on('data', (d) => up.write(d));
        sock.on('close', () => up.destroy());
        up.on('close', () => sock.destroy());
        if (this.mode === 'pass') {
            up.on('data', (d) => sock.write(d));
            return;
        }
        if (this.mode === 'midclose') {
            up.once('data', (d) => {
                sock.write(d.subarray(0, Math.max(1, d.length >> 1)), () => {
                    sock.destroy();
                    up.destroy();
                });
            });
            return;
        }
        // slow: one byte a second, in order
        let queue = Buffer.alloc(0);
        up.on('data', (d) => (queue = Buffer.concat([queue, d])));
        const timer = setInterval(() => {
            if (queue.length && !sock.destroyed) {
                sock.write(queue.subarray(0, 1));
                queue = queue.subarray(1);
            }
        }, 1000);
        this.timers.add(timer);
        sock.on('close', () => {
            clearInterval(timer);
            this.timers.delete(timer);
        });
    }

    // Stop listening and drop every connection (the client sees EOF/RST).
    async close() {
        for (const t of this.timers) clearInterval(t);
        for (const s of this.sockets) s.destroy();
        if (this.server) await new Promise((resolve) => this.server.close(() => resolve()));
    }
}

const RAW_MODES = ['absent', 'silent', 'reset', 'garbage', 'slow', 'midclose'];
const GRPC_MODES = ['grpc-stall', 'grpc-badproto', 'grpc-badframe'];
const HTTP_MODES = ['http-stall', 'http-badproto', 'http-503'];

module.exports = {GrpcServer, HttpServer, RawServer, freePort, RAW_MODES, GRPC_MODES, HTTP_MODES};

// CLI, to poke at an exporter by hand:  node hostile.js <mode> [port]
if (require.main === module) {
    (async () => {
        const mode = process.argv[2] || 'silent';
        const port = Number(process.argv[3] || 0);
        let srv;
        if (GRPC_MODES.includes(mode) || mode === 'ok') {
            srv = new GrpcServer(mode);
            await srv.start(port);
        } else {
            const good = new GrpcServer('ok');
            const up = mode === 'slow' || mode === 'midclose' ? await good.start() : 0;
            srv = new RawServer(mode, up);
            await srv.start(port);
        }
        console.log(`${mode} on 127.0.0.1:${srv.port}`);
    })();
}
