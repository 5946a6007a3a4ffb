#!/usr/bin/env python3
"""Every sampled Java stack carries the span current on its thread.

  span_check.py --java-home JH --lib libstackshot.so --jar stackshot.jar [--seconds N]

Builds test stand-ins of the OpenTelemetry classes the agent reads (otel/,
exact published package, class and field names and layout) twice: as the
API (class path) and relocated under io.opentelemetry.javaagent.shaded as
the Java agent does (boot class path). Runs SpanHost (threads switching
spans every ~50 ms through the API, the relocated API and StackshotSpan; a
thread parked inside a span; an untraced thread; virtual threads on JDK
21+) with the agent exporting OTLP logs over http/protobuf to a receiver
here, and checks each LogRecord against the spans its thread recorded:
  - a record's ids are a span of that very thread, and never one that had
    ended before the round's start (the record's time): never late;
  - of a busy thread's records whose round started inside one of its
    spans, at least 80 % carry ids (spans are back to back; a round's read
    follows its start, and may fall in the moment between two spans);
  - the parked thread's records all carry its one span;
  - the untraced thread's records carry none;
  - explicit-over-otel: an explicit context wins over the OTel one;
  - virtual threads (JDK 21+) carry their own spans.
Also StackshotSpan's contract with and without the agent (SpanHost api).
Exit 77 when the JDK or the jar is missing."""
import argparse
import glob
import gzip
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

ap = argparse.ArgumentParser()
ap.add_argument('--java-home', required=True)
ap.add_argument('--lib', required=True)
ap.add_argument('--jar', required=True)
ap.add_argument('--seconds', type=int, default=6)
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
java = os.path.join(a.java_home, 'bin', 'java')
javac = os.path.join(a.java_home, 'bin', 'javac')
if not os.path.exists(javac) or not os.path.exists(a.jar):
    print('skip: no JDK at %s or no %s' % (a.java_home, a.jar))
    sys.exit(77)
v = subprocess.run([java, '-version'], capture_output=True, text=True).stderr
major = int(re.search(r'version "(\d+)', v).group(1))

tmp = tempfile.mkdtemp(prefix='ss-span-')
fails = []


def fail(msg):
    print('FAIL: ' + msg)
    fails.append(msg)


# ---- build: the API, the relocated API, the host --------------------------
def sources(root):
    return sorted(glob.glob(os.path.join(root, '**', '*.java'), recursive=True))


app_src = os.path.join(here, 'otel')
agent_src = os.path.join(tmp, 'agent-src')
for f in sources(app_src):
    rel = os.path.relpath(f, app_src)
    dst = os.path.join(agent_src, 'io/opentelemetry/javaagent/shaded', rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    text = open(f).read()
    text = re.sub(r'\bio\.opentelemetry\.(context|api|sdk)\b',
                  r'io.opentelemetry.javaagent.shaded.io.opentelemetry.\1', text)
    open(dst, 'w').write(text)
app_cls, agent_cls, host_cls = (os.path.join(tmp, d) for d in ('app', 'agent', 'host'))
for src, out in ((app_src, app_cls), (agent_src, agent_cls)):
    subprocess.run([javac, '-nowarn', '-d', out] + sources(src), check=True)
subprocess.run([javac, '-nowarn', '-cp', os.pathsep.join([app_cls, agent_cls, a.jar]),
                '-d', host_cls, os.path.join(here, 'SpanHost.java')], check=True)
cp = os.pathsep.join([app_cls, host_cls, a.jar])


# ---- the receiver: OTLP logs over http/protobuf ---------------------------
def varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7f) << s
        s += 7
        if c < 0x80:
            return x, i


def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        n, wt = k >> 3, k & 7
        if wt == 0:
            val, i = varint(b, i)
        elif wt == 1:
            val, i = int.from_bytes(b[i:i + 8], 'little'), i + 8
        elif wt == 5:
            val, i = int.from_bytes(b[i:i + 4], 'little'), i + 4
        elif wt == 2:
            ln, i = varint(b, i)
            val, i = b[i:i + ln], i + ln
        else:
            raise ValueError('wire type %d' % wt)
        yield n, val


records = []


def decode(body):
    for n, rl in fields(body):
        if n != 1:
            continue
        for n2, sl in fields(rl):
            if n2 != 2:
                continue
            for n3, lr in fields(sl):
                if n3 != 2:
                    continue
                r = {'time': 0, 'trace': None, 'span': None, 'name': None, 'flags': 0}
                for f, val in fields(lr):
                    if f == 1:
                        r['time'] = val
                    elif f == 8:
                        r['flags'] = val
                    elif f == 9:
                        r['trace'] = val.hex()
                    elif f == 10:
                        r['span'] = val.hex()
                    elif f == 6:
                        kv = dict(fields(val))
                        if kv.get(1) == b'thread.name':
                            r['name'] = dict(fields(kv[2])).get(1, b'').decode()
                records.append(r)


class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        if self.headers.get('Content-Encoding') == 'gzip':
            body = gzip.decompress(body)
        decode(body)
        self.send_response(200)
        self.send_header('Content-Type', 'application/x-protobuf')
        self.send_header('Content-Length', '0')
        self.end_headers()

    def log_message(self, *args):
        pass


srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()

env = {k: v for k, v in os.environ.items()
       if not k.startswith(('SPLUNK_', 'STACKSHOT_', 'OTEL_'))}
env.update({
    'SPLUNK_PROFILER_ENABLED': 'true',
    'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '50',
    'STACKSHOT_EXPORTERS': 'otlp_logs',
    'OTEL_EXPORTER_OTLP_PROTOCOL': 'http/protobuf',
    'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:%d' % srv.server_address[1],
    'STACKSHOT_LOG_LEVEL': 'debug',
})
run = subprocess.run([java, '-Xbootclasspath/a:' + agent_cls, '-cp', cp,
                      '-agentpath:' + a.lib, 'SpanHost', str(a.seconds)],
                     env=env, capture_output=True, text=True, timeout=120)
srv.shutdown()
if run.returncode != 0 or 'done' not in run.stdout:
    print(run.stdout[-3000:], run.stderr[-3000:])
    fail('host exit code %d' % run.returncode)
for l in run.stderr.splitlines():
    if 'span reads' in l or 'warn' in l.lower():
        print(l)

# ---- what each thread had current ------------------------------------------
kinds, spans = {}, {}
stop_ns = 1 << 62
for l in run.stdout.splitlines():
    p = l.split()
    if p and p[0] == 'stop':
        stop_ns = int(p[1])
    elif p and p[0] == 'thread':
        kinds[p[1]] = p[2]
    elif p and p[0] == 'span':
        spans.setdefault(p[1], []).append((p[2], p[3], int(p[4]), int(p[5])))
by = {}
for r in records:
    by.setdefault(r['name'], []).append(r)
print('%d records, %d threads of the host seen' % (len(records), len(set(by) & set(kinds))))

LATE_NS = 2_000_000        # clock calibration of the host (Instant vs nanoTime)
EARLY_NS = 2_000_000_000   # the read follows the round's start by the round's time
# Coverage is counted over rounds that start over a second before the host
# stops its threads (which then end their spans and exit): a round's read
# follows its start by the round's time, seconds at worst under load.
END_NS = stop_ns - 1_000_000_000


def check_busy(name, rs, sp):
    ids = {s[1]: s for s in sp}
    # rounds that started while the thread had a span current (a span's
    # start is taken once it is current, its end once it is not)
    inside = [r for r in rs if r['time'] < END_NS and any(s[2] <= r['time'] <= s[3] for s in sp)]
    with_ids = 0
    for r in inside:
        if not r['span']:
            continue
        with_ids += 1
        s = ids.get(r['span'])
        if not s:
            fail('%s: a record at %d carries span %s, not one of its own' %
                 (name, r['time'], r['span']))
            continue
        if s[0] != r['trace']:
            fail('%s: span %s with trace %s, expected %s' % (name, r['span'], r['trace'], s[0]))
        if s[3] < r['time'] - LATE_NS:
            fail('%s: late: a record at %d carries span %s that ended at %d (%.1f ms before)'
                 % (name, r['time'], r['span'], s[3], (r['time'] - s[3]) / 1e6))
        if s[2] > r['time'] + EARLY_NS:
            fail('%s: span %s started %.1f ms after the round' %
                 (name, r['span'], (s[2] - r['time']) / 1e6))
    print('%s: %d records inside its spans, %d with ids%s' % (
        name, len(inside), with_ids,
        '; without at ' + ' '.join(str(r['time']) for r in inside if not r['span'])
        if with_ids < len(inside) else ''))
    if len(inside) < 5:
        fail('%s: only %d records' % (name, len(inside)))
    elif with_ids < 0.8 * len(inside):
        fail('%s: only %d of %d records carry a span' % (name, with_ids, len(inside)))


for name, kind in sorted(kinds.items()):
    rs = by.get(name, [])
    sp = spans.get(name, [])
    if kind in ('busy', 'explicit_over_otel'):
        if not sp:
            fail('%s: recorded no span' % name)
            continue
        check_busy(name, rs, sp)  # explicit_over_otel: its spans are the explicit ones
        if kind == 'explicit_over_otel':
            first, last = min(x[2] for x in sp), max(x[3] for x in sp)
            n = sum(1 for r in rs if first + 100_000_000 < r['time'] < END_NS
                    and not r['span'])
            if n:
                fail('%s: %d records without a span while one was set' % (name, n))
    elif kind == 'parked':
        (t, s, start, end), = sp
        # away from its ends: a round's read follows its start by the
        # round's time, which may cross the span's start or end
        inside = [r for r in rs if start + 500_000_000 <= r['time'] < END_NS]
        good = [r for r in inside if r['span'] == s and r['trace'] == t]
        print('%s: %d records, %d with its span' % (name, len(inside), len(good)))
        if len(inside) < 5 or len(good) != len(inside):
            fail('%s: %d of %d records carry its span' % (name, len(good), len(inside)))
    elif kind == 'untraced':
        marked = [r for r in rs if r['span']]
        print('%s: %d records, %d with ids' % (name, len(rs), len(marked)))
        if len(rs) < 5 or marked:
            fail('%s: %d records, %d with ids (expected none)' % (name, len(rs), len(marked)))
# LogRecord.flags carries the span's W3C trace flags: app-busy-0 and
# agent-busy-0 make sampled spans (TraceFlags.getSampled()), app-busy-1
# unsampled ones (getDefault()); a record without ids has no flags
for name, want in (('app-busy-0', 1), ('agent-busy-0', 1), ('app-busy-1', 0)):
    marked = [r for r in by.get(name, []) if r['span']]
    bad = [r['flags'] for r in marked if r['flags'] != want]
    print('%s: %d records with ids, flags %s' % (name, len(marked), sorted({r['flags'] for r in marked})))
    if not marked or bad:
        fail('%s: trace flags %s, expected %d on every record with ids' % (name, sorted(set(bad)), want))
unmarked = [r for r in records if not r['span'] and r['flags']]
if unmarked:
    fail('%d records without ids carry trace flags' % len(unmarked))
vts = [n for n in kinds if n.startswith('vt-')]
if major >= 21 and len(vts) != 2:
    fail('JDK %d: expected 2 virtual threads, host ran %d' % (major, len(vts)))

# ---- StackshotSpan's contract ------------------------------------------------
for agent, bound in ((True, True), (False, False)):
    cmd = [java, '-Xbootclasspath/a:' + agent_cls, '-cp', cp] + (['-agentpath:' + a.lib] if agent else []) + \
          ['SpanHost', 'api', str(bound).lower()]
    e = dict(env, STACKSHOT_EXPORTERS='none', STACKSHOT_LOG_LEVEL='warn')
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail('StackshotSpan %s the agent: %s %s' % ('with' if agent else 'without',
                                                     r.stdout, r.stderr))

shutil.rmtree(tmp, ignore_errors=True)
print('FAILED: %d' % len(fails) if fails else 'ok')
sys.exit(1 if fails else 0)
