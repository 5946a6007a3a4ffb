#!/usr/bin/env python3
"""Forked children sample from their start (ss_fork_rounds: 16 children of
a parent whose rounds are long, each living 2 s, at a 100 ms interval).

usage: check_fork_rounds.py <ss_fork_rounds> <libstackshot.so> <tmpdir> <exporters>
       [collector.py]

exporters: "text" or "text,qubership" (collector.py is then started on a
free port). A child forked while the parent's sampler was inside a round
starts a new sampler; it keeps the parent's symbol resolver unless the
fork fell inside a lookup (its debug line says which). Checked: every
child's rounds are its own and name child_work with its file and line; at
least one child was forked in a round and kept the resolver (when none
fell in a round, the program runs again, at most 4 runs). Printed, not
asserted (rates on a shared machine): each child's rounds and when its
second round came (a round is stamped when it starts: a first round that
re-read every module's DWARF shows in the next one).
"""
import os
import re
import subprocess
import sys
from datetime import datetime, timezone

prog, lib, tmp, exporters = sys.argv[1:5]
collector = sys.argv[5] if len(sys.argv) > 5 else None
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
CHILDREN = 40  # forks 61 ms apart: enough that some fall inside a round on a quiet machine
HEADER = re.compile(r"^Full thread dump stackshot round \d+ at (\S+)Z \(pid (\d+),")


def run_once():
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
               STACKSHOT_OUTPUT_DIR=tmp, STACKSHOT_EXPORTERS=exporters,
               SPLUNK_PROFILER_CALL_STACK_INTERVAL="100", STACKSHOT_LOG_LEVEL="debug")
    coll = None
    if "qubership" in exporters:
        coll = subprocess.Popen(["/usr/bin/python3", collector, "--out", tmp + ".collector"],
                                stdout=subprocess.PIPE, text=True)
        env.update(REMOTE_DUMP_HOST="127.0.0.1", REMOTE_DUMP_PORT_PLAIN=coll.stdout.readline().strip())
    try:
        return subprocess.run([prog, str(scale), str(CHILDREN)], env=env, capture_output=True,
                              text=True, timeout=60 * scale)
    finally:
        if coll:
            coll.kill()
            coll.wait()


def child_rounds(pid):
    """[(epoch ms, names one thread's frames as child_work)] of the child's file."""
    path = os.path.join(tmp, "ss_fork_rounds.%d.txt" % pid)
    rounds = []
    if not os.path.exists(path):
        return rounds
    with open(path, errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                t = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
                rounds.append([t.timestamp() * 1000, int(m.group(2)), False])
            elif rounds and re.search(r"\.child_work\(fork_rounds\.c:\d+\)$", line.rstrip()):
                rounds[-1][2] = True
    return rounds



def check(p):
    failures = []
    if p.returncode != 0:
        failures.append("exit status %d" % p.returncode)
    kids = {int(a): int(b) for a, b in re.findall(r"fork_rounds: child (\d+) at (\d+)", p.stdout)}
    if len(kids) != CHILDREN:
        failures.append("children %s" % kids)
    fell = dict((int(a), b) for a, b in re.findall(
        r"pid (\d+): forked during a round; symbol resolver (kept|rebuilt)", p.stderr))
    delay, rounds_of = {}, {}
    for k, at in sorted(kids.items(), key=lambda x: x[1]):
        rounds = child_rounds(k)
        if not rounds:
            failures.append("child %d: no rounds" % k)
            continue
        if any(r[1] != k for r in rounds) or not any(r[2] for r in rounds):
            failures.append("child %d: rounds not its own or child_work never named" % k)
        if len(rounds) < 2:
            failures.append("child %d: %d round" % (k, len(rounds)))
            continue
        delay[k] = rounds[1][0] - at
        rounds_of[k] = len(rounds)
        print("child %d: second round after %4.0f ms, %2d rounds (forked %s)" % (
            k, delay[k], len(rounds), {"kept": "in a round, resolver kept",
                                       "rebuilt": "in a lookup, resolver rebuilt"}.get(
                fell.get(k), "between rounds")))
    def figures(which):
        ks = [k for k in delay if fell.get(k) == which]
        return "%d children, rounds %s, second round after %s ms" % (
            len(ks), sorted(rounds_of[k] for k in ks), sorted(int(delay[k]) for k in ks))
    print("%s: between rounds: %s; in a round, resolver kept: %s; in a lookup, rebuilt: %s"
          % (exporters, figures(None), figures("kept"), figures("rebuilt")))
    return failures, any(v == "kept" for v in fell.values())


for attempt in range(4):
    p = run_once()
    failures, telling = check(p)
    if failures or telling:
        break
    print("no child forked in a round: again")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.stderr.write(p.stderr[-3000:])
    sys.exit(1)
if not telling:
    print("FAIL: no child forked in a round kept the parent's symbol resolver (4 runs)")
    sys.exit(1)
print("PASS")
