#!/usr/bin/env python3
"""Return addresses into code mapped after the agent read its table of
mappings (a JIT's new code pages) are taken for code: the walk goes through
such a frame (frame pointer, no CFI) down to its callers.

tests/native/jit_late.c sleeps 300 ms (the agent's first rounds, at 50 ms,
read the table), maps a page, writes a stub into it that calls spin_here,
and spins 1 s. Rounds of the spin must hold spin_here, then the stub's
frame (an address in no module), then outer_caller and main.

With "flip", the page exists (writable, a data page) when the agent reads
its table and is made executable only before the spin, as V8 flips its
code pages: the walk must go through it all the same.

usage: check_jit_late.py <jit_late> <libstackshot.so> <tmpdir> [flip]"""
import os
import re
import shutil
import subprocess
import sys

host, lib, tmp = sys.argv[1:4]
mode = sys.argv[4:5]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
           SPLUNK_PROFILER_CALL_STACK_INTERVAL="50", STACKSHOT_EXPORTERS="text",
           STACKSHOT_OUTPUT_DIR=tmp)
p = subprocess.run([host, "300", "1000"] + mode, env=env, capture_output=True, text=True, timeout=60)
files = os.listdir(tmp)
text = open(os.path.join(tmp, files[0])).read() if len(files) == 1 else ""
spinning, through = 0, 0
for block in re.findall(r'^"ss_jit_late" #1 .*?(?=^$)', text, re.M | re.S):
    frames = re.findall(r"^\tat (.*)$", block, re.M)
    names = [f.split("(")[0] for f in frames]
    if not names or not names[0].endswith("spin_here"):
        continue
    spinning += 1
    if any(n.endswith("outer_caller") for n in names) and any(n.endswith(".main") for n in names):
        through += 1
    else:
        print("cut: %s" % frames[:6])
print("rounds in spin_here: %d, walked through the new page: %d" % (spinning, through))
if p.returncode != 0 or spinning < 5 or through < spinning - 1:
    print("FAIL: exit %d, files %s, stderr %s" % (p.returncode, files, p.stderr[-500:]))
    sys.exit(1)
print("PASS")
