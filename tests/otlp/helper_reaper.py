#!/usr/bin/env python3
"""helper_reaper.py: a host that reaps any child never meets the gRPC helper.

    helper_reaper.py <libstackshot.so>

The host is Python (python3 from Debian) running a loop that a server or a
shell runs: a SIGCHLD handler, one child of its own (`sleep 0.3`), and
waitpid(-1, WNOHANG) every 20 ms for 2 s, recording every pid it reaps.
The agent is preloaded with otlp_logs over gRPC (to a closed port: the
helper starts all the same) at 100 ms. The host must reap exactly its own
child, get SIGCHLD for it alone, and have no other child at the end; the
agent's debug line names the helper's pid, which must not have been the
host's child (its parent is init or a subreaper) and must be gone or a
zombie of its new parent after the host exits. The host then sends
SIGINT to its process group (a shell's ^C), which it handles: the helper
(a session of its own, found by the pidfd the agent holds) runs on. Then the
same with STACKSHOT_GRPC_HELPER=false: no helper at all (the control).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from verdict import verdict

HOST = r'''
import json, os, signal, subprocess, time
sigchld = 0
def on_chld(sig, frame):
    global sigchld
    sigchld += 1
signal.signal(signal.SIGCHLD, on_chld)
time.sleep(0.5)  # the agent starts, its exporter opens
quiet = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # no agent of its own
own = subprocess.Popen(["sleep", "0.3"], env=quiet).pid
reaped = []
until = time.monotonic() + 2.0
while time.monotonic() < until:
    try:
        while True:
            pid, st = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            reaped.append(pid)
    except ChildProcessError:
        pass
    time.sleep(0.02)
# the helper, by the pidfd the agent holds ("Pid:" in its fdinfo)
def helper_pid():
    import re
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            m = re.search(r"^Pid:\s+(\d+)$", open(f"/proc/self/fdinfo/{fd}").read(), re.M)
        except OSError:
            continue
        if m:
            return int(m.group(1))
    return None
def running(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, TypeError):
        return False
# a shell's ^C: SIGINT to the whole process group, which the host handles
signal.signal(signal.SIGINT, lambda s, f: None)
hp = helper_pid()
before = running(hp)
os.killpg(0, signal.SIGINT)
time.sleep(0.3)
after = running(hp)
children = []
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            st = open(f"/proc/{d}/status").read()
        except OSError:
            continue
        if f"\nPPid:\t{os.getpid()}\n" in st:
            children.append(int(d))
print(json.dumps({"own": own, "reaped": reaped, "sigchld": sigchld, "children": children,
                  "helper": hp, "before": before, "after": after}))
'''


def run(lib, extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OTEL_", "SPLUNK_", "STACKSHOT_")):
            del env[k]
    with tempfile.TemporaryDirectory() as out:
        env.update({
            "SPLUNK_PROFILER_ENABLED": "true",
            "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
            "STACKSHOT_EXPORTERS": "otlp_logs",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "STACKSHOT_SHUTDOWN_TIMEOUT": "300",
            "STACKSHOT_OUTPUT_DIR": out,
            "STACKSHOT_LOG_LEVEL": "debug",
            "LD_PRELOAD": lib,
        })
        env.update(extra)
        p = subprocess.run([sys.executable, "-c", HOST], env=env, capture_output=True,
                           text=True, timeout=60, start_new_session=True)
    return p


def state_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def check(name, p, want_helper, failures):
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        failures.append(f"{name}: exit {p.returncode}, stdout {p.stdout!r}, stderr {p.stderr[-400:]!r}")
        return
    r = json.loads(lines[-1])
    helpers = [int(x) for x in re.findall(r"gRPC calls made by stackshot-grpc-helper, pid (\d+)",
                                          p.stderr)]
    print(f"{name}: own child {r['own']}, reaped {r['reaped']}, SIGCHLD {r['sigchld']}, "
          f"children left {r['children']}, helpers {helpers}; helper {r['helper']} running "
          f"before the group's SIGINT {r['before']}, after {r['after']}")
    if r["reaped"] != [r["own"]]:
        failures.append(f"{name}: the host reaped {r['reaped']}, not only its child {r['own']}")
    if r["sigchld"] != 1:
        failures.append(f"{name}: {r['sigchld']} SIGCHLD, not 1")
    if r["children"]:
        failures.append(f"{name}: children left {r['children']}")
    if want_helper and len(helpers) != 1:
        failures.append(f"{name}: {len(helpers)} helpers named in the agent's lines, not 1")
    if want_helper and (r["helper"] not in helpers or not r["before"] or not r["after"]):
        failures.append(f"{name}: the helper {r['helper']} running before the host's SIGINT to "
                        f"its process group: {r['before']}, after: {r['after']}")
    if not want_helper and helpers:
        failures.append(f"{name}: a helper was started: {helpers}")
    for h in helpers:
        until = time.monotonic() + 3
        while state_of(h) not in (None, "Z") and time.monotonic() < until:
            time.sleep(0.05)
        if state_of(h) not in (None, "Z"):
            failures.append(f"{name}: helper {h} outlived its host (state {state_of(h)})")


def main():
    lib = sys.argv[1]
    failures = []
    check("helper", run(lib, {}), True, failures)
    check("in-process", run(lib, {"STACKSHOT_GRPC_HELPER": "false"}), False, failures)
    return verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
