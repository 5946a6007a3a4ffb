#!/usr/bin/env python3
"""What libdw and libelf hold lives where a fork does not copy it, and is
given back once the resolver releases it (core/core_alloc.c,
core/core_heap.c): libelf's decompressed debuginfo in shared mappings,
the rest in the core's zone, MADV_DONTFORK ("dc" in smaps' VmFlags),
unmapped whenever libdw holds nothing.

The host is python3 (Debian's): it sleeps at a 50 ms interval (the agent
resolves libc's sleeping frames with libc6-dbg's compressed DWARF). At
0.5 s it counts the shared anonymous mappings in its own maps ("/dev/zero
(deleted)", rw-s) and the resident memory of its MADV_DONTFORK mappings;
forks a child that looks for those mappings' ranges in its own maps and
exits; at 3.5 s (the resolver has released libdw's tables: no miss for
1 s) it reads them again and forks a child that does the same, then
computes 30 ms past 150 ms (its agent starts at a CPU tick), sleeps 1 s
and exits. Checked: at 0.5 s at least one shared mapping holds libelf's
buffers and the zone holds more than 512 KiB; at 3.5 s less than 256 KiB
(a fresh Dwfl's module list); neither child has any of those ranges; the
parent's and the child's rounds name clock_nanosleep with its source
file (clock_nanosleep.c: from the debuginfo; the child's from the cache
it kept, its libdw tables forgotten); the child's rounds are its own.
Under an RLIMIT_AS the range the shared mappings go in is not reserved
(it would take the host's address space): no shared mapping, and the
names are the same. Skipped (77) when libc has no separate debuginfo on
this machine (libc6-dbg). Fails with the zone inherited (no
MADV_DONTFORK: the child holds the parent's) or kept after the release.

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


def dontfork():
    # KiB resident and the ranges of this process's MADV_DONTFORK mappings
    total = 0
    ranges = []
    rng = rss = None
    with open('/proc/self/smaps') as f:
        for l in f:
            if l[0] in '0123456789abcdef' and '-' in l.split(' ', 1)[0]:
                rng = l.split(' ', 1)[0]
            elif l.startswith('Rss:'):
                rss = int(l.split()[1])
            elif l.startswith('VmFlags:') and ' dc' in ' ' + l.split(':', 1)[1]:
                total += rss
                ranges.append(rng)
    return total, ranges


def inherited(ranges):
    with open('/proc/self/maps') as f:
        mine = {l.split(' ', 1)[0] for l in f}
    return len(set(ranges) & mine)


time.sleep(0.5)
with open('/proc/self/maps') as f:
    shared = [l for l in f if ' rw-s ' in l and '/dev/zero (deleted)' in l]
print('shared', len(shared), flush=True)
kib, ranges = dontfork()
print('zone held', kib, len(ranges), flush=True)
quick = os.fork()
if quick == 0:  # exits before its agent would start
    print('quick child inherits', inherited(ranges), flush=True)
    os._exit(0)
os.waitpid(quick, 0)
time.sleep(3.0)
kib, ranges = dontfork()
print('zone released', kib, len(ranges), flush=True)
child = os.fork()
if child == 0:
    print('child', os.getpid(), 'inherits', inherited(ranges), flush=True)
    # A forked child starts its agent at its first CPU tick past 100 ms
    # (docs/safety/guest.md): past them, it computes a little, then sleeps.
    time.sleep(0.15)
    end = time.process_time() + 0.03
    while time.process_time() < end:
        pass
    time.sleep(1.0)
    os._exit(0)
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
held = re.search(r"^zone held (\d+) (\d+)$", p.stdout, re.M)
check(held and int(held.group(1)) > 512,
      f"libdw's tables in the zone while held: {held.groups() if held else p.stdout} (KiB, mappings)")
rel = re.search(r"^zone released (\d+) (\d+)$", p.stdout, re.M)
check(rel and int(rel.group(1)) < 256,
      f"the zone given back once released: {rel.groups() if rel else p.stdout} (KiB, mappings)")
q = re.search(r"^quick child inherits (\d+)$", p.stdout, re.M)
check(q and q.group(1) == "0",
      f"a child forked while the zone is held has none of its mappings: {q.group(1) if q else p.stdout}")
c = re.search(r"^child (\d+) inherits (\d+)$", p.stdout, re.M)
child = c.group(1) if c else "?"
check(c and c.group(2) == "0",
      f"a child forked after the release has none of the zone's mappings: {c.group(2) if c else p.stdout}")
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
