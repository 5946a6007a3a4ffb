// bench_backends.js: what a dead or hostile backend costs the host.
//
//   node bench_backends.js <bk_host> <libstackshot.so> [run ms] [repeats]
//
// The host (tests/hardening/backends/bk_host.c: CPU-bound workers counting
// hash-loop iterations, plus idle threads 24 calls deep) runs `run ms`
// (default 4000) without the agent, then with the agent (10 ms interval)
// and each exporter against its backend: up (a good server), absent
// (nothing listens), silent (accepts, never answers), slow (answers one
// byte a second). Every configuration runs `repeats` times (default 3),
// interleaved with the no-agent baseline, and the medians are printed as
// ratios to the median baseline of the same run: ops/s (throughput: what
// the host gets done) and CPU time per op of the whole process (the agent's
// threads included: what the agent costs, and steadier than throughput on a
// shared machine). Figures, never assertions.
'use strict';

const {spawn} = require('child_process');
const os = require('os');
const path = require('path');
const fs = require('fs');
const {GrpcServer, RawServer, freePort} =
    require(path.join(__dirname, '..', '..', 'tests', 'hardening', 'backends', 'hostile.js'));

const [HOST, LIB] = process.argv.slice(2, 4);
const RUN_MS = Number(process.argv[4] || 4000);
const REPEATS = Number(process.argv[5] || 3);
const WORKERS = String(Math.max(1, os.cpus().length));
const COLLECTOR = path.join(__dirname, '..', '..', 'tests', 'qubership', 'collector.py');

function median(xs) {
    const s = [...xs].sort((a, b) => a - b);
    return s[s.length >> 1];
}

function runHost(env) {
    return new Promise((resolve, reject) => {
        const p = spawn(HOST, [String(RUN_MS), WORKERS, '16', '24'],
            {env, stdio: ['ignore', 'pipe', 'ignore']});
        let out = '';
        p.stdout.on('data', (d) => (out += d));
        p.on('close', () => {
            const m = out.match(/ops (\d+) run_ms (\d+).* cpu_ms (\d+)/);
            if (!m) reject(new Error('host printed no ops line'));
            else resolve({rate: Number(m[1]) / (Number(m[2]) / 1000),
                cpuPerOp: Number(m[3]) / Number(m[1])});
        });
    });
}

// The good backend of an exporter on an ephemeral port; {port, close()}.
async function upServer(exporter) {
    if (exporter !== 'qubership') {
        const g = new GrpcServer('ok');
        await g.start(0);
        return g;
    }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-bk-'));
    const proc = spawn('python3', [COLLECTOR, '--port', '0', '--out', dir],
        {stdio: ['ignore', 'pipe', 'ignore']});
    const port = await new Promise((r) => proc.stdout.once('data', (d) => r(Number(String(d)))));
    return {port, close: async () => {
        const gone = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await gone;
        fs.rmSync(dir, {recursive: true, force: true});
    }};
}

function agentEnv(exporter, port) {
    return {
        ...process.env,
        LD_PRELOAD: LIB,
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: '10',
        STACKSHOT_EXPORTERS: exporter,
        STACKSHOT_LOG_LEVEL: 'error',
        STACKSHOT_SHUTDOWN_TIMEOUT: '500',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        STACKSHOT_PROFILES_PERIOD: '1',
        REMOTE_DUMP_HOST: '127.0.0.1',
        REMOTE_DUMP_PORT_PLAIN: String(port),
        STACKSHOT_QUBERSHIP_WINDOW: '1',
    };
}

async function backend(exporter, state) {
    if (state === 'up') return upServer(exporter);
    if (state === 'slow') {
        const up = await upServer(exporter);
        const s = new RawServer('slow', up.port);
        await s.start(0);
        return {port: s.port, close: async () => { await s.close(); await up.close(); }};
    }
    const s = new RawServer(state);
    await s.start(state === 'absent' ? await freePort() : 0);
    return s;
}

async function main() {
    if (!HOST || !LIB) {
        console.error('usage: node bench_backends.js <bk_host> <libstackshot.so> [run ms] [repeats]');
        process.exit(2);
    }
    const base = [];
    const rows = [];
    console.log(`host: ${WORKERS} workers + 16 idle threads, ${RUN_MS} ms per run, ` +
        `${REPEATS} runs each, agent interval 10 ms`);
    for (const exporter of ['otlp_logs', 'otlp_profiles', 'qubership']) {
        for (const state of ['up', 'absent', 'silent', 'slow']) {
            const xs = [];
            for (let k = 0; k < REPEATS; k++) {
                base.push(await runHost({...process.env}));
                const b = await backend(exporter, state);
                xs.push(await runHost(agentEnv(exporter, b.port)));
                await b.close();
            }
            rows.push({exporter, state, rate: median(xs.map((x) => x.rate)),
                cpu: median(xs.map((x) => x.cpuPerOp))});
        }
    }
    const b = median(base.map((x) => x.rate));
    const bc = median(base.map((x) => x.cpuPerOp));
    console.log(`baseline (no agent): ${(b / 1e6).toFixed(3)} M ops/s, ` +
        `${(bc * 1e6).toFixed(1)} ns CPU per op (medians of ${base.length})`);
    console.log('exporter        backend   ops/s ratio  CPU/op ratio (to no agent)');
    for (const r of rows)
        console.log(`${r.exporter.padEnd(15)} ${r.state.padEnd(9)} ${(r.rate / b).toFixed(3).padStart(11)}  ` +
            `${(r.cpu / bc).toFixed(3).padStart(12)}`);
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
