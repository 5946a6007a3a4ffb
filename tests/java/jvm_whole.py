#!/usr/bin/env python3
"""The whole JVM as the agent sees it (tests/java/MixedHost.java).

  jvm_whole.py --java-home JDK --lib libstackshot.so --work DIR CHECK [--xrs]

vmthreads  the VM's own threads (VM Thread, GC and compiler threads, ...)
           are in the agent's rounds, after the Java threads, with the
           names, nids and status line shape jstack prints for them and
           native stacks named from libjvm's symbols (demangled: at most
           1 % of libjvm frames mangled, JDK 17 and 25); the GC threads show
           G1's own functions in some round while a thread allocates; no
           kernel tid is listed twice (Java threads are not sampled again
           by the native pass).
running    threads whose leaf is known (crc: CRC32.update's intrinsic;
           spin: one compiled method; reader: read(2) under
           FileInputStream.readBytes, native frames above it), sampled
           every 20 ms: >= 70 % of each one's samples in the right leaf;
           the sleeping thread still at Thread.sleep in every sample.
           --jfr also runs JFR (jdk.ExecutionSample and
           jdk.NativeMethodSample at the same period) on the same program,
           prints its shares beside, and asserts the agent's share is at
           most 20 points below JFR's for each thread where JFR has >= 20
           samples, >= 80 % of them in the right leaf.
attach     the same after a late attach (jcmd JVMTI.agent_load): the
           classes loaded before it get their jmethodIDs; crc: the stub on
           top with CRC32 among the next two frames (code compiled before
           the attach has debug records at safepoints only).
"""
import argparse
import calendar
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JAVA_HDR = re.compile(r'^"(?P<name>.*)" #(?P<num>\d+) .* nid=(?P<nid>0x[0-9a-f]+|\d+) ')
VM_HDR = re.compile(r'^"(?P<name>.*)" os_prio=-?\d+ cpu=[0-9.]+ms elapsed=[0-9.]+s '
                    r'tid=0x[0-9a-f]+ nid=(?P<nid>0x[0-9a-f]+|\d+) (?P<status>[a-z .()]+?)\s*$')
failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL: ' + msg)


def num(s):
    return int(s, 16) if s.startswith('0x') else int(s)


def parse_round(text):
    """A round: list of threads in order, each a dict (kind java|vm)."""
    threads = []
    cur = None
    for line in text.split('\n'):
        # the VM's threads: "#0" and a native state line (the body grammar
        # wants both; jstack prints neither for them)
        m = JAVA_HDR.match(line)
        if m:
            cur = {'kind': 'vm' if m['num'] == '0' else 'java', 'name': m['name'],
                   'nid': num(m['nid']), 'frames': []}
            threads.append(cur)
        elif cur is not None and line.startswith('\tat '):
            cur['frames'].append(line[4:])
        elif line == '':
            cur = None
    return threads


ROUND_AT = re.compile(r'^\d+ at (\d+-\d+-\d+T\d+:\d+:\d+\.\d+)Z')


def rounds_of(path, with_time=False):
    with open(path, encoding='utf-8') as f:
        parts = f.read().split('Full thread dump stackshot round ')[1:]
    if not with_time:
        return [parse_round(p) for p in parts]
    out = []
    for p in parts:
        m = ROUND_AT.match(p)
        when = calendar.timegm(time.strptime(m[1][:19], '%Y-%m-%dT%H:%M:%S')) + \
            float('0' + m[1][19:]) if m else 0
        out.append((when, parse_round(p)))
    return out


def jstack_threads(jh, pid):
    out = subprocess.run([os.path.join(jh, 'bin', 'jstack'), str(pid)], capture_output=True,
                         text=True, timeout=60).stdout
    java, vm = [], []
    for line in out.split('\n'):
        m = JAVA_HDR.match(line)
        if m:
            java.append((m['name'], num(m['nid'])))
            continue
        v = VM_HDR.match(line)
        if v:
            vm.append((v['name'], num(v['nid'])))
    return java, vm


def compile_host(jh, work, source='MixedHost.java'):
    classes = os.path.join(work, 'classes')
    os.makedirs(classes, exist_ok=True)
    subprocess.run([os.path.join(jh, 'bin', 'javac'), '-g', '-nowarn', '-d', classes,
                    os.path.join(HERE, source)], check=True, capture_output=True, text=True)
    return classes


def base_parser():
    """The arguments every JVM test script takes (its own are added after)."""
    ap = argparse.ArgumentParser()
    ap.add_argument('--java-home', required=True)
    ap.add_argument('--lib', required=True)
    ap.add_argument('--work')
    return ap


def start(jh, lib, classes, out_dir, ms, extra_env=None, jvm_args=(), host_args=()):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith('STACKSHOT_') or k.startswith('SPLUNK_'):
            del env[k]
    env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_OUTPUT_DIR': out_dir,
                'STACKSHOT_EXPORTERS': 'text'})
    env.update(extra_env or {})
    cmd = [os.path.join(jh, 'bin', 'java')] + list(jvm_args)
    if lib:
        cmd.append('-agentpath:' + lib)
    cmd += ['-cp', classes, 'MixedHost', str(ms)] + list(host_args)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    while line and line.strip() != 'ready':  # JFR prints its own lines first
        line = p.stdout.readline()
    if line.strip() != 'ready':
        fail('host did not start: ' + p.stderr.read())
    return p


def the_file(out_dir):
    files = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.endswith('.txt')]
    return files[0] if files else None


def check_vmthreads(a, work):
    classes = compile_host(a.java_home, work)
    out = os.path.join(work, 'out')
    os.makedirs(out)
    # System.gc() in a loop: the GC threads busy most of the time
    p = start(a.java_home, a.lib, classes, out, 8000,
              {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '20'}, a.jvm_args, ['gc,sleeper'])
    time.sleep(3)
    jjava, jvm = jstack_threads(a.java_home, p.pid)
    t_after = time.time()
    time.sleep(0.5)
    p.communicate(timeout=60)
    path = the_file(out)
    if not path:
        fail('no output file')
        return
    timed = rounds_of(path, True)
    rounds = [r for _, r in timed]
    if len(rounds) < 10:
        fail('only %d rounds' % len(rounds))
        return
    after = [r for when, r in timed if when >= t_after]
    if not after:
        fail('no round after jstack')
        return
    last = after[0]  # the first round taken after jstack
    vm = [t for t in last if t['kind'] == 'vm']
    by_nid = {t['nid']: t for t in vm}
    print('agent: %d Java threads, %d VM threads: %s' % (
        len(last) - len(vm), len(vm), ', '.join(t['name'] for t in vm)))
    print('jstack: VM threads: ' + ', '.join(n for n, _ in jvm))
    if not jvm:
        fail('jstack listed no VM thread (parse)')
    for name, nid in jvm:
        t = by_nid.get(nid)
        if not t:
            fail('jstack\'s "%s" (nid %d) is not among the agent\'s VM threads' % (name, nid))
        elif t['name'] != name:
            fail('nid %d: agent names it "%s", jstack "%s"' % (nid, t['name'], name))
    # jstack lists compiler threads and the like as Java threads (#n); JVMTI
    # does not: they are among the agent's VM threads, named from comm
    java_nids = {t['nid'] for t in last if t['kind'] == 'java'}
    for name, nid in jjava:
        if nid in java_nids or nid in by_nid:
            if nid in by_nid and not name.startswith(by_nid[nid]['name'].rstrip()):
                fail('nid %d: agent "%s" is not a prefix of jstack\'s "%s"' % (
                    nid, by_nid[nid]['name'], name))
    kinds = [t['kind'] for t in last]
    if 'vm' in kinds and 'java' in kinds[kinds.index('vm'):]:
        fail('a Java thread is listed after a VM thread')
    nids = [t['nid'] for t in last]
    if len(nids) != len(set(nids)):
        fail('a kernel tid is listed twice: %s' % sorted(n for n in nids if nids.count(n) > 1))
    for want in ('VM Thread', 'GC Thread#0'):
        t = next((t for t in vm if t['name'] == want), None)
        if not t:
            fail('no "%s" in the last round' % want)
        elif not any('libjvm.so' in f for f in t['frames']):
            fail('"%s" has no libjvm frame: %s' % (want, t['frames']))
        elif not any(f.split('(')[0] != 'global.unknown' and 'libjvm.so' in f and
                     not f.startswith('unknown') for f in t['frames']):
            fail('"%s": libjvm frames unnamed: %s' % (want, t['frames']))
    g1 = 0
    gc_samples = 0
    for r in rounds:
        for t in r:
            if t['kind'] == 'vm' and t['name'].startswith('GC Thread'):
                gc_samples += 1
                if any('G1' in f.split('(')[0] for f in t['frames']):
                    g1 += 1
    print('GC thread samples: %d, with G1 frames: %d' % (gc_samples, g1))
    if g1 == 0:
        fail('no GC thread sample shows a G1 function')
    # libjvm's C++ frames read as names (PosixSemaphore.wait), on Temurin
    # 25 too, whose libjvm carries its own libstdc++ and so loads no C++
    # runtime to demangle with: the resolver's own demangler does it. It
    # declines 0.2 % of libjvm's symbols (expressions in template
    # arguments): a few mangled frames may stay.
    jvm = [f for r in rounds for t in r if t['kind'] == 'vm' for f in t['frames']
           if f.endswith('(libjvm.so)')]
    mangled = [f for f in jvm if f.startswith('global._Z')]
    print('libjvm frames: %d, mangled: %d' % (len(jvm), len(mangled)))
    if not jvm or len(mangled) > 0.01 * len(jvm):
        fail('%d of %d libjvm frames mangled, e.g. %s' % (len(mangled), len(jvm), mangled[:3]))


# Where each known thread really is: (predicate on its frames, what it means)
def crc_leaf(fr):
    # in the intrinsic: its stub ([stub] without a perf map) on top of
    # CRC32's frames. A stack taken at a safepoint can never show the stub
    # (its poll is after the stub returns, at CRC32.updateBytes)
    return len(fr) > 1 and fr[0].startswith('[stub].') and \
        fr[1].startswith('java.util.zip.CRC32.')


def crc_leaf_attach(fr):
    # code compiled before a late attach: the inlined scope under the stub
    # may be the one of the next debug record (see check_running)
    return len(fr) > 2 and fr[0].startswith('[stub].') and \
        any(f.startswith('java.util.zip.CRC32.') for f in fr[1:3])


def spin_leaf(fr):
    return bool(fr) and fr[0].startswith('MixedHost.spin(')


def reader_leaf(fr):
    # native frames (libc's read, the copy into the array) above the native method
    return bool(fr) and not fr[0].startswith('java.') and \
        any(f.startswith('java.io.FileInputStream.readBytes(') for f in fr)


def reader_java(fr):  # Java-only stacks (JFR, STACKSHOT_JAVA_STACKS=java)
    return bool(fr) and fr[0].startswith('java.io.FileInputStream.readBytes(')


KNOWN = {'crc': crc_leaf, 'spin': spin_leaf, 'reader': reader_leaf}


def agent_shares(rounds, known=KNOWN):
    out = {}
    for name, ok in known.items():
        stacks = [t['frames'] for r in rounds for t in r
                  if t['kind'] == 'java' and t['name'] == name]
        out[name] = (sum(1 for f in stacks if ok(f)), len(stacks))
        other = {}
        for f in stacks:
            if not ok(f):
                key = ' <- '.join(f[:2])
                other[key] = other.get(key, 0) + 1
        for key, n in sorted(other.items(), key=lambda kv: -kv[1])[:3]:
            print('  %s: %d elsewhere: %s' % (name, n, key))
    return out


def jfr_stacks(jh, path, events):
    """sampled thread name -> list of stacks (leaf first, 'Class.method(...) line: n')."""
    out = {}
    text = subprocess.run([os.path.join(jh, 'bin', 'jfr'), 'print', '--events', events, path],
                          capture_output=True, text=True, timeout=120).stdout
    for block in text.split('\n}\n'):
        m = re.search(r'sampledThread = "([^"]*)"', block)
        st = re.search(r'stackTrace = \[\n(.*?)\n\s*\]', block, re.S)
        if not m or not st:
            continue
        frames = [f.strip() for f in st.group(1).split('\n') if f.strip() and f.strip() != '...']
        out.setdefault(m.group(1), []).append(frames)
    return out


JFR_KNOWN = {'crc': lambda fr: bool(fr) and fr[0].startswith('java.util.zip.CRC32.updateBytes'),
             'spin': lambda fr: bool(fr) and fr[0].startswith('MixedHost.spin('),
             'reader': lambda fr: bool(fr) and fr[0].startswith('java.io.FileInputStream.readBytes(')}


def run_jfr(a, classes, work, ms, period_ms):
    rec = os.path.join(work, 'rec.jfr')
    jfc = os.path.join(work, 'sample.jfc')
    with open(jfc, 'w') as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n<configuration version="2.0">\n'
                '<event name="jdk.ExecutionSample"><setting name="enabled">true</setting>'
                '<setting name="period">%d ms</setting></event>\n'
                '<event name="jdk.NativeMethodSample"><setting name="enabled">true</setting>'
                '<setting name="period">%d ms</setting></event>\n</configuration>\n'
                % (period_ms, period_ms))
    p = start(a.java_home, None, classes, work, ms, {},
              a.jvm_args + ['-XX:StartFlightRecording:filename=%s,settings=%s' % (rec, jfc)],
              ['crc,spin,reader,sleeper'])
    p.communicate(timeout=120)
    stacks = jfr_stacks(a.java_home, rec, 'jdk.ExecutionSample,jdk.NativeMethodSample')
    return {n: (sum(1 for f in stacks.get(n, []) if ok(f)), len(stacks.get(n, [])))
            for n, ok in JFR_KNOWN.items()}


# Against JFR, where JFR's own figure is a firm reference: at least
# JFR_MIN_SAMPLES samples of the thread and JFR_MIN_SHARE of them in the
# right leaf (on JDK 17 JFR almost never records the CRC32 thread, 0-2
# samples in 6 s: no comparison then). The agent's share must be at least
# JFR's minus JFR_MARGIN: its misses are the samples it takes while the
# thread is stopped for a safepoint (where it is; JFR skips those), 2-13 %
# in the runs measured, so the margin leaves room for a busier machine
# without letting a safepoint-only picture (0 % for crc and reader) pass.
JFR_MIN_SAMPLES = 20
JFR_MIN_SHARE = 0.8
JFR_MARGIN = 0.2


def check_against_jfr(name, agent, jfr):
    if not jfr:
        return
    (hit, n), (jhit, jn) = agent, jfr
    if jn < JFR_MIN_SAMPLES or jhit < JFR_MIN_SHARE * jn:
        print('%s: JFR has %d of %d samples in the leaf: no comparison' % (name, jhit, jn))
        return
    if n == 0 or hit / n < jhit / jn - JFR_MARGIN:
        fail('%s: the agent has %d of %d samples in the right leaf, JFR %d of %d: '
             'more than %d points below JFR' % (name, hit, n, jhit, jn, 100 * JFR_MARGIN))


def check_running(a, work, attach=False):
    classes = compile_host(a.java_home, work)
    out = os.path.join(work, 'out')
    os.makedirs(out)
    period = 20
    env = {'SPLUNK_PROFILER_CALL_STACK_INTERVAL': str(period)}
    if a.stacks:
        env['STACKSHOT_JAVA_STACKS'] = a.stacks
    env.update(kv.split('=', 1) for kv in a.env)
    if attach:
        p = start(a.java_home, None, classes, out, 8000, env, a.jvm_args,
                  ['crc,spin,reader,sleeper'])
        time.sleep(1)
        opts = ','.join('%s=%s' % kv for kv in [('SPLUNK_PROFILER_ENABLED', 'true'),
                                                ('STACKSHOT_OUTPUT_DIR', out),
                                                ('STACKSHOT_EXPORTERS', 'text')] +
                        sorted(env.items()))
        r = subprocess.run([os.path.join(a.java_home, 'bin', 'jcmd'), str(p.pid),
                            'JVMTI.agent_load', a.lib, '"%s"' % opts],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail('jcmd: ' + r.stdout + r.stderr)
    else:
        p = start(a.java_home, a.lib, classes, out, 6000, env, a.jvm_args,
                  ['crc,spin,reader,sleeper'])
    _, err = p.communicate(timeout=120)
    if p.returncode != 0:
        fail('host exited %d: %s' % (p.returncode, err[-2000:]))
    path = the_file(out)
    if not path:
        fail('no output file')
        return
    # the first second: before the JIT compiled the loops
    timed = rounds_of(path, True)
    rounds = [r for when, r in timed if timed and when >= timed[0][0] + 1.0]
    known = dict(KNOWN)
    if a.stacks == 'java':
        known['reader'] = reader_java
        known['crc'] = lambda fr: bool(fr) and fr[0].startswith('java.util.zip.CRC32.')
    if attach:
        # The crc loop was compiled before the attach, when HotSpot kept
        # debug information only at safepoints: the stub's return address
        # (a leaf call, no record of its own) is placed by AGCT at the next
        # record, an inlined check of CRC32.update (Preconditions.
        # checkFromIndexSize) rather than CRC32.updateBytes. The same
        # physical frame, the stub still on top: CRC32 must be just below.
        exact = sum(1 for r in rounds for t in r
                    if t['kind'] == 'java' and t['name'] == 'crc' and crc_leaf(t['frames']))
        print('crc: %d samples with CRC32 right under the stub' % exact)
        known['crc'] = crc_leaf_attach
    shares = agent_shares(rounds, known)
    has_jfr = os.path.exists(os.path.join(a.java_home, 'bin', 'jfr'))
    jfr = run_jfr(a, classes, work, 5000, period) if a.jfr and has_jfr else {}
    print('%-8s %18s %18s' % ('thread', 'agent leaf share', 'JFR leaf share'))
    for name, (hit, n) in shares.items():
        j = jfr.get(name)
        print('%-8s %10d/%-4d %3.0f%% %s' % (
            name, hit, n, 100.0 * hit / n if n else 0,
            '%10d/%-4d %3.0f%%' % (j[0], j[1], 100.0 * j[0] / j[1] if j[1] else 0) if j else ''))
        if n < 10:  # rounds are late on a loaded machine (the threads take the CPUs)
            fail('%s: only %d samples' % (name, n))
        elif hit < 0.7 * n:
            fail('%s: %d of %d samples in the right leaf (want >= 70 %%)' % (name, hit, n))
        check_against_jfr(name, (hit, n), j)
    sleeps = [t['frames'] for r in rounds for t in r if t['name'] == 'sleeper']
    # Thread.sleep(Native Method) on 17, sleepNanos0 on 25
    bad = [f for f in sleeps if not f or not f[0].startswith('java.lang.Thread.sleep')]
    if not sleeps or bad:
        fail('sleeper: %d of %d stacks not at Thread.sleep: %s' % (
            len(bad), len(sleeps), bad[:1]))


def main():
    ap = base_parser()
    ap.add_argument('--xrs', action='store_true')
    ap.add_argument('--stacks', help='STACKSHOT_JAVA_STACKS for the running check')
    ap.add_argument('--jfr', action='store_true', help='also run JFR: print its shares, assert against them')
    ap.add_argument('--env', action='append', default=[],
                    help='KEY=VALUE for the agent (repeatable)')
    ap.add_argument('check', choices=['vmthreads', 'running', 'attach'])
    a = ap.parse_args()
    a.jvm_args = ['-Xrs'] if a.xrs else []
    if not os.path.exists(os.path.join(a.java_home, 'bin', 'jstack')):
        print('no JDK at ' + a.java_home)
        return 77
    work = a.work or tempfile.mkdtemp(prefix='ss-jvm-whole.')
    try:
        {'vmthreads': check_vmthreads, 'running': check_running,
         'attach': lambda a, w: check_running(a, w, attach=True)}[a.check](a, work)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print('%d failure(s)' % len(failures))
        return 1
    print('OK')
    return 0


if __name__ == '__main__':
    sys.exit(main())
