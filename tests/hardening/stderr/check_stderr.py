#!/usr/bin/env python3
"""The agent's lines and the host's stderr, end to end.

usage: check_stderr.py <case> <stderr_host> <libstackshot.so> <tmpdir>
cases: full_exit, full_socket, full_tty, full_exec, full_fork, drain,
full_other_user, drain_other_user, early_log, closeall_logfile, reassign, closeall, early, early_closed

full_*: fd 2 is a pipe the test filled and never reads. The host runs
without the agent, then with it (text exporter, 20 ms, log level info: the
agent has its start line to write); with it the host must end in about the
same time (under 2x + 3 s: a hang detector, not a performance assertion),
exit 0 and find its stderr's flags as it left them.
drain: the same full pipe, read by the test from 0.8 s on: the start line
was dropped, and the line at exit says so.
full_other_user, drain_other_user: full_exit and drain with the host as
nobody and its stderr a pipe root created: the agent cannot open the pipe
again through /proc (its inode is 0600 root) and splices its lines in.
full_socket, full_tty: full_exit with fd 2 a full socket, a full pty.
reassign / closeall / early / early_closed: the host puts a data file of its
own on fd 2 (after the agent started, after closing every descriptor too,
before the agent started, or with fd 2 closed from the start); the data
files must hold the host's bytes only. early_log: the file the host puts on
fd 2 before the agent starts is its log (write-only, O_APPEND, as nginx's
error log): the agent's lines go there. closeall_logfile: closeall with
STACKSHOT_LOG_FILE, whose descriptor the host closes and reuses: the agent
writes nothing into the data files and opens its log again by name. See
docs/safety/guest.md."""
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tty

case, host, lib, tmp = sys.argv[1:5]
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def clean(d):
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        p = os.path.join(d, f)
        if os.path.isdir(p):
            clean(p)
            os.rmdir(p)
        else:
            os.unlink(p)


def env_for(agent, level="info", exporters="text", interval="20"):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if agent:
        env.update(SPLUNK_PROFILER_ENABLED="true", STACKSHOT_EXPORTERS=exporters,
                   STACKSHOT_OUTPUT_DIR=os.path.join(tmp, "out"), STACKSHOT_LOG_LEVEL=level,
                   SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval, LD_PRELOAD=lib)
    return env


def full_pipe(kind="pipe"):
    """A pipe (socket, pty) filled to the brim; the read end stays with the
    test, unread."""
    if kind == "socket":
        w, r = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        w, r = w.detach(), r.detach()
    elif kind == "tty":
        r, w = os.openpty()
        tty.setraw(w)
    else:
        r, w = os.pipe()
    fl = fcntl.fcntl(w, fcntl.F_GETFL)
    fcntl.fcntl(w, fcntl.F_SETFL, fl | os.O_NONBLOCK)
    filled = 0
    try:
        while True:
            filled += os.write(w, b"x" * (4096 if kind != "tty" else 64))
    except BlockingIOError:
        pass
    # the host gets the write end as it would from a shell: blocking
    fcntl.fcntl(w, fcntl.F_SETFL, fl)
    return r, w, filled


# *_other_user: the host runs as nobody, its stderr a pipe root created
# (mode 0600: the agent cannot open it again through /proc, and splices)
as_nobody = case.endswith("_other_user")


def run_bounded(args, env, stderr, bound, preexec=None, started=None):
    """(exit code or None when it had to be killed, seconds, stdout)."""
    cmd = [host] + args
    if as_nobody:
        # the agent in the host only, not in setpriv
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "env"] + \
            (["LD_PRELOAD=" + env.pop("LD_PRELOAD")] if "LD_PRELOAD" in env else []) + cmd
        env.pop("STACKSHOT_OUTPUT_DIR", None)  # the default: $TMPDIR/stackshot-%u
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr,
                         start_new_session=True, preexec_fn=preexec)
    if started is not None:
        started.append(p.pid)
    try:
        out, _ = p.communicate(timeout=bound)
        return p.returncode, time.monotonic() - t0, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, time.monotonic() - t0, out.decode(errors="replace")


def full(args, kind="pipe"):
    """The host with fd 2 a full pipe nobody reads, without then with the agent."""
    r, w, filled = full_pipe(kind)
    rc0, t_without, out0 = run_bounded(args, env_for(False), w, 60)
    check(rc0 == 0 and "host: ok" in out0, "without the agent: %s %s" % (rc0, out0))
    bound = (2 * t_without + 3) * scale  # a hang detector, loose for a loaded machine
    rc, t_with, out = run_bounded(args, env_for(True), w, bound)
    print("%s: %.2f s without the agent, %.2f s with it (bound %.2f s), exit %s: %s" %
          (" ".join(args), t_without, t_with, bound, rc, out.strip()))
    check(rc is not None, "with the agent the host did not end within %.1f s (hung)" % bound)
    check(rc == 0, "with the agent: exit code %s" % rc)
    check("host: ok" in out, "the host's own check: %r" % out.strip())
    # the pipe holds what the test put there and nothing else
    os.close(w)
    data = b""
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_NONBLOCK)
    while True:
        try:
            chunk = os.read(r, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        data += chunk
    os.close(r)
    extra = data[filled:].decode(errors="replace")
    if extra:
        print("after the test's bytes:", extra)
    check(data[:filled] == b"x" * filled, "the test's bytes came back changed")
    # a tty may have taken a line: the line discipline moved the test's
    # bytes on (poll said it had room); a pipe or socket never had any
    check(not extra if kind != "tty" else
          all(l.startswith("stackshot: ") for l in extra.replace("\r", "").splitlines()),
          "the full %s holds more than the test's bytes: %r" % (kind, extra[:300]))


def drain():
    r, w, filled = full_pipe()
    got = bytearray()

    started = []

    def agent_seen(pid):
        try:
            for t in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                    if f.read().startswith("stackshot-sampl"):
                        return True
        except OSError:
            pass
        return False

    def reader():
        # the pipe stays full until the agent runs (its start line is
        # written right after its sampler starts), and a while more
        while not started:
            time.sleep(0.01)
        end = time.monotonic() + 10 * scale
        while time.monotonic() < end and not agent_seen(started[0]):
            time.sleep(0.01)
        time.sleep(0.5 * scale)
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            got.extend(chunk)

    t = threading.Thread(target=reader)
    t.start()
    rc, secs, out = run_bounded(["exit", str(int(3000 * scale))], env_for(True), w, 30 * scale,
                                started=started)
    os.close(w)
    t.join()
    os.close(r)
    text = bytes(got[filled:]).decode(errors="replace") if len(got) >= filled else ""
    print("exit %s after %.2f s: %s; the agent wrote:\n%s" % (rc, secs, out.strip(), text))
    check(rc == 0 and "host: ok" in out, "exit code %s, %r" % (rc, out.strip()))
    check(bytes(got[:filled]) == b"x" * filled, "the test's bytes came back changed")
    check("started in pid" not in text,
          "the start line was written although the pipe was full when it was due")
    m = re.search(r"^stackshot: (\d+) of its lines (?:was|were) dropped", text, re.M)
    if check(m, "no line at exit telling the dropped lines"):
        check(int(m.group(1)) >= 1, "the exit line counts %s dropped lines" % m.group(1))


def data_only_host(path):
    with open(path, "rb") as f:
        data = f.read()
    check(b"stackshot" not in data, "the agent wrote into the host's data file %s: %r" %
          (path, data[:300]))
    lines = data.decode(errors="replace").splitlines()
    check(all(re.match(r"^host data: file \d+ round \d+$", l) for l in lines) and lines,
          "%s holds bytes that are not the host's" % path)


def taken_over():
    clean(tmp)
    err_path = os.path.join(tmp, "stderr.txt")
    if case == "reassign":
        args, env = ["reassign", os.path.join(tmp, "data.txt"), str(int(600 * scale))], \
            env_for(True, "debug")
    elif case in ("closeall", "closeall_logfile"):
        args, env = ["closeall", tmp, str(int(600 * scale))], env_for(True, "debug", "none")
        if case == "closeall_logfile":
            env["STACKSHOT_LOG_FILE"] = os.path.join(tmp, "agent.log")
    else:  # early, early_closed, early_log: the agent starts 300 ms after load
        args, env = ["earlylog" if case == "early_log" else "early",
                     os.path.join(tmp, "log.txt" if case == "early_log" else "data.txt"),
                     str(int(1200 * scale))], env_for(True, "debug", "text", "300")
    preexec = (lambda: os.close(2)) if case == "early_closed" else None
    with open(err_path, "wb") as err:
        rc, secs, out = run_bounded(args, env, err, 60 * scale, preexec)
    with open(err_path, errors="replace") as f:
        err_text = f.read()
    print("exit %s after %.2f s: %s\nstderr:\n%s" % (rc, secs, out.strip(), err_text[-3000:]))
    check(rc == 0, "exit code %s" % rc)
    check("host: ok" in out, "the host's own check: %r" % out.strip())
    if case == "early_log":
        # the host's log, write-only and appended to, is its stderr: the
        # agent's lines belong there (whole lines among the host's)
        with open(os.path.join(tmp, "log.txt"), errors="replace") as f:
            log = f.read().splitlines()
        check(any(l.startswith("stackshot: started in pid") for l in log),
              "the agent's start line is not in the host's log")
        check(all(l.startswith("stackshot: ") or re.match(r"^host log line \d+$", l)
                  for l in log), "a line of the log is cut or mixed")
        check("stackshot:" not in err_text, "the agent wrote to the stderr the host left")
        return
    files = sorted(f for f in os.listdir(tmp) if f.startswith("data."))
    check(files, "no data file")
    for f in files:
        data_only_host(os.path.join(tmp, f))
    if case == "closeall_logfile":
        # its log file was closed by the host (the number reused for a data
        # file): opened again by name, the lines at exit are there
        with open(os.path.join(tmp, "agent.log"), errors="replace") as f:
            log = f.read()
        check(re.search(r"^stackshot: pid \d+ memory: peak", log, re.M),
              "the agent's lines at exit are not in its log file")
    if case == "reassign":
        # the agent's duplicate of the original stderr: its lines of after
        # the host's change (the accounting at exit) still reach the original
        check(re.search(r"^stackshot: pid \d+ accounting: text: rounds \d+ taken", err_text, re.M),
              "the agent's lines at exit did not reach the original stderr")
    if case == "early":
        check("stackshot:" not in err_text,
              "the agent wrote to the original stderr, which the host had left")


if as_nobody and (os.geteuid() != 0 or not shutil.which("setpriv")):
    print("skipped: needs root and setpriv")
    sys.exit(77)
if case in ("full_exit", "full_other_user"):
    full(["exit", "2000"])
elif case == "full_socket":
    full(["exit", "2000"], "socket")
elif case == "full_tty":
    full(["exit", "2000"], "tty")
elif case == "full_exec":
    full(["exec", "600"])
elif case == "full_fork":
    full(["fork", "300", "600"])
elif case in ("drain", "drain_other_user"):
    drain()
elif case in ("reassign", "closeall", "closeall_logfile", "early", "early_closed", "early_log"):
    taken_over()
else:
    sys.exit("unknown case " + case)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("ok")
