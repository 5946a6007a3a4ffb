#!/usr/bin/env python3
"""What the agent adds to an idle host's private memory: Debian's sleep
(one thread, an uninstrumented host) with the agent taking a round every
100 ms with `text`, without separate debuginfo (libc6-dbg's DWARF is
libdw's, docs/symbols.md), against the same sleep without the agent. Its
RssAnon (/proc/<pid>/status: private anonymous memory, what only this
process pays; the libraries' shared code is RssFile) is read after 2.5 s,
some twenty rounds in, median of three runs each.

The agent's tables were sized for the worst case and written from the
first round on: the CFI cache (8,192 rows, 256 KiB, emptied with memset),
the unwinder's 80 page buffers (320 KiB, each page written as they were
emptied), the set of kept /proc descriptors sized for the whole budget
(8,192 entries under a limit of 20,000 descriptors, 192 KiB): +1,496 KiB
of RssAnon for sleep. Now they grow as used: +720 KiB. The bound,
1,280 KiB, sits between the two.

usage: check_idle_memory.py <libstackshot.so> <tmpdir>"""
import os
import re
import shutil
import subprocess
import sys
import time

LIMIT_KIB = 1280

lib, tmp = sys.argv[1:3]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)


def rss_anon(env):
    """RssAnon (KiB) of sleep after 2.5 s; its exit code."""
    p = subprocess.Popen(["sleep", "4"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(2.5)
    anon = None
    try:
        with open("/proc/%d/status" % p.pid) as f:
            m = re.search(r"^RssAnon:\s+(\d+) kB", f.read(), re.M)
            anon = int(m.group(1)) if m else None
    except OSError:
        pass
    return anon, p.wait(timeout=30)


base = {k: v for k, v in os.environ.items()
        if not k.startswith(("SPLUNK_", "STACKSHOT_", "OTEL_")) and k != "LD_PRELOAD"}
agent = dict(base, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
             STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=tmp,
             SPLUNK_PROFILER_CALL_STACK_INTERVAL="100",
             STACKSHOT_SYMBOLS_DEBUGINFO="false")
none, with_agent, codes = [], [], []
for _ in range(3):
    a, rc = rss_anon(base)
    none.append(a)
    codes.append(rc)
    a, rc = rss_anon(agent)
    with_agent.append(a)
    codes.append(rc)
files = os.listdir(tmp)
rounds = 0
for name in files:
    with open(os.path.join(tmp, name), errors="replace") as f:
        rounds += len(re.findall(r"^Full thread dump stackshot round", f.read(), re.M))
print("RssAnon KiB without agent %s, with agent %s; %d rounds in %d files" %
      (none, with_agent, rounds, len(files)))
if None in none or None in with_agent or any(codes):
    print("FAIL: no reading or a bad exit: %s" % codes)
    sys.exit(1)
added = sorted(with_agent)[1] - sorted(none)[1]
print("added by the agent: %d KiB (bound %d)" % (added, LIMIT_KIB))
# the agent ran: rounds written by each of the three runs
if rounds < 3 * 10 or len(files) != 3:
    print("FAIL: the agent did not run its rounds")
    sys.exit(1)
if added > LIMIT_KIB:
    print("FAIL: the agent adds %d KiB of private memory to an idle host" % added)
    sys.exit(1)
print("PASS")
