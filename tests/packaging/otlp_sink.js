// otlp_sink.js [PORT]: an OTLP/gRPC logs receiver for container.py and
// preload_host.py. Prints the port it listens on (127.0.0.1; PORT, else one
// the system picks), answers every export OK, and on SIGTERM prints
// one JSON line: the records' count, service names, thread names, the
// records per process (process.pid) and the times (epoch seconds) the
// calls answered OK arrived.
// Uses the receiver of tests/otlp/node (its npm packages).
'use strict';
const {Receiver} = require('../otlp/node/receiver.js');

(async () => {
    const recv = new Receiver(() => ({}));
    const port = await recv.start(Number(process.argv[2] || 0));
    console.log(String(port));
    process.on('SIGTERM', async () => {
        const recs = recv.delivered();
        const services = new Set(), threads = new Set(), pids = {};
        for (const r of recs) {
            threads.add(r.name);
            for (const kv of (r.resource && r.resource.attributes) || []) {
                if (kv.key === 'service.name')
                    services.add(kv.value[kv.value.value]);
                if (kv.key === 'process.pid') {
                    const pid = String(kv.value[kv.value.value]);
                    pids[pid] = (pids[pid] || 0) + 1;
                }
            }
        }
        const stamps = recv.calls.filter((c) => c.answered === 0).map((c) => c.t / 1000);
        console.log(JSON.stringify({records: recs.length, services: [...services],
            threads: [...threads], pids, stamps}));
        await recv.close();
        process.exit(0);
    });
})();
