// cases_zorka.js: the zorka exporter in the dead-and-hostile-backend
// matrix (matrix.js loads every cases_*.js). Its good backend is the test
// ZICO collector (tests/zorka/collector.py, Debian's /usr/bin/python3 with
// python3-cbor2); the raw modes of hostile.js front it. HTTP/1.1 to a raw
// mode: absent (refused), silent (no answer: each call cut at
// STACKSHOT_ZORKA_TIMEOUT), reset, garbage (not HTTP), slow (a reply at one
// byte per second), midclose (half a reply). Plus the collector silent to
// the end with the default timeouts, so the exit meets a call in flight.
'use strict';

const fs = require('fs');
const path = require('path');
const {RAW_MODES} = require('./hostile.js');

const COLLECTOR = path.join(__dirname, '..', '..', 'zorka', 'collector.py');
const PYTHON = '/usr/bin/python3'; // Debian's: python3-cbor2

// The test collector (matrix.js's Collector runs it), with session rules
// only (the end-to-end tests decode everything: here a busy machine's
// Python must keep up with the backlog). delivered(): the requests in its
// dump newer than `since` (ms) whose body holds `needle`. The collector may
// be writing a line as the dump is read: only whole lines are parsed (a
// half-written one, parsed, once threw and hung the matrix until its
// timeout).
function zorkaCollector(Collector, dir) {
    const srv = new Collector(dir, {python: PYTHON, script: COLLECTOR, args: ['--no-decode']});
    srv.delivered = (needle, since = 0) => {
        const file = path.join(dir, 'requests.jsonl');
        if (!fs.existsSync(file)) return [];
        const lines = fs.readFileSync(file, 'utf8').split('\n');
        lines.pop(); // after the last newline: empty, or a line still being written
        return lines.filter((l) => l.trim()).map(JSON.parse)
            .filter((r) => Number(r.t) >= since && Buffer.from(r.body, 'base64').includes(needle));
    };
    return srv;
}

module.exports = {
    exporter: 'zorka',
    needle: Buffer.from('bk-sleeper'), // an idle thread's name, in every trace period
    async goodServer(dir, {Collector}) {
        const srv = zorkaCollector(Collector, path.join(dir, 'zorka'));
        await srv.start(0);
        return srv;
    },
    env(port) {
        return {
            STACKSHOT_ZORKA_URL: `http://127.0.0.1:${port}`,
            STACKSHOT_ZORKA_PERIOD: '1',
            STACKSHOT_ZORKA_TIMEOUT: '2000',
        };
    },
    cases() {
        if (!fs.existsSync(PYTHON)) return [];
        const list = RAW_MODES.map((mode) => ({exporter: 'zorka', mode}));
        // down to the end with the default timeout (10 s a call) and period
        list.push({exporter: 'zorka', mode: 'silent', norecover: true, setup: (env) => {
            delete env.STACKSHOT_ZORKA_TIMEOUT;
            delete env.STACKSHOT_ZORKA_PERIOD;
        }});
        return list;
    },
};
