#!/usr/bin/env python3
"""helper_fallback.py: a gRPC helper that cannot be started again gives way
to gRPC in the host, and nothing is lost.

    helper_fallback.py <libstackshot.so> <otlp_sink.js>

The loader, the core, the gRPC module and stackshot-grpc-helper are copied
to a directory of their own; a preloaded `sleep 3` exports otlp_logs over
gRPC every 200 ms to a real gRPC receiver (node, tests/packaging/
otlp_sink.js). Once the agent names its helper, the test removes the
helper program and kills the helper: the next call cannot start another
(what a host that dropped its ids to a user who may not run it, or
chrooted where it is not, meets). Asserts: one line says gRPC runs in the
process from then on; the receiver got calls after the kill; the agent's
accounting at exit has every record exported (none dropped); the host
exits 0. Exit 77 without node or the receiver's packages.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from verdict import verdict


def main():
    lib, sink_js = sys.argv[1], sys.argv[2]
    mods = os.path.join(os.path.dirname(sink_js), "..", "otlp", "node", "node_modules")
    if not shutil.which("node") or not os.path.isdir(mods):
        print("SKIP: node or tests/otlp/node's packages (npm ci) missing")
        return 77
    build = os.path.dirname(os.path.realpath(lib))
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.realpath(lib), os.path.join(tmp, "libstackshot.so"))
        for f in ("libstackshot-core.so", "libstackshot-grpc.so", "stackshot-grpc-helper"):
            shutil.copy2(os.path.join(build, f), tmp)
        sink = subprocess.Popen(["node", sink_js], stdout=subprocess.PIPE, text=True)
        port = sink.stdout.readline().strip()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OTEL_", "SPLUNK_", "STACKSHOT_", "LD_"))}
        env.update({
            "SPLUNK_PROFILER_ENABLED": "true",
            "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "200",
            "STACKSHOT_EXPORTERS": "otlp_logs",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:" + port,
            "STACKSHOT_OTLP_RETRY_INITIAL": "100",
            "STACKSHOT_SHUTDOWN_TIMEOUT": "3000",
            "STACKSHOT_OUTPUT_DIR": tmp,
            "STACKSHOT_LOG_LEVEL": "debug",
            "LD_PRELOAD": os.path.join(tmp, "libstackshot.so"),
        })
        host = subprocess.Popen(["sleep", "3"], env=env, stderr=subprocess.PIPE, text=True)
        err, killed_at = [], [None]

        def read_stderr():
            for line in host.stderr:
                err.append(line)
                m = re.search(r"gRPC calls made by stackshot-grpc-helper, pid (\d+)", line)
                if m and killed_at[0] is None:
                    os.unlink(os.path.join(tmp, "stackshot-grpc-helper"))
                    time.sleep(0.5)  # a call or two through it first
                    os.kill(int(m.group(1)), signal.SIGKILL)
                    killed_at[0] = time.time()

        t = threading.Thread(target=read_stderr)
        t.start()
        rc = host.wait(timeout=60)
        t.join()
        sink.send_signal(signal.SIGTERM)
        seen = json.loads(sink.communicate(timeout=30)[0].strip().splitlines()[-1])
    text = "".join(err)
    acc = re.search(r"otlp_logs: rounds \d+ taken = .*?; records (\d+) taken = (\d+) exported "
                    r"\+ (\d+) dropped", text)
    after = [s for s in seen["stamps"] if killed_at[0] and s > killed_at[0]]
    print(f"host exit {rc}; helper killed at {killed_at[0]}; calls received "
          f"{len(seen['stamps'])}, {len(after)} after the kill; accounting "
          f"{acc.group(0) if acc else None}")
    if rc != 0:
        failures.append(f"host exit {rc}")
    if killed_at[0] is None:
        failures.append("the agent never named its helper")
    if not re.search(r"otlp_logs: the gRPC helper process cannot be started: .*; gRPC runs in "
                     r"this process from now on", text):
        failures.append("no line saying gRPC runs in the process from now on")
    if len(after) < 2:
        failures.append(f"{len(after)} calls received after the kill")
    if not acc or acc.group(1) != acc.group(2) or acc.group(3) != "0":
        failures.append("records dropped: " + (acc.group(0) if acc else "no accounting line"))
    return verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
