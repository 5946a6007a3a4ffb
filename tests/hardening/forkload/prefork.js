// prefork.js: forking hosts under the agent (issue 7, point 3).
//
//   node prefork.js tree   a pre-forking server: 1 parent, 8 workers, 16
//                          grandchildren, sampled every 100 ms, exporters
//                          text + otlp_logs (our gRPC receiver) + qubership
//                          (tests/qubership/collector.py)
//   node prefork.js storm  200 forks per second for 2 s, each child _exits
//                          at once or execs /bin/true
//
// Asserts: the run ends in time (no deadlock at a fork); every process's
// text file carries its own pid and only its own threads; the parent's
// OTLP records (resource process.pid = the parent) keep arriving before,
// during and after the forks with nothing dropped; every forked child that
// lives long enough reaches the collector; the rounds-taken equation of
// every exporter holds in every process.
'use strict';

const assert = require('assert');
const fs = require('fs');
const path = require('path');
const {spawn} = require('child_process');
const h = require('./harness');

const mode = process.argv[2] || 'tree';
const lib = h.otlpLib();
const {Receiver} = h.otlpReceiver();
const SCALE = Number(process.env.SS_TIME_SCALE || 1);

function pidsByRole(stdout) {
    const roles = {};
    for (const m of stdout.matchAll(/^prefork: pid (\d+) role (\w+)$/gm)) {
        (roles[m[2]] = roles[m[2]] || []).push(Number(m[1]));
    }
    return roles;
}

async function main() {
    const recv = new Receiver(() => ({}));
    const port = await recv.start();
    const qb = await h.startCollector();
    const out = lib.tmpDir(`prefork-${mode}`);
    const env = {
        SPLUNK_PROFILER_ENABLED: 'true',
        SPLUNK_PROFILER_CALL_STACK_INTERVAL: '100',
        STACKSHOT_EXPORTERS: 'text,otlp_logs,qubership',
        STACKSHOT_OUTPUT_DIR: out,
        STACKSHOT_LOG_LEVEL: 'debug', // the accounting lines at exit
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        REMOTE_DUMP_HOST: '127.0.0.1',
        REMOTE_DUMP_PORT_PLAIN: String(qb.port),
        STACKSHOT_QUBERSHIP_RECONNECT: '300',
        STACKSHOT_SHUTDOWN_TIMEOUT: '2000',
        POD_NAME: 'prefork',
    };
    const t0 = Date.now();
    const res = await h.runPreloaded(path.join(process.env.SS_BIN_DIR, 'ss_prefork'),
        [mode, String(SCALE)], env, 60000 * SCALE);
    const ms = Date.now() - t0;
    await lib.sleep(300); // the last OTLP calls and collector events
    await recv.close();
    qb.stop();
    process.stdout.write(res.stdout);
    process.stdout.write(res.stderr.split('\n').filter((l) => /rounds taken|memory: peak|otlp|forked|prefork/.test(l)).join('\n') + '\n');

    assert.equal(res.signal, null, `the host was killed (${res.signal}): a hang at fork?`);
    assert.equal(res.code, 0, `host exit ${res.code}`);
    assert.ok(!/AddressSanitizer|runtime error/.test(res.stderr), res.stderr);
    const roles = pidsByRole(res.stdout);
    const parent = roles.parent[0];
    console.log(`run took ${ms} ms`);

    // The parent: its file, its OTLP records before, during and after the
    // forks, its counters with nothing dropped.
    const parentFile = h.textFileOf(out, parent);
    const rounds = lib.parseTextDump(parentFile);
    assert.ok(rounds.length >= 20 * (mode === 'tree' ? 1 : 0.5), `parent rounds ${rounds.length}`);
    for (const r of rounds) assert.equal(r.pid, parent);
    const parentRecs = recv.calls.flatMap((c) => c.records)
        .filter((r) => h.resourcePid(r) === parent);
    const otherRecs = recv.calls.flatMap((c) => c.records)
        .filter((r) => h.resourcePid(r) !== parent);
    const times = parentRecs.map((r) => Number(BigInt(r.time) / 1000000n));
    const seqs = new Set(parentRecs.map((r) => r.time));
    console.log(`parent: ${rounds.length} rounds in its file, ${seqs.size} rounds over OTLP ` +
        `(${parentRecs.length} records); ${otherRecs.length} records from other pids`);
    // every round of the text file reached the receiver too, unless the
    // OTLP exporter counted records as dropped (the parent's line is last)
    const oa = [...res.stderr.matchAll(/otlp_logs: rounds \d+ taken = [^(]*\(\d+ in, \d+ dropped queued, (\d+) consumed\); records (\d+) taken = (\d+) exported \+ (\d+) dropped \+ (\d+) rejected/g)].pop();
    console.log(`parent's otlp_logs: ${oa && oa[0]}`);
    assert.ok(oa && Number(oa[2]) === Number(oa[3]) + Number(oa[4]) + Number(oa[5]));
    assert.equal(Number(oa[3]), parentRecs.length, 'records exported vs received');
    if (Number(oa[4]) + Number(oa[5]) === 0) {
        const otlpMs = new Set(parentRecs.map((r) => lib.isoOfNs(r.time)));
        const missing = rounds.filter((r) => !otlpMs.has(r.iso)).map((r) => `${r.seq}@${r.iso}`);
        assert.equal(seqs.size, rounds.length,
            `parent rounds: ${rounds.length} in the text file, ${seqs.size} over OTLP; ` +
            `not over OTLP: ${missing.join(' ')}`);
    }
    const eq = h.accounting(res.stderr, parent);
    for (const name of ['text', 'otlp_logs', 'qubership']) {
        const e = eq[name];
        assert.ok(e, `no accounting line for ${name} of pid ${parent}`);
        assert.equal(e.taken, e.delivered + e.dropped + e.refused + e.held, `${name}: ${e.line}`);
        assert.equal(e.dropped + e.refused + e.held, 0, `${name} of the parent: ${e.line}`);
        assert.equal(e.taken, rounds.length, `${name}: rounds taken vs the text file`);
    }
    if (mode === 'tree') {
        // rounds before the first fork, during the children's life, after
        const kids = [...roles.worker, ...roles.grandchild];
        const files = kids.map((p) => h.textFileOf(out, p));
        const childRounds = files.map((f) => lib.parseTextDump(f));
        const sampled = childRounds.filter((r) => r.length);
        const firstChild = Math.min(...sampled.map((r) => Date.parse(r[0].iso)));
        const lastChild = Math.max(...sampled.map((r) => Date.parse(r[r.length - 1].iso)));
        const before = times.filter((t) => t < firstChild).length;
        const during = times.filter((t) => t >= firstChild && t <= lastChild).length;
        const after = times.filter((t) => t > lastChild).length;
        console.log(`parent OTLP records: ${before} before, ${during} during, ${after} after the children`);
        assert.ok(before > 0 && during > 0 && after > 0, 'parent records throughout');
        // The parent's rounds arrive every ~100 ms; while it forks they
        // slow down (fork() holds glibc's malloc locks while the kernel
        // copies the address space, and 24 children starting their agents
        // take the two cores): 0.2 to 3.4 s measured at load average 20
        const ptimes = [...new Set(times)].sort((a, b) => a - b);
        let gap = 0;
        for (let i = 1; i < ptimes.length; i++) gap = Math.max(gap, ptimes[i] - ptimes[i - 1]);
        console.log(`parent: longest gap between rounds ${gap} ms`);
        assert.ok(gap < 8000 * SCALE, `parent rounds stalled ${gap} ms`);

        // every child: its own file, its own pid, only its own thread
        assert.equal(roles.worker.length, 8);
        assert.equal(roles.grandchild.length, 16);
        console.log('rounds per child: ' + childRounds.map((r) => r.length).join(' '));
        kids.forEach((pid, i) => {
            const rs = childRounds[i];
            // ~30 rounds expected; a child forked while the parent's
            // sampler was in a round starts with a cold symbol cache and
            // gets far fewer on a loaded machine (1 to 10, sometimes none:
            // see docs/safety/forkload.md), so: its agent started (its own
            // file, opened at its start, and its accounting at exit below;
            // not its start line: 25 processes' debug lines can fill the
            // stderr pipe under load, and the log drops rather than waits),
            // and every round it took is its own
            for (const r of rs) {
                assert.equal(r.pid, pid, `child ${pid}'s file holds pid ${r.pid}`);
                const names = r.threads.map((t) => t.name);
                assert.ok(names.every((n) => n === 'worker' || n === 'grandchild'),
                    `child ${pid} lists ${names}`);
            }
            const e = h.accounting(res.stderr, pid);
            assert.ok(e.text && e.qubership, `child ${pid}: accounting lines`);
            for (const name of Object.keys(e)) {
                const x = e[name];
                assert.equal(x.taken, x.delivered + x.dropped + x.refused + x.held, x.line);
                assert.equal(x.held, 0, `child ${pid}: ${x.line}`);
            }
            // its OTLP exporter is off (gRPC): no round delivered, every one
            // refused (or dropped, when queued before its open failed)
            if (e.otlp_logs && !otherRecs.some((r) => h.resourcePid(r) === pid)) {
                assert.equal(e.otlp_logs.delivered, 0, e.otlp_logs.line);
                assert.equal(e.otlp_logs.refused + e.otlp_logs.dropped, e.otlp_logs.taken,
                    e.otlp_logs.line);
            }
            assert.equal(e.text.delivered, rs.length, `child ${pid}: text rounds`);
        });
        const working = childRounds.filter((rs) =>
            rs.some((r) => r.threads.some((t) => /child_work/.test(t.block)))).length;
        console.log(`${working} of ${kids.length} children show child_work in their stacks`);
        assert.ok(sampled.length >= kids.length / 2, `children with rounds: ${sampled.length}`);
        assert.ok(working >= sampled.length / 2, 'children sampled in their own work');
        // OTLP in a child: gRPC in the process is not usable after fork (each
        // child says so once); gRPC in the parent's helper is: every child
        // joins it (one helper for the tree) and exports, with no line
        const refusals = res.stderr.split('\n').filter((l) => /cannot be used in this forked child/.test(l));
        assert.equal(refusals.length + new Set(otherRecs.map(h.resourcePid)).size, kids.length,
            'every child either exports over OTLP or says once why not');
        for (const r of otherRecs) assert.ok(kids.includes(h.resourcePid(r)));
        const helpers = [...res.stderr.matchAll(/gRPC calls made by stackshot-grpc-helper, pid (\d+)( \(joined\))?/g)];
        if (helpers.length > 0) {
            assert.deepEqual(refusals, [], 'children of a host with a gRPC helper join it');
            assert.equal(new Set(helpers.map((m) => m[1])).size, 1, 'one helper for the tree');
            assert.equal(helpers.filter((m) => !m[2]).length, 1, 'started once, by the parent');
            console.log(`${helpers.length - 1} children joined the parent's helper`);
        }
        // qubership: every process connected
        const pods = qb.handshakes();
        console.log(`qubership: ${pods.length} handshakes, ${new Set(pods).size} distinct pod names`);
        assert.ok(pods.length >= 1 + kids.length, `qubership handshakes ${pods.length}`);
        // one pod name per process (the collector drops an older
        // connection of the same pod), also for children forked at once;
        // a reconnect greets again with the same name
        assert.ok(new Set(pods).size >= 1 + kids.length,
            `qubership pod names: ${new Set(pods).size} distinct for ${1 + kids.length} processes`);
    } else {
        // the rate is the machine's (2 shared cores, children that exec
        // load the agent again): reported against a run without the
        // agent, not asserted
        const base = await lib.run(path.join(process.env.SS_BIN_DIR, 'ss_prefork'),
            [mode, String(SCALE)], {}, {timeoutMs: 60000});
        const rate = (s) => Number((/storm \d+ forks in [\d.]+ s \((\d+)\/s\)/.exec(s) || [])[1]);
        console.log(`storm: ${rate(res.stdout)} forks/s with the agent, ${rate(base.stdout)} without`);
        const m = /storm (\d+) forks in ([\d.]+) s/.exec(res.stdout);
        assert.ok(m && Number(m[1]) >= 10, `storm forks: ${m && m[1]}`);
        // The parent's rounds go on during the storm and after it. They
        // slow down: fork() holds glibc's malloc locks while the kernel
        // copies the address space, and the exec'd children (each loading
        // the agent again) take the CPU; the longest gap is reported.
        const w = /storm from (\d+) to (\d+) ms/.exec(res.stdout).slice(1).map(Number);
        const ptimes = [...new Set(times)].sort((a, b) => a - b);
        let gap = 0;
        for (let i = 1; i < ptimes.length; i++) gap = Math.max(gap, ptimes[i] - ptimes[i - 1]);
        const during = ptimes.filter((t) => t >= w[0] && t <= w[1]).length;
        const after = ptimes.filter((t) => t > w[1]).length;
        console.log(`storm: parent rounds ${during} during, ${after} after; longest gap ${gap} ms`);
        assert.ok(during >= 1 && after >= 5, 'parent rounds during and after the storm');
        assert.ok(gap < 5000 * SCALE, `parent rounds stalled ${gap} ms during the storm`);
        // A child that execs or _exits at once never starts an agent of its
        // own (the restart waits min(interval, 100 ms)): the only
        // ss_prefork file is the parent's; the exec'd /bin/true images
        // start theirs from the preload constructor.
        const files = fs.readdirSync(out).filter((f) => f.endsWith('.txt'));
        const ours = files.filter((f) => f.startsWith('ss_prefork.'));
        console.log(`storm: ${m[1]} forks, ${files.length} text files, ${ours.length} of ss_prefork`);
        // (a child the loaded machine leaves unscheduled for 100 ms does
        // start one: allow a tenth; with the restart in the at-fork
        // handler every _exiting child had a file)
        assert.ok(ours.includes(path.basename(parentFile)));
        assert.ok(ours.length - 1 <= Number(m[1]) / 10,
            `agents started in ${ours.length - 1} short-lived children of ${m[1]}`);
    }
    console.log('PASS');
}

main().catch((e) => {
    console.error(e && e.stack ? e.stack : e);
    process.exit(1);
});
