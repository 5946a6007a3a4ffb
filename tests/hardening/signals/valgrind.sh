#!/bin/sh
# valgrind.sh CASE LIBSTACKSHOT OUTDIR PROGRAM [ARGS...]
#
# Runs a native integration program with the agent preloaded under
# valgrind's memcheck: any memory error, or a definite leak, fails the run
# (--error-exitcode=1 --errors-for-leak-kinds=definite). Children are
# followed (fork and exec), so the fork and exec cases check every image.
# LD_PRELOAD is set through env(1) inside valgrind, so valgrind's own
# launcher never loads the agent. Suppressions: valgrind.supp (library
# internals only, each justified there). Then checks that rounds were
# written: a run where the agent silently did nothing must not pass.
#
# With SS_VG_QB=<tests/qubership/collector.py> the Qubership exporter runs
# too, against that test collector, and its recorded streams must not be
# empty.
set -u
case_name=$1 lib=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out"
exporters=text
qb_pid=
if [ -n "${SS_VG_QB:-}" ]; then
    python3 "$SS_VG_QB" --out "$out/collector" >"$out/collector.port" 2>"$out/collector.log" &
    qb_pid=$!
    i=0
    while [ ! -s "$out/collector.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    port=$(head -1 "$out/collector.port")
    [ -n "$port" ] || { echo "valgrind $case_name: collector did not start"; kill "$qb_pid"; exit 1; }
    exporters=text,qubership
    export REMOTE_DUMP_HOST=127.0.0.1 REMOTE_DUMP_PORT_PLAIN="$port"
fi
# --fair-sched: valgrind runs one thread at a time; without it the demo's
# spinning worker kept the lock and the agent's start thread waited for
# its turn through the whole run (0 rounds).
SPLUNK_PROFILER_ENABLED=true STACKSHOT_EXPORTERS=$exporters STACKSHOT_OUTPUT_DIR="$out" \
STACKSHOT_LOG_LEVEL=warn SPLUNK_PROFILER_CALL_STACK_INTERVAL=${SS_VG_INTERVAL:-100} \
STACKSHOT_SHUTDOWN_TIMEOUT=30000 \
valgrind -q --fair-sched=yes --trace-children=yes --child-silent-after-fork=no \
    --error-exitcode=1 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --suppressions="$here/valgrind.supp" \
    /usr/bin/env LD_PRELOAD="$lib" "$@" >"$out/log" 2>&1
rc=$?
[ -n "$qb_pid" ] && kill "$qb_pid" 2>/dev/null
cat "$out/log"
if [ $rc -ne 0 ]; then
    echo "valgrind $case_name: exit code $rc"
    exit 1
fi
rounds=$(cat "$out"/*.txt 2>/dev/null | grep -c '^Full thread dump stackshot round')
echo "valgrind $case_name: $rounds rounds written"
if [ "$rounds" -lt "${SS_VG_MIN_ROUNDS:-3}" ]; then
    echo "valgrind $case_name: too few rounds"
    exit 1
fi
if [ -n "$qb_pid" ]; then
    bytes=$(cat "$out"/collector/*.bin 2>/dev/null | wc -c)
    echo "valgrind $case_name: $bytes bytes received by the Qubership collector"
    [ "$bytes" -gt 0 ] || { echo "valgrind $case_name: nothing reached the collector"; exit 1; }
fi
grep -q '==[0-9]*==' "$out/log" && { echo "valgrind $case_name: valgrind reported"; exit 1; }
echo "valgrind $case_name: ok"
