#!/usr/bin/env python3
"""Robustness cases for the native sampler under LD_PRELOAD.

usage: robust.py <case> <bindir> <libstackshot.so> <tmpdir> [preload-prefix]
cases: churn, many, depth, fork, dlopen

Each case runs a test program with the agent for a few seconds and checks
that it exits normally, that rounds kept appearing, and what the case is
about (counted skips, 1,000 threads, the depth marker, the child's own
file, the library's frames)."""
import os
import re
import subprocess
import sys

case, bindir, lib, tmp = sys.argv[1:5]
preload = (sys.argv[5] + " " if len(sys.argv) > 5 and sys.argv[5] else "") + lib
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def parse(path):
    """[(header fields, [threads])]; thread = (name, state, [function names], truncated)."""
    rounds = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^Full thread dump stackshot round (\d+) .*\(pid (\d+), (\d+) threads, (\d+) skipped(?:, \d+ blocking the signal)?\)", line)
            if m:
                rounds.append({"seq": int(m.group(1)), "pid": int(m.group(2)),
                               "n": int(m.group(3)), "skipped": int(m.group(4)), "threads": []})
                continue
            if not rounds:
                continue
            m = re.match(r'^"(.*)" #(\d+) ', line)
            if m:
                rounds[-1]["threads"].append({"name": m.group(1), "frames": [], "marker": None})
                continue
            th = rounds[-1]["threads"][-1] if rounds[-1]["threads"] else None
            m = re.match(r"^\tat (.*)\((.*)\)$", line)
            if m and th is not None:
                if m.group(1) == "stackshot.truncated":
                    th["marker"] = m.group(2)
                else:
                    fn = m.group(1).split(".", 1)[-1].split("@", 1)[0]
                    th["frames"].append(fn)
    return rounds


def run(args, env_extra, timeout=60):
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, LD_PRELOAD=preload, SPLUNK_PROFILER_ENABLED="true",
               STACKSHOT_OUTPUT_DIR=tmp, STACKSHOT_EXPORTERS="text")
    env.update(env_extra)
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, "%s: exit code %d, stderr: %s" % (args[0], p.returncode, p.stderr[-2000:]))
    return p


def files():
    return sorted(f for f in os.listdir(tmp) if f.endswith(".txt"))


def only_file(prefix):
    fs = [f for f in files() if f.startswith(prefix)]
    check(len(fs) == 1, "one file %s.*.txt expected, have %s" % (prefix, files()))
    return parse(os.path.join(tmp, fs[0])) if fs else []


def any_frame(rounds, fn):
    return any(fn in t["frames"] for r in rounds for t in r["threads"])


os.makedirs(tmp, exist_ok=True)
# sanitizer builds run (and start threads) several times slower
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
sec = lambda x: "%g" % (x * scale)
b = lambda name: os.path.join(bindir, name)

if case == "churn":
    run([b("ss_churn"), sec(3)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"})
    rounds = only_file("ss_churn")
    check(len(rounds) >= 20, "churn: %d rounds in 3 s at 10 ms" % len(rounds))
    check([r["seq"] for r in rounds] == list(range(1, len(rounds) + 1)), "churn: rounds out of sequence")
    check(any_frame(rounds, "short_life"), "churn: no short_life frame seen")
elif case == "many":
    run([b("ss_many_threads"), sec(3), "1000"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "200"})
    rounds = only_file("ss_many_threads")
    full = [r for r in rounds if r["n"] >= 1001]
    check(len(full) >= 3, "many: rounds with all 1001 threads: %d of %d (%s)" %
          (len(full), len(rounds), [r["n"] for r in rounds]))
    # all 1000 parked, with their stacks, in at least two rounds (the first
    # rounds may find threads still starting, under sanitizers above all,
    # and the last ones threads already leaving after the run ended)
    parked = [sum(1 for t in r["threads"] if "parked_in_many" in t["frames"]) for r in full]
    check(sum(1 for p in parked if p == 1000) >= 2,
          "many: rounds with all 1000 threads parked: %s" % parked)
    check(all(r["n"] <= 1001 for r in rounds), "many: more threads than exist")
elif case == "depth":
    run([os.environ.get("SS_DEMO", b("stackshot-demo")), sec(2)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
                                     "STACKSHOT_MAX_DEPTH": "50"})
    rounds = only_file("stackshot-demo")
    check(len(rounds) >= 6, "depth: %d rounds" % len(rounds))
    rec = [t for r in rounds[-4:] for t in r["threads"] if t["name"] == "recursive"]
    check(len(rec) >= 3, "depth: recursive thread missing")
    for t in rec:
        check(len(t["frames"]) == 50 and t["marker"] == "STACKSHOT_MAX_DEPTH:50",
              "depth: %d frames, marker %r" % (len(t["frames"]), t["marker"]))
        check(t["frames"][-1] == "recurse", "depth: the leaf side is kept (%s)" % t["frames"][-3:])
        check(any("nanosleep" in f for f in t["frames"][:3]), "depth: leaf %s" % t["frames"][:3])
    others = [t for r in rounds for t in r["threads"] if t["name"] == "sleeper"]
    check(others and all(t["marker"] is None for t in others), "depth: marker on a short stack")
elif case == "fork":
    p = run([b("ss_fork_exec"), sec(1)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100"})
    m = re.search(r"child (\d+)", p.stdout)
    if check(m, "fork: no child pid in %r" % p.stdout):
        child = int(m.group(1))
        fs = files()
        parent = [f for f in fs if f.startswith("ss_fork_exec.") and f != "ss_fork_exec.%d.txt" % child]
        check(len(parent) == 1 and "ss_fork_exec.%d.txt" % child in fs, "fork: files %s" % fs)
        if len(parent) == 1:
            pr = parse(os.path.join(tmp, parent[0]))
            check(len(pr) >= 10 and any_frame(pr, "parent_work"), "fork: parent rounds %d" % len(pr))
            check(not any_frame(pr, "child_work"), "fork: child stacks in the parent's file")
        path = os.path.join(tmp, "ss_fork_exec.%d.txt" % child)
        if os.path.exists(path):
            cr = parse(path)
            check(all(r["pid"] == child for r in cr), "fork: the child's rounds carry its pid")
            check(any_frame(cr, "child_work"), "fork: child_work never sampled in the child")
            check(any_frame(cr, "execd_work"), "fork: execd_work never sampled after exec")
            check(not any_frame(cr, "parent_work"), "fork: parent stacks in the child's file")
elif case == "dlopen":
    run([b("ss_dl_loop"), b("libss_dltest.so"), sec(2.5)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"})
    rounds = only_file("ss_dl_loop")
    check(len(rounds) >= 40, "dlopen: %d rounds" % len(rounds))
    check(any_frame(rounds, "dltest_work"), "dlopen: dltest_work never sampled")
else:
    check(False, "unknown case " + case)

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
