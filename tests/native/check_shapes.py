#!/usr/bin/env python3
"""The sampler-side unwinder against gdb and against the in-handler one.

usage: check_shapes.py <shapes> <libstackshot.so> <shapes.cc> <tmpdir> [preload-prefix]

Runs the shapes host (tests/native/shapes.cc: threads asleep in every
common blocking call, 500-deep recursion, inlined frames, a catch block,
a destructor run by unwinding, a spinning thread) with the agent
preloaded, 100 ms rounds:

1. default (STACKSHOT_UNWIND=copy): every asleep thread was read without a
   signal (no fallback in the sampler's debug line), and while the threads
   are parked gdb attaches: each thread's frames in shapes.cc (function and
   line) equal gdb's, and each marker line is where the source says;
2. STACKSHOT_UNWIND=step (libunwind in the handler): the same threads give
   the same functions, frame for frame, as in 1."""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stackdump  # noqa: E402

host, lib, source, tmp = sys.argv[1:5]
preload = (sys.argv[5] + " " if len(sys.argv) > 5 and sys.argv[5] else "") + lib
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
src_name = os.path.basename(source)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def markers():
    out = {}
    with open(source) as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"marker: (\w+)", line)
            if m:
                out[m.group(1)] = i
    return out


MK = markers()
# thread -> the (function, marker) pairs its stack holds, leaf first
EXPECT = {
    "sh-nanosleep": [("park_nanosleep", "nanosleep"), ("thread_main", "thread_main")],
    "sh-clocknano": [("park_clock_nanosleep", "clocknano"), ("thread_main", "thread_main")],
    "sh-poll": [("park_poll", "poll"), ("thread_main", "thread_main")],
    "sh-epoll": [("park_epoll", "epoll"), ("thread_main", "thread_main")],
    "sh-select": [("park_select", "select"), ("thread_main", "thread_main")],
    "sh-mutex": [("park_mutex", "mutex"), ("thread_main", "thread_main")],
    "sh-cond": [("park_cond", "cond"), ("thread_main", "thread_main")],
    "sh-read": [("park_read", "read"), ("thread_main", "thread_main")],
    "sh-accept": [("park_accept", "accept"), ("thread_main", "thread_main")],
    "sh-waitpid": [("park_waitpid", "waitpid"), ("thread_main", "thread_main")],
    "sh-sigwait": [("park_sigwait", "sigwait"), ("thread_main", "thread_main")],
    "sh-recurse": [("park_nanosleep", "nanosleep"), ("recurse", "recurse_bottom"),
                   ("recurse", "recurse"), ("thread_main", "thread_main")],
    "sh-inline": [("park_clock_nanosleep", "clocknano"), ("inner_inline", "inner_inline"),
                  ("outer_inline", "outer_inline"), ("park_inline", "park_inline")],
    "sh-catch": [("park_nanosleep", "nanosleep"), ("park_catch", "catch")],
    "sh-dtor": [("park_nanosleep", "nanosleep"), ("~Blocker", "dtor"),
                ("unwinds_through", None), ("park_dtor", "unwinds_through")],
}
ASLEEP = sorted(EXPECT)
MAIN = os.path.basename(host)[:15]


def run(env_extra, rounds, attach_gdb):
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, LD_PRELOAD=preload, SPLUNK_PROFILER_ENABLED="true",
               SPLUNK_PROFILER_CALL_STACK_INTERVAL="100", STACKSHOT_OUTPUT_DIR=tmp,
               STACKSHOT_EXPORTERS="text", STACKSHOT_LOG_LEVEL="debug")
    env.update(env_extra)
    p = subprocess.Popen([host, str(rounds)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    ready_ms = time.time() * 1000
    g, gdb_ms = None, None
    if attach_gdb and "ready" in line:
        time.sleep(0.6 * scale)
        gdb_ms = time.time() * 1000
        g = stackdump.gdb_stacks(p.pid)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0 and "shapes: done" in out,
          "host exit %s, stdout %r, stderr %s" % (p.returncode, line + out, err[-1500:]))
    files = [f for f in os.listdir(tmp) if f.endswith(".%d.txt" % p.pid)]
    rounds = stackdump.parse(os.path.join(tmp, files[0])) if files else []
    check(len(rounds) >= 5, "rounds: %d" % len(rounds))
    # every thread as the latest round before gdb stopped them saw it
    # parked (main wakes every 100 ms to count rounds: a round may catch it
    # running, or leave it out while it waits for a CPU)
    last = gdb_ms if gdb_ms else float("inf")
    parked = [r for r in rounds if r and ready_ms + 300 * scale <= r[0]["time_ms"] <= last - 50]
    if not parked and len(rounds) >= 2:
        parked = rounds[-2:-1]
    pick = {}
    for r in parked:
        for t in r:
            if t["name"] != MAIN:
                pick[t["name"]] = t
    # main asleep in main_wait (it counts rounds in between: a round may
    # catch it reading, or leave it out while it waits for a CPU), and the
    # spinner (compared with nobody; on a loaded machine a busy thread may
    # not get a CPU to answer within a round's timeout), from any round
    for r in rounds:
        for t in r:
            fns = stackdump.functions(t["frames"])
            if t["time_ms"] < ready_ms or t["name"] in pick:
                continue
            if t["name"] == "sh-busy" or (t["name"] == MAIN and "main_wait" in fns and
                                          any("nanosleep" in f for f in fns[:3])):
                pick[t["name"]] = t
    return pick, g, stackdump.debug_counters(err), err


def check_markers(threads, label):
    for name, want in EXPECT.items():
        t = threads.get(name)
        if not check(t is not None, "%s: thread %s missing" % (label, name)):
            continue
        got = stackdump.source_frames(t["frames"], src_name)
        idx = 0
        for fn, mk in want:
            line = MK[mk] if mk else None
            hit = next((i for i in range(idx, len(got))
                        if got[i][0] == fn and (line is None or got[i][1] == line)), None)
            if not check(hit is not None, "%s: %s has no %s%s after frame %d: %s" %
                         (label, name, fn, ":%d" % line if line else "", idx, got[:8])):
                break
            idx = hit + 1
        all_fns = stackdump.functions(t["frames"])
        check(all_fns and all_fns[-1] in ("__clone3", "clone3", "__clone", "clone", "_start"),
              "%s: %s does not end at the thread's entry: %s" % (label, name, all_fns[-3:]))
    rec = threads.get("sh-recurse")
    if rec:
        n = sum(1 for f in rec["frames"] if stackdump.short(f[0]) == "recurse")
        check(n == 501, "%s: sh-recurse has %d recurse frames, expected 501" % (label, n))
    busy = threads.get("sh-busy")
    if check(busy is not None, "%s: sh-busy missing" % label):
        fns = stackdump.functions(busy["frames"])
        # the leaf may be std::atomic's load, inlined into spin_here
        check("spin_here" in fns[:3] and "thread_main" in fns,
              "%s: sh-busy frames %s" % (label, fns[:6]))


def main():
    # 1. the default mode, with gdb
    copy, g, counters, err = run({}, 16, True)
    check_markers(copy, "copy")
    check(counters is not None, "no debug line of the native sampler in %r" % err[-800:])
    if counters:
        print("copy: %s" % counters)
        check(counters["fallbacks"] == 0, "asleep threads signalled after all: %s" % counters)
        check(counters["asleep"] >= len(ASLEEP), "stacks read asleep: %s" % counters)
    if g is None:
        print("note: gdb could not attach; gdb comparison skipped")
    else:
        for name in ASLEEP + [MAIN]:
            if name not in copy or name not in g:
                check(False, "gdb: %s missing (agent %s, gdb %s)" %
                      (name, sorted(copy), sorted(k for k in g if isinstance(k, str))))
                continue
            ours = stackdump.source_frames(copy[name]["frames"], src_name)
            theirs = [(stackdump.short(f), l) for f, fl, l in g[name] if fl == src_name]
            check(ours == theirs, "%s: agent %s != gdb %s" % (name, ours[:8], theirs[:8]))
    # 2. libunwind in the handler: the same functions, frame for frame
    step, _, _, _ = run({"STACKSHOT_UNWIND": "step"}, 10, False)
    check_markers(step, "step")
    for name in ASLEEP:
        if name in copy and name in step:
            a = stackdump.functions(copy[name]["frames"])
            b = stackdump.functions(step[name]["frames"])
            check(a == b, "%s: copy %s != step %s" % (name, a[:10], b[:10]))


main()
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
