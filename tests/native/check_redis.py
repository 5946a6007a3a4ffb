#!/usr/bin/env python3
"""Debian's redis-server preloaded with the agent: jemalloc's background
threads (jemalloc_bg_thd) block every signal; they used to be only counted
("blocking the signal") and left out of every round. Asleep in
pthread_cond_wait, they are now sampled without a signal.

usage: check_redis.py <libstackshot.so> <tmpdir>   (exit 77 without redis-server)"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stackdump  # noqa: E402

lib, tmp = sys.argv[1:3]
redis = shutil.which("redis-server")
if not redis:
    print("skipped: redis-server not installed")
    sys.exit(77)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


env = stackdump.agent_run_env(lib, tmp)
p = subprocess.Popen([redis, "--port", "0", "--unixsocket", os.path.join(tmp, "redis.sock"),
                      "--save", "", "--appendonly", "no"],
                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rounds():
    files = [f for f in os.listdir(tmp) if f.endswith(".%d.txt" % p.pid)]
    return stackdump.parse(os.path.join(tmp, files[0])) if files else []


for _ in range(600):  # 12 rounds, at most a minute
    if len(rounds()) >= 12 or p.poll() is not None:
        break
    time.sleep(0.1)
p.send_signal(signal.SIGINT)  # redis shuts down and exits: the agent's destructor runs
out, err = p.communicate(timeout=60)
rs = rounds()
check(len(rs) >= 12, "rounds: %d (redis said %r)" % (len(rs), (out + err)[-600:]))
late = rs[2:-1]
bg = [[t for t in r if t["name"] == "jemalloc_bg_thd"] for r in late]
print("jemalloc_bg_thd threads per round: %s" % [len(b) for b in bg])
check(late and all(len(b) >= 1 for b in bg), "jemalloc's background threads missing from rounds")
waits = [t for b in bg for t in b
         if any("cond_wait" in f or "cond_timedwait" in f for f in stackdump.functions(t["frames"]))
         and stackdump.functions(t["frames"])[-1] in ("__clone3", "clone3", "__clone", "clone")]
check(len(waits) >= len(late), "background threads asleep in pthread_cond_wait down to clone3: %d" %
      len(waits))
c = stackdump.debug_counters(err)
print("native sampler counters: %s" % c)
check(c is not None and c["asleep"] > 0, "stacks read without a signal: %s" % c)
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
