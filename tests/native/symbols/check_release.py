#!/usr/bin/env python3
"""The resolver releases what libdw read once no address has missed its
cache for 1 s (samplers/symbols.c, release_dwarf; it was 5 s), and reads
it again for the next new address, with the same names and lines.

The host is python3 (Debian's) at a 50 ms interval: it sleeps 3 s (its
stack is resolved in the first rounds, libc's with libc6-dbg's DWARF, then
never changes), reads its own maps, then waits 1 s in select() (a stack
through libc code not resolved before) and reads its maps again. Checked:
after the sleep libc6-dbg's debug file is no longer mapped and libelf's
shared buffers are gone; the select() frames are named with their source
file and line from the debuginfo (select.c), so read again; the file is
mapped again after it. Skipped (77) without python3 or libc6-dbg.

usage: check_release.py <libstackshot.so> <tmpdir>"""
import glob
import os
import re
import shutil
import subprocess
import sys

lib, tmp = sys.argv[1:3]


def libc_debuginfo():
    out = subprocess.run(["readelf", "-n", "/lib/x86_64-linux-gnu/libc.so.6"],
                         capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m and os.path.exists(f"/usr/lib/debug/.build-id/{m.group(1)[:2]}/{m.group(1)[2:]}.debug")


if shutil.which("python3") is None or shutil.which("readelf") is None or not libc_debuginfo():
    print("SKIP: no python3/readelf or no separate debuginfo for libc (libc6-dbg)")
    sys.exit(77)

HOST = r"""
import select, time
def maps():
    with open('/proc/self/maps') as f:
        m = f.read()
    shared = sum(1 for l in m.splitlines() if ' rw-s ' in l and '/dev/zero (deleted)' in l)
    return int('/usr/lib/debug/' in m), shared
time.sleep(3.0)
print('idle', *maps(), flush=True)
select.select([], [], [], 1.0)
print('after', *maps(), flush=True)
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
idle = re.search(r"^idle (\d+) (\d+)$", p.stdout, re.M)
after = re.search(r"^after (\d+) (\d+)$", p.stdout, re.M)
check(idle is not None and idle.group(1) == "0",
      f"after 3 s idle libc6-dbg's file is not mapped ({idle.group(1) if idle else p.stdout!r})")
check(idle is not None and idle.group(2) == "0",
      f"after 3 s idle no shared buffer of libelf is left ({idle.group(2) if idle else '?'})")
check(after is not None and after.group(1) == "1",
      f"a new stack reads it again ({after.group(1) if after else p.stdout!r})")
text = ""
for path in glob.glob(os.path.join(tmp, "*.txt")):
    with open(path, errors="replace") as f:
        text += f.read()
check(re.search(r"\tat \S*select\S*\(select\.c:\d+\)", text) is not None,
      "select() named with its source file and line after the release")
check(re.search(r"\tat \S*clock_nanosleep\S*\(clock_nanosleep\.c:\d+\)", text) is not None,
      "the sleep named with its source file and line before it")
if failed:
    print("FAIL: %d checks; stdout: %s stderr: %s" % (len(failed), p.stdout, p.stderr[-800:]))
    sys.exit(1)
print("PASS")
