#!/usr/bin/env python3
"""Java overhead benchmark for the stackshot JVMTI agent.

  bench/java/run.py <libstackshot.so> [java_home]

Workload: 2 CPU-bound workers doing fixed work (Workload.java) beside 100
idle parked threads. Each configuration runs BENCH_RUNS times (default 3),
interleaved, and the median work time is reported as a ratio to the median
of the no-agent runs of this same invocation: the agent as it is (running
threads walked where they run, mixed stacks, the VM's threads), the agent
as it was (STACKSHOT_JAVA_STACKS=safepoint, STACKSHOT_JAVA_VM_THREADS=false),
and the JDK's Flight Recorder sampling at the same periods
(jdk.ExecutionSample and jdk.NativeMethodSample, nothing else recorded).
Beside the whole JVM's CPU (start to exit), the CPU of the agent's own
threads (stackshot-*, from schedstat while the JVM runs): the JVM's total
moves by a few percent between identical runs on a shared machine, the
agent's own part much less. Then the share of samples in the right leaf for threads whose leaf is
known (tests/java/MixedHost.java: CRC32, a compiled loop, read(2) under a
native method), agent vs JFR at 10 ms. Then, with the agent at 10 ms and
debug logging, the cost of one sampling round (measured inside the agent:
"jvmti: round ...") and the pause it causes (-Xlog:safepoint), with the
workers busy and with them absent (idle process). BENCH_QUICK=1 leaves out
the older STACKSHOT_JVMTI_STACKS variants. The agent at 10 ms also runs with
the profile outputs (pprof, flamegraph: rounds aggregated in memory, one
compact file a period, the period set to 1 s), the way JFR (binary chunks)
and async-profiler (one profile at the end) keep their samples: the cost of
sampling apart from the text exporter, which writes every thread of the
JVM in jstack format every round (~140 KB at 10 ms). BENCH_SKIP_EXTRA=1
leaves out the right-leaf and the one-round parts. BENCH_BEFORE=<another
libstackshot.so> adds that build at 1 s and 10 ms to the same runs (before
and after a change, interleaved). Takes about 3 minutes on 2 cores
(BENCH_UNITS=750 with BENCH_BEFORE: 8-10 minutes on a loaded machine).
"""
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
lib = os.path.abspath(sys.argv[1])
jh = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
    'BENCH_JAVA_HOME', '/usr/lib/jvm/java-17-openjdk-amd64')
runs = int(os.environ.get('BENCH_RUNS', '3'))
units = os.environ.get('BENCH_UNITS', '250')
tmp = tempfile.mkdtemp(prefix='ss-bench-java-')
subprocess.run([os.path.join(jh, 'bin', 'javac'), '-d', tmp,
                os.path.join(here, 'Workload.java')], check=True)
java = os.path.join(jh, 'bin', 'java')

base_env = {k: v for k, v in os.environ.items()
            if not k.startswith(('SPLUNK_', 'STACKSHOT_', 'OTEL_'))}


def jfc(period_ms):
    """JFR settings: execution samples (Java and native) only, at period_ms."""
    path = os.path.join(tmp, 'sample-%d.jfc' % period_ms)
    with open(path, 'w') as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<configuration version="2.0">\n'
                '<event name="jdk.ExecutionSample"><setting name="enabled">true</setting>'
                '<setting name="period">%d ms</setting></event>\n'
                '<event name="jdk.NativeMethodSample"><setting name="enabled">true</setting>'
                '<setting name="period">%d ms</setting></event>\n</configuration>\n'
                % (period_ms, period_ms))
    return path


def run(agent_env, workers=2, log=None):
    env = dict(base_env)
    agent_lib = lib
    if isinstance(agent_env, tuple) and agent_env[0] == 'lib':  # ('lib', path, env)
        agent_lib, agent_env = agent_env[1], agent_env[2]
    cmd = [java]
    if isinstance(agent_env, tuple):  # ('jfr', period_ms)
        cmd.append('-XX:StartFlightRecording:filename=%s/rec.jfr,settings=%s'
                   % (tmp, jfc(agent_env[1])))
        agent_env = None
    if agent_env is not None:
        env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_EXPORTERS': 'text',
                    'STACKSHOT_OUTPUT_DIR': tmp + '/out'})
        env.update(agent_env)
        cmd.append('-agentpath:' + agent_lib)
    if log:
        cmd.append('-Xlog:safepoint:file=' + log)
    cmd += ['-cp', tmp, 'Workload', str(workers), '100', units]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agent = agent_threads_cpu(p)
    out, err = p.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r'work_ms=(\d+)', out)
    if not m:
        sys.exit('workload failed: ' + err[-2000:])
    cpu_ms = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
    agent_cpu[0] = agent
    agent_cpu[1] = time.monotonic() - t0
    return int(m.group(1)), err, cpu_ms


agent_cpu = [0.0, 1.0]  # ms of the agent's threads, s of the JVM's life


def agent_threads_cpu(p):
    """CPU ms of the agent's own threads (named stackshot-*), read from
    /proc/<pid>/task/*/schedstat every 50 ms while the JVM runs (the last
    reading of each thread; they end at VMDeath, a little before the JVM).
    Apart from the JVM's total, which also moves with what the rest of the
    machine does to the workers: the agent's part, less noisy. The cost in
    the host's threads (signal handlers, handshakes) is not in it."""
    last = {}
    task = '/proc/%d/task' % p.pid
    while p.poll() is None:
        try:
            tids = os.listdir(task)
        except OSError:
            break
        for tid in tids:
            try:
                with open('%s/%s/comm' % (task, tid)) as f:
                    if not f.read().startswith('stackshot'):
                        continue
                with open('%s/%s/schedstat' % (task, tid)) as f:
                    last[tid] = int(f.read().split()[0]) / 1e6
            except (OSError, ValueError, IndexError):
                pass
        time.sleep(0.05)
    return sum(last.values())


OLD = {'STACKSHOT_JAVA_STACKS': 'safepoint', 'STACKSHOT_JAVA_VM_THREADS': 'false'}
configs = [
    ('no agent', None),
    ('agent every 1 s (text exporter)', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '1000'}),
    ('agent every 10 ms (text exporter)', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10'}),
    ('agent every 10 ms (no exporter)', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                         'STACKSHOT_EXPORTERS': 'none'}),
    # the profile outputs: rounds aggregated in memory, one compact file
    # written per period (1 s here, as JFR flushes its chunk every second;
    # the default period is 60 s), as JFR and async-profiler aggregate
    ('agent every 10 ms (pprof, 1 s files)', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                              'STACKSHOT_EXPORTERS': 'pprof',
                                              'STACKSHOT_PROFILES_PERIOD': '1'}),
    ('agent every 10 ms (flamegraph, 1 s)', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                             'STACKSHOT_EXPORTERS': 'flamegraph',
                                             'STACKSHOT_PROFILES_PERIOD': '1'}),
    # the one-time cost of separate debuginfo (libc6-dbg: its compressed
    # DWARF inflated for the first libc frame's line), absent on most hosts
    ('agent every 10 ms, no debuginfo files', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                               'STACKSHOT_SYMBOLS_DEBUGINFO': 'false'}),
    ('safepoint only, every 1 s', dict(OLD, SPLUNK_PROFILER_CALL_STACK_INTERVAL='1000')),
    ('safepoint only, every 10 ms', dict(OLD, SPLUNK_PROFILER_CALL_STACK_INTERVAL='10')),
    ('JFR samples every 1 s', ('jfr', 1000)),
    ('JFR samples every 10 ms', ('jfr', 10)),
]
before = os.environ.get('BENCH_BEFORE')
if before:
    configs += [
        ('before: agent every 1 s (text)', ('lib', os.path.abspath(before),
                                            {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '1000'})),
        ('before: agent every 10 ms (text)', ('lib', os.path.abspath(before),
                                              {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10'})),
        ('before: agent every 10 ms (none)', ('lib', os.path.abspath(before),
                                              {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                               'STACKSHOT_EXPORTERS': 'none'})),
        ('before: agent every 10 ms (pprof)', ('lib', os.path.abspath(before),
                                               {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                                'STACKSHOT_EXPORTERS': 'pprof',
                                                'STACKSHOT_PROFILES_PERIOD': '1'})),
    ]
if not os.environ.get('BENCH_QUICK'):
    configs += [
        ('agent every 10 ms, stacks each', {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                                            'STACKSHOT_EXPORTERS': 'text',
                                            'STACKSHOT_JVMTI_STACKS': 'each'}),
    ]
times = {name: [] for name, _ in configs}
cpus = {name: [] for name, _ in configs}
agents = {name: [] for name, _ in configs}
rates = {name: [] for name, _ in configs}
for i in range(runs):
    for name, env in configs:
        w, _, c = run(env)
        times[name].append(w)
        cpus[name].append(c)
        agents[name].append(agent_cpu[0])
        rates[name].append(agent_cpu[0] / agent_cpu[1])

print('JDK: %s; workload: 2 workers x %s units, 100 idle threads; %d runs each, median'
      % (jh, units, runs))
print('(wall: elapsed time of the work; cpu: CPU time of the whole JVM, start to exit,')
print(' which depends less on what else the machine runs)')
base = statistics.median(times['no agent'])
cbase = statistics.median(cpus['no agent'])
print('(agent ms: CPU of the agent\'s own threads, stackshot-*; agent %: of the rest of')
print(' the JVM\'s CPU in that run, so 1 + agent % / 100 is the ratio from those threads alone;')
print(' ms/s: the agent\'s CPU per second of the JVM\'s life, which the number of rounds,')
print(' and so a loaded machine stretching the run, does not change)')
print('%-36s %8s %7s %8s %7s %8s %7s %6s  %s' % ('configuration', 'wall ms', 'ratio', 'cpu ms',
                                                 'ratio', 'agent ms', 'agent %', 'ms/s',
                                                 'cpu ms of each run'))
for name, _ in configs:
    med = statistics.median(times[name])
    cmed = statistics.median(cpus[name])
    amed = statistics.median(agents[name])
    share = statistics.median(100.0 * a / (c - a) for a, c in zip(agents[name], cpus[name]))
    print('%-36s %8d %7.3f %8.0f %7.3f %8.0f %7.2f %6.1f  %s' % (
        name, med, med / base, cmed, cmed / cbase, amed, share,
        statistics.median(rates[name]), [int(round(c)) for c in cpus[name]]))

if os.environ.get('BENCH_SKIP_EXTRA'):
    sys.exit(0)

# The right leaf: agent (10 ms) vs JFR (10 ms) on the same program.
sys.path.insert(0, os.path.join(here, '..', '..', 'tests', 'java'))
import jvm_whole  # noqa: E402


class Args:
    java_home = jh
    jvm_args = []


classes = jvm_whole.compile_host(jh, tmp)
out = os.path.join(tmp, 'leaf')
os.makedirs(out, exist_ok=True)
p = jvm_whole.start(jh, lib, classes, out, 6000, {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10'},
                    [], ['crc,spin,reader,sleeper'])
p.communicate(timeout=300)
timed = jvm_whole.rounds_of(jvm_whole.the_file(out), True)
agent = jvm_whole.agent_shares([r for when, r in timed if when >= timed[0][0] + 1.0])
jfr = jvm_whole.run_jfr(Args, classes, tmp, 6000, 10)
print()
print('Share of samples in the right leaf, 10 ms, 6 s (the first second left out for the agent):')
print('%-8s %18s %18s' % ('thread', 'agent', 'JFR'))
for name in agent:
    a, j = agent[name], jfr.get(name, (0, 0))
    print('%-8s %10d/%-4d %3.0f%% %10d/%-4d %3.0f%%' % (
        name, a[0], a[1], 100.0 * a[0] / a[1] if a[1] else 0,
        j[0], j[1], 100.0 * j[0] / j[1] if j[1] else 0))

print()
print('One sampling round at 10 ms (medians over the run):')
print('%-46s %8s %9s %9s %10s %9s' % ('stacks via, busy workers', 'threads', 'stacks us',
                                        'round us', 'us/thread', 'pause us'))
for how in ('each', 'all') if os.environ.get('BENCH_QUICK') else ('each', 'all', 'list'):
    for workers in (2, 0):
        log = os.path.join(tmp, 'sp-%s-%d.log' % (how, workers))
        _, err, _ = run({'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10', 'STACKSHOT_EXPORTERS': 'none',
                      'STACKSHOT_LOG_LEVEL': 'debug', 'STACKSHOT_JVMTI_STACKS': how},
                     workers, log)
        rows = re.findall(r'jvmti: round \d+: (\d+) threads listed, (\d+) kept \(\d+ on CPU\), \d+ frames; '
                          r'native pass [0-9.]+ us, stacks ([0-9.]+) us, total ([0-9.]+) us, '
                          r'([0-9.]+) us/thread', err)
        rows = rows[2:]  # the first rounds resolve methods for the first time
        with open(log) as f:
            pauses = [int(m.group(1)) / 1000 for m in re.finditer(
                r'Safepoint "(?:GetAllStackTraces|GetThreadListStackTraces|GetStackTrace)".*Total: (\d+) ns',
                f.read())]
        name = '%s, %d' % ({'all': 'GetAllStackTraces',
                            'list': 'GetAllThreads+GetThreadListStackTraces',
                            'each': 'each (default): walked + GetStackTrace'}[how], workers)
        print('%-46s %8d %9.0f %9.0f %10.2f %9s' % (
            name, int(statistics.median(int(r[1]) for r in rows)),
            statistics.median(float(r[2]) for r in rows),
            statistics.median(float(r[3]) for r in rows),
            statistics.median(float(r[4]) for r in rows),
            '%.0f' % statistics.median(pauses) if pauses else 'n/a'))
