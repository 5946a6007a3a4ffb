#!/usr/bin/env python3
"""Cost of reading each Java thread's span (jvmti/jspan.c).

  bench/java/spans.py <libstackshot.so> [java_home]

SpanBench: 100 threads parked inside an OpenTelemetry span (the API
stand-ins of tests/java/otel, same layout as the published classes) and
100 parked without one, sampled every 10 ms for BENCH_SECONDS (default 10)
with no exporter. The agent times every read itself and prints, at exit,
the mean per thread with a span and per thread without ("jvmti: span
reads ..."); the round's whole cost per thread ("jvmti: round ...",
stacks, names, states, CPU times, spans) is given beside it for scale.
BENCH_RUNS runs (default 3), each figure's median."""
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
lib = os.path.abspath(sys.argv[1])
jh = sys.argv[2] if len(sys.argv) > 2 else '/usr/lib/jvm/java-17-openjdk-amd64'
runs = int(os.environ.get('BENCH_RUNS', '3'))
seconds = os.environ.get('BENCH_SECONDS', '10')
tmp = tempfile.mkdtemp(prefix='ss-bench-spans-')
stubs = sorted(glob.glob(os.path.join(here, '..', '..', 'tests', 'java', 'otel', '**', '*.java'),
                         recursive=True))
subprocess.run([os.path.join(jh, 'bin', 'javac'), '-nowarn', '-d', tmp] + stubs +
               [os.path.join(here, 'SpanBench.java')], check=True)
env = {k: v for k, v in os.environ.items() if not k.startswith(('SPLUNK_', 'STACKSHOT_', 'OTEL_'))}
env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
            'STACKSHOT_EXPORTERS': 'none', 'STACKSHOT_LOG_LEVEL': 'debug'})
span_us, none_us, round_us = [], [], []
for _ in range(runs):
    r = subprocess.run([os.path.join(jh, 'bin', 'java'), '-agentpath:' + lib, '-cp', tmp,
                        'SpanBench', '100', seconds], env=env, capture_output=True, text=True)
    m = re.search(r'span reads: (\d+), (\d+) with a span \(([\d.]+) us each\), (\d+) without '
                  r'\(([\d.]+) us each\)', r.stderr)
    if not m:
        print(r.stderr[-2000:])
        sys.exit(1)
    span_us.append(float(m.group(3)))
    none_us.append(float(m.group(5)))
    per = [float(x) for x in re.findall(r'([\d.]+) us/thread', r.stderr)]
    round_us.append(statistics.median(per[len(per) // 2:]))  # steady state
    print('run: %s reads, %s with a span: %.2f us each with, %.2f us without; round %.2f us/thread'
          % (m.group(1), m.group(2), span_us[-1], none_us[-1], round_us[-1]))
print('median of %d runs: %.2f us per thread with a span, %.2f us per thread without; '
      'whole round %.2f us per thread (%s, %s)'
      % (runs, statistics.median(span_us), statistics.median(none_us),
         statistics.median(round_us), os.path.basename(jh), os.uname().machine))
