#!/usr/bin/env python3
"""The `stackshot` command, driven as an operator would (label packaging).

    command.py CASE --cmd stackshot --dump stackshot-dump --spin spin --src DIR --out DIR

CASE: cli, run_native, run_jvm, attach_jdk17, attach_jdk25, attach_twice, attach_refused,
attach_nonjvm, attach_user, attach_ns, attach_stop, attach_stop_jdk25, attach_stop_user,
attach_stop_ns, run_stop. The hosts are real programs: spin (C) and Spin.java compiled here
by the JDK's javac; each checks its own output and exit status, and the agent's files.
Exit 0 pass, 1 fail, 77 skip (a JDK, root or unshare missing).
"""
import argparse
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

JDK17 = "/usr/lib/jvm/java-17-openjdk-amd64"
JDK25 = "/usr/lib/jvm/temurin-25-jdk-amd64"
FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


def run(argv, **kw):
    kw.setdefault("timeout", 60)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def rounds(path):
    with open(path, errors="replace") as f:
        return sum(1 for line in f if line.startswith("Full thread dump stackshot round"))


def only_file(d, pattern):
    files = glob.glob(os.path.join(d, pattern))
    return files[0] if len(files) == 1 else None


def java_class(a, jdk):
    """Spin.class compiled once per run, in a directory every user can read."""
    d = os.path.join(a.out, "classes")
    if not os.path.exists(os.path.join(d, "Spin.class")):
        os.makedirs(d, exist_ok=True)
        r = run([jdk + "/bin/javac", "-d", d, os.path.join(a.src, "Spin.java")], timeout=120)
        if r.returncode:
            print(r.stderr)
            sys.exit(1)
    os.chmod(a.out, 0o755)
    os.chmod(d, 0o755)
    return d


def fresh(a, name, mode=0o700):
    d = os.path.join(a.out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.chmod(d, mode)
    return d


def case_cli(a):
    for argv in (["--help"], ["--version"], ["help"], ["run", "--help"], ["attach", "--help"],
                 ["dump", "--help"], ["stop", "--help"], ["help", "attach"]):
        r = run([a.cmd] + argv)
        check(r.returncode == 0 and r.stdout and not r.stderr,
              "stackshot %s: exit 0, text on stdout" % " ".join(argv))
    r = run([a.cmd, "--version"])
    check(re.fullmatch(r"stackshot \d+\.\d+\.\d+\n", r.stdout) is not None,
          "--version prints 'stackshot X.Y.Z': %r" % r.stdout)
    r = run([a.dump, "--help"])
    check(r.returncode == 0 and "usage" in r.stdout, "stackshot-dump --help: exit 0")
    for argv in ([], ["frobnicate"], ["run"], ["run", "--bogus", "x"], ["run", "-i"],
                 ["attach"], ["attach", "notapid"], ["attach", "1", "--bogus"],
                 ["run", "-d", "soon", "--", "true"], ["dump", "--bogus"]):
        r = run([a.cmd] + argv)
        lines = r.stderr.splitlines()
        check(r.returncode == 2 and len(lines) in (1, 2) and not r.stdout,
              "stackshot %s: exit 2, a usage line: %r" % (" ".join(argv), r.stderr[:120]))
    # stackshot(7) has every key of docs/configuration.md's core table (docs/man/keys7.py writes it)
    root = os.path.dirname(os.path.dirname(a.src))
    conf = open(os.path.join(root, "docs/configuration.md")).read()
    core = conf[conf.index("## Core"):conf.index("## Every other key")]
    page = open(os.path.join(root, "docs/man/stackshot.7")).read().replace("\\-", "-")
    keys = re.findall(r"^\| `([A-Z_]+)`", core, re.M)
    missing = [k for k in keys if k.replace("_", "_") not in page]
    check(len(keys) > 10 and not missing, "stackshot(7) has the %d core keys; missing %s" %
          (len(keys), missing))
    for argv in (["stop"], ["stop", "x"], ["stop", "1", "--bogus"]):
        r = run([a.cmd] + argv)
        check(r.returncode == 2 and len(r.stderr.splitlines()) == 1 and not r.stdout,
              "stackshot %s: exit 2, a usage line: %r" % (" ".join(argv), r.stderr[:120]))
    r = run([a.cmd, "run", "--", "no-such-program-here"])
    check(r.returncode == 127, "run of a missing program: 127")


def case_run_native(a):
    out = fresh(a, "run_native")
    spin = os.path.basename(a.spin) + ".*.txt"
    p = subprocess.Popen([a.cmd, "run", "-i", "100", "-e", "text", "-o", out, "--", a.spin,
                          "1500", "7"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    so, se = p.communicate(timeout=60)
    f = only_file(out, spin)
    check(p.returncode == 7, "the program's exit status is kept (7): %d" % p.returncode)
    check(so == "spun\n", "the program's output is its own")
    check(f is not None and rounds(f) >= 3, "text file written with rounds: %s" % f)
    check(f is not None and "spin_for" in open(f).read(), "the program's function in the stacks")
    check(f is not None and f.endswith(".%d.txt" % p.pid),
          "no extra process: the program is the command's process (pid %d)" % p.pid)
    # a signal that ends the program ends the command's process: it is the program
    r = run([a.cmd, "run", "-e", "none", "--", "sh", "-c", "kill -USR1 $$"])
    check(r.returncode == -signal.SIGUSR1, "killed by SIGUSR1 seen as such: %d" % r.returncode)
    # --duration: sampling stops, the program runs on (3 s at 100 ms: 30 rounds without it)
    out = fresh(a, "run_native_duration")
    t0 = time.monotonic()
    r = run([a.cmd, "run", "-i", "100", "-e", "text", "-o", out, "-d", "500ms", "--",
             a.spin, "3000", "3"])
    took = time.monotonic() - t0
    f = only_file(out, spin)
    n = rounds(f) if f else 0
    check(r.returncode == 3 and r.stdout == "spun\n" and took >= 3,
          "--duration: the program ran to its end (%.1f s, exit %d)" % (took, r.returncode))
    check(1 <= n <= 7, "--duration 500ms at 100 ms: %d rounds (at most 7; 30 without)" % n)
    check("sampling ended: STACKSHOT_DURATION" in r.stderr, "the agent says sampling ended")


def case_run_jvm(a):
    if not os.path.exists(JDK17 + "/bin/java"):
        skip("no JDK 17")
    cp = java_class(a, JDK17)
    out = fresh(a, "run_jvm")
    r = run([a.cmd, "run", "-i", "100", "-e", "text", "-o", out, "-d", "700ms", "--",
             JDK17 + "/bin/java", "-cp", cp, "Spin", "2500", "5"])
    f = only_file(out, "java.*.txt")
    n = rounds(f) if f else 0
    check(r.returncode == 5 and r.stdout == "spun\n", "the JVM's status kept (5): %d" % r.returncode)
    check("-agentpath:" in r.stderr and "jvmti sampler" in r.stderr,
          "the JVM loaded the agent through JAVA_TOOL_OPTIONS")
    check(f is not None and "at Spin.spin(" in open(f).read(), "Java frames written: %s" % f)
    check(1 <= n <= 10, "--duration 700ms at 100 ms: %d rounds (at most 10; 25 without)" % n)


def start_jvm(a, jdk, ms, cwd, prefix=()):
    cp = java_class(a, JDK17)  # class file version 61 runs on 17 and later
    p = subprocess.Popen(list(prefix) + [jdk + "/bin/java", "-cp", cp, "Spin", str(ms)],
                         cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p


def java_pid(p, want_exe="java"):
    """The java process: p itself, or its child (unshare --fork)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for pid in [p.pid] + [int(x) for x in open("/proc/%d/task/%d/children" % (p.pid, p.pid))
                              .read().split()]:
            try:
                if os.path.basename(os.readlink("/proc/%d/exe" % pid)) == want_exe:
                    maps = open("/proc/%d/maps" % pid).read()
                    sigcgt = int(re.search(r"SigCgt:\s*(\w+)", open("/proc/%d/status" % pid)
                                           .read()).group(1), 16)
                    if "libjvm.so" in maps and sigcgt & (1 << (signal.SIGQUIT - 1)):
                        return pid
            except OSError:
                pass
        time.sleep(0.1)
    return None


def attach_once(a, jdk, name, prefix=(), owner=None, relative=False, seen=None):
    out = fresh(a, name, 0o777)
    jvm_cwd = os.path.join(out, "jvm")
    os.makedirs(jvm_cwd)
    os.chmod(jvm_cwd, 0o777)
    p = start_jvm(a, jdk, 6000, jvm_cwd, prefix)
    pid = java_pid(p)
    check(pid is not None, "%s: the JVM is up" % name)
    if seen and pid:
        seen(pid)
    # relative: -o taken from the command's directory, not the JVM's
    r = run([a.cmd, "attach", str(pid), "-i", "100", "-e", "text", "-o",
             "dumps" if relative else out + "/dumps"], cwd=out)
    check(r.returncode == 0 and "agent loaded into %d" % pid in r.stdout,
          "%s: attach: exit %d, %r %r" % (name, r.returncode, r.stdout, r.stderr))
    so, se = p.communicate(timeout=60)
    f = only_file(out + "/dumps", "java.*.txt")
    check(p.returncode == 0 and so == "spun\n", "%s: the JVM ran to its end (exit %s)" %
          (name, p.returncode))
    check(f is not None and "at Spin.spin(" in open(f).read(),
          "%s: the attached agent wrote Java stacks: %s" % (name, f))
    check(se.count("stackshot: started in pid") == 1, "%s: the agent started once: %r" %
          (name, se[-400:]))
    if owner and f:
        check(pwd.getpwuid(os.stat(f).st_uid).pw_name == owner,
              "%s: the file is the JVM user's (%s)" % (name, owner))
    return r


def case_attach_jdk17(a):
    if not os.path.exists(JDK17 + "/bin/java"):
        skip("no JDK 17")
    attach_once(a, JDK17, "attach_jdk17", relative=True)


def case_attach_jdk25(a):
    if not os.path.exists(JDK25 + "/bin/java"):
        skip("no Temurin 25 at " + JDK25)
    attach_once(a, JDK25, "attach_jdk25")


def case_attach_twice(a):
    if not os.path.exists(JDK17 + "/bin/java"):
        skip("no JDK 17")
    out = fresh(a, "attach_twice", 0o777)
    p = start_jvm(a, JDK17, 5000, out)
    pid = java_pid(p)
    r1 = run([a.cmd, "attach", str(pid), "-i", "100", "-e", "text", "-o", out + "/dumps"])
    r2 = run([a.cmd, "attach", str(pid), "-i", "100", "-e", "text", "-o", out + "/other"])
    so, se = p.communicate(timeout=60)
    check(r1.returncode == 0, "first attach loads: %r" % r1.stderr)
    check(r2.returncode == 1 and "already running" in r2.stderr and len(r2.stderr.splitlines()) == 1,
          "second attach refused in one line: %r" % r2.stderr)
    check(p.returncode == 0 and so == "spun\n", "the JVM ran to its end")
    check(se.count("stackshot: started in pid") == 1, "the agent started once")
    check(not os.path.exists(out + "/other"), "the second settings were not applied")


def case_attach_refused(a):
    """JVMs that cannot take the agent: refused in one line, and they live on."""
    if not os.path.exists(JDK17 + "/bin/java"):
        skip("no JDK 17")
    out = fresh(a, "attach_refused", 0o777)
    cp = java_class(a, JDK17)
    # -Xrs: the JVM ignores SIGQUIT (SigIgn) and so starts its listener at start-up: the
    # command must find the socket and never send the signal
    p = subprocess.Popen([JDK17 + "/bin/java", "-Xrs", "-cp", cp, "Spin", "4000"], cwd=out,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.exists("/tmp/.java_pid%d" % p.pid):
        time.sleep(0.1)
    r = run([a.cmd, "attach", str(p.pid), "-i", "100", "-e", "text", "-o", out + "/xrs"])
    so, se = p.communicate(timeout=60)
    check(r.returncode == 0, "-Xrs: attached through the listener it started: %r" % r.stderr)
    check(p.returncode == 0 and so == "spun\n", "-Xrs: the JVM lived on (exit %s)" % p.returncode)
    check(glob.glob(out + "/xrs/java.*.txt") != [], "-Xrs: the agent wrote its file")
    # -XX:+DisableAttachMechanism: no listener comes up; the command gives up in --timeout
    p = subprocess.Popen([JDK17 + "/bin/java", "-XX:+DisableAttachMechanism", "-cp", cp, "Spin",
                          "5000"], cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    pid = java_pid(p)
    r = run([a.cmd, "attach", str(pid), "-t", "1500ms", "-e", "text", "-o", out + "/dumps"])
    so, se = p.communicate(timeout=60)
    check(r.returncode == 1 and "no attach listener came up in time" in r.stderr and
          len(r.stderr.splitlines()) == 1, "no attach mechanism: one line: %r" % r.stderr)
    check(p.returncode == 0 and so.endswith("spun\n"), "the JVM lived on (exit %s)" % p.returncode)
    check(not os.path.exists(out + "/dumps") and not glob.glob(out + "/.attach_pid*"),
          "no agent, no trigger file left behind")


def case_attach_nonjvm(a):
    p = subprocess.Popen([a.spin, "3000"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    r = run([a.cmd, "attach", str(p.pid)])
    check(r.returncode == 1 and "is not a HotSpot JVM" in r.stderr and
          len(r.stderr.splitlines()) == 1, "a native pid: one clear line, exit 1: %r" % r.stderr)
    so, _ = p.communicate(timeout=30)
    check(p.returncode == 0 and so == "spun\n", "the native process was not disturbed")
    r = run([a.cmd, "attach", "4194303"])
    check(r.returncode == 1 and "no such process" in r.stderr, "a missing pid: %r" % r.stderr)


def case_attach_user(a):
    if os.geteuid() != 0:
        skip("not root")
    if not shutil.which("setpriv") or not os.path.exists(JDK17 + "/bin/java"):
        skip("no setpriv or JDK 17")
    attach_once(a, JDK17, "attach_user",
                prefix=["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"],
                owner="nobody")


def case_attach_ns(a):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        skip("not root, or no unshare")
    if not os.path.exists(JDK17 + "/bin/java"):
        skip("no JDK 17")
    seen = {}

    def nspid(pid):  # the JVM sees itself as pid 1 of its own namespace
        seen["NSpid"] = re.search(r"NSpid:\s*(.*)", open("/proc/%d/status" % pid).read()).group(1)

    r = attach_once(a, JDK17, "attach_ns",
                    prefix=["unshare", "--fork", "--pid", "--mount-proc"], seen=nspid)
    check(seen.get("NSpid", "").split()[-1:] == ["1"], "the JVM is pid 1 in its namespace: %s" %
          seen.get("NSpid"))
    m = re.search(r"copied to (/tmp/stackshot\.\w+)/", r.stderr)
    check(m is not None, "the agent was copied into the JVM's /tmp, and it says so")
    if m:
        shutil.rmtree(m.group(1), ignore_errors=True)


def wait_for(pred, secs=30):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def sampler_threads(pid):
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            n += open("/proc/%d/task/%s/comm" % (pid, t)).read().startswith("stackshot-sampl")
        except OSError:
            pass
    return n


def case_attach_stop(a, jdk=JDK17, prefix=()):
    """stackshot stop: sampling ends, the files are complete, the JVM runs on; attach again."""
    if not os.path.exists(jdk + "/bin/java"):
        skip("no JDK at " + jdk)
    # the agent names its files with the JVM's own pid (1 in a pid namespace)
    out = fresh(a, "attach_stop", 0o777)
    cp = java_class(a, JDK17)
    copied = None
    until, ticks = out + "/until", out + "/jvm.out"
    p = subprocess.Popen(list(prefix) + [jdk + "/bin/java", "-Duntil=" + until, "-cp", cp, "Spin", "60000"],
                         cwd=out, stdout=open(ticks, "w"), stderr=subprocess.PIPE, text=True)
    try:
        pid = java_pid(p)
        check(pid is not None, "the JVM is up")
        # no agent yet: nothing to stop, and nothing is sent to the JVM
        r = run([a.cmd, "stop", str(pid)])
        check(r.returncode == 1 and "not sampling" in r.stderr and
              len(r.stderr.splitlines()) == 1, "stop before any attach: one line: %r" % r.stderr)
        check(not os.path.exists("/tmp/.java_pid%d" % pid), "  and no attach listener started")
        # pprof every 10 min: its file is written only when the agent stops
        r = run([a.cmd, "attach", str(pid), "-i", "100", "-e", "text,pprof", "-o",
                 out + "/first", "-s", "STACKSHOT_PROFILES_PERIOD=600"])
        check(r.returncode == 0, "attach: %r" % r.stderr)
        copied = re.search(r"copied to (/tmp/stackshot\.\w+)/", r.stderr)
        check((copied is not None) == ("unshare" in prefix), "a copy into the JVM's /tmp only for "
              "a JVM in another mount namespace")
        check(wait_for(lambda: only_file(out + "/first", "java.*.txt") and
                       rounds(only_file(out + "/first", "java.*.txt")) >= 3), "rounds written")
        f1 = only_file(out + "/first", "java.*.txt")
        r = run([a.cmd, "stop", str(pid)])
        check(r.returncode == 0 and "sampling stopped in %d" % pid in r.stdout,
              "stop: exit %d, %r %r" % (r.returncode, r.stdout, r.stderr))
        check(sampler_threads(pid) == 0, "the sampler thread is gone")
        n1, s1 = rounds(f1), size(f1)
        t1 = open(ticks).read().count("tick")
        time.sleep(1.5)  # 15 intervals
        n2, s2 = rounds(f1), size(f1)
        t2 = open(ticks).read().count("tick")
        check(n1 == n2 and s1 == s2, "the file stopped growing: %d rounds, %d bytes, then %d, %d"
              % (n1, s1, n2, s2))
        check(open(f1).read().endswith("\n\n"), "its last round complete")
        pb = glob.glob(out + "/first/*.pb.gz")
        check(len(pb) == 1 and size(pb[0]) > 0, "the pprof profile flushed at the stop: %s" % pb)
        check(p.poll() is None and t2 > t1, "the JVM runs on: its ticks %d -> %d" % (t1, t2))
        r = run([a.cmd, "stop", str(pid)])
        check(r.returncode == 1 and "not sampling" in r.stderr, "a second stop: nothing to stop")
        # attach again: sampling starts again, with this attach's settings
        r = run([a.cmd, "attach", str(pid), "-i", "100", "-e", "text", "-o", out + "/second"])
        check(r.returncode == 0 and "sampling" in r.stdout, "attach after stop: %r %r" %
              (r.stdout, r.stderr))
        check("copied" not in r.stderr, "  into the library the JVM has, not a new copy")
        check(wait_for(lambda: only_file(out + "/second", "java.*.txt") and
                       rounds(only_file(out + "/second", "java.*.txt")) >= 3),
              "sampling again, into the new directory")
        check(rounds(f1) == n1, "the first file untouched")
        check(sampler_threads(pid) == 1, "one sampler thread")
    finally:
        open(until, "w").close()
        _, se = p.communicate(timeout=60)
        if copied:
            shutil.rmtree(copied.group(1), ignore_errors=True)
    so = open(ticks).read()
    check(p.returncode == 0 and so.endswith("spun\n"), "the JVM ran to its end (exit %s)" %
          p.returncode)
    check(se.count("stackshot: started in pid") == 2 and
          se.count("sampling stopped (stackshot stop)") == 1,
          "the agent started twice, stopped once: %r" % se[-600:])
    # a native process: its agent cannot be stopped from outside
    q = subprocess.Popen([a.spin, "2000"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    r = run([a.cmd, "stop", str(q.pid)])
    so, _ = q.communicate(timeout=30)
    check(r.returncode == 1 and "not a HotSpot JVM" in r.stderr and
          len(r.stderr.splitlines()) == 1, "stop on a native pid: one line: %r" % r.stderr)
    check(q.returncode == 0 and so == "spun\n", "the native process was not disturbed")


def case_run_stop(a):
    """stop for an agent the JVM loaded at its start (stackshot run: -agentpath in
    JAVA_TOOL_OPTIONS, Temurin 25 when there, else JDK 17), then attach again."""
    jdk = JDK25 if os.path.exists(JDK25 + "/bin/java") else JDK17
    if not os.path.exists(jdk + "/bin/java"):
        skip("no JDK")
    out = fresh(a, "run_stop", 0o777)
    cp = java_class(a, JDK17)
    until, ticks = out + "/until", out + "/jvm.out"
    p = subprocess.Popen([a.cmd, "run", "-i", "100", "-e", "text", "-o", out + "/first", "--",
                          jdk + "/bin/java", "-Duntil=" + until, "-cp", cp, "Spin", "60000"],
                         cwd=out, stdout=open(ticks, "w"), stderr=subprocess.PIPE, text=True)
    try:
        pid = java_pid(p)
        f1 = out + "/first/java.%d.txt" % p.pid
        check(pid == p.pid and wait_for(lambda: os.path.exists(f1) and rounds(f1) >= 3),
              "the JVM samples itself from its start: %s" % f1)
        r = run([a.cmd, "stop", str(pid)])
        check(r.returncode == 0 and "sampling stopped" in r.stdout, "stop: %r" % r.stderr)
        n1, t1 = size(f1), open(ticks).read().count("tick")
        time.sleep(1.5)
        check(size(f1) == n1 and open(ticks).read().count("tick") > t1 and p.poll() is None,
              "the file stopped growing, the JVM runs on")
        r = run([a.cmd, "attach", str(pid), "-e", "text", "-o", out + "/second"])
        f2 = out + "/second/java.%d.txt" % pid
        check(r.returncode == 0 and wait_for(lambda: os.path.exists(f2) and rounds(f2) >= 3),
              "attach after stop: sampling again: %r" % r.stderr)
    finally:
        open(until, "w").close()
        _, se = p.communicate(timeout=60)
    check(p.returncode == 0 and open(ticks).read().endswith("spun\n"), "the JVM ran to its end")
    check(se.count("stackshot: started in pid") == 2, "started twice: %r" % se[-500:])


def case_attach_stop_jdk25(a):
    case_attach_stop(a, JDK25)


def case_attach_stop_user(a):
    """The same as root for a JVM running as nobody: stop connects with the JVM's ids."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        skip("not root, or no setpriv")
    case_attach_stop(a, JDK17, ["setpriv", "--reuid=nobody", "--regid=nogroup",
                                "--clear-groups"])


def case_attach_stop_ns(a):
    """The same with the JVM in its own mount and pid namespaces: stop and the second attach
    reach the copy of the agent the first attach put in the JVM's /tmp."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        skip("not root, or no unshare")
    case_attach_stop(a, JDK17, ["unshare", "--fork", "--pid", "--mount-proc"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--spin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    globals()["case_" + a.case](a)
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
