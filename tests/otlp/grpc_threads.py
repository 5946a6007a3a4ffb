#!/usr/bin/env python3
"""gRPC's threads are the agent's: they never appear in a round.

gRPC starts its threads lazily, from an agent thread, when the exporter
opens its channel and makes its first calls; the grpc module registers
them as internal a moment later. The first round comes as soon as the
agent starts, so it meets them young. A preloaded `sleep` exporting with
otlp_logs over gRPC (to a closed port: the threads start all the same) and
text is run a few times; no round of the text file may list a thread named
as gRPC names its threads.

And gRPC's threads are few whatever the machine: gRPC sizes its thread pool
from the number of CPUs (36 threads on 32 CPUs); the module answers 2 CPUs
to gRPC's libraries (exporters/otlp/grpc_cpus.c). As root, in a mount
namespace where /sys/devices/system/cpu shows 32 CPUs (glibc counts them
there), a preloaded `sleep` exporting with otlp_logs over gRPC has at most
8 threads of gRPC's (skipped without root or unshare).

usage: grpc_threads.py <libstackshot.so>"""
import glob
import shutil
import os
import re
import subprocess
import sys
import tempfile

GRPC_NAMES = re.compile(r'^"(event_engine|grpc_global_tim|default-executo|resolver-execut|grpc_)', re.M)
RUNS = 5


def one_run(lib, out):
    env = dict(os.environ,
               SPLUNK_PROFILER_ENABLED="true",
               SPLUNK_PROFILER_CALL_STACK_INTERVAL="100",
               STACKSHOT_EXPORTERS="text,otlp_logs",
               OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
               STACKSHOT_SHUTDOWN_TIMEOUT="300",
               STACKSHOT_OUTPUT_DIR=out,
               STACKSHOT_LOG_LEVEL="error",
               LD_PRELOAD=lib)
    subprocess.run(["sleep", "0.6"], env=env, check=True, timeout=30)
    files = glob.glob(os.path.join(out, "*.txt"))
    if not files:
        return None, "no text file"
    text = open(files[0], encoding="utf-8", errors="replace").read()
    rounds = text.count("Full thread dump")
    return rounds, GRPC_NAMES.findall(text)


def main():
    lib = sys.argv[1]
    bad = 0
    seen_rounds = 0
    for i in range(RUNS):
        with tempfile.TemporaryDirectory() as out:
            rounds, found = one_run(lib, out)
            if rounds is None:
                print(f"FAIL run {i}: {found}")
                bad += 1
                continue
            seen_rounds += rounds
            if found:
                print(f"FAIL run {i}: gRPC threads in the rounds: {sorted(set(found))}")
                bad += 1
            else:
                print(f"ok   run {i}: {rounds} rounds, no gRPC thread")
    if seen_rounds == 0:
        print("FAIL no round at all")
        bad += 1
    bad += many_cpus(lib)
    sys.exit(1 if bad else 0)


GRPC_COMM = re.compile(r"^(event_engine|grpc_global_tim|default-executo|resolver-execut|timer_manager|grpc_)", re.M)


def many_cpus(lib):
    """gRPC's threads in a process that sees 32 CPUs; 1 if too many."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("skip 32 CPUs: needs root and unshare")
        return 0
    with tempfile.TemporaryDirectory() as d:
        cpus = os.path.join(d, "cpu")
        for i in range(32):
            os.makedirs(os.path.join(cpus, f"cpu{i}"))
        for f in ("possible", "present", "online"):
            with open(os.path.join(cpus, f), "w") as fh:
                fh.write("0-31\n")
        script = (f"mount --bind {cpus} /sys/devices/system/cpu || exit 77; "
                  "echo cpus $(getconf _NPROCESSORS_CONF); "
                  f"LD_PRELOAD={lib} SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 "
                  "STACKSHOT_EXPORTERS=otlp_logs OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 "
                  "STACKSHOT_LOG_LEVEL=error STACKSHOT_SHUTDOWN_TIMEOUT=300 sleep 2 & "
                  "p=$!; sleep 1.2; cat /proc/$p/task/*/comm; wait")
        r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60)
        if r.returncode == 77 or "cpus 32" not in r.stdout:
            print(f"skip 32 CPUs: no such view here ({r.returncode}, {r.stdout[:40]!r} {r.stderr[-200:]!r})")
            return 0
        grpc = GRPC_COMM.findall(r.stdout)
        agent = re.findall(r"^stackshot-", r.stdout, re.M)
        print(f"32 CPUs: {len(grpc)} gRPC threads, {len(agent)} of the agent's own")
        if not agent:
            print("FAIL 32 CPUs: the agent did not start")
            return 1
        if len(grpc) > 8:
            print(f"FAIL 32 CPUs: {len(grpc)} gRPC threads (at most 8)")
            return 1
        print("ok   32 CPUs: gRPC's thread pool sized for the agent")
        return 0


if __name__ == "__main__":
    main()
