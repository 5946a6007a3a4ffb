#!/usr/bin/env python3
"""The guard around AsyncGetCallTrace (jvmti/agct.c).

  jvm_guard.py --java-home JDK --lib libstackshot.so [--work DIR]

tests/java/MixedHost.java (threads running: crc, spin; one sleeping) at
20 ms for 3 s with STACKSHOT_TEST_AGCT_FAULT=1: AsyncGetCallTrace is given
its frames on a read-only page, so on every walk it really faults inside
libjvm, on the running Java thread, in the sampling signal's handler.
  - the JVM lives: it exits 0, prints its own last line, writes no
    hs_err file;
  - the faults are caught and counted ("faults inside AsyncGetCallTrace
    were caught"), as many as the walks that fell back ("fault:N");
  - the running threads are still in every round, with the stack JVMTI
    gives (spin at MixedHost.spin).
Then tests/java/GuardNpe.java, with and without -Xrs: the JVM's own
faults (implicit null checks in compiled code, turned into
NullPointerExceptions by its SIGSEGV handler) still reach that handler
through the agent's: the host counts its exceptions and exits 0.
Without the guard the first walk ends the JVM with SIGSEGV (no hs_err
file either: the sampling handler blocks every signal, so the kernel
kills the process without running HotSpot's handler).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jvm_whole  # noqa: E402

from jvm_whole import fail, failures  # noqa: E402


def main():
    ap = jvm_whole.base_parser()
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.java_home, 'bin', 'javac')):
        print('SKIP: no javac in ' + a.java_home)
        return 77
    work = a.work or tempfile.mkdtemp(prefix='ss-guard-')
    out = os.path.join(work, 'out')
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    classes = jvm_whole.compile_host(a.java_home, work)
    for f in glob.glob(os.path.join(work, 'hs_err_pid*.log')):
        os.unlink(f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('STACKSHOT_', 'SPLUNK_'))}
    env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_OUTPUT_DIR': out,
                'STACKSHOT_EXPORTERS': 'text', 'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '20',
                'STACKSHOT_LOG_LEVEL': 'debug', 'STACKSHOT_TEST_AGCT_FAULT': '1'})
    p = subprocess.run([os.path.join(a.java_home, 'bin', 'java'), '-agentpath:' + a.lib,
                        '-cp', classes, 'MixedHost', '3000', 'crc,spin,sleeper'],
                       env=env, capture_output=True, text=True, timeout=120, cwd=work)
    hs = glob.glob(os.path.join(work, 'hs_err_pid*.log'))
    if p.returncode != 0:
        fail('the JVM exited %d%s' % (p.returncode, ' (hs_err: %s)' % hs[0] if hs else ''))
    if hs:
        fail('hs_err file written: ' + hs[0])
    if 'ready' not in p.stdout:
        fail('the host did not start')
    if 'AsyncGetCallTrace will fault (test)' not in p.stderr:
        fail('the test hook is not active: ' + p.stderr[-1500:])
    m = re.search(r'(\d+) faults inside AsyncGetCallTrace were caught', p.stderr)
    caught = int(m[1]) if m else 0
    f = re.search(r'fell back to the safepoint stack \(by code:[^)]*fault:(\d+)', p.stderr)
    fell = int(f[1]) if f else 0
    print('faults caught %d, walks fallen back for a fault %d' % (caught, fell))
    if caught < 10:
        fail('%d faults caught (expected one per walk of a running thread)' % caught)
    if fell < 10 or fell > caught:
        fail('%d walks fell back for a fault, %d faults caught' % (fell, caught))
    path = jvm_whole.the_file(out)
    rounds = jvm_whole.rounds_of(path) if path else []
    spin_ok = sum(1 for r in rounds for t in r
                  if t['name'] == 'spin' and any('MixedHost.spin' in fr for fr in t['frames']))
    with_spin = sum(1 for r in rounds for t in r if t['name'] == 'spin')
    print('%d rounds; spin in %d, at MixedHost.spin in %d' % (len(rounds), with_spin, spin_ok))
    if len(rounds) < 10 or with_spin < len(rounds) - 2 or spin_ok < with_spin - 2:
        fail('running threads not in the rounds with their JVMTI stacks')
    subprocess.run([os.path.join(a.java_home, 'bin', 'javac'), '-d', classes,
                    os.path.join(os.path.dirname(os.path.abspath(__file__)), 'GuardNpe.java')],
                   check=True)
    env.pop('STACKSHOT_TEST_AGCT_FAULT')
    for extra in ([], ['-Xrs']):
        q = subprocess.run([os.path.join(a.java_home, 'bin', 'java')] + extra +
                           ['-agentpath:' + a.lib, '-cp', classes, 'GuardNpe', '2000'],
                           env=env, capture_output=True, text=True, timeout=120, cwd=work)
        n = re.search(r'^npe (\d+)$', q.stdout, re.M)
        print('GuardNpe %s: exit %d, %s' % (' '.join(extra) or '(no -Xrs)', q.returncode,
                                             n[0] if n else 'no count'))
        if q.returncode != 0 or not n or int(n[1]) < 1000:
            fail('GuardNpe %s: exit %d: %s' % (extra, q.returncode, q.stderr[-1500:]))
        g = re.search(r'guard: \d+ faults caught inside AsyncGetCallTrace, (\d+) passed on',
                      q.stderr)
        print('  faults passed on to the JVM: %s' % (g[1] if g else 'none'))
        if not g or int(g[1]) < 1:
            fail('GuardNpe: no fault went through the guard to the JVM')
    if failures:
        print(p.stderr[-3000:])
        print('%d failures' % len(failures))
        return 1
    print('ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
