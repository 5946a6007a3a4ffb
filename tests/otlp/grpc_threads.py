#!/usr/bin/env python3
"""gRPC's threads are the agent's: they never appear in a round.

gRPC starts its threads lazily, from an agent thread, when the exporter
opens its channel and makes its first calls; the grpc module registers
them as internal a moment later. The first round comes as soon as the
agent starts, so it meets them young. A preloaded `sleep` exporting with
otlp_logs over gRPC (to a closed port: the threads start all the same) and
text is run a few times; no round of the text file may list a thread named
as gRPC names its threads.

usage: grpc_threads.py <libstackshot.so>"""
import glob
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
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
