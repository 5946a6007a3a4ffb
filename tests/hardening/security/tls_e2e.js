// tls_e2e.js: https:// endpoints verify the server's certificate.
//
//   node tls_e2e.js
//
// A gRPC (h2 over TLS) receiver with a self-signed certificate made by
// openssl at test time; the agent core (OTLP_DRIVER, tests/otlp) exports
// call-stack logs to it:
//   1. https://, no OTEL_EXPORTER_OTLP_CERTIFICATE: nothing is delivered,
//      every record counted as dropped, one line says the certificate was
//      not trusted;
//   2. https:// with the certificate as CA file: delivered;
//   3. https:// with OTEL_EXPORTER_OTLP_INSECURE=true and no CA file:
//      delivered over TLS without verification, and one warning says so;
//   4. an endpoint without scheme and INSECURE=true (OTel: plaintext)
//      reaches a plaintext receiver.
'use strict';

const assert = require('assert/strict');
const fs = require('fs');
const path = require('path');
const {execFileSync} = require('child_process');

const nodeDir = path.join(__dirname, '..', '..', 'otlp', 'node');
const lib = require(path.join(nodeDir, 'lib'));
lib.requireDeps(); // the receiver needs tests/otlp/node's npm packages (skip: 77)
const {RawReceiver} = require(path.join(nodeDir, 'receiver'));

const INTERVAL = 150;
const ROUNDS = 2;
const THREADS = 3;

function makeCert(dir) {
    try {
        execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes',
            '-keyout', path.join(dir, 'server.key'), '-out', path.join(dir, 'server.crt'),
            '-days', '2', '-subj', '/CN=localhost',
            '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], {stdio: 'pipe'});
    } catch (e) {
        lib.skip(`openssl cannot make a certificate: ${e.message}`);
    }
    return {key: fs.readFileSync(path.join(dir, 'server.key')),
        cert: fs.readFileSync(path.join(dir, 'server.crt')), ca: path.join(dir, 'server.crt')};
}

function env(endpoint, extra = {}) {
    return {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: String(INTERVAL),
        STACKSHOT_EXPORTERS: 'otlp_logs',
        STACKSHOT_OUTPUT_DIR: lib.tmpDir('tls'),
        OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
        OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
        STACKSHOT_OTLP_RETRY_INITIAL: '100',
        STACKSHOT_OTLP_RETRY_MAX: '200',
        STACKSHOT_OTLP_RETRY_ATTEMPTS: '2',
        STACKSHOT_SHUTDOWN_TIMEOUT: '1500',
        ...extra,
    };
}

function driver(e) {
    return lib.run(process.env.OTLP_DRIVER, [String(ROUNDS), String(THREADS)], e);
}

async function main() {
    if (!process.env.OTLP_DRIVER) lib.skip('OTLP_DRIVER not set');
    const dir = lib.tmpDir('tls-cert');
    const tls = makeCert(dir);
    const recv = new RawReceiver({tls: {key: tls.key, cert: tls.cert}});
    const port = await recv.start();
    const url = `https://localhost:${port}`;
    const total = ROUNDS * THREADS;

    // 1. not trusted: refused, counted, said
    // info: the loss puts the counters at info; debug would repeat the failure
    const untrusted = await driver(env(url, {STACKSHOT_LOG_LEVEL: 'info'}));
    console.log(untrusted.stderr);
    assert.equal(untrusted.code, 0);
    assert.equal(recv.calls.length, 0, 'nothing may reach an unverified server');
    let k = lib.counters(untrusted.stderr);
    assert.equal(k.exported, 0);
    assert.equal(k.dropped, total);
    const said = untrusted.stderr.split('\n')
        .filter((l) => l.startsWith('stackshot:') && /certificate verify failed/.test(l));
    assert.equal(said.length, 1, 'one line of ours says why');

    // 2. trusted through the CA file
    const trusted = await driver(env(url, {OTEL_EXPORTER_OTLP_CERTIFICATE: tls.ca}));
    console.log(trusted.stderr);
    assert.equal(trusted.code, 0);
    assert.equal(lib.counters(trusted.stderr).exported, total);
    assert.ok(recv.calls.length > 0);
    assert.doesNotMatch(trusted.stderr, /without verifying/);

    // 3. INSECURE=true on https://: TLS, not verified, one warning
    const before = recv.calls.length;
    const insecure = await driver(env(url, {OTEL_EXPORTER_OTLP_INSECURE: 'true'}));
    console.log(insecure.stderr);
    assert.equal(insecure.code, 0);
    assert.equal(lib.counters(insecure.stderr).exported, total);
    assert.ok(recv.calls.length > before);
    const warnings = insecure.stderr.split('\n').filter((l) => /without verifying/.test(l));
    assert.equal(warnings.length, 1, 'one warning line');
    assert.match(warnings[0], /OTEL_EXPORTER_OTLP_INSECURE=true with an https:\/\/ endpoint/);
    await recv.close();

    // 4. no scheme + INSECURE=true: plaintext (the OTel meaning)
    const plain = new RawReceiver();
    const pport = await plain.start();
    const noScheme = await driver(env(`127.0.0.1:${pport}`, {OTEL_EXPORTER_OTLP_INSECURE: 'true'}));
    console.log(noScheme.stderr);
    await plain.close();
    assert.equal(lib.counters(noScheme.stderr).exported, total);
    assert.ok(plain.calls.length > 0);
    assert.doesNotMatch(noScheme.stderr, /without verifying/);
    fs.rmSync(dir, {recursive: true, force: true});
    console.log('tls_e2e: OK');
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
