#!/usr/bin/env python3
"""End-to-end tests of the qubership_dumps exporter: thread, top and heap
dumps uploaded to a real nginx configured as the Qubership dumps collector
(dumps_collector.py), judged by the collector's indexing rules and by
content: a td parses as a jstack dump whose threads match the process (a
JVM's equals a real jstack, header included), a top lists every sampled
thread with the columns of a real `top -H -b -n1`, a heap zip holds one
HPROF; the TCP collector's td/top/heap commands; collector faults.

  test_dumps.py --scenario NAME --lib libstackshot.so --demo qb_native_demo
                [--java-home JDK --java-src DIR] [--collector-py collector.py]

Exit 0 pass, 1 fail, 77 skipped.
"""
import argparse
import calendar
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "java"))
import collector  # noqa: E402
import dumps_collector as dc  # noqa: E402
import jstack_compare  # noqa: E402

FAILED = []
POD = "demo-svc-5d8f7c9b4-x2x9k"


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILED.append(what)


def agent_env(base, extra=None):
    env = dict(os.environ)
    env.update({
        "SPLUNK_PROFILER_ENABLED": "true",
        "STACKSHOT_EXPORTERS": "qubership_dumps",
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "200",
        "STACKSHOT_LOG_LEVEL": "debug",  # the accounting lines at exit are debug when all went well
        "DIAGNOSTIC_DUMP_INTERVAL": "1s",
        "NC_DIAGNOSTIC_AGENT_SERVICE": base,
        "POD_NAME": POD,
        "CLOUD_NAMESPACE": "ns1",
    })
    env.update(extra or {})
    return env


def accounting(stderr):
    m = re.search(r"qubership_dumps: accounting: thread dumps (\d+) taken: (\d+) uploaded, (\d+) "
                  r"failed, (\d+) dropped; top dumps (\d+) taken: (\d+) uploaded, (\d+) failed, "
                  r"(\d+) dropped; heap dumps (\d+) zipped, (\d+) uploaded, (\d+) failed", stderr)
    if not m:
        return None
    v = [int(x) for x in m.groups()]
    return {"td": v[0:4], "top": v[4:8], "heap": v[8:11]}


def balanced(acc):
    """taken = uploaded + failed + dropped, for td and top."""
    return acc is not None and all(acc[k][0] == sum(acc[k][1:]) for k in ("td", "top"))


def check_rules(uploads, what):
    bad = [u for u in uploads if u.problems]
    check(uploads and not bad, "%s: %d uploads, every one indexable by the collector's rules %s"
          % (what, len(uploads), bad[:3]))
    pods = set(u.pod for u in uploads)
    check(len(pods) == 1 and next(iter(pods)).startswith(POD + "_"),
          "%s: one pod directory <POD_NAME>_<start ms>: %s" % (what, pods))


# ---- td and top parsing ----------------------------------------------------

TD_DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


def parse_td(text):
    lines = text.split("\n")
    return lines[0], lines[1] if len(lines) > 1 else "", jstack_compare.parse_dump(text)


TOP_ROW = re.compile(r"^\s*(\d+) (\S+)\s+(\S+)\s+(-?\d+)\s+(\S+)\s+(\S+)\s+(\S+) (\S) +([\d.]+) +([\d.]+) +(\S+) (.*)$")


def parse_top(text):
    """(summary lines, header line, {tid: row dict})"""
    lines = text.rstrip("\n").split("\n")
    try:
        h = next(i for i, l in enumerate(lines) if l.lstrip().startswith("PID "))
    except StopIteration:
        return lines, "", {}
    rows = {}
    for l in lines[h + 1:]:
        m = TOP_ROW.match(l)
        if m:
            g = m.groups()
            rows[int(g[0])] = dict(user=g[1], pr=g[2], ni=int(g[3]), virt=g[4], res=g[5],
                                   shr=g[6], s=g[7], cpu=float(g[8]), mem=float(g[9]),
                                   time=g[10], name=g[11])
    return lines[:h], lines[h], rows


def kib(v):
    m = re.match(r"^([\d.]+)([mgtpe]?)$", v)
    if not m:
        return -1
    return float(m.group(1)) * 1024 ** " mgtpe".index(m.group(2) or " ")


def secs(t):
    """TIME+ "M:SS.hh" -> seconds"""
    m = re.match(r"^(\d+):(\d\d)\.(\d\d)$", t)
    return int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 100 if m else -1


def real_top(pid):
    p = subprocess.run(["top", "-H", "-b", "-n1", "-w", "512", "-p", str(pid)],
                       capture_output=True, text=True, timeout=20)
    return time.time(), p.stdout


def tasks(pid):
    out = {}
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                out[int(t)] = f.read().strip()
    except OSError:
        pass
    return out


def compare_top(agent, real, what, dt, pid):
    """Our top dump against a real top of the same process, dt seconds apart.
    (%CPU is not compared: top's one frame measures it over a fraction of a
    second.)"""
    a_sum, a_head, a_rows = parse_top(agent)
    r_sum, r_head, r_rows = parse_top(real)
    check(a_head == r_head, "%s: header line as top's: %r / %r" % (what, a_head, r_head))
    patterns = [r"^top - \d\d:\d\d:\d\d up .*,\s+\d+ users?,  load average: [\d.]+, [\d.]+, [\d.]+$",
                r"^Threads: +\d+ total, +\d+ running, +\d+ sleeping, +\d+ stopped, +\d+ zombie$",
                r"^%Cpu\(s\): *[\d.]+ us, *[\d.]+ sy, *[\d.]+ ni, *[\d.]+ id, *[\d.]+ wa, *[\d.]+ hi, "
                r"*[\d.]+ si, *[\d.]+ st\s*$",
                r"^MiB Mem : +[\d.]+ total, +[\d.]+ free, +[\d.]+ used, +[\d.]+ buff/cache\s*$",
                r"^MiB Swap: +[\d.]+ total, +[\d.]+ free, +[\d.]+ used\. +[\d.]+ avail Mem\s*$"]
    for i, pat in enumerate(patterns):
        check(i < len(a_sum) and re.match(pat, a_sum[i]) and i < len(r_sum) and re.match(pat, r_sum[i]),
              "%s: summary line %d shaped as top's: %r / %r" % (what, i + 1, a_sum[i:i + 1], r_sum[i:i + 1]))
    if len(a_sum) > 1 and len(r_sum) > 1:
        at = int(re.search(r"(\d+) total", a_sum[1]).group(1))
        check(at == len(a_rows), "%s: Threads total = rows (%d)" % (what, at))
    # the same threads, but for a JIT compiler thread the JVM started or
    # stopped between the two
    common, union = set(a_rows) & set(r_rows), set(a_rows) | set(r_rows)
    check(common and len(common) >= 0.8 * len(union),
          "%s: the same threads as top: %s / %s" % (what, sorted(a_rows), sorted(r_rows)))
    for tid in sorted(common):
        a, r = a_rows[tid], r_rows[tid]
        for k in ("user", "pr", "ni", "name"):
            check(a[k] == r[k], "%s: thread %d %s: %r, top %r" % (what, tid, k, a[k], r[k]))
        for k in ("virt", "res", "shr"):
            x, y = kib(a[k]), kib(r[k])
            # resident and shared memory move between the two by what the
            # agent's symbol resolver loads and releases (libdw's tables and
            # the decompressed DWARF: about 10 MiB with libc6-dbg, released
            # after 1 s without a new address)
            slack = 0.25 * max(x, y) + (16384 if k != "virt" else 0)
            check(x > 0 and y > 0 and abs(x - y) <= slack,
                  "%s: thread %d %s: %s, top %s" % (what, tid, k, a[k], r[k]))
        if tid == pid:
            continue  # procps-ng 4.0.2 shows the process's totals on the leader's row
        x, y = secs(a["time"]), secs(r["time"])
        check(x >= 0 and y >= 0 and abs(x - y) <= abs(dt) + 1.5,
              "%s: thread %d TIME+ %s, top %s (%.1f s apart)" % (what, tid, a["time"], r["time"], dt))
        check(abs(a["mem"] - r["mem"]) <= 0.3, "%s: thread %d %%MEM %s, top %s" % (what, tid, a["mem"], r["mem"]))
    order = [a_rows[t]["cpu"] for t in parse_top_order(agent)]
    check(order == sorted(order, reverse=True), "%s: rows sorted by %%CPU: %s" % (what, order))
    return a_rows, r_rows


def check_own_threads(tops, what):
    """The agent's own rows ("stackshot-*") over every top dump: one row per
    name in a dump, one name and one nice per thread id across dumps, the
    uploader at nice 10. (A new thread starts with its creator's name and
    nice: the top made right after the first td listed the uploader, then
    being created, as a second "stackshot-qbd" at nice 0, which a CI run
    caught against a real top.)"""
    seen = {}
    for u in tops:
        _, _, rows = parse_top(u.data().decode())
        own = [(tid, r["name"], r["ni"]) for tid, r in rows.items() if r["name"].startswith("stackshot-")]
        names = [n for _, n, _ in own]
        check(len(names) == len(set(names)), "%s %s: each agent thread once: %s" % (what, u.name, sorted(own)))
        for tid, n, ni in own:
            seen.setdefault(tid, set()).add((n, ni))
    changed = {tid: sorted(v) for tid, v in seen.items() if len(v) > 1}
    check(seen and not changed, "%s: every agent thread keeps its name and nice over %d tops: %s"
          % (what, len(tops), changed or sorted(seen.items())))
    up = [v for v in seen.values() if any(n == "stackshot-qbup" for n, _ in v)]
    check(up and all(ni == 10 for v in up for _, ni in v), "%s: the uploader at nice 10: %s" % (what, up))


def uploader_made(pid):
    """Is the agent's uploader thread in /proc, named and at nice 10?"""
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                st = f.read()
            comm, rest = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
            if comm == "stackshot-qbup" and int(rest[16]) == 10:
                return True
    except (OSError, ValueError, IndexError):
        pass
    return False


def wait_uploader(pid, what, seconds=20):
    """Until the uploader thread (started with the first dump) is made: a
    real snapshot taken while it is being made would list it with its
    creator's name and nice, which no later one has. (Not its first
    upload: at nice 10 on a loaded machine that may come seconds later.)"""
    deadline = time.time() + seconds
    while not uploader_made(pid) and time.time() < deadline:
        time.sleep(0.05)
    check(uploader_made(pid), "%s: the uploader thread made before the real snapshots" % what)


def parse_top_order(text):
    out = []
    started = False
    for l in text.split("\n"):
        if l.lstrip().startswith("PID "):
            started = True
            continue
        m = TOP_ROW.match(l) if started else None
        if m:
            out.append(int(m.group(1)))
    return out


# ---- scenarios -------------------------------------------------------------

def run_native(args, env, seconds, probe=None):
    env = dict(env, LD_PRELOAD=args.lib, DEMO_SECONDS=str(seconds))
    t0 = time.time()
    p = subprocess.Popen([args.demo], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    seen = {}
    if probe:
        seen = probe(p.pid)
    out, err = p.communicate(timeout=120)
    sys.stdout.write(err)
    return p.returncode, err, time.time() - t0, seen


def sc_native(args, work):
    """A native program: td and top every second, checked against /proc and a real top."""
    n = dc.Nginx(work).start()
    probe = {}

    def look(pid):
        probe["pid"] = pid
        time.sleep(2.2)
        wait_uploader(pid, "native")
        probe["tasks"] = tasks(pid)
        probe["top"] = real_top(pid)
        return probe

    try:
        # a signalled thread that does not answer within
        # STACKSHOT_SIGNAL_TIMEOUT (100 ms) is left out of its round, and a
        # busy one waits that long for a CPU at a load of 10 on two cores
        # (busy-worker missing from a td): a second here
        rc, err, took, _ = run_native(args, agent_env(n.base, {"STACKSHOT_SIGNAL_TIMEOUT": "1000"}),
                                      4, look)
        time.sleep(0.3)
        ups = n.uploads()
        puts = n.requests()
    finally:
        n.stop()
    check(rc == 0, "native: host exits 0 (%.1f s)" % took)
    check_rules(ups, "native")
    tds = [u for u in ups if u.kind == "td"]
    tops = [u for u in ups if u.kind == "top"]
    acc = accounting(err)
    # taken every second; uploaded, at least one of each: the uploader runs
    # at nice 10, and on a loaded machine a periodic dump still waiting is
    # replaced by the next one (counted as dropped)
    check(acc and acc["td"][0] >= 2 and acc["top"][0] >= 2 and tds and tops,
          "native: a td and a top every second (taken %s, %s; %d, %d uploaded)"
          % (acc and acc["td"][0], acc and acc["top"][0], len(tds), len(tops)))
    # PUTs, not files: two tds of one round (the sampler starved on a
    # loaded machine) share a name, the second PUT replaces the first
    # (204). And the PUT in flight at exit, cancelled and counted as
    # dropped, may have reached nginx all the same.
    put = {k: len([1 for _, m, st, uri in puts if m == "PUT" and st in (201, 204) and uri.endswith("." + k + ".txt")])
           for k in ("td", "top")}
    check(balanced(acc) and all(acc[k][1] <= put[k] <= acc[k][1] + min(acc[k][3], 1) for k in put),
          "native: accounting line matches the collector's successful PUTs %s: %s" % (put, acc))
    tids = probe.get("tasks", {})
    for u in tds:
        date, banner, threads = parse_td(u.data().decode())
        check(TD_DATE.match(date) and banner.startswith("Full thread dump qb_native_demo (native process "),
              "native td %s: header %r %r" % (u.name, date, banner))
        check({"busy-worker", "qb_native_demo"} <= set(threads), "native td %s: threads %s" % (u.name, sorted(threads)))
        for name, t in threads.items():
            nid = int(t["nid"], 0)
            check(tids.get(nid) == name[:15], "native td %s: %r nid %d is that thread of the process (%s)"
                  % (u.name, name, nid, tids.get(nid)))
        bw = threads.get("busy-worker", {"frames": []})
        check(any("compute_primes" in f for f in bw["frames"]), "native td %s: busy-worker in compute_primes" % u.name)
    if tds and tops:
        same_shape_as_vectors(args, tds[0].data().decode(), tops[0].data().decode())
    check_own_threads(tops, "native")
    # top: every sampled thread, and the columns of a real top
    by_second = {u.name.split(".")[0]: u for u in tops}
    last = max(t.name for t in tops) if tops else None
    for u in tds:
        t = by_second.get(u.name.split(".")[0])
        if not t:
            continue
        _, _, rows = parse_top(t.data().decode())
        _, _, threads = parse_td(u.data().decode())
        nids = set(int(x["nid"], 0) for x in threads.values())
        # (busy-worker ends at DEMO_SECONDS: the last top, read from /proc
        # at its tick, may come after its end and the td's round before)
        ended = set(int(x["nid"], 0) for n, x in threads.items() if n == "busy-worker")
        check(nids <= set(rows) or (t.name == last and nids - set(rows) <= ended),
              "native top %s lists every sampled thread %s" % (t.name, sorted(nids)))
    if "top" in probe and tops:
        when, text = probe["top"]
        t = min(tops, key=lambda x: abs(x.when - when))
        a_rows, r_rows = compare_top(t.data().decode(), text, "native top %s vs top" % t.name,
                                     t.when - when, probe["pid"])
        # %CPU over the last second: the busy thread first, the idle ones near 0
        # (how much the busy one gets depends on the machine's load)
        order = parse_top_order(t.data().decode())
        busy = a_rows.get(order[0]) if order else None
        idle = [r["cpu"] for r in a_rows.values() if r["name"] == "qb_native_demo"]
        check(busy and busy["name"] == "busy-worker" and 0 < busy["cpu"] <= 100.5 and busy["s"] == "R",
              "native top: busy-worker first, running, %%CPU %s" % (busy and busy["cpu"]))
        check(idle and idle[0] < 5, "native top: the idle main thread near 0 %%CPU: %s" % idle)
        check(set(tids) == set(r_rows), "native: top's threads are /proc's: %s" % sorted(tids))


def same_shape_as_vectors(args, td, top):
    """Our td and top against the real dumps of the collector's vectors
    (20230804T164202.td.txt: jstack -l of a JDK 17; .top.txt: top -Hb of
    its threads): the same grammar reads both."""
    vtd = os.path.join(args.vectors or "", "20230804T164202.td.txt")
    vtop = os.path.join(args.vectors or "", "20230804T164209.top.txt")
    if not os.path.exists(vtd):
        print("vectors not found: shapes not compared")
        return
    with open(vtd) as f:
        date, banner, threads = parse_td(f.read())
    check(TD_DATE.match(date) and banner.startswith("Full thread dump OpenJDK") and len(threads) > 40,
          "vector td reads as a td: %r %r, %d threads" % (date, banner, len(threads)))
    odate, obanner, othreads = parse_td(td)
    check(TD_DATE.match(odate) and obanner.startswith("Full thread dump ") and obanner.endswith("):")
          and othreads, "our td has the vector's shape: %r" % obanner)
    with open(vtop) as f:
        vsum, vhead, vrows = parse_top(f.read())
    osum, ohead, orows = parse_top(top)
    check(vhead.split() == ohead.split(), "top: the vector's columns: %s / %s" % (vhead.split(), ohead.split()))
    check(len(vrows) > 100 and orows, "top: rows of both read by one grammar (%d, %d)" % (len(vrows), len(orows)))
    for prefix in ("top - ", "Threads:", "%Cpu(s):"):
        check(any(l.startswith(prefix) for l in vsum) and any(l.startswith(prefix) for l in osum),
              "top: both have the %r line" % prefix)


def compile_java(args, work, names):
    classes = os.path.join(work, "classes")
    os.makedirs(classes, exist_ok=True)
    srcs = [os.path.join(args.java_src, "Demo.java") if n == "Demo" else os.path.join(HERE, n + ".java")
            for n in names]
    subprocess.run([os.path.join(args.java_home, "bin", "javac"), "-g", "-d", classes] + srcs,
                   check=True, timeout=120)
    return classes


def java(args, classes, env, argv, xmx=None):
    cmd = [os.path.join(args.java_home, "bin", "java")]
    if xmx:
        cmd.append("-Xmx" + xmx)
    return cmd + ["-agentpath:" + args.lib, "-cp", classes] + argv


def need_jdk(args):
    if not args.java_home or not os.path.exists(os.path.join(args.java_home, "bin", "jstack")):
        print("no JDK given: skipped")
        sys.exit(77)


def sc_jvm(args, work):
    """A JVM: the td equals a real jstack taken just before its round."""
    need_jdk(args)
    classes = compile_java(args, work, ["Demo"])
    n = dc.Nginx(work).start()
    jstack = os.path.join(args.java_home, "bin", "jstack")
    def tds_after(t):
        # tds whose round (its name's second) began after t
        return [u for u in n.uploads() if u.kind == "td" and
                calendar.timegm(time.strptime(u.name[:15], "%Y%m%dT%H%M%S")) > t]

    p = None
    try:
        p = subprocess.Popen(java(args, classes, None, ["Demo", "60"]), env=agent_env(n.base),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.stdout.readline()  # "ready": every thread in its place
        time.sleep(1.0)
        wait_uploader(p.pid, "jvm")
        js = subprocess.run([jstack, str(p.pid)], capture_output=True, text=True, timeout=60).stdout
        js_done = time.time()
        top_when, top_text = real_top(p.pid)
        # a jstack may take seconds on a loaded machine: wait for the next td
        deadline = time.time() + 20
        while not tds_after(js_done) and time.time() < deadline:
            time.sleep(0.2)
        p.terminate()  # SIGTERM: the JVM exits, VMDeath stops the agent
        out, err = p.communicate(timeout=120)
        sys.stdout.write(err)
        time.sleep(0.3)
        ups = n.uploads()
        after = tds_after(js_done)
    finally:
        if p and p.poll() is None:  # the test broke off: no JVM left behind
            p.kill()
            p.wait()
        n.stop()
    check(p.returncode == 143 and "qubership_dumps: accounting:" in err, "jvm: exits (SIGTERM) through VMDeath")
    check_rules(ups, "jvm")
    tds = [u for u in ups if u.kind == "td"]
    check(after, "jvm: a td taken after jstack (%d tds)" % len(tds))
    if not after:
        return
    td = after[0].data().decode()
    date, banner, agent = parse_td(td)
    jl = js.split("\n")
    check(banner == jl[1], "jvm td: the VM line equals jstack's: %r / %r" % (banner, jl[1]))
    check(TD_DATE.match(date) and abs(time.mktime(time.strptime(date, "%Y-%m-%d %H:%M:%S")) -
                                      time.mktime(time.strptime(jl[0], "%Y-%m-%d %H:%M:%S"))) <= 5,
          "jvm td: the date line as jstack's, in local time: %r / %r" % (date, jl[0]))
    before = len(jstack_compare.failures)
    major = jstack_compare.jdk_major(os.path.join(args.java_home, "bin", "java"))
    # (attach=True only skips its check that a virtual thread was sampled:
    # a td leaves virtual threads out, as jstack does)
    jstack_compare.compare(agent, jstack_compare.parse_dump(js), major, True, False)
    check(len(jstack_compare.failures) == before, "jvm td: every thread equals jstack's (%d threads)" % len(agent))
    # JDK 21 and later spell a thread's line "#<n> [<os tid>]" (the source
    # says so: ss_process_info.dump_os_tid); older ones "#<n> prio="
    os_tid = re.compile(r'^"[^"\n]*" #\d+ \[\d+\] ', re.M)
    check(bool(os_tid.search(td)) == bool(os_tid.search(js)) and "prio=" in td,
          "jvm td: thread lines spelled as jstack's (os thread id: %s)" % bool(os_tid.search(js)))
    tops = [u for u in ups if u.kind == "top"]
    check_own_threads(tops, "jvm")
    if tops:
        t = min(tops, key=lambda x: abs(x.when - top_when))
        a_rows, _ = compare_top(t.data().decode(), top_text, "jvm top %s vs top" % t.name,
                                t.when - top_when, p.pid)
        nids = set(int(x["nid"], 0) for x in agent.values() if not x.get("virtual"))
        check(nids <= set(a_rows), "jvm top lists every sampled thread")


def hprof_zip_ok(u, what):
    z = zipfile.ZipFile(io.BytesIO(u.data()))
    names = z.namelist()
    check(len(names) == 1 and names[0].endswith(".hprof"), "%s: one .hprof in the zip: %s" % (what, names))
    head = z.open(names[0]).read(19) if names else b""
    check(head == b"JAVA PROFILE 1.0.2\0", "%s: it starts with the HPROF magic: %r" % (what, head))
    return names


def sc_oom(args, work):
    """OutOfMemoryError: the JVM's dump uploaded as a zip; a collector that
    refuses it leaves the zip on disk for the next process, which uploads it."""
    need_jdk(args)
    classes = compile_java(args, work, ["Oom"])
    logs = os.path.join(work, "logs")
    refusing = dc.Nginx(os.path.join(work, "refusing"), mode="403").start()
    try:
        env = agent_env(refusing.base, {"NC_DIAGNOSTIC_LOGS_FOLDER": logs, "DIAGNOSTIC_SCAN_INTERVAL": "1s"})
        p1 = subprocess.run(java(args, classes, env, ["Oom", "2500"], "32m"), env=env, capture_output=True,
                            text=True, timeout=120)
        sys.stdout.write(p1.stdout + p1.stderr)
    finally:
        refusing.stop()
    check(p1.returncode == 0 and "OutOfMemoryError caught" in p1.stdout, "oom: the JVM ran into it and exits 0")
    check("Dumping heap to %s/java_pid%d.hprof" % (logs, parse_pid(p1.stderr)) in p1.stdout,
          "oom: the agent made the JVM dump its heap into NC_DIAGNOSTIC_LOGS_FOLDER")
    left = sorted(f for f in os.listdir(logs) if not f.startswith("."))
    check(len(left) == 1 and left[0].endswith(".hprof.zip"),
          "oom: refused (403): the zip stays, the .hprof is gone: %s" % left)
    check(re.search(r"heap dump \S+\.hprof\.zip: upload failed \(HTTP 403\); it stays in", p1.stderr),
          "oom: the refusal told in one line")
    check(re.search(r"1 heap dumps wait in %s for the next upload" % re.escape(logs), p1.stderr),
          "oom: the exit line counts the dump still waiting")
    n = dc.Nginx(work).start()
    try:
        env = agent_env(n.base, {"NC_DIAGNOSTIC_LOGS_FOLDER": logs, "DIAGNOSTIC_SCAN_INTERVAL": "1s"})
        p2 = subprocess.run(java(args, classes, env, ["Oom", "2500", "calm"], "32m"), env=env,
                            capture_output=True, text=True, timeout=120)
        sys.stdout.write(p2.stderr)
        time.sleep(0.3)
        ups = n.uploads()
    finally:
        n.stop()
    heaps = [u for u in ups if u.kind == "heap"]
    check(p2.returncode == 0 and len(heaps) == 1 and heaps[0].name == left[0],
          "oom: the next JVM uploads the waiting zip: %s" % heaps)
    check_rules(ups, "oom")
    if heaps:
        names = hprof_zip_ok(heaps[0], "oom")
        check(names == ["java_pid%d.hprof" % parse_pid(p1.stderr)], "oom: the entry keeps the JVM's name")
    check(not [f for f in os.listdir(logs) if not f.startswith(".")], "oom: deleted after the 2xx only")
    acc = accounting(p2.stderr)
    check(acc and acc["heap"] == [0, 1, 0], "oom: accounting %s" % acc)


def parse_pid(stderr):
    m = re.search(r"started in pid (\d+)", stderr)
    return int(m.group(1)) if m else -1


def commands_common(args, work, host_cmd, env_extra, cmds):
    out = os.path.join(work, "tcp")
    srv = collector.Server(collector.parse(["--out", out, "--commands", cmds, "--commands-after", "12"])).start()
    n = dc.Nginx(work).start()
    try:
        env = agent_env(n.base, dict({
            "STACKSHOT_EXPORTERS": "qubership",
            "REMOTE_DUMP_HOST": "127.0.0.1",
            "REMOTE_DUMP_PORT_PLAIN": str(srv.port),
            "STACKSHOT_QUBERSHIP_WINDOW": "1",
            "DIAGNOSTIC_DUMP_INTERVAL": "1h",  # only the commands make dumps
        }, **env_extra))
        p = subprocess.run(host_cmd, env=env, capture_output=True, text=True, timeout=120)
        sys.stdout.write(p.stderr)
        time.sleep(0.3)
        ups = n.uploads()
    finally:
        n.stop()
    with open(os.path.join(out, "events.log")) as f:
        ev = [l.split(" ", 1)[1].strip() for l in f]
    sent = {}
    for e in ev:
        m = re.match(r"c1 command sent (\w+) (\w+)", e)
        if m:
            sent[m.group(1)] = m.group(2)
    results = {}
    for e in ev:
        m = re.match(r"c1 command result (\w+) (\w+)", e)
        if m:
            results[sent.get(m.group(1), "?")] = m.group(2)
    return p, ups, sent, results


def sc_drive(args, work):
    """The agent core with a synthetic source (qb_drive, also built with
    the sanitizers): periodic dumps and the TCP collector's commands."""
    if not args.drive:
        print("no qb_drive given: skipped")
        sys.exit(77)
    p, ups, sent, results = commands_common(args, work, [args.drive, "3.5"],
                                            {"DIAGNOSTIC_DUMP_INTERVAL": "1s"}, "td,top,heap")
    check(p.returncode == 0, "drive: exits 0")
    check(results == {"td": "K", "top": "K", "heap": "FF"}, "drive: command results %s" % results)
    check_rules(ups, "drive")
    tds = [u for u in ups if u.kind == "td"]
    check(len(tds) >= 3, "drive: periodic and asked-for thread dumps (%d)" % len(tds))
    for u in tds:
        _, banner, threads = parse_td(u.data().decode())
        check(set(threads) == {"main", "busy-worker", "changer"} and "(native process" in banner,
              "drive td %s: the round's threads %s" % (u.name, sorted(threads)))
    acc = accounting(p.stderr)
    # (a periodic td and an asked-for one of the same second share a name:
    # the second PUT overwrites the first, 204)
    check(balanced(acc) and acc["td"][1] >= len(tds) and acc["td"][2] == 0,
          "drive: accounting %s, %d td files" % (acc, len(tds)))


def sc_commands_native(args, work):
    """td, top and heap from the TCP collector to a native process."""
    p, ups, sent, results = commands_common(
        args, work, [args.demo], {"LD_PRELOAD": args.lib, "DEMO_SECONDS": "4"}, "td,top,heap")
    check(p.returncode == 0, "commands: host exits 0")
    check(sorted(sent.values()) == ["heap", "td", "top"], "commands: the collector sent td, top, heap")
    check(results == {"td": "K", "top": "K", "heap": "FF"},
          "commands: td and top succeed, heap fails in a native process: %s" % results)
    kinds = sorted(u.kind for u in ups)
    check(kinds == ["td", "top"], "commands: the dumps they asked for were uploaded: %s" % kinds)
    check_rules(ups, "commands")
    pods = set(u.pod for u in ups)
    hs = re.search(r"connected to \S+ as (\S+)", p.stderr)
    check(hs and pods == {hs.group(1)}, "commands: uploads under the TCP handshake's pod name %s" % pods)


def sc_commands_jvm(args, work):
    """heap and td from the TCP collector to a JVM."""
    need_jdk(args)
    classes = compile_java(args, work, ["Demo"])
    logs = os.path.join(work, "logs")
    p, ups, sent, results = commands_common(
        args, work, java(args, classes, None, ["Demo", "6"]),
        {"NC_DIAGNOSTIC_LOGS_FOLDER": logs, "DIAGNOSTIC_SCAN_INTERVAL": "1h"}, "heap,td")
    check(p.returncode == 0, "commands jvm: exits 0")
    check(results == {"heap": "K", "td": "K"}, "commands jvm: heap and td succeed: %s" % results)
    heaps = [u for u in ups if u.kind == "heap"]
    check(len(heaps) == 1, "commands jvm: the heap dump uploaded at once: %s" % ups)
    if heaps:
        names = hprof_zip_ok(heaps[0], "commands jvm")
        check(names and re.match(r"^\d{8}T\d{6}\.hprof$", names[0]) and heaps[0].name == names[0] + ".zip",
              "commands jvm: named <ts>.hprof.zip as diagtools names it: %s" % names)
    check_rules(ups, "commands jvm")


def sc_fault(args, work, mode):
    """A collector that is down, silent, refuses (403) or finds the body too
    large (413): the host is not held up, every dump is accounted for, the
    failure is told."""
    if mode == "down":
        base, stop = "http://127.0.0.1:%d" % dc.free_port(), lambda: None
    elif mode == "silent":
        s = dc.Silent()
        base, stop = s.base, s.stop
    else:
        n = dc.Nginx(work, mode=mode).start()
        base, stop = n.base, n.stop
    try:
        rc, err, took, _ = run_native(args, agent_env(base, {"DIAGNOSTIC_UPLOAD_TIMEOUT": "1m"}), 3)
    finally:
        stop()
    # 3 s of work, then at most the shutdown timeout (2 s) at exit
    check(rc == 0 and took < 3 + 2 + 1.5, "%s: host exits 0 in %.1f s" % (mode, took))
    acc = accounting(err)
    # (a td needs a round: on a loaded machine the first may come late)
    check(balanced(acc) and acc["td"][1] == 0 and acc["top"][1] == 0 and acc["top"][0] >= 1,
          "%s: nothing uploaded, every dump accounted for: %s" % (mode, acc))
    want = {"down": r"not uploaded to \S+ \(.*(connect|refused)",
            "silent": r"dumps? not uploaded before the exit \(dropped\)|not uploaded to \S+ \(",
            "403": r"not uploaded to \S+ \(HTTP 403\)",
            "413": r"not uploaded to \S+ \(HTTP 413\)"}[mode]
    check(re.search(want, err, re.I), "%s: told in a line" % mode)
    lines = [l for l in err.split("\n") if "not uploaded to" in l]
    check(len(lines) <= 2, "%s: not one line per failure: %d lines" % (mode, len(lines)))


def sc_tls(args, work):
    """TLS_ENABLED=true: uploads over https, the server verified against
    TLS_CERT_DIR/ca.crt; one signed by another CA gets nothing."""
    from certs import make_certs
    certs = os.path.join(work, "certs")
    make_certs(certs)
    n = dc.Nginx(work, tls=(os.path.join(certs, "srv.crt"), os.path.join(certs, "srv.key"))).start()
    try:
        base = n.base  # an address: a name without a dot would get ".<namespace>"
        env = {"TLS_ENABLED": "true", "TLS_CERT_DIR": os.path.join(certs, "ca")}
        rc, err, took, _ = run_native(args, agent_env(base, env), 2.5)
        time.sleep(0.3)
        ups = n.uploads()
        check(rc == 0 and len(ups) >= 2, "tls: host exits 0, uploads over https: %s" % ups)
        check_rules(ups, "tls")
        env["TLS_CERT_DIR"] = os.path.join(certs, "rogue")
        rc, err, took, _ = run_native(args, agent_env(base, env), 2.5)
        time.sleep(0.3)
        check(rc == 0 and len(n.uploads()) == len(ups), "tls: nothing to a server not trusted")
        check(re.search(r"not uploaded to https://127.0.0.1:\d+ \(.*(certificate|SSL)", err),
              "tls: the refusal told in a line")
        acc = accounting(err)
        check(balanced(acc) and acc["td"][2] >= 1, "tls: the refused dumps counted as failed: %s" % acc)
    finally:
        n.stop()


SCENARIOS = {
    "tls": sc_tls,
    "native": sc_native,
    "jvm": sc_jvm,
    "oom": sc_oom,
    "commands_native": sc_commands_native,
    "drive": sc_drive,
    "commands_jvm": sc_commands_jvm,
    "down": lambda a, w: sc_fault(a, w, "down"),
    "silent": lambda a, w: sc_fault(a, w, "silent"),
    "403": lambda a, w: sc_fault(a, w, "403"),
    "413": lambda a, w: sc_fault(a, w, "413"),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--demo")
    ap.add_argument("--drive")
    ap.add_argument("--vectors")
    ap.add_argument("--java-home")
    ap.add_argument("--java-src")
    args = ap.parse_args()
    if not os.path.exists(dc.NGINX):
        print("nginx not installed: skipped")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="qbd-%s-" % args.scenario)
    try:
        SCENARIOS[args.scenario](args, work)
    except SystemExit:
        shutil.rmtree(work, ignore_errors=True)
        raise
    print("%s: %s (%s)" % (args.scenario, "FAILED" if FAILED else "passed", work))
    if not FAILED:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
