#!/bin/sh
# java_run.sh <java home> <libstackshot.so> <Demo.java> <scratch dir>
# Compiles examples/java/Demo.java and runs it for 2 s with the agent
# exporting OTLP profiles every second, 100 ms apart (the endpoint and the
# protocol come from the environment: tests/profiles/node/otlp_check.js).
set -e
jh=$1 lib=$2 src=$3 dir=$4
mkdir -p "$dir"
"$jh/bin/javac" -d "$dir" "$src"
exec env SPLUNK_PROFILER_ENABLED=true STACKSHOT_EXPORTERS=otlp_profiles \
    SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 STACKSHOT_PROFILES_PERIOD=1 \
    "$jh/bin/java" "-agentpath:$lib" -cp "$dir" Demo 2
