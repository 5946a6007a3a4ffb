#!/usr/bin/env python3
"""Stacks used again without a handshake (jvmti/sampler.c, the reuse rule).

  jvm_reuse.py --java-home JDK --lib libstackshot.so [--work DIR]

tests/java/StackMover.java at 10 ms: 50 threads parked for good, and one
thread that parks alternately in siteA and siteB (500 ms each, the same
JVMTI state in both). The agent takes a parked thread's stack again only
when its CPU clock moved since it last took it; so:
  - every round taken well inside a phase of the mover (from 5 ms before
    the round's time to 200 ms after it) shows the mover in that phase's
    site, never the stack of the phase before: a thread that moved ran;
  - the parked threads show the same 6 frames in every round after their
    first two (a thread caught at its start may not have parked yet);
  - most stacks were used again ("jvmti: stacks: ... used again", debug),
    and the exporters were told so (the text is the same as formatting
    it afresh: checked by the frames above);
  - the JVMTI state and GetThreadInfo's answer (name, priority, daemon) of
    a thread that did not run are used again too ("jvmti: thread facts",
    debug: more used again than read), yet a parked thread renamed by
    another thread shows its new name within a second (1.2 s allowed),
    and never before the rename;
  - the thread listing (GetAllThreads) is used again while no Java thread
    started or ended ("jvmti: thread listings", debug: more rounds used it
    again than listed), yet a thread that comes and goes ("comer-N", 600 ms
    each) is in every round as a Java thread from its start (10 ms after its run began: the
    agent counts the start before that) to 300 ms before it ended (a
    round's listing comes after its time stamp, up to tens of ms on a
    loaded machine), and in no round from 10 ms after it was joined.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jvm_whole  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
from jvm_whole import fail, failures  # noqa: E402


def main():
    ap = jvm_whole.base_parser()
    ap.add_argument('--ms', type=int, default=5000)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.java_home, 'bin', 'javac')):
        print('SKIP: no javac in ' + a.java_home)
        return 77
    work = a.work or tempfile.mkdtemp(prefix='ss-reuse-')
    classes = os.path.join(work, 'classes')
    out = os.path.join(work, 'out')
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(classes, exist_ok=True)
    os.makedirs(out)
    subprocess.run([os.path.join(a.java_home, 'bin', 'javac'), '-g', '-d', classes,
                    os.path.join(HERE, 'StackMover.java')], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(('STACKSHOT_', 'SPLUNK_'))}
    env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_OUTPUT_DIR': out,
                'STACKSHOT_EXPORTERS': 'text', 'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '10',
                'STACKSHOT_LOG_LEVEL': 'debug'})
    p = subprocess.run([os.path.join(a.java_home, 'bin', 'java'), '-agentpath:' + a.lib,
                        '-cp', classes, 'StackMover', str(a.ms), '500'],
                       env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail('host exited %d: %s' % (p.returncode, p.stderr[-2000:]))
    phases = [(m[1], int(m[2]) / 1000.0, int(m[3]) / 1000.0)
              for m in re.finditer(r'^phase ([AB]) (\d+) (\d+)$', p.stdout, re.M)]
    if len(phases) < 6:
        fail('the mover ran %d phases' % len(phases))
    path = jvm_whole.the_file(out)
    rounds = jvm_whole.rounds_of(path, True) if path else []
    checked = wrong = 0
    still_stacks = set()
    still_seen = {}  # name -> rounds it was in
    for when, threads in rounds:
        by = {t['name']: t for t in threads}
        for name, t in by.items():
            if not name.startswith('still-'):
                continue
            seen = still_seen[name] = still_seen.get(name, 0) + 1
            # a thread caught in its first two rounds may not have parked
            # yet: no Java frame (JVMTI gives none; jstack neither), or on
            # its way (JDK 25: Thread.scopedValueBindings under Thread.run)
            if seen > 2:
                still_stacks.add(tuple(t['frames']))
        mover = by.get('mover')
        if not mover:
            continue
        site = 'A' if any('StackMover.siteA(' in f for f in mover['frames']) else \
            'B' if any('StackMover.siteB(' in f for f in mover['frames']) else None
        for label, start, end in phases:
            if start <= when - 0.005 and when + 0.2 <= end:
                checked += 1
                if site != label:
                    wrong += 1
                    if wrong <= 5:
                        fail('round at %.3f (inside phase %s %.3f..%.3f): mover at %s: %s'
                             % (when, label, start, end, site, mover['frames'][:3]))
    print('%d rounds, %d checked against the mover\'s phases, %d wrong' % (
        len(rounds), checked, wrong))
    if checked < 50:
        fail('only %d rounds inside a phase' % checked)
    if len(still_stacks) != 1 or len(next(iter(still_stacks), ())) < 6:
        fail('parked threads: %d different stacks: %s' % (len(still_stacks),
                                                         list(still_stacks)[:3]))
    m = re.search(r'jvmti: stacks: (\d+) taken with GetStackTrace, (\d+) used again', p.stderr)
    if not m:
        fail('no "jvmti: stacks" line (no stack used again)')
    else:
        taken, reused = int(m[1]), int(m[2])
        print('stacks taken %d, used again %d' % (taken, reused))
        if reused < taken:
            fail('fewer stacks used again (%d) than taken (%d)' % (reused, taken))
    m = re.search(r'^renamed (\d+)$', p.stdout, re.M)
    renamed = int(m[1]) / 1000.0 if m else None
    if renamed is None:
        fail('the host did not rename its thread')
    else:
        late = early = after = 0
        for when, threads in rounds:
            names = {t['name'] for t in threads}
            if when < renamed - 0.005 and 'renamed' in names:
                early += 1
            if when > renamed + 1.2:
                after += 1
                late += 'renamed' not in names
        print('rename: %d rounds from 1.2 s after it, %d without the new name; %d with it '
              'before' % (after, late, early))
        if after < 20 or late or early:
            fail('renamed thread: %d rounds after, %d of them with the old name, %d rounds '
                 'with the new name before the rename' % (after, late, early))
    m = re.search(r'jvmti: thread facts: (\d+) GetThreadState, (\d+) used again; (\d+) '
                  r'GetThreadInfo of known threads, (\d+) used again', p.stderr)
    if not m:
        fail('no "jvmti: thread facts" line (no state or thread info used again)')
    else:
        print('GetThreadState %s, used again %s; GetThreadInfo %s, used again %s'
              % (m[1], m[2], m[3], m[4]))
        if int(m[2]) < int(m[1]) or int(m[4]) < int(m[3]):
            fail('fewer thread facts used again than read: %s' % m[0])
    comers = [(m[1], int(m[2]) / 1000.0, int(m[3]) / 1000.0)
              for m in re.finditer(r'^comer (\d+) (\d+) (\d+)$', p.stdout, re.M)]
    if len(comers) < 4:
        fail('only %d threads came and went' % len(comers))
    alive = missing = stale = 0
    for when, threads in rounds:
        names = {t['name'] for t in threads}
        # as a Java thread: one left out of the listing would be sampled by
        # the native pass as one of the VM's (#0, its name from /proc)
        java = {t['name'] for t in threads if t['kind'] == 'java'}
        for n, began, ended in comers:
            if began + 0.01 <= when <= ended - 0.3:
                alive += 1
                if 'comer-' + n not in java:
                    missing += 1
                    if missing <= 5:
                        fail('round at %.3f: comer-%s (%.3f..%.3f) missing' % (when, n, began,
                                                                                ended))
            elif when >= ended + 0.01 and 'comer-' + n in names:
                stale += 1
                if stale <= 5:
                    fail('round at %.3f: comer-%s, joined at %.3f, still there'
                         % (when, n, ended))
    print('threads that came and went: %d, %d rounds they had to be in, %d missing; %d rounds '
          'with one that had ended' % (len(comers), alive, missing, stale))
    if alive < 50:
        fail('only %d rounds checked against the threads that came and went' % alive)
    m = re.search(r'jvmti: thread listings: (\d+) GetAllThreads, (\d+) rounds used', p.stderr)
    if not m:
        fail('no "jvmti: thread listings" line (the listing never used again)')
    else:
        print('GetAllThreads %s, listing used again %s' % (m[1], m[2]))
        if int(m[2]) < int(m[1]):
            fail('the listing used again in fewer rounds (%s) than taken (%s)' % (m[2], m[1]))
    if failures:
        print('%d failures' % len(failures))
        return 1
    print('ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
