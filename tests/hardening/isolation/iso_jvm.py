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
exporter every 50 ms. Checks:
  - the JVM exits 0; no fake was called by anybody but the host ("FAKE"
    on stderr, and the host's own count of foreign calls is 0);
  - each of the host's 14 functions answered as its own, before and after
    the agent ran (its return value and its own count of calls);
  - the core was loaded isolated (RTLD_DEEPBIND, debug line);
  - the agent wrote its rounds (at least 3), with the JVM's thread names
    and the busy threads' Java frames (isoBusyInner under isoBusyOuter).
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


def check(a, work):
    classes = os.path.join(work, 'classes')
    os.makedirs(classes)
    subprocess.run([os.path.join(a.java_home, 'bin', 'javac'), '-g', '-d', classes,
                    os.path.join(HERE, 'IsoHost.java')], check=True)
    out = os.path.join(work, 'out')
    os.makedirs(out)
    jni = os.path.abspath(a.jni)
    cmd = [os.path.join(a.java_home, 'bin', 'java'), '-agentpath:' + a.lib, '-Xmx64m',
           '-cp', classes, 'IsoHost', jni, str(RUN_MS)]
    p = subprocess.run(cmd, env=agent_env(out, jni), capture_output=True, text=True,
                       timeout=90)
    print(p.stdout, end='')
    if p.returncode != 0:
        fail('the JVM exited %d\n%s' % (p.returncode, p.stderr[-3000:]))
    fakes = [l for l in p.stderr.splitlines() if 'FAKE' in l]
    if fakes:
        fail('the host\'s functions were called by the agent: %s' % fakes)
    for when in ('before', 'after'):
        m = re.search(r'^self %s (\d+)/(\d+)$' % when, p.stdout, re.M)
        if not m:
            fail('no "self %s" line' % when)
        elif m.group(1) != m.group(2) or m.group(2) != '14':
            fail('%s the agent ran, %s of %s of the host\'s functions answered as its own'
                 % (when, m.group(1), m.group(2)))
    m = re.search(r'^foreign calls (\d+)$', p.stdout, re.M)
    if not m or m.group(1) != '0':
        fail('the host counted foreign calls of its functions: %s' % (m and m.group(1)))
    if 'core loaded isolated (RTLD_DEEPBIND)' not in p.stderr:
        fail('the core was not loaded isolated:\n' +
             '\n'.join(l for l in p.stderr.splitlines() if 'core loaded' in l))
    rounds = rounds_of(out)
    if len(rounds) < 3:
        fail('%d rounds in the text file' % len(rounds))
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
            fail('no thread "%s" in the text file (names: %s)' % (want, sorted(names)[:20]))
    if busy_frames == 0:
        fail('no iso-busy stack with isoBusyInner under isoBusyOuter')
    print('%d rounds, %d thread names, %d iso-busy stacks with both frames'
          % (len(rounds), len(names), busy_frames))


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
