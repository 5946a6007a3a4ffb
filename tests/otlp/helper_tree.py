#!/usr/bin/env python3
"""helper_tree.py: a forking host's children share its gRPC helper.

    helper_tree.py <libstackshot.so> <otlp_sink.js>

Debian's python3, preloaded, exports otlp_logs over gRPC (the default, in
stackshot-grpc-helper) every 100 ms to a real gRPC receiver (node,
tests/packaging/otlp_sink.js). After 1.5 s of work it forks two children
that each fork a grandchild, and exits while they work 2.5 s more.
Asserts: every process of the tree exported through one helper (started
by the parent, joined by the four others, which found it by its name),
with no line of their own; the children's records go on
arriving after the parent's exit, and their accounting has every record
exported; the parent does not wait for (or kill) the helper its
children use (it is told that the helper keeps on, and no second helper
is started); once the whole tree has exited the helper ends. Then a
parent and two children share a helper the test kills mid-run: one of
them starts the next by its name and the others join it, and all three
go on exporting. Exit 77 without node or the receiver's packages.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from verdict import verdict

# What the hosts' processes do between their forks: compute.
WORK = r"""
import os, sys, time
def work(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(i * i for i in range(2000))
"""

HOST = WORK + r"""
work(1.5)
for _ in range(2):
    if os.fork() == 0:
        if os.fork() == 0:
            work(2.5)
            os.write(1, f"grandchild {os.getpid()}\n".encode())
            os._exit(0)
        work(2.5)
        os.write(1, f"child {os.getpid()}\n".encode())
        os._exit(0)
work(0.3)
os.write(1, f"parent {os.getpid()} exits at {time.time()}\n".encode())
sys.exit(0)
"""

# The second run: a parent and two children export through one helper,
# which the test kills mid-run.
KILLED = WORK + r"""
work(1.5)
kids = []
for _ in range(2):
    kid = os.fork()
    if kid == 0:
        work(3)
        os._exit(0)
    kids.append(kid)
work(3)
for k in kids:
    os.waitpid(k, 0)
os.write(1, f"parent {os.getpid()} children {kids[0]} {kids[1]}\n".encode())
"""

NAMED = r"gRPC calls made by stackshot-grpc-helper, pid (\d+)( \(joined\))?"


def run_killed(py, env, err_path):
    """The second run; the helper killed once all three use it. Returns
    (the host's stdout lines, its stderr, the killed pid)."""
    killed = None
    with open(err_path, "w") as err_file:
        host = subprocess.Popen([py, "-c", KILLED], env=env, stdout=subprocess.PIPE,
                                stderr=err_file, text=True)
        deadline = time.time() + 20
        while killed is None and time.time() < deadline and host.poll() is None:
            with open(err_path) as f:
                named = re.findall(NAMED, f.read())
            if len(named) >= 3:
                time.sleep(0.3)  # a call or two through it first
                killed = int(named[0][0])
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.05)
        lines = host.communicate(timeout=60)[0].splitlines()
    with open(err_path) as f:
        text = f.read()
    os.unlink(err_path)
    return lines, text, killed


def check_killed(lines, text, killed, seen, failures):
    """After the kill: one of the three started the next helper by the
    name, the two others joined it, and all went on exporting."""
    parent = next((l.split() for l in lines if l.startswith("parent ")), None)
    named = re.findall(NAMED, text)
    after = [n for n in named if killed and int(n[0]) != killed]
    print(f"killed helper {killed}; named after: {after}; records per pid: "
          f"{ {p: seen['pids'].get(p, 0) for p in (parent[1], parent[3], parent[4])} if parent else None}")
    if not parent or killed is None:
        failures.append(f"the second run: host {lines}, helper killed: {killed}")
        return
    if len(after) != 3 or [n[1] for n in after].count("") != 1 or len({n[0] for n in after}) != 1:
        failures.append(f"after the kill, one new helper started and joined by the two others: "
                        f"{after}")
    for pid in (parent[1], parent[3], parent[4]):
        if seen["pids"].get(pid, 0) < 15:  # about 8 before the kill
            failures.append(f"pid {pid}: {seen['pids'].get(pid, 0)} records received: the "
                            f"exports stopped at the kill")
    if re.search(r"cannot be used in this forked child|records \d+ dropped", text):
        failures.append("a record was dropped or a child refused after the kill")


def helper_state(pid):
    """'gone', 'Z' (ended, not reaped yet) or the state letter."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def main():
    lib, sink_js = sys.argv[1], sys.argv[2]
    mods = os.path.join(os.path.dirname(sink_js), "..", "otlp", "node", "node_modules")
    py = "/usr/bin/python3"
    if not shutil.which("node") or not os.path.isdir(mods) or not os.access(py, os.X_OK):
        print("SKIP: node, tests/otlp/node's packages (npm ci) or Debian's python3 missing")
        return 77
    failures = []
    sink = subprocess.Popen(["node", sink_js], stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "SPLUNK_", "STACKSHOT_", "LD_"))}
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ss-helper-tree-{os.getpid()}")
    env.update({
        "SPLUNK_PROFILER_ENABLED": "true",
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:" + port,
        "STACKSHOT_OUTPUT_DIR": out,
        "STACKSHOT_LOG_LEVEL": "debug",
        "LD_PRELOAD": lib,
    })
    err_path = out + ".err"
    with open(err_path, "w") as err_file:
        host = subprocess.Popen([py, "-c", HOST], env=env, stdout=subprocess.PIPE,
                                stderr=err_file, text=True)
        host.wait(timeout=60)
        parent_ended = time.time()
        # the children hold the pipe until they exit
        lines = host.stdout.read().splitlines()
        tree_ended = time.time()
    with open(err_path) as f:
        text = f.read()
    os.unlink(err_path)
    shutil.rmtree(out, ignore_errors=True)
    helpers = re.findall(r"gRPC calls made by stackshot-grpc-helper, pid (\d+)( \(joined\))?",
                         text)
    helper = helpers[0][0] if helpers else None
    # the helper ends once nobody of the tree is left (init reaps it later)
    states = []
    for _ in range(40):
        states.append(helper_state(helper) if helper else "gone")
        if states[-1] in ("gone", "Z"):
            break
        time.sleep(0.05)
    killed_run = run_killed(py, env, err_path)
    shutil.rmtree(out, ignore_errors=True)
    sink.send_signal(signal.SIGTERM)
    seen = json.loads(sink.communicate(timeout=30)[0].strip().splitlines()[-1])
    check_killed(*killed_run, seen, failures)

    parent = next((l.split() for l in lines if l.startswith("parent ")), None)
    kids = [l.split()[1] for l in lines if l.startswith(("child ", "grandchild "))]
    print(f"host: {lines}; parent's exit seen {parent_ended - float(parent[4]):.2f} s after its "
          f"last line" if parent else f"host: {lines}")
    print(f"helpers named: {helpers}; after the tree: {states[-1]} ({len(states)} looks)")
    print(f"records per pid: {seen['pids']}")
    if host.returncode != 0 or not parent or len(kids) != 4:
        failures.append(f"host exit {host.returncode}, lines {lines}")
        return verdict(failures)
    if len(helpers) != 5 or [h[1] for h in helpers].count("") != 1:
        failures.append(f"one helper started and joined by the four others: {helpers}")
    if len({h[0] for h in helpers}) != 1:
        failures.append(f"one helper for the tree: {sorted({h[0] for h in helpers})}")
    if "cannot be used in this forked child" in text:
        failures.append("a child said it cannot export: " +
                        "; ".join(l for l in text.splitlines() if "forked child (pid" in l))
    for pid in [parent[1]] + kids:
        if seen["pids"].get(pid, 0) < 3:
            failures.append(f"pid {pid}: {seen['pids'].get(pid, 0)} records received")
    if not any(s > float(parent[4]) + 0.5 for s in seen["stamps"]):
        failures.append("no call received after the parent's exit")
    # the parent does not wait for (or kill) a helper its children use: it
    # was told so, and no other helper was started after its exit (its
    # exit time is printed, not asserted: its last export's flush, under
    # load, takes as long as a second's wait would)
    if "keeps on for its other clients" not in text:
        failures.append("the parent was not told that its helper keeps on")
    for m in re.finditer(r"pid (\d+) accounting: otlp_logs: .*?records (\d+) taken = (\d+) "
                         r"exported \+ (\d+) dropped", text):
        if m.group(2) != m.group(3) or m.group(4) != "0":
            failures.append(f"pid {m.group(1)}: records lost: {m.group(0)}")
    if states[-1] not in ("gone", "Z"):
        failures.append(f"the helper {helper} still runs {time.time() - tree_ended:.1f} s after "
                        f"the tree's end")
    return verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
