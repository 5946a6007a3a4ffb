#!/usr/bin/env python3
"""Real programs whose stacks the agent's signal must never touch, end to
end (issue 19; docs/safety/stacks.md). Each host checks its own behaviour:
the Go server its answers and its exit, Rust and the C host their own stack
overflow report; this script compares that with the same host run without
the agent, and reads the agent's text rounds to see the host was sampled.

usage: check_stacks.py CASE PROGRAM LIB TMPDIR [noagent]
cases:
  go_http        PROGRAM is httpload (httpload.go): SS_HTTP_REQUESTS requests
                 (default 100000, 4 keep-alive workers, client not preloaded)
                 to the server preloaded with the agent at 10 ms, GOGC=5
  rust_overflow  PROGRAM is overflow.rs, built here with the rustc on PATH
  rust_work      (exit 77 without rustc)
  c_overflow     PROGRAM is stack_host (stack_host.c)
  c_keep
  c_forks        a thread on the agent's alternate stack forks (plainly and
                 from a handler on that stack): each child has that one stack
                 of the agent's kind and is sampled on it
noagent: the host alone, the same checks but the agent's (for comparison)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "native"))
import stackdump  # noqa: E402

case, program, lib, tmp = sys.argv[1:5]
agent = not (len(sys.argv) > 5 and sys.argv[5] == "noagent")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def finish():
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")
    sys.exit(0)


def host_env(interval, with_agent=True, extra=None):
    """The host's environment: the agent preloaded (text exporter, debug
    lines for its counters, in a file of their own: on stderr they would
    cut into the host's own report), or not preloaded at all."""
    env = stackdump.agent_run_env(lib, tmp)
    env["SPLUNK_PROFILER_CALL_STACK_INTERVAL"] = str(interval)
    env["STACKSHOT_LOG_FILE"] = os.path.join(tmp, "agent.%p.log")
    if not with_agent:
        for k in ("LD_PRELOAD", "SPLUNK_PROFILER_ENABLED"):
            env.pop(k, None)
    env.update(extra or {})
    return env


def rounds_of(pid):
    files = [f for f in os.listdir(tmp) if f.endswith(".%d.txt" % pid)]
    return stackdump.parse(os.path.join(tmp, files[0])) if files else []


def host_text(err):
    """stderr without the agent's own lines (none expected there)"""
    return "\n".join(l for l in err.splitlines() if not l.startswith("stackshot:"))


def agent_log(pid):
    try:
        with open(os.path.join(tmp, "agent.%d.log" % pid), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def exit_text(rc):
    return "signal %s" % signal.Signals(-rc).name if rc < 0 else "exit %d" % rc


def sampled_in(rounds, name, source):
    """how many rounds list thread `name` running in a function of `source`
    (caught by signal)"""
    return sum(1 for r in rounds for t in r
               if t["name"] == name and t["state"] == "RUNNABLE"
               and any(f == source for _, f, _ in t["frames"]))


def started(pid):
    """the C host and the Rust overflow start once the agent wrote 2 rounds"""
    wait_rounds(pid, lambda r: len(r) >= 2)


def sampled(pid, name, source):
    """rounds of the host, and how many list thread `name` running in a
    function of `source`"""
    rounds = rounds_of(pid)
    hits = sampled_in(rounds, name, source)
    print("%d rounds, thread %r running in %s in %d" % (len(rounds), name, source, hits))
    return rounds, hits


def go_http():
    if not program or not os.path.exists(program):
        print("SKIP: httpload not built (no go tool)")
        sys.exit(77)
    total = int(os.environ.get("SS_HTTP_REQUESTS", "100000"))
    env = host_env(10, agent, {"GOGC": "5"})
    start = time.monotonic()
    srv = subprocess.Popen([program, "server"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    first = srv.stdout.readline()
    m = re.search(r"port (\d+)", first)
    if not check(m, "no port line: %r" % first):
        srv.kill()
        out, err = srv.communicate()
        print(err[-3000:])
        return
    # the load generator is not preloaded: it only loads the server
    cenv = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SPLUNK_PROFILER_ENABLED")}
    try:
        cl = subprocess.run([program, "client", m.group(1), str(total), "4"], env=cenv,
                            capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        cl = None
    try:
        out, err = srv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        out, err = srv.communicate()
    secs = time.monotonic() - start
    print(cl.stdout.strip() if cl else "client: timed out")
    print(out.strip())
    print("server %s after %.1f s" % (exit_text(srv.returncode), secs))
    check(cl and cl.returncode == 0 and re.search(r"client: %d requests ok" % total, cl.stdout),
          "the client's requests: %s" % (cl.stdout.strip() if cl else "timed out"))
    # the Go runtime's own words when it dies: its first lines
    said = host_text(err)
    fatal = [l for l in said.splitlines() if l.startswith(("fatal error", "runtime:", "panic", "SIG"))]
    check(srv.returncode == 0, "server %s: %s" % (exit_text(srv.returncode), " | ".join(fatal[:4]) or said[-800:]))
    check("served %d requests" % total in out, "server's count: %r" % out)
    if not check(not fatal, "the Go runtime complained: %s" % " | ".join(fatal[:4])):
        print("the server's stderr, first lines:\n" + "\n".join(said.splitlines()[:12]))
    if not agent or failures:
        return
    log = agent_log(srv.pid)
    c = stackdump.debug_counters(log)
    print("native sampler counters: %s" % c)
    if check(c is not None, "no debug line of the native sampler: %s" % log[-1500:]):
        check(c["signalled"] > 0, "no stack taken by signal: %s" % c)
    rounds = rounds_of(srv.pid)
    # every round lists the server's threads, Go runtime frames named; and
    # the server's own Go code (its handlers, net/http) is caught running
    late = rounds[2:-1]
    runtime = [r for r in late if sum(1 for t in r if any(f.startswith("runtime.") for f, _, _ in t["frames"])) >= 2]
    serving = sum(1 for r in late for t in r
                  if any(f.startswith(("main.", "net/http.")) for f, _, _ in t["frames"]))
    print("%d rounds, %d with 2+ threads in the Go runtime, %d stacks in main.* or net/http.*" %
          (len(rounds), len(runtime), serving))
    check(len(rounds) >= 20, "rounds: %d" % len(rounds))
    # (most rounds: on a loaded machine a round may miss a running thread's
    # answer and list it without frames)
    check(late and 5 * len(runtime) >= 4 * len(late), "rounds without the server's threads: %d of %d" %
          (len(late) - len(runtime), len(late)))
    check(serving >= 3, "stacks in the server's own code (main.*, net/http.*): %d" % serving)


def overflow(run_host, expect, name, source):
    """run_host(with_agent) -> CompletedProcess; expect(p) -> None or what
    is wrong. Without the agent first (the host's own behaviour), then with
    it (20 ms): the same."""
    p = run_host(False)
    print("no agent: %s, stderr: %s" % (exit_text(p.returncode), host_text(p.stderr)[-300:]))
    bad = expect(p)
    if not check(bad is None, "without the agent: %s" % bad) or not agent:
        return
    p = run_host(True)
    print("agent: %s, stderr: %s" % (exit_text(p.returncode), host_text(p.stderr)[-600:]))
    bad = expect(p)
    check(bad is None, "with the agent: %s" % bad)
    check("stackshot: started" in agent_log(p.pid), "the agent did not start: %r" % agent_log(p.pid)[-600:])
    rounds, hits = sampled(p.pid, name, source)
    # signals went to the thread while it went down (or the test proves nothing)
    check(hits >= 3, "thread %r sampled running in %s in %d rounds" % (name, source, hits))


def rust_binary():
    rustc = shutil.which("rustc")
    if not rustc:
        print("SKIP: no rustc on PATH")
        sys.exit(77)
    os.makedirs(tmp, exist_ok=True)
    # one binary per case: the two rust cases run at once, and one that
    # replaced the other's binary while it ran left it "(deleted)", its
    # frames unnamed (a CI run failed rust_work so)
    bindir = os.path.join(os.path.dirname(os.path.abspath(tmp)), "rust-" + case)
    os.makedirs(bindir, exist_ok=True)
    exe = os.path.join(bindir, "ss_rust_overflow")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(program):
        # (rustc names its intermediate files after the output's stem)
        work = tempfile.mkdtemp(prefix="rustc.", dir=os.path.dirname(exe))
        part = os.path.join(work, "ss_rust_overflow")
        r = subprocess.run([rustc, "-O", "-g", "-o", part, program], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr)
            sys.exit(1)
        os.replace(part, exe)
        shutil.rmtree(work, ignore_errors=True)
    return exe


def wait_rounds(pid, enough, limit=60):
    """the host's rounds once enough(rounds) is true, or after limit
    seconds (a loaded machine may take long over the first round: the
    agent reads the host's debug information then)"""
    end = time.monotonic() + limit
    while True:
        rounds = rounds_of(pid)
        if enough(rounds) or time.monotonic() > end:
            return rounds
        time.sleep(0.1)


def _run(cmd, with_agent, interval, timeout, go=None):
    """(CompletedProcess, pid) of the host, run with or without the agent.
    go(pid), with the agent: returns when the host may go on, which it
    learns from the end of its stdin (without go, stdin is empty)."""
    p = subprocess.Popen(cmd, env=host_env(interval, with_agent), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.PIPE if go else subprocess.DEVNULL)
    if go:
        if with_agent:
            go(p.pid)
        p.stdin.close()
        p.stdin = None  # (communicate() would flush it)
    out, err = p.communicate(timeout=timeout)
    print("$ %s%s" % (" ".join(os.path.basename(c) for c in cmd), "" if with_agent else " (no agent)"))
    return subprocess.CompletedProcess(cmd, p.returncode, out, err), p.pid


def rust_overflow():
    exe = rust_binary()

    def host(with_agent):
        p, pid = _run([exe, "overflow"], with_agent, 20, 120, started)
        p.pid = pid
        return p

    def expect(p):
        # Rust's own report, then abort()
        if p.returncode != -signal.SIGABRT:
            return "%s, not SIGABRT (stderr %r)" % (exit_text(p.returncode), host_text(p.stderr)[-300:])
        if not re.search(r"thread 'deep'.* has overflowed its stack", p.stderr):
            return "no overflow report: %r" % host_text(p.stderr)[-300:]
        return None
    overflow(host, expect, "deep", "overflow.rs")


def rust_work():
    exe = rust_binary()
    def worked(pid):
        wait_rounds(pid, lambda r: sampled_in(r, "worker", "overflow.rs") >= 5)
    p, pid = _run([exe, "work"], agent, 20, 120, worked)
    print("%s: %s %s" % (exit_text(p.returncode), p.stdout.strip(), host_text(p.stderr)[-600:]))
    check(p.returncode == 0 and "work: done" in p.stdout,
          "%s: %r %r" % (exit_text(p.returncode), p.stdout, host_text(p.stderr)[-600:]))
    if agent:
        rounds, hits = sampled(pid, "worker", "overflow.rs")
        check(hits >= 5, "thread 'worker' sampled running in %d rounds" % hits)


def c_overflow():
    def host(with_agent):
        p, pid = _run([program, "overflow"], with_agent, 20, 120, started)
        p.pid = pid
        return p

    def expect(p):
        # the host's own handler, on its own alternate stack
        if p.returncode != 42:
            return "%s, not the host's 42 (stderr %r)" % (exit_text(p.returncode), host_text(p.stderr)[-300:])
        if "stack_host: stack overflow caught in thread deep" not in p.stderr:
            return "no report of the host's: %r" % host_text(p.stderr)[-300:]
        return None
    overflow(host, expect, "deep", "stack_host.c")


def c_keep():
    p, pid = _run([program, "keep", "3000"], agent, 20, 120, started)
    print("%s: %s %s" % (exit_text(p.returncode), p.stdout.strip(), host_text(p.stderr)[-600:]))
    check(p.returncode == 0 and "stack_host: keep ok" in p.stdout,
          "%s: %r %r" % (exit_text(p.returncode), p.stdout, host_text(p.stderr)[-600:]))
    if agent:
        rounds, hits = sampled(pid, "keeper", "stack_host.c")
        check(hits >= 3, "thread 'keeper' sampled running in %d rounds" % hits)


def c_forks():
    """A thread on the agent's alternate stack forks, plainly and from a
    handler running on that stack: each child has that one stack of the
    agent's kind (the other threads' are not copied: MADV_DONTFORK), keeps
    running on it, and its agent samples it there."""
    p, pid = _run([program, "forks"], agent, 20, 120, started)
    print("%s: %s %s" % (exit_text(p.returncode), p.stdout.strip(), host_text(p.stderr)[-600:]))
    check(p.returncode == 0 and "stack_host: forks ok" in p.stdout,
          "%s: %r %r" % (exit_text(p.returncode), p.stdout, host_text(p.stderr)[-600:]))
    m = re.search(r"the parent: (\d+) alternate stacks", p.stdout)
    check(m and int(m.group(1)) >= 6, "the parent holds one alternate stack per thread: %s"
          % (m and m.group(1)))
    kids = [int(k) for k in re.findall(r"stack_host: child (\d+)", p.stdout)]
    check(len(kids) == 2, "two children: %s" % kids)
    if agent:
        for k in kids:
            rounds, hits = sampled(k, "forker", "stack_host.c")
            check(hits >= 3, "child %d: thread 'forker' sampled running in %d rounds" % (k, hits))


cases = {"go_http": go_http, "rust_overflow": rust_overflow, "rust_work": rust_work,
         "c_overflow": c_overflow, "c_keep": c_keep, "c_forks": c_forks}
if case not in cases:
    print(__doc__)
    sys.exit(2)
cases[case]()
finish()
