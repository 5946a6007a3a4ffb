#!/usr/bin/env bash
# pgbench.sh: PostgreSQL with a connection per transaction (pgbench -C -c 1
# -S: every transaction forks a backend) with and without the agent
# preloaded into the server, at the 1 s interval, pairs interleaved; prints
# the transactions per second of each run and the ratio of medians.
#
#   bench/footprint/pgbench.sh <libstackshot.so> [seconds=5] [pairs=3] [exporters=text]
#
# Needs PostgreSQL's server (postgres, initdb, pg_ctl) and pgbench; run as
# root (the cluster runs as user postgres) or as a user that may run them.
# Its own cluster in a temporary directory, on a unix socket there; stopped
# and removed at the end.
set -euo pipefail
lib=$(readlink -f "$1")
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
start() { # start [agent]
  local env=(env -u LD_PRELOAD -u SPLUNK_PROFILER_ENABLED)
  [ "${1:-}" = agent ] && env=(env LD_PRELOAD="$lib" SPLUNK_PROFILER_ENABLED=true
    STACKSHOT_EXPORTERS="$exporters" STACKSHOT_OUTPUT_DIR="$dir/out-%u"
    SPLUNK_PROFILER_CALL_STACK_INTERVAL=1000 OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9)
  pg "${env[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
    -o "-p $port -k $dir -c listen_addresses=''" start >/dev/null
}
stop() { pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null; }
start
pg pgbench -h "$dir" -p "$port" -U postgres -i -s 1 postgres >/dev/null 2>&1
stop
tps() { # tps [agent]
  start "${1:-}"
  sleep 1.5 # the postmaster's agent has started (agent runs)
  pg pgbench -h "$dir" -p "$port" -U postgres -C -c 1 -S -T "$secs" postgres 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1
  stop
}
base=() agent=()
for i in $(seq "$pairs"); do
  base+=("$(tps)")
  agent+=("$(tps agent)")
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mb=$(med "${base[@]}") ma=$(med "${agent[@]}")
echo "pgbench -C -c 1 -S, ${secs}s x $pairs pairs, exporters $exporters, 1 s interval"
echo "no agent: ${base[*]} tps (median $mb)"
echo "agent:    ${agent[*]} tps (median $ma)"
awk -v a="$ma" -v b="$mb" 'BEGIN {printf "ratio %.3f (target >= 0.95)\n", a / b}'
