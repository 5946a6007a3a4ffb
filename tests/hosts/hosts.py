#!/usr/bin/env python3
"""Real programs as hosts of the preloaded agent (label "hosts").

usage: hosts.py <case> <libstackshot.so> <bindir> <tmpdir>
cases:
  true       /bin/true (and `sh -c true`, and cat of its own maps) leaves
             nothing: no file, no line, no agent library mapped before the
             first round is due
  wrappers   timeout -> sh -> program: only the program writes dumps and
             says one line; the wrappers leave no file and no line (also a
             launcher whose child execs only after its first round was due)
  unshare    `unshare -U -r id` succeeds (also with STACKSHOT_EXPORTERS=none)
  ns         a running agent steps aside for unshare, setns and clone
             (tests/hosts/ns_host.c) and samples again after
  setpriv    `setpriv --reuid=nobody --regid=nogroup --clear-groups id` (and
             --init-groups, and a shell that runs on as nobody) prints what it
             prints without the agent, exits 0, and the shell's agent threads
             are nobody's, as the shell is
  caps       a running agent meets a libcap-ng style drop (PR_SET_KEEPCAPS,
             capset, setres[ug]id), seteuid/setegid later and capset on each
             thread (tests/hosts/caps_host.c); also in a forked child whose
             agent has not started again yet, and with the start thread still
             waiting: same output and exit as without the agent, the agent's
             threads end with the host's credentials, rounds after the drop
  chromium   headless Chromium as a non-root user renders a page
  nginx      Debian's nginx, `user www-data`, 3 workers: master and workers
             all write dumps, each as the user it runs as (%u), with the
             default directory and with a directory owned by www-data
  rotation   the text file at 10 ms with a tiny STACKSHOT_OUTPUT_MAX_BYTES:
             rotated many times, no file past the cap, every round taken in
             one file; STACKSHOT_OUTPUT_KEEP bounds the files kept
  periods    pprof keeps its newest STACKSHOT_OUTPUT_KEEP_PERIODS periods
  retention  files of gone processes, older than STACKSHOT_OUTPUT_MAX_AGE or
             past STACKSHOT_OUTPUT_MAX_TOTAL, removed at start; others kept
  writefail  a read-only and a full output directory (tmpfs in unshare -rm):
             said once per exporter, rounds lost counted, host unharmed
  logfile    STACKSHOT_LOG_FILE takes the lines; bad output directories
             are told apart in one line each
  node       node --perf-basic-prof running a busy script (a fixed amount of
             work, so that V8 compiles its functions whatever the load):
             JIT frames named from /tmp/perf-<pid>.map, builtins named in
             node's remapped code, no _fini
  nobackend  with no collector (refused) or one that never answers, over
             gRPC and HTTP, `for i in 1 2 3; do sleep 1.2; done` takes as
             long as without the agent, and the drop is counted
  switches   only SPLUNK_PROFILER_ENABLED=true turns the agent on; other
             spellings and OTEL_SDK_DISABLED=true leave it off with one line;
             a mistyped exporter, endpoint or protocol starts nothing and
             sends nothing (not even to the default endpoint)
  sleepers   Debian's perl and watch, whose sleeps return early on a signal
             (perl's sleep and select, watch's interval): at a 20 ms interval
             they sleep as long and tick as often as without the agent, and
             are sampled; an in-handler unwinder (STACKSHOT_UNWIND=gcc, which
             signals them) cuts perl short: the case can tell
  timeout    `timeout 1 sleep 5` x 16 at 20 ms (and timers that fire after a
             few looks: 150 ms at 20 ms, 100 ms at 10 ms, two runs at a
             time; and timeout held back by tests/hosts/stall.c, so that
             the first look comes before it forks or after its whole end):
             timeout exits 124 and writes no file and no line of its own,
             whatever moment its timer fires
  postgres   PostgreSQL 15 (its own cluster, as a non-root user, in a temp
             directory) under the agent, three server starts (10 ms, 10 ms,
             1 s), each
             with a `pgbench -C` run: the server log holds exactly one agent
             line per start (the postmaster's), forked backends add none,
             every file holds a round and whole stacks (no truncation
             marker, first rounds too), and backends that took no round
             (connections shorter than a forked child's 100 ms restart
             delay) leave no file
  shortlived a running agent's forked children that exit (exit(0), the
             destructors run) or exec before their restart do not wait for
             the agent's thread: no FUTEX_WAIT by the child's own thread
             under `strace -f` (a child a loaded machine kept past its
             restart, which created its restart thread, is left out: 4 of
             the 8 at least are looked at); nor do /bin/true and `sh -c true` (the
             loader's start thread cancelled at exit, not joined); all exit 0
             and leave no file and no line
  children   a busy host's (two computing threads) forked children that
             live 5 ms hold only the thread that forked at their exit (no
             agent thread created at fork: /proc/self/task counted by the
             child just before _exit); children that compute 1 s start
             their own agent (its restart thread created from the timer
             signal), take rounds of whole stacks (their first ones too),
             exit 0 and add no line at info (nor
             when the host closed its descriptors before forking, or each
             child closes them as it starts); children
             that compute and sleep in turns see no EINTR; in a host
             whose malloc is its own program's the thread is created at
             fork (no safe point for a handler) and children take rounds

  mainexit   the main thread calls pthread_exit while a worker computes: the
             process ends when the worker does (exit 0, within an interval)
  strict     worker threads in seccomp's strict mode (entered through prctl,
             and through the seccomp system call) compute for a second: the
             process exits 0 with every thread's line (before: SIGSEGV at the
             first round), the workers are counted as not taking the signal
             and the main thread is sampled; a forked child that enters
             strict mode at once and computes exits 0 (its agent's late
             start held back), the agent running and armed
  mlock      a service that locks its memory (tests/hosts/mlock_host.c) as
             nobody under an 8 MiB RLIMIT_MEMLOCK: with MCL_FUTURE the agent
             leaves it (one line, no file) and it gets as many blocks as
             alone; with MCL_CURRENT alone, the same count and the agent
             samples it after; as root (no limit) the agent stays and samples
  realtime   python3 under `chrt -f 10` (agent running, and only armed):
             every agent thread runs SCHED_OTHER; python3 making every thread
             of its process SCHED_FIFO (as `chrt -a -p` does) after the agent
             started: set back at the next round, one line
  tasks      a host that uses every task its RLIMIT_NPROC allows, as a user
             of its own (tests/hosts/tasks_host.c, lowering its limit at run
             time; Debian's python3 under `prlimit --nproc`): it makes as
             many threads, forks and spawns as without the agent, which
             leaves it (one line) after a flush of what it collected; also
             with otlp_logs (gRPC's threads end too), and as root in a
             cgroup whose pids.max is 25 (where one can be made)

  xz         Debian's xz -T2, whose compressing threads block every signal
             (liblzma's threads, as QEMU's), under the agent at
             20 ms and under perf (the reference, same run): the same output
             as alone; perf's samples of each compressing thread are in
             liblzma, and so are the agent's stacks of it, listed RUNNABLE
             and whole (to clone3) in most rounds (before: never listed, only
             counted as "2 blocking the signal")

Exit 0 when every check holds, 77 when a program or privilege the case
needs is missing, 1 otherwise (each failed check printed)."""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

case, lib, bindir, tmp = sys.argv[1:5]
lib = os.path.abspath(lib)  # (node runs in its case's directory)
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
    return cond


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def fresh(name):
    d = os.path.join(tmp, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def shared_dir(name):
    """A fresh directory every user may create in (sticky), for hosts that
    run as another user."""
    d = fresh(name)
    os.chmod(d, 0o1777)
    return d


def agent_env(out, **extra):
    env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
               STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=out)
    for k in ("STACKSHOT_LOG_LEVEL", "STACKSHOT_LOG_FILE", "SPLUNK_PROFILER_CALL_STACK_INTERVAL"):
        env.pop(k, None)
    env.update(extra)
    return env


def agent_lines(text):
    return [l for l in text.splitlines() if l.startswith("stackshot:")]


def rounds_in(path):
    with open(path, errors="replace") as f:
        return len(re.findall(r"^Full thread dump stackshot round \d+ ", f.read(), re.M))


def truncations(path):
    """The truncation markers of a file's stacks (a copy cut short)."""
    with open(path, errors="replace") as f:
        return re.findall(r"at stackshot\.truncated\(([^)]*)\)", f.read())


def files(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


# ---- true: leaves nothing ------------------------------------------------

def case_true():
    for exporters in ("text", "otlp_logs", "text,pprof,flamegraph"):
        out = fresh("true")
        for argv in (["/bin/true"], ["sh", "-c", "true"], ["/bin/sh", "-c", "/bin/true; /bin/true"]):
            r = subprocess.run(argv, env=agent_env(out, STACKSHOT_EXPORTERS=exporters),
                               capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, f"{argv} exits 0 ({exporters})")
            check(not agent_lines(r.stderr + r.stdout),
                  f"{argv} prints no line ({exporters}): {agent_lines(r.stderr)}")
        check(files(out) == [], f"no file in the output directory ({exporters}): {files(out)}")
        check(not os.path.exists(os.path.join(out, "..", "stackshot-0")), "no default directory")
    # before the first round is due only the loader is mapped
    r = subprocess.run(["cat", "/proc/self/maps"], env=agent_env(fresh("true")),
                       capture_output=True, text=True, timeout=30)
    maps = r.stdout
    check("libstackshot.so" in maps, "the loader is mapped (the test sees the agent at all)")
    for heavy in ("libstackshot-core", "libdw", "libunwind", "libgrpc", "libprotobuf-c", "libz.so"):
        check(heavy not in maps, f"{heavy} is not mapped before the first round is due")
    # a thread only: stackshot-start, nothing else of ours
    r = subprocess.run(["sh", "-c", "ls /proc/self/task | wc -l; cat /proc/self/task/*/comm"],
                       env=agent_env(fresh("true")), capture_output=True, text=True, timeout=30)
    check("stackshot-sampler" not in r.stdout and "stackshot-text" not in r.stdout,
          "no sampler or exporter thread before the first round is due")


# ---- wrappers: timeout -> sh -> program ----------------------------------

def case_wrappers():
    out = fresh("wrappers")
    # sh forks the program and waits (a launcher); timeout waits in sigsuspend
    prog = os.path.join(bindir, "ss_hosts_busy")
    # 500 ms: sh has forked the program long before its first round is due
    argv = ["timeout", "20", "sh", "-c", f"{prog} 2500; exit $?"]
    r = subprocess.run(argv, env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="500"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"the chain exits 0 ({r.returncode})")
    m = re.search(r"ss_hosts_busy: pid (\d+)", r.stdout)
    check(m is not None, "the program says its pid")
    pid = m.group(1) if m else "?"
    names = files(out)
    check(names == [f"ss_hosts_busy.{pid}.txt"], f"only the program's file: {names}")
    if names:
        check(rounds_in(os.path.join(out, names[0])) >= 1, "the program was sampled")
    lines = agent_lines(r.stderr)
    check(len(lines) == 1 and re.match(rf"stackshot: started in pid {pid} ", lines[0] if lines else ""),
          f"one line, the program's start: {lines}")

    # A launcher whose child, forked at once, reaches its exec only after
    # the launcher's first round was due (a shell's child on a loaded
    # machine): the launcher waits for it and stays out.
    out = fresh("wrappers")
    argv = [prog, "launch", "400", shutil.which("sleep"), "1.5"]
    r = subprocess.run(argv, env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="200"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"the slow launcher exits 0 ({r.returncode})")
    m = re.search(r"ss_hosts_busy: launcher pid (\d+)", r.stdout)
    launcher = m.group(1) if m else "?"
    names = files(out)
    check(names and not [n for n in names if n.endswith(f".{launcher}.txt")],
          f"the slow launcher leaves no file: {names}")
    lines = agent_lines(r.stderr)
    check(not [l for l in lines if f" pid {launcher} " in l],
          f"and says no line: {lines}")


# ---- unshare -U -r id ----------------------------------------------------

def case_unshare():
    if shutil.which("unshare") is None:
        skip("unshare (util-linux) is not installed")
    for exporters in ("text", "none"):
        out = fresh("unshare")
        for interval in ("1000", "5"):
            # 5 ms: the agent has started (threads exist) by the time unshare runs
            r = subprocess.run(["unshare", "-U", "-r", "sh", "-c", "sleep 0.2; id -u"],
                               env=agent_env(out, STACKSHOT_EXPORTERS=exporters,
                                             SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                               capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and r.stdout.strip() == "0",
                  f"unshare -U -r ... id -u: exit {r.returncode}, {r.stdout.strip()!r}, "
                  f"{r.stderr.strip()[:200]!r} ({exporters}, {interval} ms)")
        r = subprocess.run(["unshare", "-U", "-r", "id"], env=agent_env(out, STACKSHOT_EXPORTERS=exporters),
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "uid=0(root)" in r.stdout, f"unshare -U -r id ({exporters}): {r.stderr.strip()!r}")
        check(not agent_lines(r.stderr), "and leaves no line")


# ---- a running agent steps aside ----------------------------------------

def case_ns():
    out = fresh("ns")
    r = subprocess.run([os.path.join(bindir, "ss_ns_host"), "800", "1200"],
                       env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="50",
                                     STACKSHOT_LOG_LEVEL="debug"),
                       capture_output=True, text=True, timeout=60)
    print(r.stdout)
    check(r.returncode == 0, f"ns_host exits 0: {r.stdout.strip().splitlines()[-1:]}")
    m = re.search(r"(\d+) thread\(s\) before unshare", r.stdout)
    check(m is not None and int(m.group(1)) > 1, "the agent's threads ran before unshare")
    check("clone child" in r.stdout and "has 1 thread(s)" in r.stdout, "the clone child is single-threaded")
    names = [n for n in files(out) if n.startswith("ss_ns_host.")]
    check(len(names) == 1, f"one text file: {files(out)}")
    if names:
        with open(os.path.join(out, names[0])) as f:
            text = f.read()
        starts = re.findall(r"^Full thread dump stackshot round (\d+) ", text, re.M)
        # rounds before the unshare, after it, and after the setns and the
        # clone: each restart begins its round numbers again at 1
        check(starts.count("1") >= 3, f"sampled in each phase ({starts})")
    check("stackshot: started in pid" in r.stderr, "started")


# ---- dropped privileges: the set*id family and capset --------------------

def without_agent(argv):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def same_as_without(argv, env, what):
    """Runs argv with and without the agent: same exit code and stdout."""
    ref = without_agent(argv)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == ref.returncode,
          f"{what}: exit {r.returncode}, {ref.returncode} without the agent {r.stderr.strip()[-200:]!r}")
    check(r.stdout == ref.stdout, f"{what}: the same output ({r.stdout!r} / {ref.stdout!r})")
    return r


CRED_KEYS = ("Uid:", "Gid:", "Groups:", "CapPrm:", "CapEff:")


def thread_creds(status_text):
    return tuple(l.split(None, 1)[1].strip() if len(l.split(None, 1)) > 1 else ""
                 for key in CRED_KEYS for l in status_text.splitlines() if l.startswith(key))


def check_agent_threads_like_host(tasks, host_comm, what):
    host = [c for n, c in tasks if n == host_comm]
    ours = [(n, c) for n, c in tasks if n.startswith("stackshot-")]
    check(ours != [], f"{what}: the agent's threads run ({[n for n, _ in tasks]})")
    check(host != [] and all(c == host[0] for _, c in ours),
          f"{what}: the agent's threads have the host's credentials {host[:1]} / {ours}")


def dumps_with_rounds(d):
    return {n: rounds_in(os.path.join(d, n)) for n in files(d)}


def case_setpriv():
    if shutil.which("setpriv") is None:
        skip("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        skip("setpriv changes ids only as root")
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup"]
    base = shared_dir("setpriv")
    out = os.path.join(base, "out-%u")
    for interval in ("1000", "5"):
        env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval)
        r = same_as_without(nobody + ["--clear-groups", "id"], env, f"setpriv --clear-groups id ({interval} ms)")
        check(r.stdout.strip() == "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)",
              f"id says nobody: {r.stdout.strip()!r}")
        same_as_without(nobody + ["--init-groups", "id"], env, f"setpriv --init-groups id ({interval} ms)")
    # the shell runs on as nobody, sampled, and reports its own threads
    script = ("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; id; "
              "for t in /proc/$$/task/*; do echo \"task $(cat $t/comm)\"; "
              "grep -E '^(Uid|Gid|Groups|CapPrm|CapEff):' $t/status; done")
    r = subprocess.run(nobody + ["--clear-groups", "sh", "-c", script],
                       env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="10"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and r.stdout.startswith("uid=65534(nobody)"),
          f"setpriv ... sh: exit {r.returncode}, {r.stdout[:80]!r}")
    tasks = [(blk.split("\n", 1)[0], thread_creds(blk)) for blk in r.stdout.split("task ")[1:]]
    check_agent_threads_like_host(tasks, "sh", "setpriv ... sh")
    sampled = dumps_with_rounds(os.path.join(base, "out-65534"))
    check(any(n.startswith("sh.") and k >= 1 for n, k in sampled.items()),
          f"the shell was sampled as nobody: {sampled}")


def case_caps():
    if os.geteuid() != 0:
        skip("caps_host drops privileges only as root")
    host = os.path.join(bindir, "ss_caps_host")
    base = shared_dir("caps")
    out = os.path.join(base, "out-%u")
    runs = [  # (argv tail, interval ms, what it reaches)
        (["300", "600"], "10", "a running agent"),
        (["0", "1600"], "500", "the start thread waiting"),
        (["--fork", "65534", "65534", "1", "300", "600"], "10", "a forked child"),
    ]
    for tail, interval, what in runs:
        argv = [host] + (tail if tail[0] == "--fork" else ["65534", "65534", "1"] + tail)
        before = set(files(os.path.join(base, "out-65534")))
        r = same_as_without(argv, agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval), what)
        check("0 thread(s) with other credentials" in r.stdout, f"{what}: every thread has the host's credentials")
        like = re.search(r"threads like this one:(.*)", r.stderr)
        names = like.group(1).split() if like else []
        check("stackshot-sampl" in names, f"{what}: the agent's threads are among them: {names}")
        after = dumps_with_rounds(os.path.join(base, "out-65534"))
        new = {n: k for n, k in after.items() if n not in before}
        check(any(k >= 1 for k in new.values()), f"{what}: rounds taken as uid 65534: {new}")


# ---- headless Chromium as a non-root user --------------------------------

CHROMIUM_FLAGS = ["--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


def case_chromium():
    chromium = shutil.which("chromium")
    if chromium is None:
        skip("chromium is not installed")
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        skip("needs root and runuser to run Chromium as nobody")
    base = shared_dir("chromium")
    page = os.path.join(base, "page.html")
    # busy for 2.5 s in the renderer: the browser process is sampled meanwhile
    with open(page, "w") as f:
        f.write("<html><body><h1 id=x>wait</h1><script>"
                "const t0 = Date.now(); while (Date.now() - t0 < 2500) {}"
                "document.getElementById('x').textContent = 'ok-' + (40 + 2);"
                "</script></body></html>")
    os.chmod(page, 0o644)
    home = os.path.join(base, "home")
    os.makedirs(home)
    os.chmod(home, 0o1777)
    out = os.path.join(base, "out-%u")
    env = agent_env(out, HOME=home, SPLUNK_PROFILER_CALL_STACK_INTERVAL="500")
    argv = ["runuser", "-u", "nobody", "--", "env", f"HOME={home}", chromium] + CHROMIUM_FLAGS + [
        f"--user-data-dir={home}/ud", "--dump-dom", "file://" + page]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"chromium exits 0 (exit {r.returncode}; "
                             f"{[l for l in r.stderr.splitlines() if 'FATAL' in l][:2]})")
    check("ok-42" in r.stdout, "the page was rendered and dumped")
    check("zygote" not in r.stderr.lower() or "FATAL" not in r.stderr, "no zygote failure")
    nobody = str(int(subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout))
    d = os.path.join(base, f"out-{nobody}")
    browser = [n for n in files(d) if re.match(r"chromium\.\d+\.txt$", n)]
    check(len(browser) >= 1, f"the browser process wrote dumps: {files(d)}")
    if browser:
        with open(os.path.join(d, browser[0]), errors="replace") as f:
            text = f.read()
        check("Chrome_IOThread" in text, "with its threads (Chrome_IOThread)")
    lines = agent_lines(r.stderr)
    check(all(("started in pid" in l) for l in lines), f"no line but starts: {lines}")
    check(not any(re.search(r"started in pid 1 ", l) for l in lines), "no agent in a PID namespace's pid 1")


# ---- nginx with user www-data and 3 workers ------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_nginx(prefix, env):
    port = free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""user www-data;
worker_processes 3;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "hello\\n"; }} }}
}}
""")
    p = subprocess.Popen(["nginx", "-c", conf, "-p", prefix], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    if b"hello" in s.recv(1000):
                        break
            except OSError:
                time.sleep(0.1)
        for _ in range(30):  # a few requests over 1.5 s; the workers sample anyway
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    s.recv(1000)
            except OSError:
                pass
            time.sleep(0.05)
        time.sleep(1.0)
        workers = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                 text=True).stdout.split()
    finally:
        p.send_signal(signal.SIGQUIT)
        try:
            _, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
    # nginx points its stderr at the error log once started: the agent's
    # lines of master and workers land there
    with open(os.path.join(prefix, "error.log"), errors="replace") as f:
        err += f.read()
    return p.pid, workers, p.returncode, err


def case_nginx():
    if shutil.which("nginx") is None:
        skip("nginx is not installed")
    if os.geteuid() != 0:
        skip("nginx drops to www-data only when started as root")
    www = int(subprocess.run(["id", "-u", "www-data"], capture_output=True, text=True).stdout)

    # 1. the default directory ($TMPDIR/stackshot-%u): root's and www-data's
    base = shared_dir("nginx")
    prefix = os.path.join(base, "prefix")
    os.makedirs(prefix)
    env = agent_env("", TMPDIR=base, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100")
    env.pop("STACKSHOT_OUTPUT_DIR")
    master, workers, rc, err = run_nginx(prefix, env)
    check(rc == 0, f"nginx exits 0 ({rc})")
    check(len(workers) == 3, f"3 workers ({workers})")
    root_dir, www_dir = os.path.join(base, "stackshot-0"), os.path.join(base, f"stackshot-{www}")
    check(f"nginx.{master}.txt" in files(root_dir), f"the master's dumps in {root_dir}: {files(root_dir)}")
    for w in workers:
        f = os.path.join(www_dir, f"nginx.{w}.txt")
        check(os.path.exists(f) and rounds_in(f) >= 1, f"worker {w}'s dumps in {www_dir}")
        if os.path.exists(f):
            check(os.stat(f).st_uid == www, f"worker {w}'s file belongs to www-data")
    if os.path.isdir(www_dir):
        check(os.stat(www_dir).st_uid == www and (os.stat(www_dir).st_mode & 0o777) == 0o700,
              "www-data's directory is its own, mode 0700")
    check("Permission denied" not in err and "disabled" not in err, f"no refusal: {agent_lines(err)}")

    # 2. one directory owned by www-data: the workers write there; the
    # master (root) refuses it in one clear line
    base2 = fresh("nginx-www")
    os.chmod(base2, 0o1777)
    prefix = os.path.join(base2, "prefix")
    os.makedirs(prefix)
    shared = os.path.join(base2, "www")
    os.makedirs(shared, mode=0o700)
    os.chown(shared, www, www)
    master, workers, rc, err = run_nginx(prefix, agent_env(shared, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100"))
    check(rc == 0, "nginx exits 0")
    for w in workers:
        check(f"nginx.{w}.txt" in files(shared), f"worker {w} writes into www-data's directory")
    told = [l for l in agent_lines(err) if "owned by uid" in l]
    check(len(told) == 1, f"the master says once why it does not write there: {told}")

    # 3. %u: each user its own directory under one path
    base3 = fresh("nginx-u")
    os.chmod(base3, 0o1777)
    prefix = os.path.join(base3, "prefix")
    os.makedirs(prefix)
    master, workers, rc, err = run_nginx(prefix, agent_env(os.path.join(base3, "out-%u"),
                                                           SPLUNK_PROFILER_CALL_STACK_INTERVAL="100"))
    check(f"nginx.{master}.txt" in files(os.path.join(base3, "out-0")), "%u: the master's file")
    check(sorted(files(os.path.join(base3, f"out-{www}"))) ==
          sorted(f"nginx.{w}.txt" for w in workers), "%u: the workers' files")


# ---- STACKSHOT_LOG_FILE and bad output directories ------------------------

def case_logfile():
    d = fresh("logfile")
    prog = os.path.join(bindir, "ss_hosts_busy")
    log = os.path.join(d, "agent.%p.log")
    out = os.path.join(d, "out")
    r = subprocess.run([prog, "1000"], env=agent_env(out, STACKSHOT_LOG_FILE=log,
                                                      SPLUNK_PROFILER_CALL_STACK_INTERVAL="50"),
                       capture_output=True, text=True, timeout=30)
    pid = re.search(r"pid (\d+)", r.stdout).group(1)
    check(not agent_lines(r.stderr), "nothing on stderr")
    logf = os.path.join(d, f"agent.{pid}.log")
    check(os.path.exists(logf), "the log file is named with the pid")
    if os.path.exists(logf):
        check((os.stat(logf).st_mode & 0o777) == 0o600, "mode 0600")
        with open(logf) as f:
            text = f.read()
        check(re.search(rf"^stackshot: started in pid {pid} ", text, re.M) is not None, "the start line is there")
        check(len(text.splitlines()) == 1, f"and only it: {text.splitlines()}")

    # each kind of bad output directory gets its own words
    regular = os.path.join(d, "regular")
    open(regular, "w").close()
    link = os.path.join(d, "link")
    os.symlink(d, link)
    cases = {
        regular: "is a regular file, not a directory",
        link: "is a symbolic link",
        os.path.join(regular, "sub"): "has a path component that is not a directory",
    }
    if os.geteuid() == 0:
        other = os.path.join(d, "other")
        os.makedirs(other, mode=0o700)
        os.chown(other, 1, 1)
        cases[other] = "is owned by uid 1, not by this process's user"
    for bad, words in cases.items():
        # long enough for a round (the first write) however slowly the core opens
        r = subprocess.run([prog, "1000"], env=agent_env(bad, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"),
                           capture_output=True, text=True, timeout=30)
        lines = [l for l in agent_lines(r.stderr) if "started in pid" not in l]
        check(r.returncode == 0, f"{bad}: the host runs on")
        check(len(lines) >= 1 and words in lines[0] and "Too many levels" not in lines[0],
              f"{bad}: one clear line ({words}): {lines}")


# ---- node --perf-basic-prof ---------------------------------------------

# The loop is a fixed amount of work, not a time: V8 compiles a function
# after a count of what it ran (fib soon, busyLoop by on-stack replacement
# after about 4400 rounds of its loop, a quarter of a second of CPU here),
# and a loaded machine that gives node a tenth of a core for 2 s of wall
# time used to end the loop while busyLoop still ran in the interpreter
# (CI: "busyLoop is named too" failed, its frames all
# Builtins_InterpreterEntryTrampoline, 160 ms of CPU in 4 s).
NODE_ROUNDS = 20000  # about 1 s of one core unloaded, 4.5 times the 4400
NODE_SCRIPT = """
function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
function busyLoop(rounds) {
  let x = 0;
  for (let i = 0; i < rounds; i++) { x += fib(20); }
  return x;
}
const c0 = Date.now();
const x = busyLoop(Number(process.argv[2]));
const cpu = process.cpuUsage();
console.log('node-busy ' + process.pid + ' ' + x + ' wall ' + (Date.now() - c0) +
            ' ms, process cpu ' + Math.round((cpu.user + cpu.system) / 1000) + ' ms');
"""


def node_summary(r, text, pid):
    """What a failed node case needs told: the host's exit and output, and
    what the agent wrote (rounds; the main thread's CPU and frames)."""
    print(f"  node: exit {r.returncode}, stdout {r.stdout.strip()[-300:]!r}")
    print("  node's stderr (end):\n    " + "\n    ".join(r.stderr.strip().splitlines()[-15:]))
    if text is None:
        return
    heads = re.findall(r'^"node" #1 .*$', text, re.M)
    print(f"  agent: {len(re.findall(r'^Full thread dump ', text, re.M))} rounds, "
          f"main thread in {len(heads)}; last: {heads[-1] if heads else None}")
    frames = {}
    for block in re.findall(r'^"node" #1 .*?(?=^$)', text, re.M | re.S):
        for fr in re.findall(r"^\tat (.*)$", block, re.M):
            fr = re.sub(r"\([^()]*\)$", "", fr)
            frames[fr] = frames.get(fr, 0) + 1
    top = sorted(frames.items(), key=lambda kv: -kv[1])[:15]
    print("  main thread's frames (count):\n    " + "\n    ".join(f"{n} {fr}" for fr, n in top))
    if os.path.exists(f"/tmp/perf-{pid}.map"):
        with open(f"/tmp/perf-{pid}.map", errors="replace") as f:
            mine = [l.strip() for l in f if "busy.js" in l]
        print("  perf map's lines of the script:\n    " + "\n    ".join(mine[:10]))


def case_node():
    node = shutil.which("node")
    if node is None:
        skip("node is not installed")
    d = fresh("node")
    script = os.path.join(d, "busy.js")
    with open(script, "w") as f:
        f.write(NODE_SCRIPT)
    out = os.path.join(d, "out")
    # (a fixed amount of work takes 10 to 20 times as long at a load of
    # 20 on two cores: ctest's TIMEOUT is 180 s. In the case's directory:
    # node 20 with --perf-basic-prof writes isolate-*-v8.log where it runs)
    failed = len(failures)
    try:
        r = subprocess.run([node, "--perf-basic-prof", script, str(NODE_ROUNDS)],
                           env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"),
                           capture_output=True, text=True, timeout=150, cwd=d)
    except subprocess.TimeoutExpired as e:  # (killed by subprocess.run)
        def text_of(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        r = subprocess.CompletedProcess(e.cmd, "killed after 150 s", text_of(e.stdout), text_of(e.stderr))
    check(r.returncode == 0, f"node exits 0 ({r.stderr.strip()[-200:]})")
    m = re.search(r"node-busy (\d+) ", r.stdout)
    pid = m.group(1) if m else "?"
    print(f"  {r.stdout.strip()}")
    names = files(out)
    check(names == [f"node.{pid}.txt"], f"node's file: {names}")
    text = None
    if names:
        with open(os.path.join(out, names[0]), errors="replace") as f:
            text = f.read()
        # the main thread's frames over all rounds
        main = []
        for block in re.findall(r'^"node" #1 .*?(?=^$)', text, re.M | re.S):
            main += re.findall(r"^\tat (.*)$", block, re.M)
        check(len(main) > 100, f"the main thread was sampled ({len(main)} frames)")
        check(not any("_fini" in fr for fr in main), "no frame is _fini")
        jit = [fr for fr in main if fr.startswith("jit.JS:") and f"(perf-{pid}.map)" in fr]
        check(any("fib " + script in fr for fr in jit), f"JIT frames named after the script's functions: {jit[:3]}")
        check(any("busyLoop " + script in fr for fr in jit), "busyLoop is named too")
        check(any("Builtins_" in fr for fr in main), "V8 builtins (node's remapped code) are named")
    if len(failures) > failed:
        node_summary(r, text, pid)
    try:
        os.unlink(f"/tmp/perf-{pid}.map")
    except OSError:
        pass


# ---- sleepers: real programs whose sleeps a signal would cut short ---------

def timed(argv, env):
    t0 = time.monotonic()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return r, time.monotonic() - t0


PERL_SLEEPS = 'sleep 2; select(undef, undef, undef, 1.0); print "done\\n"'


def watch_ticks(d, env):
    """Runs of `watch -n 1` in 3.5 s (it runs at 0, 1, 2, 3 s)."""
    ticks = os.path.join(d, "ticks")
    env = dict(env, TERM="xterm")
    subprocess.run(["timeout", "3.5", "watch", "-n", "1", "-t", "-x", "sh", "-c",
                    f"echo tick >> {ticks}"], env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    if not os.path.exists(ticks):
        return 0
    with open(ticks) as f:
        return len(f.read().split())


def seen_in(path, pattern):
    with open(path, errors="replace") as f:
        return re.search(pattern, f.read()) is not None


def case_sleepers():
    perl, watch = shutil.which("perl"), shutil.which("watch")
    if perl is None or watch is None:
        skip("perl or watch (procps) is not installed")
    # perl: sleep (nanosleep) then select with a timeout; both return early
    # when a signal handler runs, and perl does not restart them
    out = fresh("sleepers")
    r, took = timed([perl, "-e", PERL_SLEEPS],
                    agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"))
    check(r.returncode == 0 and r.stdout.strip() == "done", f"perl exits 0 ({r.stderr.strip()[-200:]})")
    check(took >= 2.95, f"perl slept its 3 s under the agent at 20 ms ({took:.2f} s)")
    names = files(out)
    rounds = rounds_in(os.path.join(out, names[0])) if len(names) == 1 else 0
    check(rounds >= 20, f"and was sampled meanwhile ({rounds} rounds in {names})")
    check(rounds and seen_in(os.path.join(out, names[0]), r"TIMED_WAITING \(sleeping\)\n(\tat .*\n)*\tat \S*nanosleep")
          and seen_in(os.path.join(out, names[0]), r"\tat \S*select\b"),
          "its stacks show it asleep in nanosleep, then in select")
    # the control: an in-handler unwinder signals the sleeping thread
    r, took = timed([perl, "-e", PERL_SLEEPS],
                    agent_env(fresh("sleepers"), SPLUNK_PROFILER_CALL_STACK_INTERVAL="20",
                              STACKSHOT_UNWIND="gcc"))
    check(took < 2.5, f"control: signalled (STACKSHOT_UNWIND=gcc), perl's sleeps end early ({took:.2f} s)")
    # watch -n 1: as many runs of its command as without the agent
    base = watch_ticks(fresh("sleepers-base"), dict(os.environ))
    out = fresh("sleepers")
    d = fresh("sleepers-watch")
    ticks = watch_ticks(d, agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"))
    check(2 <= ticks <= base + 1 and base >= 2,
          f"watch -n 1 ran its command {ticks} times in 3.5 s under the agent, {base} without")
    names = [n for n in files(out) if n.startswith("watch.")]
    rounds = rounds_in(os.path.join(out, names[0])) if len(names) == 1 else 0
    check(rounds >= 20, f"and watch was sampled meanwhile ({rounds} rounds in {names})")
    check(rounds and seen_in(os.path.join(out, names[0]), r"TIMED_WAITING \(sleeping\)\n(\tat .*\n)*\tat \S*usleep"),
          "its stacks show it asleep in usleep")


# ---- switches: what turns the agent on, and mistakes that send nothing ----

def agent_threads(env):
    """The agent's threads in a `sleep 2` seen from outside at 1.5 s (past
    the first round at the default interval), and its stderr."""
    p = subprocess.Popen(["sleep", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    time.sleep(1.5)
    threads = []
    for comm in glob.glob(f"/proc/{p.pid}/task/*/comm"):
        try:
            with open(comm) as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("stackshot-"):
            threads.append(name)
    out, err = p.communicate(timeout=30)
    return threads, subprocess.CompletedProcess(p.args, p.returncode, out, err)


def case_switches():
    # only true turns it on (any case); other spellings: off, one line
    for value, on in (("true", True), ("TRUE", True), ("yes", False), ("1", False), ("on", False),
                      ("false", False), ("", False)):
        out = fresh("switches")
        threads, r = agent_threads(agent_env(out, SPLUNK_PROFILER_ENABLED=value))
        lines = agent_lines(r.stderr)
        if on:
            check(threads and len(lines) == 1 and "started" in lines[0],
                  f"SPLUNK_PROFILER_ENABLED={value!r}: on ({threads}, {lines})")
        else:
            check(not threads and files(out) == [],
                  f"SPLUNK_PROFILER_ENABLED={value!r}: off, no thread, no file ({threads})")
            said = value not in ("false", "")
            check(len(lines) == (1 if said else 0) and
                  (not said or "only true turns the agent on" in lines[0]),
                  f"SPLUNK_PROFILER_ENABLED={value!r}: {'one line' if said else 'no line'}: {lines}")
    # OTEL_SDK_DISABLED=true wins, with one line
    out = fresh("switches")
    threads, r = agent_threads(agent_env(out, OTEL_SDK_DISABLED="true"))
    lines = agent_lines(r.stderr)
    check(not threads and files(out) == [] and len(lines) == 1 and "OTEL_SDK_DISABLED=true" in lines[0],
          f"OTEL_SDK_DISABLED=true: off, one line ({threads}, {lines})")
    # a typo in the exporters or in the endpoint: one line naming the value,
    # nothing started, nothing sent (a listener on the default port sees no
    # connection), no file
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", 4317))
    except OSError:
        listener.close()
        listener = None
    if listener:
        listener.listen(8)
        listener.settimeout(0.2)
    for extra, expect in (({"STACKSHOT_EXPORTERS": "otlp_log"}, "unknown exporter 'otlp_log'"),
                          ({"STACKSHOT_EXPORTERS": "otlp_logs",
                            "OTEL_EXPORTER_OTLP_ENDPOINT": "htp:/ /x"}, "not an endpoint"),
                          ({"STACKSHOT_EXPORTERS": "otlp_logs",
                            "OTEL_EXPORTER_OTLP_PROTOCOL": "grcp"}, "not a protocol")):
        out = fresh("switches")
        threads, r = agent_threads(agent_env(out, **extra))
        lines = agent_lines(r.stderr)
        check(not threads and files(out) == [], f"{extra}: nothing started ({threads})")
        check(any(expect in l for l in lines) and any("stays off" in l for l in lines)
              and len(lines) <= 2, f"{extra}: said, and that the agent stays off: {lines}")
        if listener:
            try:
                c, _ = listener.accept()
                c.close()
                check(False, f"{extra}: something connected to the default endpoint")
            except socket.timeout:
                check(True, f"{extra}: no connection to the default endpoint")
    if listener:
        listener.close()


# ---- nobackend: a backend that is down or silent never holds an exit ----

def case_nobackend():
    """The issue's measurements, for every network exporter (OTLP over gRPC
    and HTTP, Zorka, Qubership): with no collector (connections refused) a
    shell loop of three 1.2 s sleeps takes as long as with the text
    exporter; with a collector that accepts and never answers, a 3 s sleep
    (an OTLP or Qubership call has been in flight for 2 s at exit:
    stalled) takes that long too, and a Zorka one (whose traces of a 10 s
    period first go out at exit: never heard from) at most
    STACKSHOT_SHUTDOWN_UNPROVEN (500 ms) more; the shell loop against the
    silent collector costs each process at most that budget."""
    def elapsed(argv, env):
        t0 = time.monotonic()
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        return time.monotonic() - t0, r

    loop = ["bash", "-c", "for i in 1 2 3; do sleep 1.2; done"]
    refused = free_port()  # nothing listens there: connections are refused
    silent = socket.socket()  # accepts, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    held = []
    import threading
    done = threading.Event()

    def accept_forever():
        silent.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(silent.accept()[0])
            except (socket.timeout, OSError):
                pass

    t = threading.Thread(target=accept_forever, daemon=True)
    t.start()

    def exporters(port):
        url = f"http://127.0.0.1:{port}"
        return (("otlp_logs over grpc", {"STACKSHOT_EXPORTERS": "otlp_logs",
                                         "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                                         "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}),
                ("otlp_logs over http/protobuf", {"STACKSHOT_EXPORTERS": "otlp_logs",
                                                  "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                                                  "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}),
                ("zorka", {"STACKSHOT_EXPORTERS": "zorka", "STACKSHOT_ZORKA_URL": url}),
                ("qubership", {"STACKSHOT_EXPORTERS": "qubership",
                               "REMOTE_DUMP_HOST": "127.0.0.1",
                               "REMOTE_DUMP_PORT_PLAIN": str(port)}))

    # Against the agent with a local exporter (text) in the same run: what
    # the backend adds must be nothing but noise (the harm was 0.25-0.9 s
    # per process, 1.8 s for sleep 3, 5.4 s for the loop against a silent
    # Zorka or Qubership collector); the agent's own start and exit (its
    # first round) are measured apart, against no agent.
    unproven = 0.5
    runs = (("refused", refused, loop, 3, ()),
            ("silent", silent.getsockname()[1], ["sleep", "3"], 1, ("zorka",)),
            ("silent", silent.getsockname()[1], loop, 3, ("zorka", "qubership")))
    for what, port, argv, n, first_call_at_exit in runs:
        base, _ = elapsed(argv, dict(os.environ))
        local, _ = elapsed(argv, agent_env(fresh("nobackend"), STACKSHOT_EXPORTERS="text"))
        for name, extra in exporters(port):
            if argv is loop and what == "silent" and name not in first_call_at_exit:
                continue
            # a process whose first call comes at its exit (or just
            # before) may spend the unproven budget on it
            budget = unproven if name in first_call_at_exit else 0
            env = agent_env(fresh("nobackend"), **extra)
            took, r = elapsed(argv, env)
            lines = agent_lines(r.stderr)
            check(r.returncode == 0 and took < max(base, local) + (0.15 + budget) * n + 0.1,
                  f"{what} collector, {name}: {' '.join(argv[:3])} took {took:.2f} s; "
                  f"{local:.2f} s with the text exporter, {base:.2f} s without the agent")
            drop = [l for l in lines if "not delivered" in l]
            check(all("(the backend was failing)" in l or "(the backend did not answer" in l
                      for l in drop) and (drop or name == "qubership"),
                  f"{what}, {name}: what was not sent is counted, and why: {drop}")
            said = [l for l in lines if "failed" in l or "reconnecting" in l]
            check(len(said) <= n, f"{what}, {name}: at most one line per process says the "
                  f"backend failed: {said}")
    done.set()
    t.join()
    for c in held:
        c.close()
    silent.close()


# ---- timeout: a launcher whose timer fires --------------------------------

def case_timeout():
    if shutil.which("timeout") is None:
        skip("no timeout")
    stall_lib = os.path.join(bindir, "ss_hosts_stall.so")
    # timers that fire after one second, and after a few looks
    runs = [("1", "20", {})] * 16 + [("0.15", "20", {})] * 8 + [("0.1", "10", {})] * 8
    # what a loaded machine does now and then, made certain by a library
    # that holds timeout back (tests/hosts/stall.c): the start's first
    # look comes before timeout has forked (its start held 300 ms; also
    # with a timer shorter than that look's interval would be on an idle
    # machine), and after timeout's whole end (fork, timer, kill, reap,
    # return from main: its exit held 600 ms)
    early = {"SS_STALL_COMM": "timeout", "SS_STALL_START": "300"}
    late = {"SS_STALL_COMM": "timeout", "SS_STALL_EXIT": "600"}
    runs += [("1", "20", early)] * 4 + [("0.03", "10", early)] * 4 + [("0.05", "200", late)] * 4
    for i in range(0, len(runs), 2):
        procs = []
        for dur, iv, stall in runs[i:i + 2]:
            out = fresh(f"timeout{len(procs)}")
            env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=iv, **stall)
            if stall:
                env["LD_PRELOAD"] = f"{stall_lib}:{lib}"  # its constructor after ours
            p = subprocess.Popen(["timeout", dur, "sleep", "5"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append((p, out, dur, iv, stall))
        for p, out, dur, iv, stall in procs:
            _, err = p.communicate(timeout=60)
            held = "".join(f", {k[9:].lower()} held {v} ms" for k, v in stall.items()
                           if k != "SS_STALL_COMM")
            what = f"timeout {dur} sleep 5 at {iv} ms{held} (pid {p.pid})"
            check(p.returncode == 124, f"{what} exits 124 ({p.returncode})")
            mine = [n for n in files(out) if n.startswith("timeout.") or f".{p.pid}." in n]
            check(not mine, f"{what} writes no file: {mine}")
            lines = [l for l in agent_lines(err) if f" pid {p.pid} " in l or f"pid {p.pid}:" in l]
            check(not lines, f"{what} says no line: {lines}")


# ---- postgres: a forking server ------------------------------------------

PG_BIN = "/usr/lib/postgresql/15/bin"


def case_postgres():
    if not os.path.exists(os.path.join(PG_BIN, "initdb")) or shutil.which("pgbench") is None:
        skip("no PostgreSQL 15 server or pgbench")
    base = tempfile.mkdtemp(prefix="ss-pg-", dir=tmp)
    os.chmod(base, 0o755)
    as_user = []
    if os.geteuid() == 0:
        import pwd
        user = "postgres"
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            user, pw = "nobody", pwd.getpwnam("nobody")
        os.chown(base, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", user, "--"]
    data, out, log = (os.path.join(base, n) for n in ("data", "out", "log"))
    port = str(free_port())

    def pg(argv, env=None, **kw):
        e = dict(env or os.environ)
        if env is None:
            for k in ("LD_PRELOAD", "SPLUNK_PROFILER_ENABLED"):
                e.pop(k, None)
        return subprocess.run(as_user + argv, env=e, capture_output=True, text=True,
                              timeout=120, cwd=base, **kw)

    r = pg([os.path.join(PG_BIN, "initdb"), "-D", data, "-A", "trust", "-U", "postgres"])
    if r.returncode != 0:
        skip(f"initdb failed: {r.stderr[-300:]}")
    bench = ["pgbench", "-h", base, "-p", port, "-U", "postgres"]
    connections = 0
    postmasters = []
    # the third start at 1 s: the postmaster forks its background
    # processes before its own first round, and they start their agent
    # from the loader (not as children of a running agent); the fourth at
    # 1 s with the default exporter (otlp_logs over gRPC) to a real
    # receiver: the postmaster and its background processes, each with an
    # agent of its own, share one gRPC helper (found by its name)
    intervals = ("10", "10", "1000", "grpc")
    sink_js = os.path.join(src, "tests", "packaging", "otlp_sink.js")
    sink = None
    if shutil.which("node") and os.path.isdir(os.path.join(src, "tests", "otlp", "node",
                                                           "node_modules")):
        sink = subprocess.Popen(["node", sink_js], stdout=subprocess.PIPE, text=True)
        sink_port = sink.stdout.readline().strip()
    else:
        intervals = intervals[:3]
        print("no node or its packages: the gRPC start is left out")
    helpers_seen = set()
    try:
        for start, interval in enumerate(intervals):
            env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval)
            if interval == "grpc":
                env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="1000",
                                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink_port}")
                env.pop("STACKSHOT_EXPORTERS")  # the default
            r = pg([os.path.join(PG_BIN, "pg_ctl"), "-D", data, "-l", log, "-w", "-o",
                    f"-p {port} -k {base} -c listen_addresses=''", "start"], env)
            if not check(r.returncode == 0, f"server start {start + 1} ({r.stderr[-200:]})"):
                return
            with open(os.path.join(data, "postmaster.pid")) as f:
                postmasters.append(f.readline().strip())
            if start == 0:
                r = pg(bench + ["-i", "-s", "1", "postgres"])
                check(r.returncode == 0, f"pgbench -i ({r.stderr[-200:]})")
            r = pg(bench + ["-C", "-c", "1", "-S", "-T", "3", "postgres"])
            check(r.returncode == 0, f"pgbench -C exits 0 ({r.stderr[-200:]})")
            if interval == "grpc":
                ps = subprocess.run(["ps", "-u", user if as_user else str(os.geteuid()), "-o",
                                     "pid=,stat=,comm="], capture_output=True, text=True)
                helpers_seen = {l.split()[0] for l in ps.stdout.splitlines()
                                if l.split()[-1] == "stackshot-grpc" and "Z" not in l.split()[1]}
            m = re.search(r"number of transactions actually processed: (\d+)", r.stdout)
            connections += int(m.group(1)) if m else 0
            r = pg([os.path.join(PG_BIN, "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"])
            check(r.returncode == 0, f"server stop {start + 1}")
    finally:
        pg([os.path.join(PG_BIN, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"])
        if sink:
            sink.send_signal(signal.SIGTERM)
            seen = json.loads(sink.communicate(timeout=30)[0].strip().splitlines()[-1])
    check(connections >= 20, f"pgbench connected and ran ({connections} connections)")
    if sink:
        pids = seen["pids"]
        print(f"default exporter: records per process {pids}; gRPC helpers running {helpers_seen}")
        check(pids.get(postmasters[-1], 0) >= 1, f"gRPC: the postmaster exported ({pids})")
        check(len(pids) >= 4, f"gRPC: its background processes exported too ({pids})")
        check(len(helpers_seen) == 1, f"gRPC: one helper for the server ({helpers_seen})")
    with open(log, errors="replace") as f:
        lines = agent_lines(f.read())
    check(len(lines) == len(postmasters),
          f"one agent line per server start: {len(lines)} for {len(postmasters)} ({lines[:4]})")
    for i, pid in enumerate(postmasters):
        check(any(re.match(rf"stackshot: started in pid {pid} ", l) for l in lines),
              f"start {i + 1}: the postmaster's line (pid {pid})")
    names = files(out)
    check(names and any(f".{pid}." in n for n in names for pid in postmasters),
          f"the postmaster writes its file: {names[:5]}")
    empty = [n for n in names if rounds_in(os.path.join(out, n)) < 1]
    check(not empty, f"no file without a round: {empty[:5]}")
    # the first rounds of the postmaster and of its forked processes hold
    # whole stacks (a running one was cut at its stack pointer's page end)
    cut = {n: t for n in names if (t := truncations(os.path.join(out, n)))}
    check(not cut, f"whole stacks, first rounds too: {dict(list(cut.items())[:3])}")
    # Each connection is a backend forked for one short transaction,
    # gone long before a forked child's restart (100 ms); the files are
    # the postmaster's and its long-lived background processes', plus
    # the odd backend a loaded machine kept alive past 100 ms.
    check(len(names) < 20 + connections // 10,
          f"short-lived backends leave no file: {len(names)} files for {connections} connections")
    shutil.rmtree(base, ignore_errors=True)


# ---- shortlived: exit and exec do not wait for the agent ------------------

def futex_waits(trace, tid):
    return [l for l in trace if l.startswith(f"{tid} ") and "FUTEX_WAIT" in l]


def made_threads(trace, pid):
    """Did process `pid`'s own thread create a thread (a forked child's
    restart thread) before it exec'd (the new program's start thread is
    its own)?"""
    for l in trace:
        if not l.startswith(f"{pid} "):
            continue
        if " execve(" in l:
            return False
        if re.search(r"\bclone3?\(", l):
            return True
    return False


def traced(argv, trace, out, **extra):
    """argv under `strace -f -e trace=futex,execve,clone,clone3`, the agent in its
    environment and not in strace's (strace, busy tracing, is no launcher
    at rest and would start an agent of its own)."""
    env = agent_env(out, **extra)
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD" and not k.startswith(("SPLUNK_", "STACKSHOT_"))}
    sets = []
    for k, v in env.items():
        if k == "LD_PRELOAD" or k.startswith(("SPLUNK_", "STACKSHOT_")):
            sets += ["-E", f"{k}={v}"]
    return subprocess.run(["strace", "-f", "-e", "trace=futex,execve,clone,clone3", "-o", trace] + sets + argv,
                          env=plain, capture_output=True, text=True, timeout=120)


def case_shortlived():
    if shutil.which("strace") is None:
        skip("no strace")
    probe = subprocess.run(["strace", "-f", "-o", "/dev/null", "true"], capture_output=True)
    if probe.returncode != 0:
        skip("strace cannot trace here")
    spawner = os.path.join(bindir, "ss_hosts_spawner")
    for mode in ("exit", "exec"):
        out = fresh("shortlived")
        st = os.path.join(tmp, "shortlived.strace")
        r = traced([spawner, mode, "8", "5"], st, out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="10")
        check(r.returncode == 0, f"{mode}: the host and its children exit 0 ({r.returncode})")
        children = re.findall(r"^child (\d+)$", r.stdout, re.M)
        check(len(children) == 8, f"{mode}: 8 children ran")
        with open(st) as f:
            trace = f.read().splitlines()
        # A child lives 5 ms, its agent would start after 100 ms: one that
        # a loaded machine (strace slows it too) kept alive that long has
        # created its restart thread (the exit or exec may then wait for
        # the start under way, within the shutdown deadline) and perhaps
        # left a file; it is not counted.
        kids = [n for n in files(out) if any(f".{c}." in n for c in children)]
        check(len(kids) <= 2, f"{mode}: the children leave no file: {kids}")
        looked = [c for c in children
                  if not any(f".{c}." in n for n in kids) and not made_threads(trace, c)]
        check(len(looked) >= 4, f"{mode}: most children never restarted: {len(looked)} of 8")
        for c in looked:
            waits = futex_waits(trace, c)
            check(not waits, f"{mode}: child {c} does not wait on a futex: {waits[:2]}")
        # (strace is a tracer: the host's agent says it signals no thread
        # while one is attached)
        lines = [l for l in agent_lines(r.stderr) if "a tracer (pid" not in l]
        check(len(lines) == 1 and not any(f" pid {c} " in lines[0] for c in children),
              f"{mode}: one line, the host's start: {lines}")
    # a process whose agent never started: the loader's start thread
    for argv in (["/bin/true"], ["sh", "-c", "true"]):
        out = fresh("shortlived")
        st = os.path.join(tmp, "shortlived.strace")
        r = traced(argv, st, out)
        check(r.returncode == 0, f"{argv} exits 0")
        with open(st) as f:
            trace = f.read().splitlines()
        # the process's own thread: the one that execs the program (its
        # start thread waits on its condition variable: not the host's)
        first = next((l.split()[0] for l in trace if " execve(" in l), "?")
        waits = futex_waits(trace, first)
        check(not waits, f"{argv}: its thread does not wait on a futex: {waits[:2]}")
        check(not agent_lines(r.stderr) and files(out) == [], f"{argv}: no line, no file")


# ---- children: no agent thread at fork, an agent once they live -----------

def children_take_rounds(program, mode, n, ms, interval, label):
    """`program mode n ms` under the agent at `interval` ms: every child
    exits 0 and takes rounds of its own. Returns the run, the children's
    pids and the output directory."""
    out = fresh("children")
    r = subprocess.run([program, mode, str(n), str(ms)], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                       capture_output=True, text=True, timeout=120)
    children = re.findall(r"^child (\d+)$", r.stdout, re.M)
    check(r.returncode == 0 and len(children) == n,
          f"{label}: {n} children ran and exited 0 ({r.returncode}): {r.stderr[-300:]}")
    for c in children:
        rounds = sum(rounds_in(os.path.join(out, f)) for f in files(out) if f".{c}." in f)
        check(rounds >= 1, f"{label}: child {c} took rounds of its own: {rounds}")
    return r, children, out


def case_children():
    spawner = os.path.join(bindir, "ss_hosts_spawner")
    out = fresh("children")
    r = subprocess.run([spawner, "tasks", "12", "5", "2"], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL="10"),
                       capture_output=True, text=True, timeout=120)
    counts = [int(n) for n in re.findall(r"^child \d+ tasks (-?\d+)$", r.stdout, re.M)]
    check(r.returncode == 0 and len(counts) == 12,
          f"tasks: 12 children counted their threads ({r.returncode}, {len(counts)})")
    # A child lives 5 ms asleep: its restart (due 100 ms after the fork,
    # created on its thread's CPU time) never comes; before, a
    # stackshot-fork thread was created at every fork.
    check(counts and all(c == 1 for c in counts),
          f"tasks: a child holds only the thread that forked: {counts}")
    check(len(agent_lines(r.stderr)) == 1, f"tasks: one line, the host's: {agent_lines(r.stderr)}")
    for interval in ("10", "50"):
        r, children, out = children_take_rounds(spawner, "work", 3, 1000, interval,
                                                f"work at {interval} ms")
        for c in children:
            mine = [n for n in files(out) if f".{c}." in n]
            # its main thread runs: copied to its stack's end, the first
            # round too (it was cut at its stack pointer's page end)
            cut = [m for n in mine for m in truncations(os.path.join(out, n))]
            check(not cut, f"work at {interval} ms: child {c}'s stacks are whole: {cut[:3]}")
        starts = [l for l in agent_lines(r.stderr) if " started" in l]
        check(len(starts) == 1, f"work at {interval} ms: one start line, the host's: {starts}")
        # a child forked while the parent's sampler adopted a kept
        # descriptor (the kernel copies the table before the memory) does
        # not count it taken over: no line of a child's at all
        theirs = [l for l in agent_lines(r.stderr) if any(f"pid {c} " in l for c in children)]
        check(not theirs, f"work at {interval} ms: no line of a child's: {theirs}")
    # Descriptors closed by the host: by the parent before it forks (its
    # agent counts what it lost and says so at its exit; a child's copy of
    # those counts is not the child's), by each child as it starts (the
    # copies of the parent's agent's descriptors: not the child's to
    # lose). The children take rounds and say nothing.
    for mode in ("parentclose", "childclose"):
        r, children, _ = children_take_rounds(spawner, mode, 3, 1000, "10", mode)
        theirs = [l for l in agent_lines(r.stderr) if any(f"pid {c} " in l for c in children)]
        check(not theirs, f"{mode}: no line of a child's: {theirs}")
        if mode == "parentclose":
            host = [l for l in agent_lines(r.stderr) if "accounting:" in l and
                    re.search(r"[1-9]\d* kept descriptors taken over", l)]
            check(len(host) == 1, f"{mode}: the host's exit says what it lost: {host}")
    # The same children at debug, each writing its lines to a log file of
    # its own (STACKSHOT_LOG_FILE with %p): the parent's log file, closed
    # by the child, is not counted as the child's (it was, before: "1 kept
    # descriptors taken over" in every child's last line)
    out = fresh("children")
    r = subprocess.run([spawner, "childclose", "2", "1000"], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL="10", STACKSHOT_LOG_LEVEL="debug",
                       STACKSHOT_LOG_FILE=os.path.join(out, "log.%p")),
                       capture_output=True, text=True, timeout=120)
    children = re.findall(r"^child (\d+)$", r.stdout, re.M)
    check(r.returncode == 0 and len(children) == 2, f"childclose at debug: 2 children exited 0")
    for c in children:
        try:
            with open(os.path.join(out, f"log.{c}"), errors="replace") as f:
                counts = [int(n) for n in re.findall(r"(\d+) kept descriptors taken over", f.read())]
        except OSError:
            counts = []
        check(counts and not any(counts),
              f"childclose at debug: child {c} counts no kept descriptor taken over: {counts}")
    # Children that compute 2 ms and sleep 3 ms in turns for 300 ms: the
    # restart timer's signals come on the thread's CPU time, so while it
    # runs, never in its sleeps (a wall-clock timer ended about every other
    # nanosleep with EINTR); the restart happened (more than one thread).
    # At 1 s the child's sampler signals little in that time.
    out = fresh("children")
    r = subprocess.run([spawner, "naps", "6", "300"], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL="1000"),
                       capture_output=True, text=True, timeout=120)
    counts = [int(n) for n in re.findall(r"^child \d+ tasks (-?\d+)$", r.stdout, re.M)]
    check(len(counts) == 6 and not any(c >= 100 for c in counts),
          f"naps: no sleep of a child ended with EINTR (100 + count): {counts}")
    check(sum(1 for c in counts if 1 < c < 100) >= 4,
          f"naps: children restarted their agent from the timer (threads): {counts}")
    # Children that set every signal's action back to the default, then
    # compute: the restart timer's ticks are SIGURG's, dropped by default
    # (on the sampling signal, whose default action ends the process, the
    # first tick killed the child)
    out = fresh("children")
    r = subprocess.run([spawner, "resetwork", "3", "300"], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL="10"),
                       capture_output=True, text=True, timeout=120)
    children = re.findall(r"^child (\d+)$", r.stdout, re.M)
    check(r.returncode == 0 and len(children) == 3,
          f"resetwork: 3 children reset their signals, computed and exited 0 ({r.returncode}): "
          f"{r.stdout[-200:]}")
    # Children of a host whose agent is still armed (its first round not
    # due: a 60 s interval), living 5 ms. A process that forks seldom (a
    # daemon's workers) gives each child its start thread at fork: an idle
    # child has its agent too. One that forks often (10 children first)
    # does not: the child's thread would come from the timer (before, the
    # loader created one in every child: 2 threads each).
    for mode, want in (("armed-tasks", 2), ("armed-burst-tasks", 1)):
        out = fresh("children")
        r = subprocess.run([spawner, mode, "4", "5"], env=agent_env(out,
                           SPLUNK_PROFILER_CALL_STACK_INTERVAL="60000"),
                           capture_output=True, text=True, timeout=120)
        counts = [int(n) for n in re.findall(r"^child \d+ tasks (-?\d+)$", r.stdout, re.M)]
        check(r.returncode == 0 and counts == [want] * 4,
              f"{mode}: each child holds {want} threads at its exit: {counts} ({r.returncode})")
        check(not agent_lines(r.stderr), f"{mode}: no line (nothing started): {agent_lines(r.stderr)}")
    # ... and children of one that forks often that compute 1.5 s past
    # their parent's first round (300 ms) get their start thread from the
    # timer: rounds of their own
    r, _, _ = children_take_rounds(spawner, "armed-burst-work", 2, 1500, "300",
                                   "armed: work from the timer")
    starts = [l for l in agent_lines(r.stderr) if " started" in l]
    check(len(starts) == 1, f"armed: work: one start line, the host's: {starts}")
    # A host whose malloc is its own program's (jemalloc linked in): a
    # handler must not create a thread there, so the restart thread is
    # created at fork, as before, and children still take rounds.
    own = os.path.join(bindir, "ss_hosts_spawner_ownmalloc")
    out = fresh("children")
    r = subprocess.run([own, "tasks", "4", "5", "2"], env=agent_env(out,
                       SPLUNK_PROFILER_CALL_STACK_INTERVAL="10"),
                       capture_output=True, text=True, timeout=120)
    counts = [int(n) for n in re.findall(r"^child \d+ tasks (-?\d+)$", r.stdout, re.M)]
    check(r.returncode == 0 and counts == [2] * 4,
          f"own malloc: the restart thread is created at fork: {counts} ({r.returncode})")
    children_take_rounds(own, "work", 2, 1000, "10", "own malloc: work")


# ---- output files: rotation, retention, failing writes --------------------

def exit_parts(stderr):
    """The exit's accounting line (debug when nothing was lost), per
    exporter: {name: (taken, delivered, dropped, refused, held)}."""
    out = {}
    for line in re.finditer(r"pid \d+ accounting: (.*)", stderr):
        for m in re.finditer(r"(\w+): rounds (\d+) taken = (\d+) delivered \+ (\d+) dropped \+ "
                             r"(\d+) refused \+ (\d+) held", line.group(1)):
            out[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
    return out


def round_seqs(path):
    with open(path, errors="replace") as f:
        return [int(x) for x in re.findall(r"^Full thread dump stackshot round (\d+) ", f.read(), re.M)]


def case_rotation():
    """The text file under a 10 ms interval for 6 s with a 6000-byte cap:
    rotated many times, no file past the cap, and every round the exporter
    took is in exactly one of the files (read back in order: .N oldest ...
    .1, then the current one); with STACKSHOT_OUTPUT_KEEP=2 at most three
    files stay."""
    cap = 6000
    for keep in (1000, 2):
        out = fresh("rotation")
        env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="10",
                        STACKSHOT_OUTPUT_MAX_BYTES=str(cap), STACKSHOT_OUTPUT_KEEP=str(keep),
                        STACKSHOT_LOG_LEVEL="debug")
        r = subprocess.run(["sleep", "6"], env=env, capture_output=True, text=True, timeout=60)
        names = files(out)
        txt = [n for n in names if re.fullmatch(r"sleep\.\d+\.txt(\.\d+)?", n)]
        rotated = sorted((n for n in txt if not n.endswith(".txt")),
                         key=lambda n: -int(n.rsplit(".", 1)[1]))
        current = [n for n in txt if n.endswith(".txt")]
        sizes = {n: os.path.getsize(os.path.join(out, n)) for n in txt}
        check(r.returncode == 0, f"keep {keep}: the host exits 0")
        check(all(v <= cap for v in sizes.values()), f"keep {keep}: no file past {cap} bytes: {sizes}")
        if keep == 2:
            check(len(rotated) == 2 and len(current) == 1, f"keep 2: three files stay: {txt}")
            continue
        check(len(rotated) >= 5, f"rotated {len(rotated)} times (at least 5)")
        seqs = []
        for n in rotated + current:
            seqs += round_seqs(os.path.join(out, n))
        parts = exit_parts(r.stderr).get("text")
        check(parts is not None, f"the exit's accounting line has text's part")
        if parts:
            taken, delivered, dropped, refused, held = parts
            check(seqs == sorted(set(seqs)), "rounds in order across the files, none twice")
            check(len(seqs) == delivered and taken == delivered + dropped + refused + held,
                  f"{len(seqs)} rounds in {len(rotated) + 1} files = {delivered} delivered "
                  f"({taken} taken, {dropped} dropped and counted)")


def case_periods():
    """pprof at 1 s periods for 5 s with STACKSHOT_OUTPUT_KEEP_PERIODS=2:
    only the two newest periods' files stay."""
    out = fresh("periods")
    env = agent_env(out, STACKSHOT_EXPORTERS="pprof", STACKSHOT_PROFILES_PERIOD="1",
                    SPLUNK_PROFILER_CALL_STACK_INTERVAL="50", STACKSHOT_OUTPUT_KEEP_PERIODS="2")
    r = subprocess.run(["sleep", "5"], env=env, capture_output=True, text=True, timeout=60)
    seqs = sorted(int(m.group(1)) for n in files(out)
                  for m in [re.fullmatch(r"sleep\.\d+\.(\d+)\.pb\.gz", n)] if m)
    check(r.returncode == 0 and len(seqs) == 2 and seqs[1] == seqs[0] + 1 and seqs[1] >= 3,
          f"the two newest periods stay: {files(out)}")


def case_retention():
    """At start, in the output directory: files of the agent's naming whose
    process is gone go when older than STACKSHOT_OUTPUT_MAX_AGE, and, oldest
    first, while the directory's total passes STACKSHOT_OUTPUT_MAX_TOTAL;
    a live process's files, other names and recent files stay."""
    out = fresh("retention")
    dead = subprocess.run(["true"]).returncode  # noqa: F841 (a pid now gone:)
    p = subprocess.Popen(["true"])
    p.wait()
    gone = p.pid
    me = os.getpid()
    week = 8 * 86400
    now = time.time()
    plan = {  # name: (age in s, bytes, expected to stay)
        f"old.{gone}.txt": (week, 100, False),
        f"old.{gone}.txt.3": (week, 100, False),
        f"old.{gone}.7.pb.gz": (week, 100, False),
        f"old.{gone}.7.html": (week, 100, False),
        f"alive.{me}.txt": (week, 100, True),
        f"recent.{gone}.txt": (60, 100, True),
        "notours.txt": (week, 100, True),
        f"notours.{gone}.log": (week, 100, True),
    }
    for name, (age, size, _) in plan.items():
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(b"x" * size)
        os.utime(path, (now - age, now - age))
    r = subprocess.run(["sleep", "1.5"], env=agent_env(out), capture_output=True, text=True,
                       timeout=60)
    left = set(files(out))
    for name, (_, _, stays) in plan.items():
        check((name in left) == stays, f"age: {name} {'stays' if stays else 'goes'}")
    check(any("removed 4 files" in l for l in agent_lines(r.stderr)),
          f"one line says so: {agent_lines(r.stderr)}")
    # the total: three fresh files of a gone process, 100 kB each, under a
    # 250 kB total: the oldest goes
    out = fresh("retention")
    for i, age in enumerate((300, 200, 100)):
        path = os.path.join(out, f"big{i}.{gone}.txt")
        with open(path, "wb") as f:
            f.write(b"x" * 100000)
        os.utime(path, (now - age, now - age))
    r = subprocess.run(["sleep", "1.5"], env=agent_env(out, STACKSHOT_OUTPUT_MAX_TOTAL="250000"),
                       capture_output=True, text=True, timeout=60)
    left = set(files(out))
    check(f"big0.{gone}.txt" not in left and f"big1.{gone}.txt" in left and
          f"big2.{gone}.txt" in left, f"total: the oldest went: {sorted(left)}")


def in_small_fs(argv, env, size, readonly=False):
    """argv run as root of a user and mount namespace (unshare -rm) with a
    tmpfs of `size` at the output directory; read-only after its
    directory was made."""
    out = env["STACKSHOT_OUTPUT_DIR"]
    setup = f"mount -t tmpfs -o size={size},mode=0700 none {out}"
    if readonly:
        setup += f" && mount -o remount,ro {out}"
    env = dict(env)
    preload = env.pop("LD_PRELOAD")  # the program's only, not the shell's
    return subprocess.run(["unshare", "-rm", "sh", "-c",
                           setup + f' && exec env LD_PRELOAD={preload} "$@"', "sh"] + argv,
                          env=env, capture_output=True, text=True, timeout=60)


def case_writefail():
    """A read-only output directory and a full one (a 64 kB tmpfs): the host
    runs and exits as without the agent, each exporter says so once (text,
    pprof), and the rounds it could not write are counted lost in the
    exit's line."""
    if shutil.which("unshare") is None:
        skip("no unshare")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt"],
                           capture_output=True)
    if probe.returncode != 0:
        skip("unshare -rm cannot mount a tmpfs here")
    for what, size, ro in (("full", "64k", False), ("read-only", "1m", True)):
        out = fresh("writefail")
        env = agent_env(out, STACKSHOT_EXPORTERS="text,pprof", STACKSHOT_PROFILES_PERIOD="1",
                        SPLUNK_PROFILER_CALL_STACK_INTERVAL="10")
        r = in_small_fs(["sleep", "4"], env, size, ro)
        lines = agent_lines(r.stderr)
        check(r.returncode == 0, f"{what}: the host exits 0 ({r.returncode})")
        said = [l for l in lines if "failed" in l]
        refused = [l for l in lines if "cannot open" in l]  # the file layer's, once
        by = {x: [l for l in said if l.startswith(f"stackshot: {x}:")] for x in ("text", "pprof")}
        check(len(said) <= 2 and all(len(v) == 1 for v in by.values()) and len(refused) <= 1,
              f"{what}: said once per exporter: {said + refused}")
        parts = exit_parts(r.stderr)
        t = parts.get("text")
        check(t is not None and t[2] > 0 and t[0] == t[1] + t[2] + t[3] + t[4],
              f"{what}: text's lost rounds counted: {t}")
        if what == "full":
            check(t is not None and t[1] > 0, f"full: rounds written before the disk filled: {t}")


# ---- mainexit: the main thread calls pthread_exit ------------------------

def case_mainexit():
    """glibc ends the process when its last thread ends; the agent's threads
    must not keep it alive (before: it never ended, and with every live
    thread blocking every signal not even SIGTERM ended it)."""
    prog = os.path.join(bindir, "ss_hosts_main_exit")
    for interval in ("20", "1000"):
        out = fresh("mainexit")
        t0 = time.monotonic()
        try:
            r = subprocess.run([prog], env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                               capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            check(False, f"{interval} ms: the process ended once its threads had (still there after 20 s)")
            continue
        took = time.monotonic() - t0
        print(f"{interval} ms: exit {r.returncode} after {took:.2f} s; {r.stdout.strip()!r}")
        check(r.returncode == 0, f"{interval} ms: exit status 0 as without the agent ({r.returncode})")
        check(r.stdout == "worker done\n", f"{interval} ms: the worker's line: {r.stdout!r}")
        check(took < 1.0 + 2 * int(interval) / 1000 + 3, f"{interval} ms: ended within an interval: {took:.2f} s")
        check(agent_lines(r.stderr) == [l for l in agent_lines(r.stderr) if "started in pid" in l],
              f"{interval} ms: no other agent line: {agent_lines(r.stderr)}")
        if interval == "20":
            txt = "".join(open(os.path.join(out, f)).read() for f in files(out) if f.endswith(".txt"))
            check('"mx-worker"' in txt and "worker" in txt, "20 ms: the worker was sampled")
    r = subprocess.run([prog], capture_output=True, text=True, timeout=20)
    check(r.returncode == 0 and r.stdout == "worker done\n", f"without the agent: {r.returncode}")


# ---- strict: threads in seccomp's strict mode -----------------------------

def case_strict():
    """A thread in seccomp's strict mode dies at its first system call other
    than read, write, _exit and rt_sigreturn, and the sampling handler makes
    one (before: the process died of SIGSEGV at the first round). The
    thread is not signalled; it is sampled by the kernel (perf), and the
    rest of the process as usual. A forked child that enters strict mode at
    once is not killed by its agent's late start either."""
    prog = os.path.join(bindir, "ss_hosts_strict")
    want = ["main done", "sx-worker-1 done", "sx-worker-2 done"]
    for how in ("prctl", "syscall"):
        r = subprocess.run([prog, how], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and sorted(r.stdout.splitlines()) == want,
              f"{how}, without the agent: exit {r.returncode}, {r.stdout!r}")
        for interval in ("10", "100"):
            out = fresh("strict")
            r = subprocess.run([prog, how], env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                               capture_output=True, text=True, timeout=30)
            what = f"{how}, {interval} ms"
            check(r.returncode == 0, f"{what}: exit status 0 as without the agent ({r.returncode})")
            check(sorted(r.stdout.splitlines()) == want, f"{what}: every thread's line: {r.stdout!r}")
            txt = "".join(open(os.path.join(out, f), errors="replace").read()
                          for f in files(out) if f.endswith(".txt"))
            heads = re.findall(r"^Full thread dump stackshot round \d+ .*$", txt, re.M)
            print(f"{what}: {len(heads)} rounds")
            check(len(heads) >= (50 if interval == "10" else 5), f"{what}: the process was sampled")
            # not signalled (they block it: status Seccomp 1, or the signal
            # the prctl wrapper blocked; or the registry's mark): counted as
            # blocking it or skipped, or, from the round after the first
            # that found them blocking, sampled by the kernel (a perf event
            # on their CPU clock: no system call of theirs) in worker()
            rounds = txt.split("Full thread dump stackshot round ")[1:]
            sampled = [x for x in rounds
                       if len(re.findall(r'^"sx-worker-\d".*\n.*RUNNABLE\n\tat global\.worker\(',
                                         x, re.M)) >= 1]
            counted = [h for h in heads if re.search(r"2 (blocking the signal|skipped)", h)]
            refused = [l for l in agent_lines(r.stderr) if "are counted, not sampled" in l]
            print(f"{what}: a worker sampled by the kernel in {len(sampled)}, counted in "
                  f"{len(counted)} of {len(heads)} rounds; {refused}")
            listed = re.findall(r'^"sx-worker-\d".*\n.*\n\tat (\S+)\(', txt, re.M)
            check(all(f == "global.worker" for f in listed),
                  f"{what}: every stack of a worker listed is its own, in worker(): "
                  f"{sorted(set(listed))}")
            # a worker at least in most rounds: the kernel samples a thread
            # while it runs, and on a loaded 2-CPU machine two computing
            # workers are not both on a CPU in every round
            check(refused or len(sampled) >= len(heads) // 2,
                  f"{what}: the workers sampled by the kernel (in worker()) in most rounds")
            check("__pthread_clockjoin_ex" in txt or "pthread_join" in txt,
                  f"{what}: the main thread's stack (in pthread_join)")
    # A forked child whose thread enters strict mode at once and computes
    # there, in a host that forks often, running (10 ms) and armed (60 s):
    # the fork timer (its tick would create the child's thread: mmap) is
    # held back (before, on SIGURG, the child was killed at its tick)
    for interval in ("10", "60000"):
        out = fresh("strict")
        r = subprocess.run([prog, "fork"], env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and r.stdout.splitlines() == ["child done", "child exit 0"],
              f"fork at {interval} ms: the strict child computed and exited 0: {r.stdout!r}")


# ---- mlock: a service that locks its memory under a limit -----------------

def case_mlock():
    """mlockall(MCL_CURRENT | MCL_FUTURE) counts every mapping after it
    against RLIMIT_MEMLOCK: the agent's too (before: a user's service under
    the default 8 MiB got 18 of its 57 blocks, and the agent could not load
    its core). The agent leaves such a process; with MCL_CURRENT alone it
    steps aside for the call and comes back; without a limit it stays."""
    if shutil.which("setpriv") is None:
        skip("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        skip("a process without CAP_IPC_LOCK is needed: setpriv changes ids only as root")
    prog = os.path.join(bindir, "ss_hosts_mlock")
    base = shared_dir("mlock")
    out = os.path.join(base, "out-%u")
    user_out = os.path.join(base, "out-65534")

    def as_user(args, env=None):
        # the shell sets the limit the way a unit's LimitMEMLOCK= would
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
               "sh", "-c", 'ulimit -l 8192 && exec "$@"', "sh", prog] + args
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)

    def blocks(r):
        m = re.search(r"^blocks (\d+)$", r.stdout, re.M)
        return int(m.group(1)) if m else -1

    for args, mode in ((["0"], "current+future"), (["0", "current"], "current")):
        alone = as_user(args)
        check(alone.returncode == 0 and blocks(alone) > 0,
              f"{mode}, without the agent: exit {alone.returncode}, {alone.stdout!r} {alone.stderr!r}")
        for interval in ("200", "1000"):
            shutil.rmtree(user_out, ignore_errors=True)
            what = f"{mode}, {interval} ms"
            r = as_user(args, agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval))
            print(f"{what}: exit {r.returncode}, {blocks(r)} blocks (alone {blocks(alone)}); "
                  f"{agent_lines(r.stderr)}")
            check(r.returncode == 0 and "mlockall 0" in r.stdout and "threads 2" in r.stdout,
                  f"{what}: mlockall and the threads succeed as without the agent")
            check(blocks(r) == blocks(alone), f"{what}: every block the limit leaves the process "
                  f"({blocks(r)}, alone {blocks(alone)})")
            lines = agent_lines(r.stderr)
            if mode == "current+future":
                check(len(lines) == 1 and "the agent leaves it" in lines[0],
                      f"{what}: one line, the agent leaves: {lines}")
                check(files(user_out) == [], f"{what}: no file: {files(user_out)}")
            elif interval == "200":
                # stepped aside for the call only: it starts and samples after
                sampled = dumps_with_rounds(user_out)
                check(any(k >= 1 for k in sampled.values()), f"{what}: sampled after the call: {sampled}")
    # no limit (root: CAP_IPC_LOCK): the agent stays, and samples the threads
    d = fresh("mlock-root")
    r = subprocess.run([prog, "0"], env=agent_env(d, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and blocks(r) == 400, f"no limit: exit {r.returncode}, {r.stdout!r}")
    check(not any("leaves" in l for l in agent_lines(r.stderr)), f"no limit: the agent stays: {agent_lines(r.stderr)}")
    txt = "".join(open(os.path.join(d, f), errors="replace").read() for f in files(d) if f.endswith(".txt"))
    check("compute" in txt, "no limit: the computing threads were sampled")


# ---- realtime: a host that runs real-time ---------------------------------

def case_realtime():
    """A thread inherits its creator's scheduling policy: under a real-time
    host (SCHED_FIFO) the agent's threads ran real-time at the host's
    priority (ahead of every normal thread of the machine). They run
    SCHED_OTHER, from their creation, and again after a `chrt -a -p`."""
    if shutil.which("chrt") is None:
        skip("chrt (util-linux) is not installed")
    probe = subprocess.run(["chrt", "-f", "10", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip(f"no real-time scheduling here: {probe.stderr.strip()}")
    # python3 as the host: it forks nothing (a shell waiting for a child is
    # a launcher, where the agent does not start)
    names = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}
    listing = ("import os, time\n"
               "def tasks():\n"
               "    for t in os.listdir('/proc/self/task'):\n"
               "        comm = open(f'/proc/self/task/{t}/comm').read().strip()\n"
               "        print('task', comm, os.sched_getscheduler(int(t)) & 0xff)\n")

    def tasks(text):
        return [[l.split()[1], names.get(int(l.split()[2]), l.split()[2])]
                for l in text.splitlines() if l.startswith("task ")]

    for interval, what in (("100", "running"), ("5000", "armed")):
        out = fresh("realtime")
        r = subprocess.run(["chrt", "-f", "10", "python3", "-c", listing + "time.sleep(0.6)\ntasks()\n"],
                           env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL=interval),
                           capture_output=True, text=True, timeout=30)
        ts = tasks(r.stdout)
        print(f"chrt -f 10, agent {what}: {ts}")
        ours = [t for t in ts if t[0].startswith("stackshot-")]
        check(r.returncode == 0 and ["python3", "SCHED_FIFO"] in ts,
              f"{what}: the host runs SCHED_FIFO ({r.returncode}, {r.stderr[-300:]!r})")
        check(len(ours) >= (2 if what == "running" else 1), f"{what}: the agent's threads are there: {ours}")
        check(all(t[1] == "SCHED_OTHER" for t in ours), f"{what}: every agent thread runs SCHED_OTHER: {ours}")
    # made real-time after the agent started (every thread, as `chrt -a -p`
    # does): set back at the next round
    out = fresh("realtime")
    script = (listing + "time.sleep(0.5)\n"
              "for t in os.listdir('/proc/self/task'):\n"
              "    os.sched_setscheduler(int(t), os.SCHED_FIFO, os.sched_param(10))\n"
              "time.sleep(0.5)\ntasks()\n")
    r = subprocess.run(["python3", "-c", script],
                       env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100"),
                       capture_output=True, text=True, timeout=30)
    ts = tasks(r.stdout)
    print(f"every thread made SCHED_FIFO later: {ts}")
    ours = [t for t in ts if t[0].startswith("stackshot-")]
    check(["python3", "SCHED_FIFO"] in ts and len(ours) >= 2,
          f"made real-time later: the host real-time, the agent there: {ts} {r.stderr[-300:]!r}")
    check(all(t[1] == "SCHED_OTHER" for t in ours), f"made real-time later: the agent's threads back to SCHED_OTHER: {ours}")
    said = [l for l in agent_lines(r.stderr) if "real-time" in l]
    check(len(said) == 1, f"made real-time later: one line says so: {agent_lines(r.stderr)}")


# ---- tasks: a host short of threads or processes --------------------------

TASKS_UID = "54329"  # this case's own user: RLIMIT_NPROC counts all its tasks


def pids_cgroup(limit):
    """A new cgroup whose pids.max is `limit` (cgroup v1's pids hierarchy or
    v2), or None where none can be made."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        if not os.path.exists(os.path.join(root, "cgroup.procs")):
            continue
        d = os.path.join(root, f"stackshot-tasks-{os.getpid()}")
        try:
            os.mkdir(d)
            with open(os.path.join(d, "pids.max"), "w") as f:
                f.write(str(limit))
            return d
        except OSError:
            try:
                os.rmdir(d)
            except OSError:
                pass
    return None


def case_tasks():
    """The agent's threads count against RLIMIT_NPROC (and a cgroup's
    pids.max): a host that creates threads or forks up to its limit failed
    two or three calls early (27 threads of 29 under `ulimit -u 30`). When
    the host's pthread_create, fork or posix_spawn fails with EAGAIN, the
    agent leaves the process, having flushed what it collected, and the
    call is made again."""
    if shutil.which("setpriv") is None or shutil.which("prlimit") is None:
        skip("setpriv and prlimit (util-linux) are needed")
    if os.geteuid() != 0:
        skip("a user of the case's own is needed: setpriv changes ids only as root")
    prog = os.path.join(bindir, "ss_hosts_tasks")
    base = shared_dir("tasks")

    def as_user(argv, env=None):
        cmd = ["setpriv", f"--reuid={TASKS_UID}", f"--regid={TASKS_UID}", "--clear-groups"] + argv
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)

    def agent_run(name, argv):
        out = os.path.join(base, name)
        r = as_user(argv, agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100"))
        return r, out

    def left_after_flush(what, r, out, call):
        lines = agent_lines(r.stderr)
        print(f"{what}: {lines}")
        leave = [l for l in lines if "short of threads or processes" in l]
        check(len(leave) == 1 and f"{call} failed with EAGAIN" in leave[0] and "leaves" in leave[0],
              f"{what}: one line says the agent leaves: {lines}")
        # its accounting is said only when something was lost
        check(not any(w in l for l in lines for w in ("lost", "dropped", "accounting")),
              f"{what}: nothing it collected was lost: {lines}")
        n = sum(rounds_in(os.path.join(out, f)) for f in files(out) if f.endswith(".txt"))
        check(n >= 1, f"{what}: the rounds before the leave are in its file ({n})")

    cases = ((["threads", "24", "25"], "threads 24", "pthread_create"),
             (["fork", "2"], "fork status 7", "fork"),
             (["spawn", "2"], "spawn status 0", "posix_spawn"))
    for args, want, call in cases:
        what = f"{args[0]} under RLIMIT_NPROC {args[-1]}"
        alone = as_user([prog] + args)
        check(alone.returncode == 0 and want in alone.stdout,
              f"{what}, without the agent: exit {alone.returncode}, {alone.stdout!r}")
        r, out = agent_run(args[0], [prog] + args)
        check(r.returncode == 0 and want in r.stdout,
              f"{what}: as without the agent: exit {r.returncode}, {r.stdout!r}")
        left_after_flush(what, r, out, call)

    # the default exporter: gRPC's own threads (7) end too, within a second
    # (no collector here: what was collected is dropped, and counted)
    what = "threads under RLIMIT_NPROC 25, otlp_logs over gRPC"
    out = os.path.join(base, "grpc")
    r = as_user([prog, "threads", "24", "25"],
                agent_env(out, STACKSHOT_EXPORTERS="otlp_logs", SPLUNK_PROFILER_CALL_STACK_INTERVAL="100",
                          OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}"))
    lines = agent_lines(r.stderr)
    check(r.returncode == 0 and "threads 24" in r.stdout,
          f"{what}: as without the agent: exit {r.returncode}, {r.stdout!r}")
    check(sum("short of threads or processes" in l for l in lines) == 1, f"{what}: one line says the agent leaves")
    check(any("accounting" in l and "dropped" in l for l in lines), f"{what}: the undelivered rounds are counted: {lines}")

    # root in a cgroup whose pids.max is 25, as in a container run with
    # --pids-limit (root is not held to RLIMIT_NPROC; pids.max holds all)
    d = pids_cgroup(25)
    if d is None:
        print("skipped: no pids cgroup can be made here")
    else:
        try:
            argv = ["sh", "-c", f'echo $$ > {d}/cgroup.procs && exec "$@"', "sh", prog, "threads", "24", "0"]
            env = dict(os.environ)
            env.pop("LD_PRELOAD", None)
            alone = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            what = "threads as root under pids.max 25"
            check(alone.returncode == 0 and "threads 24" in alone.stdout,
                  f"{what}, without the agent: exit {alone.returncode}, {alone.stdout!r}")
            out = fresh("tasks-cgroup")
            r = subprocess.run(argv, env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100"),
                               capture_output=True, text=True, timeout=60)
            check(r.returncode == 0 and "threads 24" in r.stdout,
                  f"{what}: as without the agent: exit {r.returncode}, {r.stdout!r}")
            check(any("pids.max 25" in l for l in agent_lines(r.stderr)),
                  f"{what}: the line names the limit: {agent_lines(r.stderr)}")
            left_after_flush(what, r, out, "pthread_create")
        finally:
            time.sleep(0.2)
            try:
                os.rmdir(d)
            except OSError:
                pass

    # Debian's python3, limited from its start as a unit's LimitNPROC= does:
    # threads until the first refusal
    py = "/usr/bin/python3"
    if not os.access(py, os.X_OK):
        skip("Debian's python3 is not installed")
    script = ("import threading, time\n"
              "time.sleep(0.6)\n"
              "ev = threading.Event(); n = 0\n"
              "try:\n"
              "    while n < 200:\n"
              "        threading.Thread(target=ev.wait, daemon=True).start(); n += 1\n"
              "except RuntimeError as e:\n"
              "    print('refused', e)\n"
              "print('threads', n)\n"
              "ev.set()\n")
    argv = ["prlimit", "--nproc=16", py, "-c", script]

    def made(r):
        m = re.search(r"^threads (\d+)$", r.stdout, re.M)
        return int(m.group(1)) if m else -1
    alone = as_user(argv)
    check(alone.returncode == 0 and made(alone) == 15,
          f"python3 under prlimit --nproc=16, without the agent: 15 threads ({alone.stdout!r} {alone.stderr[-200:]!r})")
    r, out = agent_run("python3", argv)
    check(r.returncode == 0 and made(r) == made(alone),
          f"python3 under prlimit --nproc=16: {made(r)} threads, as without the agent ({r.stdout!r})")
    left_after_flush("python3 under prlimit --nproc=16", r, out, "pthread_create")


# ---- undumpable: a daemon that dropped root itself ----------------------

def case_undumpable():
    """A process that is not dumpable (a daemon that dropped root with
    setuid itself, or one that said so with prctl) run by an unprivileged
    user: its task files belong to root, and the agent cannot read where a
    thread sleeps. It used to signal a thread asleep that had run since its
    last stack, and a signal ends nanosleep with EINTR whatever SA_RESTART
    says: Debian's perl, whose sleep does not go on after an interruption
    (Time::HiRes), had 3 to 5 of its five 0.4 s sleeps cut to 0.05 s. Now a
    thread asleep in such a wait is not signalled; its stack is
    stackshot.asleep(<the kernel's wait>)."""
    perl = "/usr/bin/perl"
    if not os.access(perl, os.X_OK):
        skip("Debian's perl is not installed")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        skip("root and setpriv are needed (a daemon that drops root, a process run as nobody)")
    nr = {"x86_64": 157, "aarch64": 167}.get(os.uname().machine)
    sleeps = ("use Time::HiRes qw(time sleep);\n"
              "my @short;\n"
              "for (1..5) { my $t0 = time; sleep(0.4); my $d = time - $t0;"
              " push @short, sprintf('%.3f', $d) if $d < 0.39; }\n"
              "open(my $f, '<', '/proc/self/status'); print grep { /^Uid/ } <$f>;\n"
              "print 'short sleeps: ', scalar(@short), \" (@short)\\n\";\n")
    drop = "$( = $) = 65534; $< = $> = 65534; die 'still root' if $> == 0;\n"
    runs = [("root dropping to nobody itself", [perl, "-e", drop + sleeps])]
    if nr:
        runs.append(("nobody, prctl(PR_SET_DUMPABLE, 0)",
                     ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                      perl, "-e", f"syscall({nr}, 4, 0) == 0 or die 'prctl: $!';\n" + sleeps]))
    for what, argv in runs:
        alone = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        check(alone.returncode == 0 and "short sleeps: 0 " in alone.stdout,
              f"{what}, without the agent: {alone.stdout!r} {alone.stderr[-300:]!r}")
        out = shared_dir("undumpable")
        r = subprocess.run(argv, env=agent_env(os.path.join(out, "o-%u"),
                                               SPLUNK_PROFILER_CALL_STACK_INTERVAL="50"),
                           capture_output=True, text=True, timeout=60)
        print(f"{what}: {r.stdout.strip()!r}; {agent_lines(r.stderr)}")
        check(r.returncode == 0 and "short sleeps: 0 " in r.stdout and "65534" in r.stdout,
              f"{what}: every 0.4 s sleep whole, as without the agent: {r.stdout!r}")
        txt = "".join(open(os.path.join(d, f), errors="replace").read()
                      for d in (os.path.join(out, x) for x in files(out)) for f in files(d)
                      if f.endswith(".txt"))
        check(rounds_in_text(txt) >= 20 and re.search(r"stackshot\.asleep\(\w*nanosleep\w*\)", txt),
              f"{what}: sampled all along ({rounds_in_text(txt)} rounds), the sleeps shown as the "
              f"kernel's wait")


def rounds_in_text(txt):
    return len(re.findall(r"^Full thread dump stackshot round \d+ ", txt, re.M))


# ---- debugger: gdb attached to a host --------------------------------------

def case_debugger():
    """A debugger attached to a process sees every signal the process gets
    first: with the agent at 20 ms, `gdb -p PID` stopped the program at
    its first `continue` with "received signal SIG61". While a tracer is
    attached (TracerPid), the agent signals no thread: the host runs under
    gdb to its end, rounds go on (the running thread sampled by the kernel,
    a perf event, or left out, counted as skipped), one line says why."""
    gdb = shutil.which("gdb")
    if gdb is None:
        skip("gdb is not installed")
    busy = os.path.join(bindir, "ss_hosts_busy")
    out = fresh("debugger")
    p = subprocess.Popen([busy, "3000"], env=agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    txt = lambda: "".join(open(os.path.join(out, f), errors="replace").read()
                          for f in files(out) if f.endswith(".txt"))
    for _ in range(200):
        if rounds_in_text(txt()) >= 5:
            break
        time.sleep(0.02)
    before = rounds_in_text(txt())
    g = subprocess.run([gdb, "-p", str(p.pid), "-batch", "-nx", "-ex", "continue"],
                       capture_output=True, text=True, timeout=60)
    stdout, stderr = p.communicate(timeout=30)
    lines = agent_lines(stderr)
    shown = [l for l in g.stdout.splitlines() if "signal" in l or "exited" in l]
    print(f"gdb: {shown}; host exit {p.returncode}; rounds before the attach {before}, "
          f"in all {rounds_in_text(txt())}; {lines}")
    check(before >= 5, "the agent took rounds before the debugger came")
    check(not any("received signal" in l for l in g.stdout.splitlines()),
          f"gdb never stopped the program on a signal: {shown}")
    check("exited normally" in g.stdout and p.returncode == 0,
          f"the host ran to its end under gdb: exit {p.returncode}, {shown}")
    check(sum("tracer" in l for l in lines) == 1, f"one line says a tracer is attached: {lines}")
    # the running thread is not signalled: the kernel samples it (a perf
    # event, no signal: gdb sees nothing), or it is left out (skipped)
    rounds = txt().split("Full thread dump stackshot round ")[1 + before:]
    sampled = [x for x in rounds if re.search(r"RUNNABLE\n\tat global\.(work|main)\(", x)]
    left = [x for x in rounds if re.search(r"[1-9]\d* skipped", x.splitlines()[0])]
    refused = [l for l in lines if "are counted, not sampled" in l]
    print(f"rounds while attached {len(rounds)}: busy thread sampled by the kernel in "
          f"{len(sampled)}, left out in {len(left)}; {refused}")
    check(len(rounds) > 10 and len(sampled) + len(left) >= len(rounds) - 2,
          "rounds went on while gdb was attached, the running thread sampled by the kernel or "
          "left out")
    check(refused or len(sampled) >= len(rounds) // 2,
          "the running thread sampled by the kernel (no signal) in most rounds while attached")


# ---- sanitizers: a program built with ASan or TSan ------------------------

def case_sanitizers():
    """A program built with -fsanitize=address or thread has the
    sanitizer's runtime, which aborts the process when a library is opened
    RTLD_DEEPBIND, the isolation the agent's core needs. The agent stays
    off there from the start (no thread, no core mapped), with one line
    that says why. Before: the loader armed its start thread, then loaded
    the core without isolation, which refused to run ("not a matching
    agent core"). An ASan program also refuses any library preloaded
    ahead of its runtime (ASan's own rule, the same for any library) unless
    ASAN_OPTIONS=verify_asan_link_order=0."""
    neutral = os.path.join(bindir, "ss_hosts_stall.so")
    for san, name in (("address", "AddressSanitizer"), ("thread", "ThreadSanitizer")):
        prog = os.path.join(bindir, f"ss_hosts_busy_{san}")
        base = dict(os.environ, ASAN_OPTIONS="verify_asan_link_order=0")
        alone = subprocess.run([prog, "600"], env=base, capture_output=True, text=True, timeout=60)
        check(alone.returncode == 0, f"{san}: without the agent: exit {alone.returncode} {alone.stderr[-300:]!r}")
        out = fresh(f"sanitizer-{san}")
        env = agent_env(out, ASAN_OPTIONS="verify_asan_link_order=0",
                        SPLUNK_PROFILER_CALL_STACK_INTERVAL="50")
        p = subprocess.Popen([prog, "600"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)  # past the first rounds' time (50 ms)
        try:
            names = [open(f"/proc/{p.pid}/task/{t}/comm").read().strip()
                     for t in os.listdir(f"/proc/{p.pid}/task")]
            maps = open(f"/proc/{p.pid}/maps").read()
        except OSError:
            names, maps = [], ""
        stdout, stderr = p.communicate(timeout=60)
        lines = agent_lines(stderr)
        print(f"{san}: exit {p.returncode}, threads {names}, {lines}")
        check(p.returncode == 0 and "ss_hosts_busy: pid" in stdout,
              f"{san}: runs as without the agent: exit {p.returncode} {stderr[-300:]!r}")
        check(len(lines) == 1 and f"sanitizer runtime ({name}" in lines[0] and "stays off" in lines[0],
              f"{san}: one line says the agent stays off, and why: {lines}")
        check(names and not any(n.startswith("stackshot") for n in names),
              f"{san}: no thread of the agent's: {names}")
        check("libstackshot-core" not in maps, f"{san}: the agent's core is not mapped")
        check(files(out) == [], f"{san}: no file: {files(out)}")
        if san == "address":
            # without the option, ASan's rule: the same exit as with any
            # library preloaded ahead of its runtime
            plain = dict(os.environ)
            plain.pop("ASAN_OPTIONS", None)
            other = subprocess.run([prog, "100"], env=dict(plain, LD_PRELOAD=neutral),
                                   capture_output=True, text=True, timeout=60)
            ours = subprocess.run([prog, "100"], env=dict(agent_env(out), ASAN_OPTIONS=""),
                                  capture_output=True, text=True, timeout=60)
            print(f"address, no ASAN_OPTIONS: exit {ours.returncode}, another preloaded library "
                  f"{other.returncode}")
            check(ours.returncode == other.returncode and "does not come first" in ours.stderr,
                  f"address, no ASAN_OPTIONS: ASan's own refusal, as for another library "
                  f"({ours.returncode}, {other.returncode}): {ours.stderr[-300:]!r}")


# ---- xz: threads that block every signal, against perf ---------------------

def case_xz():
    """liblzma's threads (xz -T) block every signal, so that the process's
    signals go to its main thread; so do QEMU's. The agent cannot
    signal them, and while they compute they are in no system call to be
    read asleep: they were only counted ("2 blocking the signal") and a
    profile of xz showed none of its compression. The kernel samples them
    now (a perf event on each such thread's CPU clock). perf record, the
    reference, samples the same run."""
    xz, perf = shutil.which("xz"), shutil.which("perf")
    if not xz or not perf:
        skip("xz and perf (linux-perf) are needed")
    import hashlib
    import random
    d = fresh("xz")
    data = os.path.join(d, "data.bin")
    with open(data, "wb") as f:
        f.write(random.Random(7).randbytes(24 << 20))
    argv = [xz, "-6", "-T2", "--block-size=4MiB", "-c", data]
    alone = subprocess.run(argv, capture_output=True, timeout=120)
    want = hashlib.sha256(alone.stdout).hexdigest()
    out = fresh("xz-out")
    pdata = os.path.join(d, "perf.data")
    env = agent_env(out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="20")
    env.pop("LD_PRELOAD")  # for xz only, not for perf
    r = subprocess.run([perf, "record", "-q", "-e", "cpu-clock:u", "-F", "499", "-o", pdata, "--",
                        "env", "LD_PRELOAD=" + lib] + argv,
                       env=env, capture_output=True, timeout=180)
    if r.returncode != 0 and not r.stdout:
        skip("perf record cannot sample here: %r" % r.stderr[-300:])
    check(r.returncode == 0 and hashlib.sha256(r.stdout).hexdigest() == want,
          "xz's output with the agent is the same as alone (exit %d)" % r.returncode)
    # the reference: each thread's samples, and how many fell in liblzma
    ps = subprocess.run([perf, "script", "-i", pdata, "-F", "comm,tid,ip,dso"],
                        capture_output=True, text=True, timeout=120).stdout
    per, lz = {}, {}
    for line in ps.splitlines():
        m = re.match(r"\s*xz\s+(\d+)\s+[0-9a-f]+\s+\((.*)\)", line)
        if m:
            tid = int(m.group(1))
            per[tid] = per.get(tid, 0) + 1
            lz[tid] = lz.get(tid, 0) + ("liblzma" in m.group(2))
    workers = sorted((t for t in per if per[t] >= 100 and lz[t] >= 0.8 * per[t]),
                     key=lambda t: -per[t])
    print("perf: samples per thread %s, in liblzma %s" % (per, lz))
    check(len(workers) >= 2, "perf: two threads compress, their samples in liblzma")
    txts = [os.path.join(out, f) for f in files(out) if f.startswith("xz.") and f.endswith(".txt")]
    if not check(len(txts) == 1, "one text file of xz: %s" % files(out)):
        return
    text = open(txts[0], errors="replace").read()
    rounds = text.split("Full thread dump stackshot round ")[1:]
    blocking = [x for x in rounds if "blocking the signal" in x.splitlines()[0]]
    for t in workers[:2]:
        mine = []
        for x in rounds:
            for th in x.split("\n\n"):
                if "nid=0x%x " % t in th:
                    mine.append(th)
        frames = [re.findall(r"^\tat (.*)$", th, re.M) for th in mine]
        busy = [f for th, f in zip(mine, frames)
                if "RUNNABLE" in th and f and "liblzma" in f[0]]
        whole = [f for f in busy if "clone3" in f[-1]]
        print("thread %d: listed in %d of %d rounds, RUNNABLE in liblzma %d, whole %d" %
              (t, len(mine), len(rounds), len(busy), len(whole)))
        # a sample every 10 ms of the thread's CPU time (half the
        # interval): on a loaded machine it gets less than a CPU, and
        # fewer rounds have a fresh one (perf's 499 Hz counts its CPU time)
        fresh_max = min(len(rounds), per[t] * 1000 // 499 // 10)
        check(len(busy) >= 0.5 * fresh_max,
              "thread %d, compressing: listed RUNNABLE in liblzma in %d of %d rounds, %d with a "
              "fresh sample at most (perf: %d%% of its samples there)" %
              (t, len(busy), len(rounds), fresh_max, 100 * lz[t] // per[t]))
        check(len(whole) >= 0.9 * len(busy), "thread %d: its stacks whole (to clone3): %d of %d" %
              (t, len(whole), len(busy)))
    check(len(blocking) <= len(rounds) // 2,
          "counted as blocking the signal in %d of %d rounds only (before: all)" %
          (len(blocking), len(rounds)))


cases = {"children": case_children, "timeout": case_timeout, "postgres": case_postgres, "shortlived": case_shortlived, "nobackend": case_nobackend, "switches": case_switches, "sleepers": case_sleepers, "node": case_node, "true": case_true, "setpriv": case_setpriv, "caps": case_caps, "wrappers": case_wrappers, "unshare": case_unshare, "ns": case_ns,
         "chromium": case_chromium, "nginx": case_nginx, "logfile": case_logfile,
         "rotation": case_rotation, "periods": case_periods, "retention": case_retention, "writefail": case_writefail,
         "mainexit": case_mainexit, "strict": case_strict,
         "mlock": case_mlock, "realtime": case_realtime, "tasks": case_tasks,
         "sanitizers": case_sanitizers, "undumpable": case_undumpable,
         "debugger": case_debugger, "xz": case_xz}
cases[case]()
print(f"{case}: {len(failures)} failed")
sys.exit(1 if failures else 0)
