#!/usr/bin/env python3
"""A cgo Go server (tests/native/go/server.go) preloaded with the agent is
sampled: the Go runtime installs its handler on every signal but 32-34 and
keeps the ones it does not use, so the agent samples a Go program with
SIGRTMIN (34); its threads are listed with the Go runtime's frames named,
and its spinning goroutine (main.spin) is caught by signal.

usage: check_go.py <server> <libstackshot.so> <tmpdir>"""
import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stackdump  # noqa: E402

server, lib, tmp = sys.argv[1:4]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


env = stackdump.agent_run_env(lib, tmp)
env.pop("STACKSHOT_SIGNAL", None)
p = subprocess.Popen([server, "15"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
first = p.stdout.readline()
m = re.search(r"port (\d+)", first)
served = 0
if check(m, "no port line: %r" % first):
    for _ in range(5):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%s/" % m.group(1), timeout=10) as r:
                served += r.read().startswith(b"hello")
        except OSError as e:
            check(False, "request failed: %s" % e)
out, err = p.communicate(timeout=120)
check(p.returncode == 0 and "server: done" in out, "server exit %s: %r %s" % (p.returncode, out, err[-800:]))
check(served == 5, "requests served: %d of 5" % served)
check("the sampling signal is SIGRTMIN" in err, "no line about SIGRTMIN: %r" % err[-800:])
check("does not pass it on" not in err, "the Go runtime's handler taken for a takeover: %r" % err[-800:])
c = stackdump.debug_counters(err)
print("native sampler counters: %s" % c)
if check(c is not None, "no debug line of the native sampler"):
    check(c["signalled"] > 0, "no stack taken by signal: %s" % c)
files = [f for f in os.listdir(tmp) if f.endswith(".%d.txt" % p.pid)]
rounds = stackdump.parse(os.path.join(tmp, files[0])) if files else []
check(len(rounds) >= 10, "rounds: %d" % len(rounds))
late = rounds[2:-1]
if late:
    runtime_threads = max(sum(1 for t in r if any(f.startswith("runtime.") for f, _, _ in t["frames"]))
                          for r in late)
    print("threads with Go runtime frames in a round: up to %d; threads per round: %s" %
          (runtime_threads, [len(r) for r in late][:10]))
    check(runtime_threads >= 2, "threads with runtime.* frames: %d" % runtime_threads)
    check(all(len(r) >= 3 for r in late), "threads per round: %s" % [len(r) for r in late])
    # the busy goroutine, caught running by signal: in main.spin, or inside
    # the asynchronous preemption Go's own SIGURG injects into it every
    # 10 ms (runtime.asyncPreempt: the walk stops there)
    def busy(t):
        fns = stackdump.functions(t["frames"])
        return "main.spin" in fns or (fns and fns[0].startswith("runtime.asyncPreempt"))
    spin = [t for r in late for t in r if busy(t)]
    # (a round may leave its thread out: on a loaded machine it may get no
    # CPU within the answer timeout)
    check(3 * len(spin) >= len(late), "the busy goroutine in %d of %d rounds" % (len(spin), len(late)))
    check(sum(1 for t in spin if "main.spin" in stackdump.functions(t["frames"])) >= 2,
          "main.spin seen in fewer than 2 rounds")
    check(all(t["state"] == "RUNNABLE" for t in spin), "the busy goroutine not RUNNABLE")
    # Go code's file and line come from its own CU (.debug_aranges lists
    # only the cgo C files: libdwfl alone named Go frames after one of them)
    places = set((f, l) for t in spin for fn, f, l in t["frames"]
                 if stackdump.short(fn) == "main.spin")
    print("main.spin at %s" % sorted(places))
    check(places and all(f == "server.go" and l > 0 for f, l in places),
          "main.spin not placed in server.go: %s" % sorted(places))
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
