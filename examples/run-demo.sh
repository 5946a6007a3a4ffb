#!/usr/bin/env bash
# Builds stackshot and profiles the bundled demos with no backend at all:
# the C demo under LD_PRELOAD and, when a JDK is installed, the Java demo
# under -agentpath. Output goes to demo-output/ (or $STACKSHOT_OUTPUT_DIR):
# thread-dump text, pprof and a flame graph per process (STACKSHOT_EXPORTERS
# overrides the set; DEMO_SECONDS the run time).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
out=${STACKSHOT_OUTPUT_DIR:-$root/demo-output}
rm -rf "$out"
exporters=${STACKSHOT_EXPORTERS:-text,pprof,flamegraph}
seconds=${DEMO_SECONDS:-5}
export STACKSHOT_PROFILES_PERIOD=${STACKSHOT_PROFILES_PERIOD:-60}

export SPLUNK_PROFILER_ENABLED=true
export SPLUNK_PROFILER_CALL_STACK_INTERVAL=${SPLUNK_PROFILER_CALL_STACK_INTERVAL:-500}
export STACKSHOT_OUTPUT_DIR=$out
export STACKSHOT_EXPORTERS=$exporters

echo "== C demo under LD_PRELOAD (${seconds}s) =="
LD_PRELOAD=$root/$build/libstackshot.so "$build/examples/c/stackshot-demo" "$seconds"

if command -v javac >/dev/null && command -v java >/dev/null; then
  echo "== Java demo under -agentpath (${seconds}s) =="
  mkdir -p "$build/examples/java"
  javac -g -d "$build/examples/java" examples/java/Demo.java
  java -agentpath:"$root/$build/libstackshot.so" -cp "$build/examples/java" Demo "$seconds"
fi

echo
echo "== output in $out =="
ls -l "$out"
native=$(ls "$out"/stackshot-demo.*.txt | head -n 1)
echo
html=$(ls "$out"/stackshot-demo.*.html 2>/dev/null | head -n 1 || true)
[ -n "$html" ] && echo "flame graph of the C demo: open $html in a browser"
pb=$(ls "$out"/stackshot-demo.*.pb.gz 2>/dev/null | head -n 1 || true)
[ -n "$pb" ] && echo "pprof profile of the C demo: go tool pprof -top $pb"
echo
echo "== last round of $native (first 60 lines) =="
awk '/^Full thread dump/ {n = 0} {line[n++] = $0}
     END {for (i = 0; i < n && i < 60; i++) print line[i]}' "$native"
