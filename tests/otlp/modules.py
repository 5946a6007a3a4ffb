#!/usr/bin/env python3
"""modules.py: heavy libraries are mapped only when an exporter needs them.

    modules.py <libstackshot.so> <otlp_demo>

Runs the native demo under LD_PRELOAD and reads its /proc/<pid>/maps while
the agent runs:
  text        only the text exporter: the core is mapped, and no gRPC,
              abseil, libstdc++, protobuf-c, OpenSSL's libssl, libcurl,
              libcbor, nor any module;
  otlp_logs   gRPC is mapped in its helper process, not in the host: the
              host maps no heavy library; the helper (stackshot-grpc-helper,
              found by the pidfd the host holds; not the host's child) has
              gRPC mapped, no LD_PRELOAD and the
              agent off in its environment, /dev/null on 0-2 and its socket
              on 3 and no other descriptor of the host's; it is gone once
              the host has exited;
  in-process  with STACKSHOT_GRPC_HELPER=false, the gRPC module
              (libstackshot-grpc.so) and gRPC are mapped in the host;
  missing     the loader and the core copied alone to a directory without
              the module, exporters otlp_logs and text: exactly one line says
              the module cannot be loaded and otlp_logs is off, nothing else
              about otlp_logs, the text exporter writes its rounds, the host
              exits 0.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from verdict import verdict

# libcurl.so (OpenSSL's; libdw brings libcurl-gnutls for debuginfod, a
# different file), libcbor (zorka), and the modules themselves
HEAVY = re.compile(r"/(libgrpc|libgpr|libabsl|libstdc\+\+|libprotobuf-c|libssl|libcbor|"
                   r"libcurl\.so|libstackshot-(grpc|http|zorka))[^/]*\.so")


def helpers_of(pid):
    """The helpers (processes named stackshot-grpc) the host holds a pidfd
    of: the helper is not the host's child (init adopted it), the pidfd in
    the host's table is how the agent knows it ("Pid:" in its fdinfo)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                m = re.search(r"^Pid:\s+(\d+)$", f.read(), re.M)
            if not m:
                continue
            with open(f"/proc/{m.group(1)}/comm") as f:
                if f.read().strip() == "stackshot-grpc":
                    found.append(int(m.group(1)))
        except OSError:
            continue
    return found


def helper_state(hpid, wait=3.0):
    """The helper's state letter once it ended or wait passed; None: gone
    (a zombie, Z, is a helper that ended and waits for its new parent)."""
    until = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{hpid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None
        if state == "Z" or time.monotonic() > until:
            return state
        time.sleep(0.05)


def look_at_helper(hpid):
    """What the test checks of a helper: (maps, environ, {fd: target})."""
    with open(f"/proc/{hpid}/maps") as f:
        maps = f.read()
    with open(f"/proc/{hpid}/environ", "rb") as f:
        env = [e.decode(errors="replace") for e in f.read().split(b"\0") if e]
    fds = {int(n): os.readlink(f"/proc/{hpid}/fd/{n}") for n in os.listdir(f"/proc/{hpid}/fd")}
    return maps, env, fds


def run(lib, demo, exporters, out_dir, extra=None, helper=None):
    """Start the demo under the agent; return (maps text, stderr, exit code).
    helper: a dict that gets the helper's pid and what look_at_helper saw."""
    env = dict(os.environ)
    env.update({
        "SPLUNK_PROFILER_ENABLED": "true",
        "STACKSHOT_EXPORTERS": exporters,
        "STACKSHOT_OUTPUT_DIR": out_dir,
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
        "STACKSHOT_SHUTDOWN_TIMEOUT": "500",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
        "LD_PRELOAD": lib,
    })
    env.update(extra or {})
    p = subprocess.Popen([demo, "2000"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "ready" not in line:
        p.kill()
        raise SystemExit(f"FAIL: the demo did not start: {line!r}")
    time.sleep(0.8)  # several rounds: every exporter has opened
    with open(f"/proc/{p.pid}/maps") as f:
        maps = f.read()
    if helper is not None:
        pids = helpers_of(p.pid)
        helper["pids"] = pids
        if len(pids) == 1:
            helper["maps"], helper["env"], helper["fds"] = look_at_helper(pids[0])
    out, err = p.communicate(timeout=30)
    return maps, err, p.returncode


def mapped(maps):
    return sorted({l.split()[-1] for l in maps.splitlines() if ".so" in l})


def main():
    lib, demo = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        maps, err, rc = run(lib, demo, "text", tmp)
        libs = mapped(maps)
        heavy = [l for l in libs if HEAVY.search(l)]
        print(f"text: {len(libs)} files mapped")
        if not any("libstackshot-core.so" in l for l in libs):
            failures.append("text: the core is not mapped (did the agent start?)")
        if heavy:
            failures.append(f"text: heavy libraries mapped: {heavy}")
        if rc != 0:
            failures.append(f"text: exit code {rc}")

        helper = {}
        maps, err, rc = run(lib, demo, "otlp_logs", tmp, helper=helper)
        libs = mapped(maps)
        heavy = [l for l in libs if HEAVY.search(l)]
        print(f"otlp_logs: {len(libs)} files mapped in the host, helpers {helper['pids']}")
        if heavy:
            failures.append(f"otlp_logs: heavy libraries mapped in the host: {heavy}")
        if len(helper["pids"]) != 1:
            failures.append(f"otlp_logs: {len(helper['pids'])} helper processes, not 1")
        else:
            hlibs = mapped(helper["maps"])
            print(f"otlp_logs: the helper maps {len(hlibs)} files; environment "
                  f"{[e for e in helper['env'] if e.startswith(('LD_PRELOAD', 'SPLUNK_PROFILER_ENABLED'))]}"
                  f"; descriptors {helper['fds']}")
            if not any("libgrpc.so" in l for l in hlibs):
                failures.append("otlp_logs: the helper does not map libgrpc.so")
            if any("libstackshot.so" in l or "libstackshot-core.so" in l for l in hlibs):
                failures.append("otlp_logs: the agent is loaded in its own helper")
            if any(e.startswith("LD_PRELOAD=") for e in helper["env"]) or \
                    "SPLUNK_PROFILER_ENABLED=false" not in helper["env"]:
                failures.append("otlp_logs: the helper's environment would start an agent")
            # 0-2 /dev/null, 3 the socket; above, only what gRPC opened
            # (its epoll and eventfds, its connections): none of the host's
            fds = helper["fds"]
            if any(fds.get(n) != "/dev/null" for n in (0, 1, 2)) or \
                    not fds.get(3, "").startswith("socket:") or \
                    any(not t.startswith(("anon_inode:", "socket:")) for n, t in fds.items()
                        if n > 3):
                failures.append(f"otlp_logs: the helper's descriptors: {fds}")
            state = helper_state(helper["pids"][0])
            if state not in (None, "Z"):
                failures.append(f"otlp_logs: the helper outlived its host (state {state})")
        if rc != 0:
            failures.append(f"otlp_logs: exit code {rc}")

        maps, err, rc = run(lib, demo, "otlp_logs", tmp, {"STACKSHOT_GRPC_HELPER": "false"})
        libs = mapped(maps)
        print(f"in-process: {len(libs)} files mapped")
        for want in ("libstackshot-grpc.so", "libgrpc.so"):
            if not any(want in l for l in libs):
                failures.append(f"in-process: {want} is not mapped")
        if rc != 0:
            failures.append(f"in-process: exit code {rc}")

        alone = os.path.join(tmp, "alone")
        os.mkdir(alone)
        build = os.path.dirname(os.path.realpath(lib))
        shutil.copy(os.path.realpath(lib), os.path.join(alone, "libstackshot.so"))
        shutil.copy(os.path.join(build, "libstackshot-core.so"), alone)
        out_dir = os.path.join(tmp, "out")
        maps, err, rc = run(os.path.join(alone, "libstackshot.so"), demo,
                            "otlp_logs,text", out_dir)
        lines = [l for l in err.splitlines() if "otlp_logs:" in l and "rounds" not in l
                 and "accounting" not in l]
        said = [l for l in lines if re.search(
            r"otlp_logs: cannot load its module libstackshot-grpc\.so \(.*\); otlp_logs is off",
            l)]
        print("missing: " + " | ".join(lines))
        if len(said) != 1 or len(lines) != 1:
            failures.append(f"missing: expected one line about otlp_logs, got {lines}")
        if any(HEAVY.search(l) for l in mapped(maps)):
            failures.append("missing: heavy libraries mapped")
        texts = [f for f in os.listdir(out_dir) if f.endswith(".txt")] \
            if os.path.isdir(out_dir) else []
        dumps = 0
        for f in texts:
            with open(os.path.join(out_dir, f), errors="replace") as fh:
                dumps += fh.read().count("Full thread dump")
        if dumps < 3:
            failures.append(f"missing: the text exporter wrote {dumps} rounds")
        if rc != 0:
            failures.append(f"missing: exit code {rc}")
    return verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
