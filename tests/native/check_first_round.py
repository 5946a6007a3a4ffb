#!/usr/bin/env python3
"""The first round comes one interval after load (the loader's start
thread waits that interval; the sampler then takes its first round at
once): Debian's sleep living 1.6 s at the default 1 s interval is sampled
once, its main thread's elapsed time in that round under 1.5 s. (Before:
the sampler waited one more interval, and a process of 1.6 s left no
round at all.)

usage: check_first_round.py <libstackshot.so> <tmpdir>"""
import os
import re
import shutil
import subprocess
import sys

lib, tmp = sys.argv[1:3]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
           STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=tmp)
env.pop("SPLUNK_PROFILER_CALL_STACK_INTERVAL", None)
p = subprocess.run(["sleep", "1.6"], env=env, capture_output=True, text=True, timeout=30)
files = os.listdir(tmp)
text = open(os.path.join(tmp, files[0])).read() if len(files) == 1 else ""
elapsed = [float(x) for x in re.findall(r'^"sleep" #1 .* elapsed=([0-9.]+)s', text, re.M)]
print("rounds: %d, main thread's elapsed: %s" % (len(elapsed), elapsed))
if p.returncode != 0 or not elapsed or elapsed[0] >= 1.5:
    print("FAIL: exit %d, files %s, stderr %s" % (p.returncode, files, p.stderr[-500:]))
    sys.exit(1)
print("PASS")
