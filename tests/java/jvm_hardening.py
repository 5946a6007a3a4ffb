#!/usr/bin/env python3
"""Hardening checks with a JVM host (tests/java/HardHost.java): what the
native hosts of tests/hardening check, where it applies to a JVM.

  jvm_hardening.py --java-home JDK --lib libstackshot.so [--collector
                   tests/qubership/collector.py] CHECK

descriptors  the agent (text, pprof, flamegraph and qubership exporters,
             every 20 ms) beside a JVM that writes, reads back and checks
             its own 32 files in a loop: the JVM reads exactly what it
             wrote; while it runs, every descriptor of the agent's (its
             output files, its socket to the collector, its pipes) is
             close-on-exec; the JVM's standard output holds only its own
             lines; the agent's files hold rounds.
signals      a JVM whose Java code handles SIGHUP and SIGINT
             (sun.misc.Signal) and runs two busy threads the agent signals
             every 10 ms: 10 of each sent one at a time, each handled once
             (its own count), SIGQUIT still prints HotSpot's thread dump,
             the JVM exits 0.
timeout      the JVM under `timeout -s TERM 4` (coreutils): timeout exits
             124, the JVM's shutdown hook runs, the agent flushes on the
             way out (the text exporter's closing counters equal the rounds
             in its file), all within the shutdown timeout and slack.
             --preload: LD_PRELOAD on `timeout` (inherited by java, where
             the loader adds -agentpath), no -agentpath of our own.
xrs          the same under -Xrs: the JVM does not take SIGTERM, so it is
             killed as without the agent (no hook, promptly); the agent
             installed nothing on SIGTERM that would keep it alive.
tasks        a JVM that starts sleeping threads until one fails ("unable to
             create native thread"), as a user of its own under
             `prlimit --nproc=64`, and as root in a cgroup whose pids.max
             is 64: with the agent (text; otlp_logs to a dead endpoint) it
             starts as many as without it, one fewer at most (the agent's
             sampler is a Java thread, which ends only once the JVM's
             creating thread lets go of its lock); one line says the agent
             leaves, the text file holds the rounds from before. Before:
             2 fewer with text, 9 with otlp_logs (gRPC's threads).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import jvm_whole  # noqa: E402
O_CLOEXEC = 0o2000000
from jvm_whole import fail, failures  # noqa: E402


def compile_host(jh, work):
    return jvm_whole.compile_host(jh, work, 'HardHost.java')


def agent_env(out, **kv):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(('STACKSHOT_', 'SPLUNK_', 'OTEL_', 'JAVA_TOOL_OPTIONS', 'LD_PRELOAD')):
            del env[k]
    env.update({'SPLUNK_PROFILER_ENABLED': 'true', 'STACKSHOT_OUTPUT_DIR': out,
                'SPLUNK_PROFILER_CALL_STACK_INTERVAL': '20', 'STACKSHOT_EXPORTERS': 'text'})
    env.update(kv)
    return env


class Lines:
    """A process's standard output, read line by line on a thread (and its
    standard error on another: .err once it ended)."""

    def __init__(self, p):
        self.p = p
        self.lines = []
        self.errs = []
        self.cv = threading.Condition()
        self.t = threading.Thread(target=self._read, args=(p.stdout,), daemon=True)
        self.t.start()
        self.te = threading.Thread(target=lambda: self.errs.append(p.stderr.read()), daemon=True)
        self.te.start()

    def wait_end(self, timeout):
        self.p.wait(timeout)
        self.t.join(10)
        self.te.join(10)
        self.err = ''.join(self.errs)

    def _read(self, f):
        for line in f:
            with self.cv:
                self.lines.append(line.rstrip('\n'))
                self.cv.notify_all()

    def wait_for(self, pred, timeout):
        end = time.time() + timeout
        with self.cv:
            while not any(pred(l) for l in self.lines):
                left = end - time.time()
                if left <= 0:
                    return False
                self.cv.wait(left)
        return True


def rounds_in(out, prefix='java'):
    if not os.path.isdir(out):
        return None, 0
    files = [f for f in os.listdir(out) if f.startswith(prefix + '.') and f.endswith('.txt')]
    if not files:
        return None, 0
    path = os.path.join(out, sorted(files)[0])
    with open(path, errors='replace') as f:
        return path, sum(1 for l in f if l.startswith('Full thread dump'))


def fd_table(pid):
    """fd -> (link, flags) of a live process."""
    table = {}
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            link = os.readlink('/proc/%d/fd/%s' % (pid, fd))
            with open('/proc/%d/fdinfo/%s' % (pid, fd)) as f:
                flags = int(re.search(r'^flags:\s+([0-7]+)', f.read(), re.M).group(1), 8)
        except (OSError, AttributeError):
            continue  # closed in between
        table[int(fd)] = (link, flags)
    return table


def socket_inodes_to(pid, port):
    """inodes of the process's TCP sockets whose remote port is `port`."""
    inodes = set()
    for name in ('tcp', 'tcp6'):
        try:
            with open('/proc/%d/net/%s' % (pid, name)) as f:
                next(f)
                for line in f:
                    col = line.split()
                    if int(col[2].rsplit(':', 1)[1], 16) == port:
                        inodes.add(col[9])
        except OSError:
            pass
    return inodes


def check_descriptors(a, work):
    classes = compile_host(a.java_home, work)
    out, own = os.path.join(work, 'out'), os.path.join(work, 'own')
    os.makedirs(own)
    coll = None
    exporters = 'text,pprof,flamegraph'
    extra = {}
    if a.collector and os.path.exists(a.collector):
        coll = subprocess.Popen([sys.executable, a.collector, '--port', '0', '--out',
                                 os.path.join(work, 'coll')], stdout=subprocess.PIPE, text=True)
        port = int(coll.stdout.readline())
        exporters += ',qubership'
        extra = {'REMOTE_DUMP_HOST': '127.0.0.1', 'REMOTE_DUMP_PORT_PLAIN': str(port),
                 'STACKSHOT_QUBERSHIP_WINDOW': '1'}
    env = agent_env(out, STACKSHOT_EXPORTERS=exporters, STACKSHOT_PPROF_PERIOD='1', **extra)
    try:
        p = subprocess.Popen([os.path.join(a.java_home, 'bin', 'java'), '-agentpath:' + a.lib,
                              '-cp', classes, 'HardHost', 'files', own, '5000'],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = Lines(p)
        if not lines.wait_for(lambda l: l == 'ready', 60):
            fail('the JVM did not start')
        # a few seconds in: the exporters have opened what they keep open
        checked, seen, bad = 0, {}, set()
        for _ in range(6):
            time.sleep(0.5)
            if p.poll() is not None:
                break
            socks = socket_inodes_to(p.pid, port) if coll else set()
            for fd, (link, flags) in fd_table(p.pid).items():
                inode = link[len('socket:['):-1] if link.startswith('socket:[') else None
                agent = (link.startswith(out + '/') or (inode and inode in socks) or
                         (fd > 2 and link.startswith('pipe:')))
                if not agent:
                    continue
                checked += 1
                seen[link if not inode else 'socket to the collector'] = flags
                if not flags & O_CLOEXEC and fd not in bad:
                    bad.add(fd)
                    fail('descriptor %d (%s) of the agent is not close-on-exec (flags %o)' %
                         (fd, link, flags))
        lines.wait_end(120)
        err = lines.err
    finally:
        if coll:
            coll.kill()
            coll.wait()
    print('agent descriptors checked: %d, e.g. %s' % (checked, sorted(seen)[:6]))
    if p.returncode != 0:
        fail('the JVM exited %d: %s' % (p.returncode, err[-1500:]))
    foreign = [l for l in lines.lines if l != 'ready' and not l.startswith('files ')]
    if foreign:
        fail('the JVM\'s standard output holds lines not its own: %s' % foreign[:3])
    if not any(l.startswith('files ok ') for l in lines.lines):
        fail('the JVM\'s own files: %s' % [l for l in lines.lines if l.startswith('files')])
    if not any(l.startswith(out + '/') for l in seen):
        fail('no output file of the agent open while the JVM ran')
    if coll and 'socket to the collector' not in seen:
        fail('no socket to the collector while the JVM ran')
    _, n = rounds_in(out)
    if n < 10:
        fail('only %d rounds in the text output' % n)
    print('\n'.join(l for l in lines.lines if l.startswith('files')))


def check_signals(a, work):
    classes = compile_host(a.java_home, work)
    out = os.path.join(work, 'out')
    env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL='10')
    p = subprocess.Popen([os.path.join(a.java_home, 'bin', 'java'), '-agentpath:' + a.lib,
                          '-cp', classes, 'HardHost', 'signals'],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    lines = Lines(p)
    n = 10
    try:
        if not lines.wait_for(lambda l: l == 'ready', 60):
            fail('the JVM did not start')
        # signals sent while the agent samples: after its first rounds
        # (a loaded machine may take seconds for them), 30 ms apart
        end = time.time() + 60
        while rounds_in(out)[1] < 5 and time.time() < end:
            time.sleep(0.1)
        before = rounds_in(out)[1]
        for i in range(1, n + 1):
            for name, sig in (('HUP', signal.SIGHUP), ('INT', signal.SIGINT)):
                time.sleep(0.03)
                os.kill(p.pid, sig)
                want = 'sig %s %d' % (name, i)
                if not lines.wait_for(lambda l, w=want: l == w, 10):
                    fail('no "%s" within 10 s' % want)
                    break
            if failures:
                break
        os.kill(p.pid, signal.SIGQUIT)
        if not lines.wait_for(lambda l: l.startswith('Full thread dump'), 10):
            fail('SIGQUIT: no thread dump from the JVM')
        lines.wait_for(lambda l: l.startswith('JNI global refs') or
                       l.startswith('Heap'), 5)
        p.stdin.close()
        lines.wait_end(60)
        err = lines.err
    finally:
        if p.poll() is None:
            p.kill()
    counts = [l for l in lines.lines if l.startswith('counts ')]
    print(counts[0] if counts else 'no counts line')
    if p.returncode != 0:
        fail('the JVM exited %d: %s' % (p.returncode, err[-1500:]))
    if counts != ['counts HUP %d INT %d' % (n, n)]:
        fail('handler counts %s, want %d of each' % (counts, n))
    _, rounds = rounds_in(out)
    print('%d rounds in the text output, %d of them after the first signal' % (
        rounds, rounds - before))
    if before < 5 or rounds - before < 5:
        fail('%d rounds before the signals, %d during and after' % (before, rounds - before))


def run_under_timeout(a, work, xrs=False, preload=False, secs=4):
    classes = compile_host(a.java_home, work)
    out = os.path.join(work, 'out')
    env = agent_env(out, STACKSHOT_SHUTDOWN_TIMEOUT='1000', STACKSHOT_LOG_LEVEL='debug')
    java = [os.path.join(a.java_home, 'bin', 'java')] + (['-Xrs'] if xrs else [])
    if preload:
        env['LD_PRELOAD'] = a.lib
    else:
        java.append('-agentpath:' + a.lib)
    t0 = time.time()
    # -k: a JVM that does not end on SIGTERM is killed 10 s later (a
    # failure, found in bounded time)
    r = subprocess.run(['timeout', '-k', '10', '-s', 'TERM', str(secs)] + java +
                       ['-cp', classes, 'HardHost', 'hook'],
                       env=env, capture_output=True, text=True, timeout=120)
    took = time.time() - t0
    return r, took, out


def check_timeout(a, work):
    secs = 4
    r, took, out = run_under_timeout(a, work, preload=a.preload, secs=secs)
    path, rounds = rounds_in(out)
    acc = [l for l in r.stderr.split('\n') if re.search(r'accounting: .*text: rounds', l)]
    print('timeout exit %d after %.1f s; %d rounds in %s; %s' % (
        r.returncode, took, rounds, path and os.path.basename(path), acc[-1:] or 'no accounting'))
    if r.returncode != 124:
        fail('timeout exited %d, want 124: %s' % (r.returncode, r.stderr[-1500:]))
    if 'hook ran' not in r.stdout.split('\n'):
        fail('the JVM\'s shutdown hook did not run: %r' % r.stdout[-500:])
    if rounds < 20:
        fail('only %d rounds in the text output' % rounds)
    # the exit's accounting line of the JVM's agent: every round in the file
    want = '(%d in, 0 dropped queued, ' % rounds
    if not any(want in l for l in acc):
        fail('the exporter\'s closing counters %s do not match the %d rounds in the file' %
             (acc, rounds))
    # the JVM's own exit and the agent's flush (STACKSHOT_SHUTDOWN_TIMEOUT
    # 1000) after the signal, with slack for a loaded machine
    if took > secs + 1 + 5:
        fail('the JVM ended %.1f s after the start, %d s timeout' % (took, secs))
    if a.preload:
        tfiles = [f for f in os.listdir(out) if f.startswith('timeout.')]
        print('output of the agent in timeout itself: %s' % (tfiles or 'none'))


def check_xrs(a, work):
    secs = 3
    r, took, out = run_under_timeout(a, work, xrs=True, secs=secs)
    path, rounds = rounds_in(out)
    print('timeout exit %d after %.1f s; %d rounds in the file before the kill' % (
        r.returncode, took, rounds))
    if r.returncode != 124:
        fail('timeout exited %d, want 124: %s' % (r.returncode, r.stderr[-1500:]))
    if 'hook ran' in r.stdout:
        fail('the shutdown hook ran under -Xrs: something caught SIGTERM')
    if 'ready' not in r.stdout:
        fail('the JVM did not start: %s' % r.stderr[-1500:])
    if took > secs + 5:
        fail('the JVM ended %.1f s after the start, %d s timeout: SIGTERM did not kill it' %
             (took, secs))
    if rounds < 5:
        fail('only %d rounds before the kill' % rounds)


def free_port():
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as so:
        so.bind(('127.0.0.1', 0))
        return so.getsockname()[1]


def tasks_run(a, classes, argv_prefix, out, exporter=None):
    """HardHost threads under a limit (argv_prefix sets it): (count, run)."""
    java = [os.path.join(a.java_home, 'bin', 'java'), '-XX:-UsePerfData', '-Xss256k']
    env = dict(os.environ)
    if exporter:
        java.append('-agentpath:' + a.lib)
        env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL='100', STACKSHOT_EXPORTERS=exporter,
                        OTEL_EXPORTER_OTLP_ENDPOINT='http://127.0.0.1:%d' % free_port())
    r = subprocess.run(argv_prefix + java + ['-cp', classes, 'HardHost', 'threads', '1500', '1000'],
                       env=env, capture_output=True, text=True, timeout=120)
    m = re.search(r'^threads (\d+)$', r.stdout, re.M)
    return (int(m.group(1)) if m else -1), r


def tasks_compare(a, classes, what, argv_prefix, base, exporters):
    alone, r = tasks_run(a, classes, argv_prefix, None)
    print('%s, without the agent: %d threads' % (what, alone))
    if r.returncode != 0 or alone < 10:
        fail('%s, without the agent: exit %d, %r %s' % (what, r.returncode, r.stdout, r.stderr[-800:]))
        return
    for exporter in exporters:
        # the agent makes its user's directory (one it does not own is refused)
        out = os.path.join(base, '%s-%s-%%u' % (what.split()[0], exporter))
        n, r = tasks_run(a, classes, argv_prefix, out, exporter)
        lines = [l for l in r.stderr.splitlines() if l.startswith('stackshot:')]
        leave = [l for l in lines if 'short of threads or processes' in l]
        slow = re.search(r'^slowest start (\d+) ms$', r.stdout, re.M)
        print('%s, %s: %d threads, slowest Thread.start %s ms; %s' % (
            what, exporter, n, slow.group(1) if slow else '?', leave))
        if r.returncode != 0 or n < alone - 1:
            fail('%s, %s: %d threads, %d without the agent (exit %d): %s' % (
                what, exporter, n, alone, r.returncode, r.stderr[-1500:]))
        if len(leave) != 1 or 'pthread_create (a Java thread) failed with EAGAIN' not in leave[0]:
            fail('%s, %s: one line says the agent leaves: %s' % (what, exporter, lines))
        if 'hs_err' in r.stdout + r.stderr:
            fail('%s, %s: the JVM crashed' % (what, exporter))
        if exporter == 'text':
            made = [os.path.join(base, d) for d in os.listdir(base)
                    if d.startswith(os.path.basename(out).rsplit('%', 1)[0])]
            rounds = sum(rounds_in(d)[1] for d in made)
            lost = [l for l in lines if 'lost' in l or 'dropped' in l]
            if rounds < 1 or lost:
                fail('%s: the rounds from before the leave are in the file (%d), none lost: %s' % (
                    what, rounds, lost))


def check_tasks(a, work):
    if os.geteuid() != 0 or not shutil.which('setpriv') or not shutil.which('prlimit'):
        print('skipped: root, setpriv and prlimit (util-linux) are needed')
        sys.exit(77)
    classes = compile_host(a.java_home, work)
    for root, dirs, files in os.walk(work):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    base = os.path.join(work, 'tasks')
    os.makedirs(base)
    os.chmod(base, 0o1777)
    # a user of this JDK's own: RLIMIT_NPROC counts every task of the user
    uid = str(54340 + sum(map(ord, os.path.realpath(a.java_home))) % 50)
    user = ['setpriv', '--reuid=' + uid, '--regid=' + uid, '--clear-groups', 'prlimit', '--nproc=64']
    tasks_compare(a, classes, 'RLIMIT_NPROC 64', user, base, ('text', 'otlp_logs'))
    # root in a cgroup whose pids.max is 64 (a container's --pids-limit)
    for cg in ('/sys/fs/cgroup/pids', '/sys/fs/cgroup'):
        if not os.path.exists(os.path.join(cg, 'cgroup.procs')):
            continue
        d = os.path.join(cg, 'stackshot-jvm-tasks-%d' % os.getpid())
        try:
            os.mkdir(d)
            with open(os.path.join(d, 'pids.max'), 'w') as f:
                f.write('64')
        except OSError:
            continue
        try:
            inside = ['sh', '-c', 'echo $$ > %s/cgroup.procs && exec "$@"' % d, 'sh']
            tasks_compare(a, classes, 'pids.max 64', inside, base, ('text',))
        finally:
            time.sleep(0.3)
            try:
                os.rmdir(d)
            except OSError:
                pass
        break
    else:
        print('no pids cgroup can be made here: that part skipped')


def main():
    ap = jvm_whole.base_parser()
    ap.add_argument('--collector')
    ap.add_argument('--preload', action='store_true')
    ap.add_argument('check', choices=['descriptors', 'signals', 'timeout', 'xrs', 'tasks'])
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.java_home, 'bin', 'javac')):
        print('no JDK at ' + a.java_home)
        return 77
    if a.check in ('timeout', 'xrs') and not shutil.which('timeout'):
        print('no timeout(1)')
        return 77
    work = a.work or tempfile.mkdtemp(prefix='ss-jvm-hard.')
    try:
        {'descriptors': check_descriptors, 'signals': check_signals,
         'timeout': check_timeout, 'xrs': check_xrs, 'tasks': check_tasks}[a.check](a, work)
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
