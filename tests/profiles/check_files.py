#!/usr/bin/env python3
"""check_files.py: read the pprof / collapsed / flame graph files back with
independent tools.

  check_files.py synth <profiles_drive> <out dir>
      30 rounds of the known scenario (tests/profiles/synth.h) through the
      real exporters; go tool pprof -raw/-top must see exactly its counts,
      labels and locations; the collapsed file must match the golden text.
  check_files.py demo <stackshot-demo> <libstackshot.so> <out dir> [preload prefix]
      the C demo with the agent preloaded (pprof, flamegraph, text): the
      busy thread's function is on top, samples/count per thread equals the
      rounds the text exporter wrote, thread labels are present.

Exit 77 (skip) when `go` is not installed.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

GOLDEN_COLLAPSED_CPU_30 = (
    "main;main;worker;compute_primes 20\n"
    "main;main;worker;is_prime 10\n")


def fail(msg):
    print("check_files: FAIL: " + msg)
    sys.exit(1)


def go_env(tmp):
    env = dict(os.environ)
    env["HOME"] = tmp
    env["GOCACHE"] = os.path.join(tmp, "gocache")
    env["PPROF_TMPDIR"] = tmp
    env["GOFLAGS"] = ""
    env.pop("PPROF_BINARY_PATH", None)
    return env


def pprof(args, path, tmp):
    out = subprocess.run(["go", "tool", "pprof"] + args + [path], capture_output=True,
                         text=True, env=go_env(tmp), timeout=120)
    if out.returncode != 0:
        fail("go tool pprof %s: %s" % (" ".join(args), out.stderr.strip()))
    return out.stdout


def parse_raw(text):
    """Samples (values, location ids, labels) and locations of -raw output."""
    samples, locations = [], {}
    section = None
    cur = None
    for line in text.splitlines():
        if line.startswith("Samples:"):
            section = "s"
            continue
        if line.startswith("Locations"):
            section = "l"
            continue
        if line.startswith("Mappings"):
            section = "m"
            continue
        if section == "s":
            m = re.match(r"^\s+([\d ]+):\s*([\d ]*)$", line)
            if m and not line.strip().startswith("samples/"):
                cur = {"values": [int(v) for v in m.group(1).split()],
                       "locs": [int(v) for v in m.group(2).split()], "labels": {}}
                samples.append(cur)
                continue
            for k, v in re.findall(r"([\w.]+):\[([^\]]*)\]", line):
                if cur is not None:
                    cur["labels"][k] = v
        elif section == "l":
            m = re.match(r"^\s+(\d+): (0x[0-9a-f]+) (?:M=\d+ )?(\S+)", line)
            if m:
                locations[int(m.group(1))] = [m.group(3)]
                last = int(m.group(1))
            else:
                m = re.match(r"^\s+(\S+) .*s=\d+$", line)
                if m and locations:
                    locations[last].append(m.group(1))
    return samples, locations


def top_flat(text):
    for line in text.splitlines():
        m = re.match(r"^\s*([\d.]+\w*)\s+[\d.]+%\s+[\d.]+%\s+[\d.]+\w*\s+[\d.]+%\s+(\S+)", line)
        if m:
            return m.group(2), line
    fail("no rows in -top output:\n" + text)


def check_synth(drive, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([drive, out, "30"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("profiles_drive: " + r.stderr)
    pb = glob.glob(os.path.join(out, "*.1.pb.gz"))
    col = glob.glob(os.path.join(out, "*.1.collapsed"))
    html = glob.glob(os.path.join(out, "*.1.html"))
    if len(pb) != 1 or len(col) != 1 or len(html) != 1:
        fail("expected one .pb.gz, .collapsed and .html, got %s" % os.listdir(out))
    for p in pb + col + html:
        if os.stat(p).st_mode & 0o777 != 0o600:
            fail("%s has mode %o" % (p, os.stat(p).st_mode & 0o777))
    with open(col[0]) as f:
        if f.read() != GOLDEN_COLLAPSED_CPU_30:
            fail("collapsed file differs from the golden text")
    raw = pprof(["-raw"], pb[0], out)
    if "samples/count wall/nanoseconds cpu/nanoseconds" not in raw:
        fail("sample types missing:\n" + raw)
    if "PeriodType: wall nanoseconds" not in raw or "Period: 10000000" not in raw:
        fail("period missing")
    samples, locs = parse_raw(raw)
    by_thread = {}
    for s in samples:
        name = s["labels"].get("thread.name")
        if name is None or "thread.state" not in s["labels"] or "thread.id" not in s["labels"]:
            fail("sample without thread labels: %s" % s)
        by_thread[name] = by_thread.get(name, 0) + s["values"][0]
        leaf = locs[s["locs"][0]][0]
        if name == "main":
            want = {"compute_primes": 20, "is_prime": 10}[leaf]
            if s["values"] != [want, want * 10000000, want * 9000000]:
                fail("main/%s values %s" % (leaf, s["values"]))
            if s["labels"]["thread.id"] != "100" or s["labels"]["thread.state"] != "RUNNABLE":
                fail("main labels %s" % s["labels"])
        if name == "java-worker":
            if s["labels"].get("trace_id") != "0102030405060708090a0b0c0d0e0f10" or \
               s["labels"].get("span_id") != "a1a2a3a4a5a6a7a8":
                fail("span labels %s" % s["labels"])
        if name == "idle" and locs[s["locs"][0]] != ["inner", "outer"]:
            fail("inlined location %s" % locs[s["locs"][0]])
    if by_thread != {"main": 30, "idle": 30, "java-worker": 30}:
        fail("samples per thread %s" % by_thread)
    fn, line = top_flat(pprof(["-top", "-sample_index=cpu"], pb[0], out))
    if fn != "compute_primes":
        fail("top CPU function is %s (%s)" % (fn, line))
    print("synth: ok: %d samples, %s" % (len(samples), by_thread))


def check_demo(demo, lib, out, prefix):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.update({"SPLUNK_PROFILER_ENABLED": "true", "STACKSHOT_EXPORTERS": "pprof,flamegraph,text",
                "STACKSHOT_OUTPUT_DIR": out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
                "LD_PRELOAD": (prefix + " " if prefix else "") + lib})
    r = subprocess.run([demo, "3"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        fail("demo exited %d: %s" % (r.returncode, r.stderr))
    txt = glob.glob(os.path.join(out, "*.txt"))
    pb = glob.glob(os.path.join(out, "*.pb.gz"))
    if len(txt) != 1 or len(pb) != 1:
        fail("expected one text and one pprof file: %s" % os.listdir(out))
    with open(txt[0], errors="replace") as f:
        text = f.read()
    rounds = len(re.findall(r"^Full thread dump stackshot round", text, re.M))
    busy_rounds = len(re.findall(r'^"busy-worker"', text, re.M))
    if rounds < 10:
        fail("only %d rounds" % rounds)
    samples, locs = parse_raw(pprof(["-raw"], pb[0], out))
    per_thread = {}
    for s in samples:
        if "thread.name" not in s["labels"] or "thread.id" not in s["labels"]:
            fail("sample without thread labels: %s" % s)
        n = s["labels"]["thread.name"]
        per_thread[n] = per_thread.get(n, 0) + s["values"][0]
    if per_thread.get("busy-worker") != busy_rounds:
        fail("busy-worker has %s samples, the text shows it in %d rounds" %
             (per_thread.get("busy-worker"), busy_rounds))
    if per_thread.get("sleeper") != len(re.findall(r'^"sleeper"', text, re.M)):
        fail("sleeper sample count differs from the text")
    top = pprof(["-top", "-sample_index=cpu"], pb[0], out)
    fn, line = top_flat(top)
    if fn not in ("is_prime", "compute_primes"):
        fail("top CPU function is %s:\n%s" % (fn, top))
    cum = pprof(["-top", "-cum", "-sample_index=samples", "-tagfocus=thread.name=busy-worker"],
                pb[0], out)
    if not re.search(r"\s%d\s+[\d.]+%%\s+compute_primes" % busy_rounds, cum):
        fail("compute_primes is not in all %d busy-worker samples:\n%s" % (busy_rounds, cum))
    print("demo: ok: %d rounds, busy-worker %d samples, top %s" % (rounds, busy_rounds, fn))


def check_java(jdk, lib, demo_src, out):
    java, javac = os.path.join(jdk, "bin", "java"), os.path.join(jdk, "bin", "javac")
    if not os.path.exists(javac):
        print("check_files: no JDK at %s; skipped" % jdk)
        sys.exit(77)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "classes"))
    subprocess.run([javac, "-d", os.path.join(out, "classes"), demo_src], check=True, timeout=120)
    env = dict(os.environ)
    env.update({"SPLUNK_PROFILER_ENABLED": "true", "STACKSHOT_EXPORTERS": "pprof,text",
                "STACKSHOT_OUTPUT_DIR": out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100"})
    r = subprocess.run([java, "-agentpath:" + lib, "-cp", os.path.join(out, "classes"), "Demo", "3"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        fail("java exited %d: %s" % (r.returncode, r.stderr))
    txt = glob.glob(os.path.join(out, "*.txt"))
    pb = glob.glob(os.path.join(out, "*.pb.gz"))
    if len(txt) != 1 or len(pb) != 1:
        fail("expected one text and one pprof file: %s" % os.listdir(out))
    with open(txt[0], errors="replace") as f:
        text = f.read()
    busy_rounds = len(re.findall(r'^"busy-worker"', text, re.M))
    samples, locs = parse_raw(pprof(["-raw"], pb[0], out))
    busy = sum(s["values"][0] for s in samples if s["labels"].get("thread.name") == "busy-worker")
    if busy != busy_rounds or busy < 10:
        fail("busy-worker: %d samples, the text shows it in %d rounds" % (busy, busy_rounds))
    fn, line = top_flat(pprof(["-top", "-sample_index=cpu"], pb[0], out))
    if fn != "Demo.computePrimes":
        fail("top CPU function is %s (%s)" % (fn, line))
    print("java: ok: busy-worker %d samples, top %s" % (busy, fn))


def elf_facts(lib):
    """Build id, .text range and the exported stripx_run range of a library."""
    for tool in ("readelf", "nm"):
        if shutil.which(tool) is None:
            print("check_files: %s (binutils) missing; skipped" % tool)
            sys.exit(77)
    notes = subprocess.run(["readelf", "-n", lib], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", notes)
    if not m:
        fail("%s has no build id" % lib)
    build_id = m.group(1)
    sections = subprocess.run(["readelf", "-SW", lib], capture_output=True, text=True).stdout
    m = re.search(r"\.text\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", sections)
    text = (int(m.group(1), 16), int(m.group(1), 16) + int(m.group(3), 16))
    syms = subprocess.run(["nm", "-D", "-S", lib], capture_output=True, text=True).stdout
    m = re.search(r"^([0-9a-f]+) ([0-9a-f]+) T stripx_run$", syms, re.M)
    run = (int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16))
    if subprocess.run(["nm", lib], capture_output=True, text=True).stdout.strip():
        fail("%s is not stripped" % lib)
    return build_id, text, run


def check_stripped(host, lib, stripx, out, unstripped=None):
    build_id, text_range, run = elf_facts(stripx)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.update({"SPLUNK_PROFILER_ENABLED": "true", "STACKSHOT_EXPORTERS": "pprof,flamegraph,text",
                "STACKSHOT_OUTPUT_DIR": out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "50",
                "LD_PRELOAD": lib})
    r = subprocess.run([host, "2"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        fail("host exited %d: %s" % (r.returncode, r.stderr))
    pb = glob.glob(os.path.join(out, "*.pb.gz"))
    col = glob.glob(os.path.join(out, "*.collapsed"))
    txt = glob.glob(os.path.join(out, "*.txt"))
    if len(pb) != 1 or len(col) != 1 or len(txt) != 1:
        fail("expected one pprof, collapsed and text file: %s" % os.listdir(out))
    raw = pprof(["-raw"], pb[0], out)
    mappings = {}
    for m in re.finditer(r"^(\d+): 0x[0-9a-f]+/0x[0-9a-f]+/0x[0-9a-f]+ (\S+) ?([0-9a-f]*)", raw, re.M):
        mappings[m.group(1)] = (m.group(2), m.group(3))
    offsets, names = set(), set()
    for m in re.finditer(r"^\s+\d+: 0x[0-9a-f]+ (?:M=(\d+) )?(\S+) ", raw, re.M):
        names.add(m.group(2))
        u = re.match(r"^libstripx\.so\+0x([0-9a-f]+)$", m.group(2))
        if not u:
            continue
        off = int(u.group(1), 16)
        if not (text_range[0] <= off < text_range[1]) or run[0] <= off < run[1]:
            fail("libstripx.so+0x%x is not in the hidden code of .text %s (stripx_run %s)" %
                 (off, [hex(x) for x in text_range], [hex(x) for x in run]))
        mp = mappings.get(m.group(1))
        if not mp or not mp[0].endswith("/libstripx.so") or mp[1] != build_id:
            fail("libstripx.so+0x%x: mapping %s, want libstripx.so with build id %s" %
                 (off, mp, build_id))
        offsets.add(off)
    if len(offsets) < 2:
        fail("%d distinct libstripx.so offsets, want >= 2: unknown frames merged? names %s" %
             (len(offsets), sorted(names)))
    # The offsets are what a symbolizer takes: the copy before stripping
    # names each one (the running code is the two hidden spin functions).
    named = {}
    if unstripped and shutil.which("addr2line"):
        a2l = subprocess.run(["addr2line", "-f", "-e", unstripped] + [hex(o) for o in sorted(offsets)],
                             capture_output=True, text=True).stdout.split("\n")
        named = dict(zip((hex(o) for o in sorted(offsets)), a2l[0::2]))
        wrong = {o: f for o, f in named.items() if f not in ("stripx_spin_a", "stripx_spin_b")}
        if wrong:
            fail("offsets addr2line does not place in the hidden functions: %s" % wrong)
    for want in ("stripx_run", "worker", "start_thread"):
        if want not in names:
            fail("no function named %s in the pprof: %s" % (want, sorted(names)))
    bad = [n for n in names if n.startswith("global.") or n.startswith("unknown.")]
    if bad:
        fail("namespaced names in the pprof: %s" % bad)
    fn, line = top_flat(pprof(["-top", "-sample_index=cpu"], pb[0], out))
    if not fn.startswith("libstripx.so+0x"):
        fail("top CPU function is %s, want a libstripx.so+0x frame" % fn)
    with open(col[0]) as f:
        collapsed = f.read()
    if "global." in collapsed or "unknown." in collapsed:
        fail("namespaced names in the collapsed stacks")
    if not re.search(r"^strip-worker;.*;worker;stripx_run;libstripx\.so\+0x[0-9a-f]+ \d+$",
                     collapsed, re.M):
        fail("no strip-worker stack into libstripx.so in the collapsed stacks")
    with open(txt[0], errors="replace") as f:
        text = f.read()
    if "\tat global.stripx_run(libstripx.so)" not in text or "\tat global.worker(" not in text:
        fail("the text body lost its global. namespace")
    print("stripped: ok: %d distinct libstripx.so offsets %s, build id %s, top %s" %
          (len(offsets), named or sorted(hex(o) for o in offsets), build_id, fn))


NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


def flame(page, fn, shot, *opts):
    if shutil.which("node") is None or \
            not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core")):
        print("check_files: node or playwright-core (npm ci in tests/profiles/node) missing; skipped")
        sys.exit(77)
    r = subprocess.run(["node", os.path.join(NODE_DIR, "flame_check.js"), page, fn, shot] + list(opts),
                       capture_output=True, text=True, timeout=120)
    sys.stdout.write(r.stdout)
    if r.returncode == 77:
        sys.exit(77)
    if r.returncode != 0:
        fail("flame_check: " + r.stderr.strip())


def flame_synth(drive, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([drive, out, "30"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("profiles_drive: " + r.stderr)
    page = glob.glob(os.path.join(out, "*.html"))[0]
    flame(page, "compute_primes", os.path.join(out, "flame.png"))


def flame_demo(demo, lib, out, prefix):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.update({"SPLUNK_PROFILER_ENABLED": "true", "STACKSHOT_EXPORTERS": "flamegraph",
                "STACKSHOT_OUTPUT_DIR": out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
                "LD_PRELOAD": (prefix + " " if prefix else "") + lib})
    r = subprocess.run([demo, "2"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        fail("demo exited %d: %s" % (r.returncode, r.stderr))
    pages = glob.glob(os.path.join(out, "*.html"))
    if len(pages) != 1:
        fail("expected one flame graph page: %s; agent said: %s" % (os.listdir(out), r.stderr))
    with open(glob.glob(os.path.join(out, "*.collapsed"))[0]) as f:
        lines = f.read().splitlines()
    if not any(l.startswith("busy-worker;") and ";compute_primes" in l for l in lines):
        fail("no busy-worker/compute_primes stack in the collapsed file")
    flame(pages[0], "compute_primes", os.path.join(out, "flame.png"))


XSS_FUNCTION = "<script>alert(1)</script>"


def flame_xss(drive, out):
    """Names with HTML/JS in them: shown as text, nothing runs."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = subprocess.run([drive, out, "10", "xss"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("profiles_drive: " + r.stderr)
    page = glob.glob(os.path.join(out, "*.html"))[0]
    with open(page) as f:
        html = f.read()
    if "<script>alert" in html or "<img" in html:
        fail("a name reached the page as markup")
    flame(page, XSS_FUNCTION, os.path.join(out, "flame.png"), "--xss=" + XSS_FUNCTION,
          "--kinds=native,java,jit,kernel")


def flame_idle(lib, out):
    """An idle host (sleep 2): no thread on CPU, the page shows the wall view
    and says why; there is no collapsed file of the (empty) CPU view."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ)
    env.update({"SPLUNK_PROFILER_ENABLED": "true", "STACKSHOT_EXPORTERS": "flamegraph",
                "STACKSHOT_OUTPUT_DIR": out, "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
                "LD_PRELOAD": lib})
    sleep = shutil.which("sleep")
    r = subprocess.run([sleep, "2"], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        fail("sleep exited %d: %s" % (r.returncode, r.stderr))
    pages = glob.glob(os.path.join(out, "*.html"))
    if len(pages) != 1:
        fail("an idle process got no flame graph: %s; agent said: %s" % (os.listdir(out), r.stderr))
    if glob.glob(os.path.join(out, "*.collapsed")):
        fail("a collapsed file for an empty CPU view")
    flame(pages[0], "sleep", os.path.join(out, "flame.png"), "--idle")


def main():
    if sys.argv[1] == "flame-synth":
        return flame_synth(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "flame-xss":
        return flame_xss(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "flame-idle":
        return flame_idle(sys.argv[2], sys.argv[3])
    if sys.argv[1] == "flame-demo":
        return flame_demo(sys.argv[2], sys.argv[3], sys.argv[4],
                          sys.argv[5] if len(sys.argv) > 5 else "")
    if shutil.which("go") is None:
        print("check_files: go not installed (Debian golang-go); skipped")
        sys.exit(77)
    mode = sys.argv[1]
    if mode == "synth":
        check_synth(sys.argv[2], sys.argv[3])
    elif mode == "java":
        check_java(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    elif mode == "stripped":
        check_stripped(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5],
                       sys.argv[6] if len(sys.argv) > 6 else None)
    elif mode == "demo":
        check_demo(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else "")
    else:
        fail("unknown mode " + mode)


if __name__ == "__main__":
    main()
