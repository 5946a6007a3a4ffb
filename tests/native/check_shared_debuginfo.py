#!/usr/bin/env python3
"""What libdw and libelf hold lives where a fork does not copy it, and is
given back once the resolver releases it (core/core_alloc.c,
core/core_heap.c): libelf's decompressed debuginfo in shared mappings,
the rest in the core's zone, unmapped whenever libdw holds nothing.

The host is python3 (Debian's): it sleeps at a 50 ms interval (the agent
resolves libc's sleeping frames with libc6-dbg's compressed DWARF). At
0.5 s it reads its anonymous memory (smaps_rollup) and counts the shared
anonymous mappings in its own maps ("/dev/zero (deleted)", rw-s); at 1 s
it forks a child that computes past 150 ms until its agent's threads are
there (30 ms at least, 1 s at most: its agent starts at a CPU tick),
sleeps 1 s and exits; at 3.5 s (the resolver has released
libdw's tables: no miss for 1 s) it reads its anonymous memory again.
Checked: at least one shared mapping holds libelf's buffers; the
anonymous memory went down by more than 3 MiB between 0.5 and 3.5 s (the
zone given back, 6 MiB measured: with glibc's arena serving libdw 1.5); the
parent's and the child's rounds name clock_nanosleep with its source
file (clock_nanosleep.c: from the debuginfo, through the shared buffers
and the zone in the child, which keeps its parent's resolver); the
child's rounds are its own. Under an RLIMIT_AS the range the shared
mappings go in is not reserved (it would take the host's address space):
no shared mapping, and the names are the same. Skipped (77) when libc has
no separate debuginfo on this machine (libc6-dbg).

usage: check_shared_debuginfo.py <libstackshot.so> <tmpdir>"""
import glob
import os
import re
import resource
import shutil
import subprocess
import sys

lib, tmp = sys.argv[1:3]


def libc_debuginfo():
    out = subprocess.run(["readelf", "-n", "/lib/x86_64-linux-gnu/libc.so.6"],
                         capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m and os.path.exists(f"/usr/lib/debug/.build-id/{m.group(1)[:2]}/{m.group(1)[2:]}.debug")


if shutil.which("python3") is None or not libc_debuginfo():
    print("SKIP: no python3 or no separate debuginfo for libc (libc6-dbg)")
    sys.exit(77)

HOST = r"""
import os, sys, time


def anon_kib():
    with open('/proc/self/smaps_rollup') as f:
        for l in f:
            if l.startswith('Anonymous:'):
                return int(l.split()[1])
    return -1


t0 = time.monotonic()
time.sleep(0.5)
with open('/proc/self/maps') as f:
    shared = [l for l in f if ' rw-s ' in l and '/dev/zero (deleted)' in l]
print('shared', len(shared), flush=True)
print('anon held', anon_kib(), flush=True)
time.sleep(0.5)
child = os.fork()
if child == 0:
    print('child', os.getpid(), flush=True)
    # A forked child starts its agent at its first CPU tick past 100 ms
    # that finds a safe moment (docs/safety/guest.md): past them, it
    # computes until its agent's threads are there (30 ms of CPU at least,
    # 1 s at most: a tick that lands in libc, as in process_time's system
    # call, waits for the next), then sleeps.
    def agent_here():
        for t in os.listdir('/proc/self/task'):
            try:
                with open(f'/proc/self/task/{t}/comm') as f:
                    if f.read().startswith('stackshot-'):
                        return True
            except OSError:
                pass
        return False
    time.sleep(0.15)
    start = time.process_time()
    n = 0
    while time.process_time() - start < 1.0:
        n += 1
        if time.process_time() - start >= 0.03 and n % 1000 == 0 and agent_here():
            break
    time.sleep(1.0)
    os._exit(0)
time.sleep(max(0.0, 3.5 - (time.monotonic() - t0)))
print('anon released', anon_kib(), flush=True)
os.waitpid(child, 0)
"""

shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
           STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=tmp,
           SPLUNK_PROFILER_CALL_STACK_INTERVAL="50", STACKSHOT_SYMBOLS_DEBUGINFO="true")
p = subprocess.run([shutil.which("python3"), "-c", HOST], env=env, capture_output=True,
                   text=True, timeout=60)
failed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)


check(p.returncode == 0, f"the host exits 0 ({p.stderr.strip()[-300:]})")
m = re.search(r"^shared (\d+)$", p.stdout, re.M)
shared = int(m.group(1)) if m else 0
check(shared >= 1, f"libelf's buffers are in shared mappings ({shared})")
held = re.search(r"^anon held (\d+)$", p.stdout, re.M)
rel = re.search(r"^anon released (\d+)$", p.stdout, re.M)
check(held and rel and int(held.group(1)) - int(rel.group(1)) > 3072,
      f"the zone given back at the release: anonymous KiB held {held and held.group(1)}, "
      f"released {rel and rel.group(1)}")
c = re.search(r"^child (\d+)$", p.stdout, re.M)
child = c.group(1) if c else "?"
texts = {}
for path in glob.glob(os.path.join(tmp, "*.txt")):
    pid = re.search(r"\.(\d+)\.txt$", path).group(1)
    with open(path, errors="replace") as f:
        texts[pid] = f.read()
check(child in texts and len(texts) == 2, f"the parent's and the child's files: {sorted(texts)}")
SLEEP = re.compile(r"\tat \S*clock_nanosleep\S*\(clock_nanosleep\.c:\d+\)")
for pid, text in sorted(texts.items()):
    who = "child" if pid == child else "parent"
    rounds = re.findall(r"^Full thread dump stackshot round \d+ .*\(pid (\d+),", text, re.M)
    check(rounds and all(r == pid for r in rounds), f"{who}: {len(rounds)} rounds, all its own")
    check(SLEEP.search(text) is not None,
          f"{who}: clock_nanosleep named with its source file (debuginfo)")

# under an address-space limit: no reservation, no shared mapping
def limit_as():
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
q = subprocess.run([shutil.which("python3"), "-c", HOST], env=env, capture_output=True,
                   text=True, timeout=60, preexec_fn=limit_as)
m = re.search(r"^shared (\d+)$", q.stdout, re.M)
check(q.returncode == 0 and m is not None and m.group(1) == "0",
      f"under RLIMIT_AS: no shared mapping ({m.group(1) if m else q.stderr.strip()[-300:]})")
limited = []
for path in glob.glob(os.path.join(tmp, "*.txt")):
    with open(path, errors="replace") as f:
        limited.append(f.read())
check(any(SLEEP.search(t) for t in limited), "under RLIMIT_AS: clock_nanosleep still named from debuginfo")
if failed:
    print("FAIL: %d checks; stderr: %s" % (len(failed), p.stderr[-800:]))
    sys.exit(1)
print("PASS")
