#!/usr/bin/env python3
"""The children of a parent that forks often (ss_fork_storm: 34 forks
within a few milliseconds, 4 children living 2 s, a 100 ms interval) do
not inherit the parent's libdw tables (core/core_heap.c: MADV_DONTFORK):
their agents start with the parent's cache of names and read DWARF again
for new addresses.

usage: check_fork_storm.py <ss_fork_storm> <libstackshot.so> <tmpdir>

Checked: every child exits 0 (a resolver that used its parent's tables,
not there, would crash the child); each long child's rounds are its own
and name child_work with its file and line, and main under it; at least
one long child says (debug) that the tables did not come with the fork
(when none does, the parent's tables were released before its storm: the
program runs again, at most 4 runs).
"""
import os
import re
import subprocess
import sys

prog, lib, tmp = sys.argv[1:4]
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
HEADER = re.compile(r"^Full thread dump stackshot round \d+ at \S+ \(pid (\d+),")
LOST = re.compile(r"pid (\d+): the parent's libdw tables did not come with the fork")


def run_once():
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
               STACKSHOT_OUTPUT_DIR=tmp, STACKSHOT_EXPORTERS="text",
               SPLUNK_PROFILER_CALL_STACK_INTERVAL="100", STACKSHOT_LOG_LEVEL="debug")
    return subprocess.run([prog, str(scale)], env=env, capture_output=True, text=True,
                          timeout=60 * scale)


def rounds_of(pid):
    """[(pid in the header, names child_work with file:line over main)]"""
    path = os.path.join(tmp, "ss_fork_storm.%d.txt" % pid)
    rounds = []
    if not os.path.exists(path):
        return rounds
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if m:
            rounds.append([int(m.group(1)), False])
        elif rounds and re.search(r"\.child_work\(fork_storm\.c:\d+\)$", line) and \
                any(re.search(r"\.main\(fork_storm\.c:\d+\)$", l) for l in lines[i + 1:i + 4]):
            rounds[-1][1] = True
    return rounds


def check(p):
    failures = []
    if p.returncode != 0:
        failures.append("exit status %d (a child did not exit 0)" % p.returncode)
    kids = [int(k) for k in re.findall(r"fork_storm: child (\d+)", p.stdout)]
    if len(kids) != 4:
        failures.append("long children %s" % kids)
    lost = {int(k) for k in LOST.findall(p.stderr)}
    for k in kids:
        rounds = rounds_of(k)
        if not rounds:
            failures.append("child %d: no rounds" % k)
        elif any(r[0] != k for r in rounds) or not any(r[1] for r in rounds):
            failures.append("child %d: rounds not its own or child_work over main never named" % k)
        print("child %d: %d rounds, parent's tables %s" % (
            k, len(rounds), "not inherited" if k in lost else "inherited"))
    return failures, bool(lost & set(kids))


for attempt in range(4):
    p = run_once()
    failures, telling = check(p)
    if failures or telling:
        break
    print("the parent's tables were released before its storm: again")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.stderr.write(p.stderr[-3000:])
    sys.exit(1)
if not telling:
    print("FAIL: no long child started without its parent's libdw tables (4 runs)")
    sys.exit(1)
print("PASS")
