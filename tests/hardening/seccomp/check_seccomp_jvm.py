#!/usr/bin/env python3
"""A JVM started under a seccomp filter, the agent loaded with -agentpath.

usage: check_seccomp_jvm.py kill|eperm|kill_after|eperm_after <java_home> <seccomp_host>
                            <libstackshot.so> <tmpdir> <libseccomp_late.so>

seccomp_host --exec installs the filter of seccomp_host.c (systemd's @debug
set, process_vm_readv and process_vm_writev; SECCOMP_RET_KILL_PROCESS or
EPERM) with no_new_privs and executes java: the filter is there from the
JVM's first instruction, on every thread of the VM and of the agent.
kill_after, eperm_after: the same filter installed from inside the JVM on
all its threads at once (TSYNC) by a second JVMTI agent, libseccomp_late.so,
once the stackshot agent wrote 2 rounds; the rounds of the second half of
the run (4 s) are checked.

Checks: the JVM exits 0 with its own line (a denied call under "kill" ends
it with SIGSYS, exit 159); its sleepers slept; the agent said nothing about
memory it cannot read; the text rounds (20 ms) name the Java threads, show
each sleeper in its own method in most rounds and the busy thread in its
loop at least once, and the VM's "VM Thread" and "GC Thread#0" (sampled
natively, read asleep) walked down to HotSpot's thread_native_entry in most
rounds (refused reads end those walks at the libc leaf; sj-gc's
System.gc() every 100 ms makes both run, so that their stacks are read
again under a late filter). 77 without the JDK. See docs/java.md
("Hardening with a JVM host") and docs/safety/seccomp.md."""
import os
import re
import subprocess
import sys

mode, jh, host, lib, tmp, late = sys.argv[1:7]
mode, _, when = mode.partition("_")
java, javac = os.path.join(jh, "bin", "java"), os.path.join(jh, "bin", "javac")
if not (os.access(java, os.X_OK) and os.access(javac, os.X_OK)):
    print("no JDK at %s: skipped" % jh)
    sys.exit(77)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


os.makedirs(tmp, exist_ok=True)
for f in os.listdir(tmp):
    if f.endswith(".txt"):
        os.unlink(os.path.join(tmp, f))
classes = os.path.join(tmp, "classes")
src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "SeccompJvm.java")
subprocess.run([javac, "-g", "-d", classes, src], check=True)

env = {k: v for k, v in os.environ.items()
       if not k.startswith(("STACKSHOT_", "SPLUNK_", "OTEL_", "JAVA_TOOL_OPTIONS", "LD_PRELOAD"))}
env.update(SPLUNK_PROFILER_ENABLED="true", STACKSHOT_OUTPUT_DIR=tmp, STACKSHOT_EXPORTERS="text",
           STACKSHOT_LOG_LEVEL="info", SPLUNK_PROFILER_CALL_STACK_INTERVAL="20")
if when == "after":
    cmd = [java, "-agentpath:" + lib, "-agentpath:%s=%s" % (late, mode), "-cp", classes,
           "SeccompJvm", "4"]
    shown = "java -agentpath:... -agentpath:libseccomp_late.so=%s SeccompJvm 4" % mode
else:
    cmd = [host, "--exec", mode, java, "-agentpath:" + lib, "-cp", classes, "SeccompJvm", "3"]
    shown = "seccomp_host --exec %s java -agentpath:... SeccompJvm 3" % mode
p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
print("$ %s -> exit %d: %s" % (shown, p.returncode, p.stdout.strip()))
if p.stderr.strip():
    print("stderr:", p.stderr.strip()[-3000:])
code = 128 - p.returncode if p.returncode < 0 else p.returncode
check(code == 0, "exit %d%s" % (code, " (SIGSYS: the filter killed the JVM)" if code == 159 else ""))
m = re.search(r"^SeccompJvm: (seccomp.*)$", p.stdout, re.M)
r = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))} if m else {}
if check(m, "no result line from the JVM"):
    check(r["seccomp"] == 2, "the JVM is not under a seccomp filter (Seccomp: %d)" % r["seccomp"])
    check(r["sleeps"] >= 30 and r["parks"] >= 30, "too few sleeps: %s" % m.group(1))
    check(r["spins"] > 0, "the busy thread did not spin")
check(p.stdout.strip() == (m.group(0) if m else ""), "the JVM's output is not only its own line")
if when == "after":
    check("seccomp_late: filter installed" in p.stderr, "the late filter was not installed")
check("cannot be read" not in p.stderr, "the agent said it cannot read memory")

# the text rounds: thread name -> its frames (method names), per round
rounds = []
for f in os.listdir(tmp):
    if not f.endswith(".txt"):
        continue
    with open(os.path.join(tmp, f), errors="replace") as fh:
        name = None
        for line in fh:
            if line.startswith("Full thread dump"):
                rounds.append({})
                continue
            mt = re.match(r'^"(.*?)" ', line)
            if mt and rounds:
                name = mt.group(1)
                rounds[-1][name] = []
                continue
            mf = re.match(r"^\s+at (?:\S+?\.)?([^.(]+)\(", line)
            if mf and rounds and name:
                rounds[-1][name].append(mf.group(1))
if when == "after":
    rounds = rounds[len(rounds) // 2:]  # well after the filter (at round 2)
check(len(rounds) >= 5, "only %d rounds written" % len(rounds))
for t, fn in (("sj-sleep", "sleeper"), ("sj-park", "parker")):
    got = sum(1 for x in rounds if fn in x.get(t, []))
    print("%s: in %s in %d of %d rounds" % (t, fn, got, len(rounds)))
    check(got * 2 > len(rounds), "%s shown in %s in %d of %d rounds" % (t, fn, got, len(rounds)))
# the VM's own threads are sampled natively, read asleep through the mem
# file: their walks reach HotSpot's thread entry. Reads refused (EPERM from a
# process_vm_readv) would end them at the libc leaf. Both run a GC every
# 100 ms (sj-gc), so their stacks are read again after the filter came
for t in ("VM Thread", "GC Thread#0"):
    got = sum(1 for x in rounds if "thread_native_entry" in x.get(t, []))
    print("%s: down to thread_native_entry in %d of %d rounds" % (t, got, len(rounds)))
    check(got * 2 > len(rounds), "%s walked down to thread_native_entry in %d of %d rounds"
          % (t, got, len(rounds)))
busy = sum(1 for x in rounds if "spinner" in x.get("sj-busy", []))
print("sj-busy: in spinner in %d of %d rounds" % (busy, len(rounds)))
check(busy >= 1, "sj-busy shown in spinner in %d of %d rounds" % (busy, len(rounds)))
if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
