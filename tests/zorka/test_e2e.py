#!/usr/bin/python3
"""End-to-end tests of the zorka exporter against the test collector
(collector.py: ZICO's session rules and status codes, decoding with
Debian's python3-cbor2).

    test_e2e.py --scenario NAME --dump stackshot-dump [--drive zk_drive]
                [--demo stackshot-demo --lib libstackshot.so]
                [--java-home JDK --java-src Demo.java]

Scenarios:
  drive     zk_drive (known stacks): trees, names, descriptors, spans,
            durations, nothing lost
  restart   the collector process dies and comes back on the same port
  expiry    sessions expire between submissions (401, then a reset)
  errors    scripted 500s on trc: the session is reset, agd resent with
            Reset: true, the trace delivered
  drop      more failures than retries: the trace is given up, counted
  https     https verified with a test CA; without the CA nothing goes
  native    the C demo under LD_PRELOAD, against the text exporter
  java      the Java demo under -agentpath, against the text exporter

Checked in every scenario: the exit accounting line adds up (taken =
exported + dropped + rejected) and matches the counters; the collector
accepted exactly the traces counted exported; no violation (every symbol
and method resolves in its session, TraceEnd closes each record, children
lie within their parents, ...); every definition is sent once per session;
stackshot-dump zorka decodes every request. Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import collector  # noqa: E402

FAILED = []
INTERVAL_MS = 100


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILED.append(what)


def agent_env(url, extra=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("STACKSHOT_") or k.startswith("OTEL_"):
            del env[k]
    env.update({
        "SPLUNK_PROFILER_ENABLED": "true",
        "STACKSHOT_EXPORTERS": "zorka",
        "STACKSHOT_ZORKA_URL": url,
        "STACKSHOT_ZORKA_PERIOD": "1",
        "STACKSHOT_ZORKA_TIMEOUT": "2000",
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL": str(INTERVAL_MS),
        "STACKSHOT_SHUTDOWN_TIMEOUT": "2000",
        "STACKSHOT_LOG_LEVEL": "debug",  # the counters at exit are debug lines
        "OTEL_SERVICE_NAME": "zk-test",
    })
    env.update(extra or {})
    return env


def run(cmd, env, timeout=60):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def control(port, path):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=b"", method="POST")
    urllib.request.urlopen(req, timeout=5).read()


def stats():
    with collector.STATE.lock:
        return json.loads(json.dumps(collector.STATE.stats))


def load(out, name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# The exit's one accounting line, zorka's part: "zorka: rounds T taken = D
# delivered + X dropped + F refused + H held (I in, Q dropped queued, C
# consumed); records K taken = E exported + R dropped + J rejected; r
# retries, f failures" (a record is a trace).
EXIT_RE = (r"zorka: rounds \d+ taken = \d+ delivered \+ \d+ dropped \+ \d+ refused \+ \d+ held "
           r"\((\d+) in, (\d+) dropped queued, (\d+) consumed\); records (\d+) taken = (\d+) "
           r"exported \+ (\d+) dropped \+ (\d+) rejected; (\d+) retries, (\d+) failures")


def exit_line(stderr):
    m = re.search(r"pid \d+ accounting: .*" + EXIT_RE, stderr)
    return [int(x) for x in m.groups()] if m else None


def counters(stderr):
    v = exit_line(stderr)
    keys = ("in", "rdropped", "exported", "dropped", "rejected", "retries", "failures")
    return dict(zip(keys, v[0:2] + v[4:])) if v else None


def accounting(stderr):
    v = exit_line(stderr)
    keys = ("consumed", "taken", "exported", "dropped", "rejected")
    return dict(zip(keys, v[2:7])) if v else None


def walk(rec, depth=0):
    yield rec, depth
    for c in rec["children"]:
        yield from walk(c, depth + 1)


# ---- checks every scenario makes ---------------------------------------------

def defined_once_per_session(reqs):
    """No symbol or method definition twice within one session (between
    resets), as the agent's "sent" marks promise."""
    from cbor2 import decoder as pydecoder
    import io
    seen = {}
    twice = []
    for r in reqs:
        if not r["uri"].endswith("/agd"):
            continue
        h = {k.lower(): v[0] for k, v in r["headers"].items()}
        sid = h.get("x-zorka-session-id")
        if h.get("x-zorka-session-reset", "").lower() == "true":
            seen[sid] = set()
        body = base64.b64decode(r["body"])
        fp = io.BytesIO(body)
        dec = pydecoder.CBORDecoder(fp)
        while fp.tell() < len(body):
            it = dec.decode()
            key = (it.tag, it.value[0])
            if key in seen.setdefault(sid, set()):
                twice.append(key)
            seen[sid].add(key)
    return twice


def cut_at_exit(stderr):
    """Records the shutdown deadline cut, as the agent's line says (counted
    dropped; their body may have gone out and arrived all the same)."""
    m = re.search(r"zorka: (\d+) records not delivered before the shutdown deadline", stderr)
    return int(m.group(1)) if m else 0


def common(name, code, stderr, out, dump, expect_failures=False):
    check(code == 0, "%s: the host exits normally (%s)" % (name, code))
    ctr, acc = counters(stderr), accounting(stderr)
    check(ctr is not None and acc is not None, "%s: counters and accounting lines" % name)
    if not ctr or not acc:
        print(stderr)
        return None, None
    check(acc["taken"] == acc["exported"] + acc["dropped"] + acc["rejected"],
          "%s: %d taken = %d exported + %d dropped + %d rejected" % (
              name, acc["taken"], acc["exported"], acc["dropped"], acc["rejected"]))
    check((acc["exported"], acc["dropped"], acc["rejected"]) ==
          (ctr["exported"], ctr["dropped"], ctr["rejected"]),
          "%s: the accounting line agrees with the counters" % name)
    check(acc["consumed"] + ctr["rdropped"] == ctr["in"], "%s: rounds in = consumed + dropped" % name)
    time.sleep(0.3)  # a request the exit cut short may still be in the collector's hands
    st = stats()
    # a trace whose call the shutdown deadline cancelled after its body
    # went out may have arrived all the same: counted dropped, accepted
    late = cut_at_exit(stderr)
    check(acc["exported"] <= st["accepted_trc"] <= acc["exported"] + late,
          "%s: the collector accepted %d traces, the agent counted %d exported (%d cut at exit)" % (
              name, st["accepted_trc"], acc["exported"], late))
    check(not st["violations"], "%s: no violation (%s)" % (name, st["violations"][:3]))
    if not expect_failures:
        check(ctr["failures"] == 0 and ctr["retries"] == 0,
              "%s: no failure, no retry (%d, %d)" % (name, ctr["failures"], ctr["retries"]))
    trs = load(out, "traces.jsonl")
    unresolved = [r for t in trs for rec in t["records"] for r, _ in walk(rec)
                  if "<?" in r["class"] + r["method"] + r["sig"] or
                  any(k.startswith("<?") for k in r["attrs"])]
    check(not unresolved, "%s: every method and attribute name resolves in its session" % name)
    reqs = load(out, "requests.jsonl")
    twice = defined_once_per_session(reqs)
    check(not twice, "%s: each definition sent once per session (%s)" % (name, twice[:3]))
    # the decoder reads every request the agent sent
    p = subprocess.run([dump, "zorka", os.path.join(out, "requests.jsonl")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    text = p.stdout.decode(errors="replace")
    n_trc = sum(1 for r in reqs if r["uri"].endswith("/trc"))
    check(p.returncode == 0 and text.count("CHUNK ") == n_trc and "RES 500" not in text,
          "%s: stackshot-dump zorka decodes all %d requests (%d spans)" % (
              name, len(reqs), text.count("CHUNK ")))
    return acc, trs


def per_thread(trs):
    by = {}
    for t in trs:
        root = t["records"][0]
        by.setdefault(root["attrs"]["thread.name"], []).append((t, root))
    return by


# ---- scenarios -----------------------------------------------------------------

def start_collector(out, **kw):
    srv = collector.start(out, **kw)
    return srv, srv.server_address[1]


def scenario_drive(a, out):
    srv, port = start_collector(out)
    code, so, se = run([a.drive, "3"], agent_env("http://127.0.0.1:%d/" % port))
    acc, trs = common("drive", code, se, out, a.dump)
    srv.shutdown()
    if not acc:
        return
    rounds = int(re.search(r"rounds=(\d+)", so).group(1))
    by = per_thread(trs)
    check(set(by) == {"idle", "worker", "changer", "spanned", "deep"},
          "drive: thread names %s" % sorted(by))
    # nothing lost: every thread's samples add up to the rounds consumed
    for name, lst in by.items():
        n = sum(root["calls"] for _, root in lst)
        check(n == acc["consumed"], "drive: %s: %d samples in its traces, %d rounds" % (
            name, n, acc["consumed"]))
    check(acc["consumed"] == rounds, "drive: every round consumed (%d of %d)" % (
        acc["consumed"], rounds))
    # durations: samples x interval, parents never shorter than children
    bad = []
    for t in trs:
        for rec, _ in walk(t["records"][0]):
            if rec["tstop"] - rec["tstart"] != rec["calls"] * INTERVAL_MS * 1000000:
                bad.append(rec["method"])
    check(not bad, "drive: every record lasts calls x interval (%s)" % bad[:3])
    # the worker: one chain, is_prime in every other sample
    t, root = by["worker"][0]
    chain = [(r["class"], r["method"], r["sig"]) for r, _ in walk(root)]
    check(chain[:3] == [("global", "start_thread", "()"), ("zk-demo", "worker", "()"),
                        ("zk-demo", "compute_primes", "()")],
          "drive: worker's chain %s" % chain[:3])
    primes = [r for r, _ in walk(root) if r["method"] == "is_prime"]
    check(primes and all(r["calls"] == 1 for r in primes) and
          len(primes) in (root["calls"] // 2, (root["calls"] + 1) // 2),
          "drive: is_prime records of one sample each, every other sample")
    cp = [r for r, _ in walk(root) if r["method"] == "compute_primes"][0]
    check(cp["attrs"].get("file") == "zk-demo.c" and cp["attrs"].get("line") == "12",
          "drive: file and line attributes %s" % cp["attrs"])
    check(root["attrs"].get("thread.state") == "RUNNABLE" and root["attrs"].get("thread.id") == "2002"
          and root["attrs"].get("service.name") == "zk-test" and root["attrs"].get("local.pid")
          and root["begin"]["ttype"] == "stackshot" and root["flags"] == 0x2000,
          "drive: the root's TraceBegin and attributes %s" % root["attrs"])
    # the changer: a new trace when its root changes
    roots = [root["method"] for _, root in by["changer"]]
    check(set(roots) == {"task_alpha", "task_beta"} and
          all(root["calls"] <= 3 for _, root in by["changer"]),
          "drive: changer's traces split at each root change (%s)" % roots[:6])
    # the spanned thread: its trace id in the header, its span as parent
    ok = True
    for t, root in by["spanned"]:
        ok &= t["trace_id"] == "11" * 16
        ok &= root["attrs"].get("trace.id") == "11" * 16
        sid = root["attrs"].get("span.id", "")
        ok &= root["begin"]["parent"] == int.from_bytes(bytes.fromhex(sid), "big", signed=True)
        ok &= root["calls"] <= 4
        ok &= (root["class"], root["method"], root["sig"]) == ("java.lang.Thread", "run", "()V")
        ok &= [(c["class"], c["method"], c["sig"]) for c in root["children"]] == [
            ("com.example.Api", "handle", "(Ljava/lang/String;)I")]
    check(ok, "drive: spanned thread: span context, Java descriptors, a trace per span")
    others = {t["trace_id"] for name, lst in by.items() if name != "spanned" for t, _ in lst}
    check(len(others) == sum(len(lst) for name, lst in by.items() if name != "spanned") and
          all(re.fullmatch(r"[0-9a-f]{32}", x) for x in others),
          "drive: a random 32-digit trace id per other trace")
    check(all(root["method"] == "truncated" and root["class"] == "stackshot"
              for _, root in by["deep"]), "drive: a cut stack has the stackshot.truncated root")


def scenario_restart(a, out):
    """The collector process goes away for a second and comes back (its
    sessions lost, the connection refused meanwhile)."""
    import signal
    outs = [os.path.join(out, "first"), os.path.join(out, "second")]

    def spawn(o, port=0):
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "collector.py"), "--out", o,
                              "--port", str(port)], stdout=subprocess.PIPE)
        return p, int(p.stdout.readline())

    c1, port = spawn(outs[0])
    drive = subprocess.Popen([a.drive, "5"], env=agent_env("http://127.0.0.1:%d" % port),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(2)
    c1.send_signal(signal.SIGKILL)
    c1.wait()
    time.sleep(1)
    c2, _ = spawn(outs[1], port)
    so, se = drive.communicate(timeout=60)
    c2.send_signal(signal.SIGKILL)
    c2.wait()
    se = se.decode()
    check(drive.returncode == 0, "restart: the host exits normally (%s)" % drive.returncode)
    if drive.returncode != 0:
        print(se[-4000:])
    ctr, acc = counters(se), accounting(se)
    if not ctr or not acc:
        check(False, "restart: counters and accounting lines")
        print(se)
        return
    got = [load(o, "traces.jsonl") for o in outs]
    check(acc["taken"] == acc["exported"] and acc["dropped"] == acc["rejected"] == 0,
          "restart: nothing lost: %d taken, %d exported" % (acc["taken"], acc["exported"]))
    check(len(got[0]) + len(got[1]) >= acc["exported"] and len(got[1]) > 0,
          "restart: both collectors got traces (%d + %d, %d exported)" % (
              len(got[0]), len(got[1]), acc["exported"]))
    check(ctr["failures"] >= 1 and "failed" in se, "restart: the outage was met and said")
    resets = [r for r in load(outs[1], "requests.jsonl") if r["uri"].endswith("/agd")]
    check(resets and resets[0]["headers"].get("X-Zorka-Session-Reset") == ["true"],
          "restart: the new collector's first agd says Reset: true")
    problems = [p for t in got[1] for p in t["problems"]]
    check(not problems, "restart: every reference resolves after the restart (%s)" % problems[:2])


def scenario_expiry(a, out):
    srv, port = start_collector(out, session_timeout=1.5)
    code, so, se = run([a.drive, "6", "steady"], agent_env("http://127.0.0.1:%d" % port,
                                                {"STACKSHOT_ZORKA_PERIOD": "2"}))
    acc, _ = common("expiry", code, se, out, a.dump, expect_failures=True)
    srv.shutdown()
    if not acc:
        return
    st = stats()
    check(st["expired"] >= 1 and st["status"].get("401", 0) >= 1,
          "expiry: sessions expired and were answered 401 (%s)" % st["status"])
    # what the host's exit cut (the shutdown deadline, said in its own line:
    # on a loaded machine the last period's re-sent traces can still be in
    # flight) is not the reset's loss
    cut = cut_at_exit(se)
    check(acc["dropped"] == cut and acc["rejected"] == 0 and acc["exported"] + cut == acc["taken"] and
          2 * acc["exported"] >= acc["taken"],
          "expiry: every trace delivered after the reset (%d cut at exit)" % cut)


def scenario_errors(a, out):
    srv, port = start_collector(out)
    control(port, "/control/fail?n=3&status=500&path=trc")
    # 3 s: the retries (125 + 250 + 500 ms after the first period's end)
    # end well before the exit, which gives a collector whose last call
    # failed nothing
    code, so, se = run([a.drive, "3"], agent_env("http://127.0.0.1:%d" % port))
    acc, _ = common("errors", code, se, out, a.dump, expect_failures=True)
    srv.shutdown()
    if not acc:
        return
    ctr = counters(se)
    check(ctr["failures"] == 3 and ctr["retries"] == 3,
          "errors: 3 failures, 3 retries (%d, %d)" % (ctr["failures"], ctr["retries"]))
    check(acc["exported"] == acc["taken"], "errors: every trace delivered")
    # after each failed trc the next agd says Reset: true
    reqs = load(out, "requests.jsonl")
    resets = [r["headers"].get("X-Zorka-Session-Reset", [""])[0] for r in reqs
              if r["uri"].endswith("/agd")]
    check(resets[:4] == ["true"] * 4, "errors: agd resent with Reset: true after each 500 (%s)" %
          resets[:5])


def scenario_drop(a, out):
    srv, port = start_collector(out)
    control(port, "/control/fail?n=3&status=500&path=trc")
    code, so, se = run([a.drive, "3"], agent_env("http://127.0.0.1:%d" % port,
                                                {"STACKSHOT_ZORKA_RETRIES": "2"}))
    acc, _ = common("drop", code, se, out, a.dump, expect_failures=True)
    srv.shutdown()
    if not acc:
        return
    check(acc["rejected"] == 1 and acc["exported"] == acc["taken"] - 1,
          "drop: the trace answered 500 three times is given up as rejected, the rest delivered")
    check("dropped after 3 attempts" in se, "drop: one line says so")


def scenario_https(a, out):
    certs = os.path.join(out, "certs")
    os.makedirs(certs)
    srv, port = start_collector(out, tls_dir=certs)
    url = "https://127.0.0.1:%d" % port
    code, so, se = run([a.drive, "2"], agent_env(url, {
        "STACKSHOT_ZORKA_CERTIFICATE": os.path.join(certs, "ca.crt")}))
    acc, _ = common("https", code, se, out, a.dump)
    if acc:
        check(acc["exported"] > 0 and acc["exported"] == acc["taken"], "https: delivered, verified")
    time.sleep(0.3)
    before = stats()["accepted_trc"]
    code, so, se = run([a.drive, "1"], agent_env(url))
    ctr = counters(se)
    check(code == 0 and ctr and ctr["exported"] == 0 and stats()["accepted_trc"] == before,
          "https: without the test CA nothing is sent (exit %s, %s, %d accepted before, %d after)"
          % (code, ctr, before, stats()["accepted_trc"]))
    if not ctr:
        print(se)
    check("certificate" in se, "https: the line says why (the certificate)")
    srv.shutdown()


def text_threads(path):
    """Per thread name: the rounds it appears in and its functions, from the
    text exporter's thread dumps."""
    names = {}
    cur = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r'^"(.*)" #', line)
            if m:
                cur = names.setdefault(m.group(1), {"samples": 0, "funcs": set()})
                cur["samples"] += 1
                continue
            m = re.match(r"^\tat (.*)\((.*)\)$", line)
            if m and cur is not None:
                cur["funcs"].add(m.group(1).rsplit(".", 1)[1] if "." in m.group(1) else m.group(1))
    return names


def compare_with_text(name, trs, text_path, expect):
    text = text_threads(text_path)
    by = per_thread(trs)
    check(set(by) == set(text), "%s: the same threads as the text exporter (%s vs %s)" % (
        name, sorted(by), sorted(text)))
    for thread, info in text.items():
        lst = by.get(thread, [])
        samples = sum(root["calls"] for _, root in lst)
        funcs = {r["method"] for _, root in lst for r, _ in walk(root)}
        funcs.discard("truncated")
        funcs.discard("no_frames")
        check(samples == info["samples"] and funcs == info["funcs"],
              "%s: %s: %d samples, functions %s (text: %d, %s)" % (
                  name, thread, samples, "same" if funcs == info["funcs"] else sorted(funcs)[:8],
                  info["samples"], "" if funcs == info["funcs"] else sorted(info["funcs"])[:8]))
    for thread, func in expect:
        funcs = {r["method"] for _, root in by.get(thread, []) for r, _ in walk(root)}
        check(func in funcs, "%s: %s runs %s" % (name, thread, func))


def scenario_native(a, out):
    srv, port = start_collector(out)
    outdir = os.path.join(out, "text")
    env = agent_env("http://127.0.0.1:%d" % port, {
        "STACKSHOT_EXPORTERS": "zorka,text", "STACKSHOT_OUTPUT_DIR": outdir,
        "LD_PRELOAD": a.lib})
    code, so, se = run([a.demo, "4"], env)
    acc, trs = common("native", code, se, out, a.dump)
    srv.shutdown()
    if not acc:
        return
    txt = [f for f in os.listdir(outdir) if f.endswith(".txt")]
    check(len(txt) == 1, "native: one text file")
    compare_with_text("native", trs, os.path.join(outdir, txt[0]), [
        ("busy-worker", "compute_primes"), ("sleeper", "sleep_forever"),
        ("mutex-waiter", "wait_for_lock"), ("cond-waiter", "wait_for_signal"),
        ("recursive", "recurse")])
    by = per_thread(trs)
    rec = [r for _, root in by.get("busy-worker", []) for r, _ in walk(root)
           if r["method"] == "compute_primes"]
    check(rec and rec[0]["class"] == "stackshot-demo" and rec[0]["attrs"].get("file") ==
          "stackshot-demo.c", "native: compute_primes is stackshot-demo's, in stackshot-demo.c")


def scenario_java(a, out):
    javac = os.path.join(a.java_home, "bin", "javac")
    java = os.path.join(a.java_home, "bin", "java")
    if not os.path.exists(javac):
        print("SKIP: no JDK at %s" % a.java_home)
        sys.exit(77)
    classes = os.path.join(out, "classes")
    subprocess.run([javac, "-g", "-d", classes, a.java_src], check=True)
    srv, port = start_collector(out)
    outdir = os.path.join(out, "text")
    env = agent_env("http://127.0.0.1:%d" % port, {
        "STACKSHOT_EXPORTERS": "zorka,text", "STACKSHOT_OUTPUT_DIR": outdir})
    code, so, se = run([java, "-agentpath:" + a.lib, "-cp", classes, "Demo", "5"], env,
                       timeout=90)
    acc, trs = common("java", code, se, out, a.dump)
    srv.shutdown()
    if not acc:
        return
    txt = [f for f in os.listdir(outdir) if f.endswith(".txt")]
    compare_with_text("java", trs, os.path.join(outdir, txt[0]), [
        ("busy-worker", "computePrimes"), ("sleeper", "sleepQuietly")])
    sigs = {(r["class"], r["method"]): r["sig"] for t in trs for rec in t["records"]
            for r, _ in walk(rec)}
    check(sigs.get(("java.lang.Thread", "sleep")) == "(J)V" and
          sigs.get(("java.lang.Thread", "run")) == "()V",
          "java: JVM descriptors as signatures (Thread.sleep %s)" % sigs.get(
              ("java.lang.Thread", "sleep")))
    check(any(c == "Demo" for c, _ in sigs), "java: the Demo class")
    names = {t["records"][0]["attrs"]["thread.name"] for t in trs}
    check("wörker-线程" in names, "java: a thread name in UTF-8 arrives intact")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--drive")
    ap.add_argument("--demo")
    ap.add_argument("--lib")
    ap.add_argument("--java-home")
    ap.add_argument("--java-src")
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="zk-e2e-%s-" % a.scenario)
    {"drive": scenario_drive, "restart": scenario_restart, "expiry": scenario_expiry,
     "errors": scenario_errors, "drop": scenario_drop, "https": scenario_https,
     "native": scenario_native, "java": scenario_java}[a.scenario](a, out)
    if FAILED:
        print("%d check(s) failed; output kept in %s" % (len(FAILED), out))
        return 1
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
