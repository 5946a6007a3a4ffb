#!/usr/bin/env python3
"""Run examples/java/Demo.java under the agent and compare the agent's
thread dump with jstack's, thread by thread and frame by frame.

  jstack_compare.py --java-home JDK --lib libstackshot.so --classes DIR --work DIR
                    [--attach]

--attach starts the demo without the agent and loads it late with
`jcmd <pid> JVMTI.agent_load`; the comparison is the same (so the kernel
tids found from /proc for threads the agent did not see start are checked
against jstack too).

Compared for every thread the agent printed: name, #id, daemon, prio,
os_prio, tid (the JavaThread address), nid (JDK 17 prints hex, 21+
decimal: numbers are compared), the status word, the java.lang.Thread.State
line and every frame (class, method, module prefix, file, line) in order.
jstack's lock lines ("- locked <...>") are not frames. cpu and elapsed
differ by nature and are only checked for shape and plausibility. The
running busy-worker is compared on the frames below its leaf. Internal
threads (Reference Handler, ...) and the agent's own threads must be absent.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HEADER = re.compile(
    r'^"(?P<name>.*)" #(?P<num>\d+)(?: \[(?P<ostid>\d+)\])? (?P<daemon>daemon )?'
    r'prio=(?P<prio>\d+) os_prio=(?P<osprio>-?\d+) cpu=(?P<cpu>[0-9.]+)ms '
    r'elapsed=(?P<elapsed>[0-9.]+)s tid=0x(?P<tid>[0-9a-f]+) '
    r'nid=(?P<nid>0x[0-9a-f]+|\d+) (?P<status>.*?)\s*(?:\[0x[0-9a-f]+\])?$')

APP_THREADS = ['main', 'busy-worker', 'sleeper', 'parked', 'monitor-waiter',
               'monitor-holder', 'recursive', 'inner', 'w\u00f6rker-\u7ebf\u7a0b',
               'monitor-blocked']
INTERNAL = ['Reference Handler', 'Finalizer', 'Signal Dispatcher', 'Common-Cleaner',
            'Notification Thread', 'Attach Listener']

failures = []
JAVA_FRAME = re.compile(r'(\.java:\d+|Native Method|Unknown Source)\)$')


def fail(msg):
    failures.append(msg)
    print('FAIL: ' + msg)


def parse_dump(text):
    """Thread blocks of a dump: name -> dict (header fields, state, frames)."""
    threads = {}
    cur = None
    for line in text.split('\n'):
        m = HEADER.match(line)
        if m:
            cur = m.groupdict()
            cur['state'] = None
            cur['frames'] = []
            threads[cur['name']] = cur
            continue
        if cur is None:
            continue
        if line.startswith('   java.lang.Thread.State: '):
            cur['state'] = line.strip()
        elif line.startswith('\tat '):
            cur['frames'].append(line[4:])
        elif line == '':
            cur = None
    return threads


def last_round(path):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    parts = text.split('Full thread dump stackshot round ')
    return parts[-1] if len(parts) > 1 else '', len(parts) - 1


def rounds_in(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read().count('Full thread dump stackshot round ')
    except FileNotFoundError:
        return 0


def compare(agent, js, jdk_major, attach, internal):
    for name in APP_THREADS:
        if name not in agent:
            fail('agent output lacks thread %r' % name)
    for name in INTERNAL:
        if internal and name in js and name not in agent:
            fail('internal thread %r missing with INCLUDE_INTERNAL_STACKS=true' % name)
        if not internal and name in agent:
            fail('internal thread %r was sampled' % name)
    for name in agent:
        if name.startswith('stackshot-'):
            fail('agent thread %r was sampled' % name)
    for name, a in agent.items():
        if a.get('virtual'):
            continue
        if a['num'] == '0':
            continue  # the VM's own threads (#0, no Java id): java_*_vmthreads
        j = js.get(name)
        if j is None:
            if name == 'virtual-sleeper':
                continue  # jstack never lists virtual threads
            fail('thread %r is in the agent output, not in jstack' % name)
            continue
        for key in ('num', 'daemon', 'prio', 'osprio', 'tid', 'status', 'state'):
            # documented: a RUNNABLE thread waiting inside the VM (Reference
            # Handler, Signal Dispatcher) has a status JVMTI cannot see
            if key == 'status' and name in INTERNAL and j['status'] == 'waiting on condition' \
                    and a['status'] == 'runnable' and j['state'].endswith('RUNNABLE'):
                continue
            if (a[key] or '') != (j[key] or ''):
                fail('%s: %s differs: agent %r, jstack %r' % (name, key, a[key], j[key]))
        if int(a['nid'], 0) != int(j['nid'], 0):
            fail('%s: nid differs: agent %s, jstack %s' % (name, a['nid'], j['nid']))
        if j.get('ostid') and int(a['nid'], 0) != int(j['ostid']):
            fail('%s: nid %s is not jstack os tid [%s]' % (name, a['nid'], j['ostid']))
        # the agent's round comes after jstack: both clocks only move forward
        # (printed with 2 decimals: allow one unit of rounding)
        if not float(j['elapsed']) - 0.011 <= float(a['elapsed']) <= float(j['elapsed']) + 5:
            fail('%s: elapsed %s, jstack %s' % (name, a['elapsed'], j['elapsed']))
        if not float(j['cpu']) - 0.011 <= float(a['cpu']) <= float(j['cpu']) + 5000:
            fail('%s: cpu %sms, jstack %sms' % (name, a['cpu'], j['cpu']))
        af, jf = a['frames'], j['frames']
        if name == 'busy-worker':
            # running: the leaf and its line move; below Demo.busy nothing does.
            # Taken where it runs (STACKSHOT_JAVA_STACKS=mixed, the default),
            # native frames (a call into the VM, a stub) may be on top
            while af and not JAVA_FRAME.search(af[0]):
                af = af[1:]
            if len(af) < 4 or af[-3:] != jf[-3:] or \
                    not any(f.startswith('Demo.busy(Demo.java:') for f in af):
                fail('busy-worker bottom frames differ:\n  agent  %s\n  jstack %s' % (af, jf))
            if af and not af[0].startswith(('Demo.computePrimes(', 'Demo.busy(')):
                fail('busy-worker leaf %r is not in Demo' % af[0])
            continue
        if af != jf:
            fail('%s: frames differ:\n  agent  %s\n  jstack %s' % (name, af, jf))
    # jdk-specific spot checks of what matters most
    blocked = agent.get('monitor-blocked')
    if blocked and blocked['state'] != 'java.lang.Thread.State: BLOCKED (on object monitor)':
        fail('monitor-blocked state %r' % blocked['state'])
    # virtual threads started before a late attach are unknown to JVMTI
    if jdk_major >= 21 and not attach and 'virtual-sleeper' not in agent:
        fail('JDK %d: the virtual thread virtual-sleeper was not sampled' % jdk_major)
    vs = agent.get('virtual-sleeper')
    if vs and not any(f.startswith('Demo.virtualSleeper(Demo.java:') for f in vs['frames']):
        fail('virtual-sleeper frames lack Demo.virtualSleeper: %s' % vs['frames'])


def jdk_major(java):
    out = subprocess.run([java, '-version'], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--java-home', required=True)
    ap.add_argument('--lib', required=True)
    ap.add_argument('--classes', required=True)
    ap.add_argument('--attach', action='store_true')
    ap.add_argument('--internal', action='store_true',
                    help='SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS=true: compare JVM threads too')
    ap.add_argument('--stacks', default='all',
                    help='STACKSHOT_JVMTI_STACKS: all, list or each')
    args = ap.parse_args()
    bin_ = os.path.join(args.java_home, 'bin')
    java, jstack, jcmd = (os.path.join(bin_, x) for x in ('java', 'jstack', 'jcmd'))
    major = jdk_major(java)
    global out_dir
    out_dir = tempfile.mkdtemp(prefix='ss-java-')
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(('SPLUNK_', 'STACKSHOT_', 'OTEL_')):
            del env[k]
    opts = ('SPLUNK_PROFILER_CALL_STACK_INTERVAL=200,STACKSHOT_EXPORTERS=text,'
            'STACKSHOT_OUTPUT_DIR=' + out_dir)
    if args.internal:
        opts += ',SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS=true'
    opts += ',STACKSHOT_JVMTI_STACKS=' + args.stacks
    cmd = [java, '-Xss2m']
    if args.attach:
        cmd += ['-XX:+EnableDynamicAgentLoading'] if major >= 21 else []
    else:
        env['SPLUNK_PROFILER_ENABLED'] = 'true'
        env['SPLUNK_PROFILER_CALL_STACK_INTERVAL'] = '200'
        env['STACKSHOT_OUTPUT_DIR'] = out_dir
        env['STACKSHOT_EXPORTERS'] = 'text'
        env['STACKSHOT_JVMTI_STACKS'] = args.stacks
        if args.internal:
            env['SPLUNK_PROFILER_INCLUDE_INTERNAL_STACKS'] = 'true'
        cmd.append('-agentpath:' + args.lib)
    cmd += ['-cp', args.classes, 'Demo', '40']
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = ''
        deadline = time.time() + 30
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line or line.strip() == 'ready':
                break
        if line.strip() != 'ready':
            fail('demo did not get ready')
            return
        if args.attach:
            # jcmd splits its arguments at '=': the option string goes in quotes
            r = subprocess.run([jcmd, str(proc.pid), 'JVMTI.agent_load', args.lib,
                                '"SPLUNK_PROFILER_ENABLED=true,' + opts + '"'],
                               capture_output=True, text=True, timeout=30)
            print(r.stdout.strip())
            if r.returncode != 0:
                fail('jcmd JVMTI.agent_load failed: %s %s' % (r.stdout, r.stderr))
                return
        path = os.path.join(out_dir, 'java.%d.txt' % proc.pid)
        deadline = time.time() + 20
        while rounds_in(path) < 2 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        js_text = subprocess.run([jstack, str(proc.pid)], capture_output=True, text=True,
                                 timeout=60).stdout
        # a round started after jstack returned
        seen = rounds_in(path)
        deadline = time.time() + 10
        while rounds_in(path) < seen + 2 and time.time() < deadline:
            time.sleep(0.05)
        agent_text, n = last_round(path)
        if n == 0:
            fail('no rounds in %s' % path)
            return
        with open(os.path.join(out_dir, 'jstack.txt'), 'w', encoding='utf-8') as f:
            f.write(js_text)
        agent = parse_dump(agent_text)
        js = parse_dump(js_text)
        print('JDK %d%s: %d threads in the agent round, %d in jstack; output in %s'
              % (major, ' (late attach)' if args.attach else '', len(agent), len(js), out_dir))
        if major >= 21 and 'virtual-sleeper' in agent:
            agent['virtual-sleeper']['virtual'] = True
        compare(agent, js, major, args.attach, args.internal)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        # the runtime facts the agent read from the JVM's system properties
        ver = subprocess.run([java, '-version'], capture_output=True, text=True).stderr
        m = re.search(r'Runtime Environment.*\(build ([^)]+)\)', ver)
        facts = [l for l in (err or '').splitlines() if l.startswith('stackshot: jvmti: ')]
        if not m or not facts or ('Runtime Environment %s (' % m.group(1)) not in facts[0] or \
                ('virtual threads sampled' in facts[0]) != (major >= 21):
            fail('runtime facts line %r does not match java -version build %r'
                 % (facts[:1], m.group(1) if m else None))
        bad = [l for l in (err or '').splitlines()
               if 'stackshot' in l and ('error' in l.lower() or 'warn' in l.lower())]
        for l in bad:
            fail('agent complained: ' + l)
    if failures:
        print('%d failure(s)' % len(failures))
        sys.exit(1)
    print('OK: agent output matches jstack')
    shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == '__main__':
    main()
