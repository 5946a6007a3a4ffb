#!/usr/bin/env python3
"""iso_jvm.py: symbol isolation with a JVM host (ctest:
hardening_isolation_jdk17, hardening_isolation_jdk25).

    iso_jvm.py --java-home JDK --lib libstackshot.so --jni libiso_jni.so

IsoHost.java loads its JNI library libiso_jni.so (System.load), which
defines the names of the agent's dependencies (fakes.c: grpc_init,
unw_backtrace, deflate, absl::Mutex::Lock...). The same library is also
preloaded into java (LD_PRELOAD): a JNI library is opened RTLD_LOCAL, where
nothing else could bind to its symbols; preloaded, its fakes are in the
global scope ahead of every library, java's own libz included (the
launcher links it on 17), so an agent core not loaded isolated would bind
its libraries' calls to them. The agent is loaded by -agentpath, text
exporter every 50 ms. Checks (the preloaded case):
  - the JVM exits 0; no fake was called by anybody but the host ("FAKE"
    on stderr, and the host's own count of foreign calls is 0);
  - each of the host's 14 functions answered as its own, before and after
    the agent ran (its return value and its own count of calls);
  - the core was loaded isolated (RTLD_DEEPBIND, debug line);
  - the agent wrote its rounds (at least 3), with the JVM's thread names
    and the busy threads' Java frames (isoBusyInner under isoBusyOuter).
Then the library loaded by System.load only, once without the agent and
once with it: the same of the host's functions answer as its own (all on
25; on 17 its deflate and deflateInit2_ are java's libz's, agent or not):
the agent's libraries never enter the global scope. And the same checks
of the agent's run.
Exit 77 when the JDK or javac is missing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_MS = 2500

failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL: ' + msg)


def agent_env(out, preload):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(('STACKSHOT_', 'SPLUNK_', 'OTEL_', 'JAVA_TOOL_OPTIONS', 'LD_PRELOAD')):
            del env[k]
    env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_OUTPUT_DIR': out,
                'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '50', 'STACKSHOT_EXPORTERS': 'text',
                'STACKSHOT_LOG_LEVEL': 'debug', 'LD_PRELOAD': preload})
    if os.environ.get('ISO_CORE'):
        # another core, e.g. one opened without RTLD_DEEPBIND, to see this fail
        env['STACKSHOT_CORE'] = os.environ['ISO_CORE']
    return env


def rounds_of(out):
    files = [f for f in os.listdir(out) if f.endswith('.txt')]
    if len(files) != 1:
        fail('expected one text file in %s, got %s' % (out, files))
        return []
    with open(os.path.join(out, files[0]), errors='replace') as f:
        text = f.read()
    return [r for r in re.split(r'^(?=Full thread dump stackshot round )', text, flags=re.M)
            if r.startswith('Full thread dump')]


def run_java(a, classes, out, agent, preload):
    jni = os.path.abspath(a.jni)
    cmd = [os.path.join(a.java_home, 'bin', 'java')]
    if agent:
        cmd.append('-agentpath:' + a.lib)
    cmd += ['-Xmx64m', '-cp', classes, 'IsoHost', jni, str(RUN_MS if agent else 100)]
    env = agent_env(out, jni if preload else '')
    if not agent:
        env['SPLUNK_PROFILER_ENABLED'] = 'false'
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    print(p.stdout, end='')
    if p.returncode != 0:
        fail('the JVM exited %d\n%s' % (p.returncode, p.stderr[-3000:]))
    return p


def self_masks(p):
    """{'before': (count, mask), 'after': ...} of the host's self checks."""
    got = {}
    for when in ('before', 'after'):
        m = re.search(r'^self %s (\d+)/(\d+) mask ([0-9a-f]+)$' % when, p.stdout, re.M)
        if not m:
            fail('no "self %s" line' % when)
        else:
            got[when] = (int(m.group(1)), int(m.group(2)), m.group(3))
    return got


def check_agent_run(p, out, what):
    fakes = [l for l in p.stderr.splitlines() if 'FAKE' in l]
    if fakes:
        fail('%s: the host\'s functions were called by the agent: %s' % (what, fakes))
    m = re.search(r'^foreign calls (\d+)$', p.stdout, re.M)
    if not m or m.group(1) != '0':
        fail('%s: the host counted foreign calls of its functions: %s'
             % (what, m and m.group(1)))
    if 'core loaded isolated (RTLD_DEEPBIND)' not in p.stderr:
        fail('%s: the core was not loaded isolated:\n' % what +
             '\n'.join(l for l in p.stderr.splitlines() if 'core loaded' in l))
    rounds = rounds_of(out)
    if len(rounds) < 3:
        fail('%s: %d rounds in the text file' % (what, len(rounds)))
    names = set()
    busy_frames = 0
    for r in rounds:
        for block in r.split('\n\n'):
            m = re.match(r'"(.*?)" #', block)
            if not m:
                continue
            names.add(m.group(1))
            if m.group(1) == 'iso-busy' and re.search(
                    r'IsoHost\.isoBusyInner\(IsoHost\.java:\d+\)\n\s*at IsoHost\.isoBusyOuter\(',
                    block):
                busy_frames += 1
    for want in ('main', 'iso-busy'):
        if want not in names:
            fail('%s: no thread "%s" in the text file (names: %s)'
                 % (what, want, sorted(names)[:20]))
    if busy_frames == 0:
        fail('%s: no iso-busy stack with isoBusyInner under isoBusyOuter' % what)
    print('%s: %d rounds, %d thread names, %d iso-busy stacks with both frames'
          % (what, len(rounds), len(names), busy_frames))


def check(a, work):
    classes = os.path.join(work, 'classes')
    os.makedirs(classes)
    subprocess.run([os.path.join(a.java_home, 'bin', 'javac'), '-g', '-d', classes,
                    os.path.join(HERE, 'IsoHost.java')], check=True)
    # 1. preloaded: the fakes in the global scope, ahead of everything;
    # every one of them answers as the host's own, before and after
    out = os.path.join(work, 'global')
    os.makedirs(out)
    print('--- libiso_jni.so preloaded and loaded by System.load')
    p = run_java(a, classes, out, agent=True, preload=True)
    for when, (n, total, mask) in self_masks(p).items():
        if n != total or total != 14:
            fail('preloaded: %s the agent ran, %d of %d of the host\'s functions answered '
                 'as its own (mask %s)' % (when, n, total, mask))
    check_agent_run(p, out, 'preloaded')
    # 2. System.load only (RTLD_LOCAL): what of the host's library answers
    # as its own without the agent (java's libz comes first on 17) must
    # answer the same with it: the agent's libraries never enter the
    # global scope
    print('--- libiso_jni.so loaded by System.load only, without the agent')
    base = self_masks(run_java(a, classes, os.path.join(work, 'none'), agent=False,
                               preload=False))
    out = os.path.join(work, 'local')
    os.makedirs(out)
    print('--- libiso_jni.so loaded by System.load only, with the agent')
    p = run_java(a, classes, out, agent=True, preload=False)
    got = self_masks(p)
    if 'before' in base:
        for when, v in got.items():
            if v[2] != base['before'][2]:
                fail('System.load: %s the agent ran, the host\'s functions answering as its own '
                     'are %s, without the agent %s' % (when, v[2], base['before'][2]))
    check_agent_run(p, out, 'System.load')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--java-home', required=True)
    ap.add_argument('--lib', required=True)
    ap.add_argument('--jni', required=True)
    ap.add_argument('--keep', action='store_true', help='keep the work directory')
    a = ap.parse_args()
    for tool in ('java', 'javac'):
        if not os.path.exists(os.path.join(a.java_home, 'bin', tool)):
            print('SKIP: no %s in %s' % (tool, a.java_home))
            return 77
    work = tempfile.mkdtemp(prefix='ss-jvm-iso.')
    try:
        check(a, work)
    finally:
        if a.keep:
            print('work directory: ' + work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print('%d failure(s)' % len(failures))
        return 1
    print('OK')
    return 0


if __name__ == '__main__':
    sys.exit(main())
