#!/usr/bin/env python3
"""A host's limits, first rounds and details (issue 20), with limits_host.c
checking its own behaviour:

  nofile   under `prlimit --nofile=32` a threaded host opens 28 files
           (the 29 numbers free, less the agent's output file, kept in
           the top eighth of the table: its duplicate of stderr is taken
           for a line and closed after it under such a limit) and mallocs
           10 MB; the agent keeps no /proc file under such a limit
  as       under `prlimit --nofile=32 --as=200000000` a threaded host
           opens 28 files and mallocs 100 MB, as it does without the
           agent, and has no 64 MiB heap of a
           glibc malloc arena (its own threads never allocate: any would
           be the agent's); the agent still writes rounds with named
           frames. The core allocates from its own heap, and the agent's
           threads (the loader's start thread, whose dlopen allocates,
           and the sampler, whose libdw calls libc's fopen, strdup...)
           use glibc's main arena (agent/main_arena.c). With two arenas
           (128 MiB) the host could not malloc 64 MB, with one 100 MB.
  as_restart  the same limit, a host that stops and starts the agent from
           its main thread (stackshot_stop, stackshot_start): the new
           agent's threads take no arena either (its stack-layout probe,
           a thread of its own when started from the main thread, did),
           and the host mallocs 100 MB
  stacks   the agent's threads run on stacks of at most 1 MiB (the
           mapping around each one's stack pointer), not glibc's 8 MiB
  lower    a host that lowers RLIMIT_NOFILE to 8 at run time still opens
           its 5 files, and the agent's log stays short (a count, not a
           line per round)
  chroot   a late chroot into a directory without /proc: one "round was
           lost" line, not one per round (needs CAP_SYS_CHROOT, else 77)
  deep     the first round holds the whole stack of a main thread busy 30
           frames deep: main and __libc_start_main, no truncation marker
  coro     a main thread running 30 frames deep on a stack of its own
           (makecontext): its copy stops at its SP's page end, and the
           marker says so, "stack end unknown", not STACKSHOT_STACK_COPY
  restart  a thread in nanosleep stopped by ptrace (PTRACE_SEIZE +
           PTRACE_INTERRUPT, as a debugger attaching) and detached sleeps
           on in restart_syscall: reported TIMED_WAITING (77 when ptrace
           is refused)
  tid      threads only ever read asleep (the main thread here) print
           their pthread_t, the one the host prints itself

usage: check_limits.py <case> <limits_host> <libstackshot.so> <tmpdir>"""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import time

case, host, lib, tmp = sys.argv[1:5]
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
out = os.path.join(tmp, "out")
os.makedirs(out)


def env(interval_ms, **extra):
    e = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
             STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=out,
             SPLUNK_PROFILER_CALL_STACK_INTERVAL=str(interval_ms))
    e.update(extra)
    return e


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def dump_text():
    files = os.listdir(out)
    return open(os.path.join(out, files[0])).read() if len(files) == 1 else ""


def rounds(text):
    return re.split(r"^Full thread dump", text, flags=re.M)[1:]


def thread_block(rnd, nid=None):
    """A thread's lines in a round: by nid, or the main thread (#1)."""
    head = r'"[^\n]*nid=0x%x ' % nid if nid else r'"[^\n]*" #1 '
    m = re.search(r'^' + head + r'[^\n]*\n(?:[^\n]+\n)*', rnd, re.M)
    return m.group(0) if m else None


if case == "nofile":
    p = subprocess.run(["prlimit", "--nofile=32", host, "nofile", "28", "10"], env=env(20),
                       capture_output=True, text=True, timeout=60)
    print(p.stdout.strip())
    if p.returncode != 0:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))

elif case == "as":
    cmd = ["prlimit", "--nofile=32", "--as=200000000", host, "nofile", "28", "100"]
    alone = subprocess.run(cmd, env=dict(os.environ, SS_SETTLE_MS="100"), capture_output=True,
                           text=True, timeout=60)
    print("without the agent: " + alone.stdout.strip())
    if alone.returncode != 0:
        print("SKIP: the host alone cannot open 28 files and malloc 100 MB under these limits here")
        sys.exit(77)
    p = subprocess.run(cmd, env=env(20, SS_SETTLE_MS="1500"), capture_output=True, text=True,
                       timeout=60)
    text = dump_text()
    rs = rounds(text)
    print(p.stdout.strip())
    print("rounds: %d" % len(rs))
    if p.returncode != 0:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))
    heaps = re.search(r"(\d+) arena heaps", p.stdout)
    if not heaps or heaps.group(1) != "0":
        fail("the agent's threads took glibc malloc arenas of their own")
    if len(rs) < 10 or "at global.idle_thread(" not in text:
        fail("the agent wrote no rounds with named frames: %s" % p.stderr[-500:])

elif case == "as_restart":
    cmd = ["prlimit", "--as=200000000", host, "restart", "100"]
    alone = subprocess.run(cmd, env=dict(os.environ, SS_SETTLE_MS="100"), capture_output=True,
                           text=True, timeout=60)
    print("without the agent: " + alone.stdout.strip())
    if alone.returncode != 0:
        print("SKIP: the host alone cannot malloc 100 MB under this limit here")
        sys.exit(77)
    p = subprocess.run(cmd, env=env(20, SS_SETTLE_MS="900"), capture_output=True, text=True,
                       timeout=60)
    print(p.stdout.strip())
    if p.returncode != 0 or "restarted 3 times" not in p.stdout:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))
    heaps = re.search(r"(\d+) arena heaps", p.stdout)
    if not heaps or heaps.group(1) != "0":
        fail("the restarted agent's threads took glibc malloc arenas of their own")

elif case == "stacks":
    p = subprocess.Popen([host, "sleeper"], env=env(20, SS_RUN_MS="3000"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    maps = []
    for line in open("/proc/%d/maps" % p.pid):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        maps.append((lo, hi))
    sizes = {}
    for tid in os.listdir("/proc/%d/task" % p.pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (p.pid, tid)).read().strip()
            sc = open("/proc/%d/task/%s/syscall" % (p.pid, tid)).read().split()
        except OSError:
            continue
        if not comm.startswith("stackshot-") or len(sc) < 8:
            continue
        sp = int(sc[7], 16)
        size = next((hi - lo for lo, hi in maps if lo <= sp < hi), 0)
        sizes[comm] = size
    p.communicate(timeout=30)
    print("agent threads' stack mappings: %s" % sizes)
    if not sizes:
        fail("no agent thread seen")
    big = {c: s for c, s in sizes.items() if s > (1 << 20) + (64 << 10)}
    if big:
        fail("stacks over 1 MiB: %s" % big)

elif case == "lower":
    p = subprocess.run([host, "lower"], env=env(20), capture_output=True, text=True, timeout=60)
    lines = [l for l in p.stderr.splitlines() if l.startswith("stackshot:")]
    print(p.stdout.strip())
    print("agent lines: %d" % len(lines))
    if p.returncode != 0:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))
    if len(lines) > 4:
        fail("the agent's log repeats: %s" % lines[:6])

elif case == "chroot":
    root = os.path.join(tmp, "root")
    os.makedirs(root)
    p = subprocess.run([host, "chroot", root], env=env(20), capture_output=True, text=True,
                       timeout=60)
    if p.returncode == 2 and "chroot" in p.stderr:
        print("SKIP: chroot refused: %s" % p.stderr.strip())
        sys.exit(77)
    lost = [l for l in p.stderr.splitlines() if "a round was lost" in l]
    print(p.stdout.strip())
    print("lines saying a round was lost: %d" % len(lost))
    if p.returncode != 0:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))
    if not 1 <= len(lost) <= 2:
        fail("expected one line (then counts), got %d" % len(lost))

elif case == "deep":
    p = subprocess.run([host, "deep"], env=env(100, SS_RUN_MS="1500"), capture_output=True,
                       text=True, timeout=60)
    text = dump_text()
    rs = rounds(text)
    if p.returncode != 0 or not rs:
        fail("exit %d, %d rounds; stderr %s" % (p.returncode, len(rs), p.stderr[-500:]))
    first = thread_block(rs[0]) or ""
    print(first)
    if "truncated" in first or "at global.main(" not in first or "__libc_start" not in first:
        fail("the first round's main thread is not whole")
    if first.count("global.deep(") < 30:
        fail("fewer than 30 frames of deep()")

elif case == "coro":
    p = subprocess.run([host, "coro"], env=env(100, SS_RUN_MS="1500"), capture_output=True,
                       text=True, timeout=60)
    rs = rounds(dump_text())
    if p.returncode != 0 or not rs:
        fail("exit %d, %d rounds; stderr %s" % (p.returncode, len(rs), p.stderr[-500:]))
    marks = set()
    for r in rs:
        marks.update(re.findall(r"at stackshot\.truncated\(([^)]*)\)", thread_block(r) or ""))
    print("truncation markers of the main thread: %s" % sorted(marks))
    if not marks or any(not m.startswith("stack end unknown:") for m in marks):
        fail("the marker does not say the copy stopped at the page end")

elif case == "restart":
    p = subprocess.Popen([host, "sleeper"], env=env(50, SS_RUN_MS="3000"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tid = None
    for _ in range(2):
        m = re.match(r"sleeper (\d+)", p.stdout.readline())
        tid = int(m.group(1)) if m else tid
    time.sleep(0.5)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH, WALL = 0x4206, 0x4207, 17, 0x40000000
    if tid is None or libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        p.kill()
        p.communicate()
        print("SKIP: ptrace refused (errno %d)" % ctypes.get_errno())
        sys.exit(77)
    libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
    status = ctypes.c_int()
    libc.waitpid(tid, ctypes.byref(status), WALL)
    libc.ptrace(PTRACE_DETACH, tid, None, None)
    time.sleep(0.3)
    nr = open("/proc/%d/task/%d/syscall" % (p.pid, tid)).read().split()[0]
    print("the sleeper's system call after the detach: %s" % nr)
    p.communicate(timeout=30)
    rs = rounds(dump_text())
    block = thread_block(rs[-1], tid) if rs else None
    print(block)
    if not block or "TIMED_WAITING" not in block:
        fail("the sleeper is not TIMED_WAITING in the last round")

elif case == "tid":
    p = subprocess.run([host, "sleeper"], env=env(50, SS_RUN_MS="1500"), capture_output=True,
                       text=True, timeout=60)
    m = re.search(r"^main \d+ (0x[0-9a-f]+)", p.stdout, re.M)
    heads = re.findall(r'^"[^"]*" #1 .*', dump_text(), re.M)
    print("main's pthread_t: %s; rounds: %d; %s" % (m and m.group(1), len(heads),
                                                     heads[:1]))
    if p.returncode != 0 or not m or not heads:
        fail("exit %d; stderr %s" % (p.returncode, p.stderr[-500:]))
    wrong = [h for h in heads if "tid=%s " % m.group(1) not in h]
    if wrong:
        fail("%d of %d rounds without the main thread's pthread_t: %s" %
             (len(wrong), len(heads), wrong[0]))

else:
    fail("unknown case " + case)
print("PASS")
