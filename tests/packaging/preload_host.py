#!/usr/bin/env python3
"""/etc/ld.so.preload: the agent on every process of a host (label packaging).

    preload_host.py --lib libstackshot.so --spin spin --src tests/packaging --out DIR

The real machine is never touched: the test runs itself again under `unshare --mount --net`
(root), and there, in the private mount namespace, lays a file over /etc/ld.so.preload (a bind
mount when the file exists, else an overlay on /etc) naming the agent; the private network
namespace has its own 127.0.0.1:4317, the agent's default OTLP endpoint, where a local OTLP/gRPC
receiver (tests/otlp/node) listens. Every program started there then loads the library, as on a
host configured that way. Checks:
  - a native program and a JVM with SPLUNK_PROFILER_ENABLED=true and nothing else in their
    environment (no LD_PRELOAD, no JAVA_TOOL_OPTIONS, no other key) are profiled: the agent
    starts once in each (the JVM through JVMTI: the loader gives it -agentpath), and the
    receiver gets records of their threads (ss_pkg_spin, and the JVM's main);
  - a native program, a JVM and the receiver (node) without that variable are unaffected: their
    own output and status, the loader mapped but not the core, no agent thread, no line, no file;
  - a set-user-ID root program run by nobody with the agent enabled in its environment: the
    agent stays off (AT_SECURE), so the caller cannot have root write files where it says;
  - outside the namespace /etc/ld.so.preload is as it was.
Exit 0 pass, 1 fail, 77 skip (not root, unshare not permitted, no JDK, node or ip).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

JDK17 = "/usr/lib/jvm/java-17-openjdk-amd64"
PRELOAD = "/etc/ld.so.preload"
FAILED = []
started = 0.0  # when the last program() started (wall clock)


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


def etc_state():
    try:
        st = os.stat(PRELOAD)
        return (st.st_ino, st.st_size, st.st_mtime_ns, open(PRELOAD).read())
    except FileNotFoundError:
        return None


def bare_env(enabled):
    """The machine's environment without anything of the agent's, plus the switch."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STACKSHOT_", "SPLUNK_", "OTEL_", "LD_", "JAVA_", "JDK_",
                                "_JAVA"))}
    if enabled:
        env["SPLUNK_PROFILER_ENABLED"] = "true"
    return env


def threads(pid):
    names = []
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            names.append(open("/proc/%d/task/%s/comm" % (pid, t)).read().strip())
        except OSError:
            pass
    return names


def watch(p, secs):
    """What the running process maps and its threads' names (comm: 15 bytes), seen while
    it runs (the agent starts one interval after the program)."""
    maps, names, deadline = "", [], time.monotonic() + secs
    while time.monotonic() < deadline and p.poll() is None:
        try:
            maps = open("/proc/%d/maps" % p.pid).read()
            names = threads(p.pid)
        except OSError:
            break
        if "libstackshot-core" in maps and "stackshot-sampl" in names:
            break
        time.sleep(0.1)
    return maps, names


def files_of(pid, since):
    """Files of the agent's default directory ($TMPDIR/stackshot-<uid>) named by the pid
    and written since the program started (an older one is an earlier process's)."""
    return [f for f in glob.glob("/tmp/stackshot-*/*.%d.*" % pid)
            if os.path.getmtime(f) >= since]


def program(name, argv, enabled, want_out, secs):
    global started
    started = time.time() - 1
    p = subprocess.Popen(argv, env=bare_env(enabled), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    maps, names = watch(p, secs)
    so, se = p.communicate(timeout=120)
    check(p.returncode == 0 and so == want_out, "%s: its own output and status (%s)" %
          (name, p.returncode))
    check("/libstackshot.so" in maps, "%s: the loader was preloaded by /etc/ld.so.preload" % name)
    return p.pid, maps, names, se


def setuid_program(a):
    """A set-user-ID root program run by nobody with the agent's keys in its environment: the
    caller's environment must not steer a privileged process (here: where root writes)."""
    d = os.path.join(a.out, "setuid")
    os.makedirs(d)
    os.chmod(d, 0o777)
    prog = os.path.join(d, "spin_suid")
    shutil.copy(a.spin, prog)
    os.chmod(prog, 0o4755)
    if "nosuid" in subprocess.run(["findmnt", "-n", "-o", "OPTIONS", "-T", d],
                                  capture_output=True, text=True).stdout.split(","):
        print("note: %s is on a nosuid mount: the set-user-ID case is not run" % d)
        return
    env = bare_env(True)
    env.update(STACKSHOT_EXPORTERS="text", STACKSHOT_OUTPUT_DIR=d + "/out",
               STACKSHOT_LOG_FILE=d + "/log", SPLUNK_PROFILER_CALL_STACK_INTERVAL="100")
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        prog, "1000"], env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and r.stdout == "spun\n" and r.stderr == "",
          "set-user-ID program run by nobody, enabled in its environment: runs as without the "
          "agent: %r" % r.stderr)
    check(not os.path.exists(d + "/out") and not os.path.exists(d + "/log"),
          "  the agent stayed off: no file of root's where the caller said")


def inner(a):
    lib = os.path.realpath(a.lib)
    # before any mount: `ip` itself must not carry the agent
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if os.path.exists(PRELOAD):
        fd, f = tempfile.mkstemp(dir=a.out)
        os.write(fd, (lib + "\n").encode())
        os.close(fd)
        os.chmod(f, 0o644)
        subprocess.run(["mount", "--bind", f, PRELOAD], check=True)
    else:
        up, work = os.path.join(a.out, "upper"), os.path.join(a.out, "work")
        os.makedirs(up)
        os.makedirs(work)
        r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            "lowerdir=/etc,upperdir=%s,workdir=%s" % (up, work), "/etc"],
                           capture_output=True, text=True)
        if r.returncode:
            print("skip: no overlay mount here: " + r.stderr.strip())
            return 77
        with open(PRELOAD, "w") as f:
            f.write(lib + "\n")
    print("in the namespace, %s: %s" % (PRELOAD, open(PRELOAD).read().strip()))

    # the receiver: node, preloaded too, without the variable
    sink = subprocess.Popen(["node", os.path.join(a.src, "otlp_sink.js"), "4317"],
                            env=bare_env(False), stdout=subprocess.PIPE, text=True)
    try:
        port = int(sink.stdout.readline())
        check(port == 4317, "the receiver listens on the agent's default endpoint")
        maps = open("/proc/%d/maps" % sink.pid).read()
        check("/libstackshot.so" in maps and "libstackshot-core" not in maps and
              not any(n.startswith("stackshot") for n in threads(sink.pid)),
              "node without the variable: the loader mapped, nothing else of the agent")

        java = [JDK17 + "/bin/java", "-cp", a.classes, "Spin"]
        # without the variable: unaffected
        pid, maps, names, se = program("native, not enabled", [a.spin, "1500"], False,
                                       "spun\n", 1.4)
        check("libstackshot-core" not in maps and names == [os.path.basename(a.spin)],
              "  no core, one thread (its own): %s" % names)
        check(se == "" and not files_of(pid, started), "  no line, no file: %r" % se)
        pid, maps, names, se = program("JVM, not enabled", java + ["2000"], False, "spun\n", 1.9)
        check("libstackshot-core" not in maps and "stackshot-sampl" not in names,
              "  no core, no sampler thread")
        check("JAVA_TOOL_OPTIONS" not in se and "stackshot" not in se and
              not files_of(pid, started),
              "  no -agentpath given, no line, no file: %r" % se)

        # the switch alone: profiled
        pid, maps, names, se = program("native, SPLUNK_PROFILER_ENABLED=true only",
                                       [a.spin, "3500"], True, "spun\n", 3.4)
        check("libstackshot-core" in maps and any(n.startswith("stackshot") for n in names),
              "  the agent runs: %s" % names)
        check(se.count("stackshot: started in pid %d" % pid) == 1 and "native sampler" in se,
              "  started once, native sampler: %r" % se[-300:])
        pid, maps, names, se = program("JVM, SPLUNK_PROFILER_ENABLED=true only", java + ["3500"],
                                       True, "spun\n", 3.4)
        check("Picked up JAVA_TOOL_OPTIONS: -agentpath:%s" % lib in se,
              "  the loader gave the JVM -agentpath")
        check("stackshot-sampl" in names and se.count("stackshot: started in pid") == 1 and
              "jvmti sampler" in se, "  the JVMTI agent runs, started once: %r" % se[-400:])

        setuid_program(a)
    finally:
        sink.terminate()
        got = sink.stdout.read()
        sink.wait(timeout=30)
    summary = {}
    if got.strip():
        import json
        summary = json.loads(got.strip().splitlines()[-1])
    print("receiver: %s" % summary)
    got_threads = summary.get("threads", [])
    check(os.path.basename(a.spin) in got_threads, "records of the native program's thread")
    check("main" in got_threads, "records of the JVM's main thread")
    check("node" not in got_threads, "none of the receiver's own")
    return 1 if FAILED else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--spin", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--classes")
    ap.add_argument("--inner", action="store_true")
    a = ap.parse_args()
    if a.inner:
        sys.exit(inner(a))
    if os.geteuid() != 0:
        skip("needs root (a private mount namespace)")
    for tool in ("unshare", "mount", "ip", "node", "setpriv", "findmnt"):
        if not shutil.which(tool):
            skip("no " + tool)
    if not os.path.isdir(os.path.join(a.src, "../otlp/node/node_modules/@grpc/grpc-js")):
        skip("no npm packages in tests/otlp/node (npm ci there)")
    if not os.path.exists(JDK17 + "/bin/javac"):
        skip("no JDK 17")
    if subprocess.run(["unshare", "--mount", "--net", "true"], capture_output=True).returncode:
        skip("unshare --mount --net is not permitted here")
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    classes = os.path.join(a.out, "classes")
    r = subprocess.run([JDK17 + "/bin/javac", "-d", classes, os.path.join(a.src, "Spin.java")],
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stderr)
        sys.exit(1)
    before = etc_state()
    r = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private",
                        sys.executable, os.path.abspath(__file__), "--inner", "--lib", a.lib,
                        "--spin", a.spin, "--src", a.src, "--out", a.out, "--classes", classes],
                       timeout=300)
    check(etc_state() == before, "outside the namespace %s is as it was (%s)" %
          (PRELOAD, "absent" if before is None else "its content"))
    if r.returncode == 77:
        sys.exit(77)
    check(r.returncode == 0, "the checks in the namespace passed")
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
