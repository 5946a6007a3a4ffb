#!/usr/bin/env bash
# pgbench.sh: PostgreSQL with a connection per transaction (pgbench -C -c 1
# -S: every transaction forks a backend): without the agent, with an empty
# preloaded library (the floor of any preloaded library) and with the agent
# preloaded into the server at the 1 s and the 10 ms interval, runs
# interleaved; prints the transactions per second of each run and the
# ratios of medians (to no agent and to the empty library).
#
#   bench/footprint/pgbench.sh <libstackshot.so> [seconds=5] [rounds=3] [exporters=text]
#
# The empty library is libss_bench_empty.so of the same build
# (<build>/bench/footprint/, next to bench_footprint; EMPTY_LIB overrides).
# Needs PostgreSQL's server (postgres, initdb, pg_ctl) and pgbench; run as
# root (the cluster runs as user postgres) or as a user that may run them.
# Its own cluster in a temporary directory, on a unix socket there; stopped
# and removed at the end. Also counts the agent's lines in the server log
# and the files it left (one line per server start, a file per process that
# took a round).
set -euo pipefail
lib=$(readlink -f "$1")
empty=${EMPTY_LIB:-$(dirname "$lib")/bench/footprint/libss_bench_empty.so}
[ -r "$empty" ] || { echo "no empty library $empty (build target ss_bench_empty)"; exit 1; }
secs=${2:-5}
pairs=${3:-3}
exporters=${4:-text}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bin/postgres" ] || { echo "SKIP: no PostgreSQL server"; exit 77; }
command -v pgbench >/dev/null || { echo "SKIP: no pgbench"; exit 77; }
dir=$(mktemp -d /tmp/bench-pg-XXXXXX)
chmod 755 "$dir"
as=()
if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir"; as=(runuser -u postgres --); fi
port=$((20000 + RANDOM % 20000))
pg() { "${as[@]}" "$@"; }
cleanup() {
  pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
pg "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
start() { # start [none|empty|agent INTERVAL_MS]
  local env=(env -u LD_PRELOAD -u SPLUNK_PROFILER_ENABLED)
  case "${1:-none}" in
  empty) env=(env -u SPLUNK_PROFILER_ENABLED LD_PRELOAD="$empty") ;;
  agent) env=(env LD_PRELOAD="$lib" SPLUNK_PROFILER_ENABLED=true
    STACKSHOT_EXPORTERS="$exporters" STACKSHOT_OUTPUT_DIR="$dir/out-$2"
    SPLUNK_PROFILER_CALL_STACK_INTERVAL="$2" OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9) ;;
  esac
  pg "${env[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
    -o "-p $port -k $dir -c listen_addresses=''" start >/dev/null
}
stop() { pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null; }
start
pg pgbench -h "$dir" -p "$port" -U postgres -i -s 1 postgres >/dev/null 2>&1
stop
: >"$dir/log"
tps() { # tps [none|empty|agent INTERVAL_MS]
  start "$@"
  sleep 1.5 # the postmaster's agent has started (agent runs)
  pg pgbench -h "$dir" -p "$port" -U postgres -C -c 1 -S -T "$secs" postgres 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1
  stop
}
base=() emp=() a1s=() a10=()
for i in $(seq "$pairs"); do
  base+=("$(tps none)")
  emp+=("$(tps empty)")
  a1s+=("$(tps agent 1000)")
  a10+=("$(tps agent 10)")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mb=$(med "${base[@]}") me=$(med "${emp[@]}") m1=$(med "${a1s[@]}") m10=$(med "${a10[@]}")
echo "pgbench -C -c 1 -S, ${secs}s x $pairs rounds, exporters $exporters"
echo "no agent:      ${base[*]} tps (median $mb)"
echo "empty library: ${emp[*]} tps (median $me)"
echo "agent 1 s:     ${a1s[*]} tps (median $m1)"
echo "agent 10 ms:   ${a10[*]} tps (median $m10)"
for a in "1 s:$m1" "10 ms:$m10"; do
  awk -v n="${a%%:*}" -v a="${a##*:}" -v b="$mb" -v e="$me" \
    'BEGIN {printf "agent %s: ratio %.3f to no agent, %.3f to the empty library\n", n, a / b, a / e}'
done
echo "agent lines in the server log: $(grep -c '^stackshot:' "$dir/log" || true)" \
  "for $((2 * pairs)) server starts with the agent"
grep "^stackshot:" "$dir/log" | sed "s/pid [0-9]*/pid N/g; s/[0-9]\+/#/g" | sort | uniq -c | sort -rn | head -5
for iv in 1000 10; do
  echo "files at $iv ms: $(ls "$dir/out-$iv" 2>/dev/null | wc -l)"
done
