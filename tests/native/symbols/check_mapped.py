#!/usr/bin/env python3
"""What a preloaded text-only host maps (Debian's sleep: stripped, with a
build id and no debug file, as most programs and libraries are): with STACKSHOT_SYMBOLS_DEBUGINFO=true
the agent maps no more files than with false, but for the separate debuginfo
files it reads (under /usr/lib/debug); libdebuginfod and what it brings
(libcurl-gnutls, GnuTLS, Kerberos, LDAP...) are never mapped. With
libc6-dbg installed, libc's frames keep their source files and lines.

usage: check_mapped.py <libstackshot.so> <tmpdir>"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import stackdump  # noqa: E402

lib, tmp = sys.argv[1:3]
sleep = shutil.which("sleep")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def run(debuginfo):
    """(files mapped by the running host, its rounds)"""
    out = os.path.join(tmp, debuginfo)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.unlink(os.path.join(out, f))
    env = dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true", STACKSHOT_OUTPUT_DIR=out,
               SPLUNK_PROFILER_CALL_STACK_INTERVAL="100", STACKSHOT_EXPORTERS="text",
               STACKSHOT_SYMBOLS_DEBUGINFO=debuginfo)
    p = subprocess.Popen([sleep, "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    files = set()
    for _ in range(100):  # after a few rounds (every thread resolved)
        time.sleep(0.1)
        dumps = [f for f in os.listdir(out) if f.endswith(".%d.txt" % p.pid)]
        if dumps and len(stackdump.parse(os.path.join(out, dumps[0]))) >= 5:
            break
    with open("/proc/%d/maps" % p.pid) as m:
        for line in m:
            parts = line.split(None, 5)
            # "/dev/zero (deleted)": shared anonymous memory (libelf's
            # decompressed sections, core/core_alloc.c), not a file
            if len(parts) == 6 and parts[5].startswith("/") and \
                    not parts[5].startswith("/dev/zero (deleted)"):
                files.add(parts[5].strip())
    err = p.communicate(timeout=60)[1]
    check(p.returncode == 0, "%s: exit %s: %s" % (debuginfo, p.returncode, err[-500:]))
    dumps = [f for f in os.listdir(out) if f.endswith(".%d.txt" % p.pid)]
    return files, stackdump.parse(os.path.join(out, dumps[0])) if dumps else []


with_dbg, rounds = run("true")
without, _ = run("false")
extra = sorted(with_dbg - without)
print("mapped files: %d with debuginfo, %d without; extra: %s" % (len(with_dbg), len(without), extra))
check(not any("debuginfod" in f for f in with_dbg | without), "libdebuginfod mapped")
check(all(f.startswith("/usr/lib/debug/") for f in extra),
      "files mapped only with debuginfo that are not debuginfo: %s" %
      [f for f in extra if not f.startswith("/usr/lib/debug/")])
check(len(rounds) >= 5, "rounds: %d" % len(rounds))

libc = next((f for f in with_dbg if os.path.basename(f) == "libc.so.6"), None)
build_id = None
if libc:
    note = subprocess.run(["readelf", "-n", libc], capture_output=True, text=True).stdout
    build_id = next((ln.split()[-1] for ln in note.splitlines() if "Build ID" in ln), None)
if build_id and os.path.exists("/usr/lib/debug/.build-id/%s/%s.debug" % (build_id[:2], build_id[2:])):
    frames = [fr for r in rounds for t in r for fr in t["frames"] if "nanosleep" in fr[0]]
    print("libc nanosleep frames: %s" % sorted(set(frames))[:4])
    check(frames and all(f.endswith(".c") and ln > 0 for _, f, ln in frames),
          "libc's nanosleep frames without a source line: %s" % sorted(set(frames))[:4])
else:
    print("libc6-dbg not installed: libc's lines not checked")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
