#!/usr/bin/env bash
# secrets.sh: header values and tokens never reach the agent's log, at any
# level (STACKSHOT_LOG_LEVEL=debug), including the lines about malformed
# headers, endpoints with credentials and tokens in the option string.
#
#   secrets.sh <otlp_driver>
#
# The driver exports to a port nothing listens on, so the export failure
# lines are printed too. Every secret is a distinct SECRETxx string; the
# test fails on the first one found in stderr.
set -u
driver=$1
port=$(( 20000 + RANDOM % 20000 )) # nothing listens there (connection refused)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0

run() { # run <name> VAR=value ...
  local name=$1; shift
  env -i PATH="$PATH" ${LSAN_OPTIONS:+LSAN_OPTIONS=$LSAN_OPTIONS} \
    ${TSAN_OPTIONS:+TSAN_OPTIONS=$TSAN_OPTIONS} \
    SPLUNK_PROFILER_ENABLED=true SPLUNK_PROFILER_CALL_STACK_INTERVAL=100 \
    STACKSHOT_EXPORTERS=otlp_logs,otlp_profiles STACKSHOT_LOG_LEVEL=debug \
    STACKSHOT_OUTPUT_DIR="$out/o" STACKSHOT_OTLP_RETRY_INITIAL=50 STACKSHOT_OTLP_RETRY_ATTEMPTS=2 \
    STACKSHOT_SHUTDOWN_TIMEOUT=500 OTEL_EXPORTER_OTLP_TIMEOUT=500 \
    OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port" "$@" \
    "$driver" 2 2 >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL $name: driver exit $rc"; cat "$out/$name.err"; fail=1; return
  fi
  if ! grep -q "stackshot:" "$out/$name.err"; then
    echo "FAIL $name: no agent output at all (the test would prove nothing)"; fail=1; return
  fi
  if grep -n "SECRET" "$out/$name.err" "$out/$name.out"; then
    echo "FAIL $name: a secret is in the output above"; fail=1; return
  fi
  echo "ok   $name ($(grep -c stackshot: "$out/$name.err") agent lines)"
}

# the expected line about a malformed header must be there (so the
# malformed cases do exercise the error path)
expect() { # expect <name> <regex>
  if ! grep -qE "$2" "$out/$1.err"; then
    echo "FAIL $1: expected a line matching '$2'"; cat "$out/$1.err"; fail=1
  fi
}

run good        OTEL_EXPORTER_OTLP_HEADERS="x-sf-token=SECRET01,other=SECRET02"
run per_signal  OTEL_EXPORTER_OTLP_LOGS_HEADERS="x-sf-token=SECRET03" \
                OTEL_EXPORTER_OTLP_PROFILES_HEADERS="authorization=Bearer SECRET04"
run bad_escape  OTEL_EXPORTER_OTLP_HEADERS="x-sf-token=SECRET05%zz"
expect bad_escape "OTEL_EXPORTER_OTLP_HEADERS: header item 1 has a bad percent-escape"
run no_equals   OTEL_EXPORTER_OTLP_HEADERS="x-sf-token SECRET06"
expect no_equals "header item 1 has no '='"
run bad_key     OTEL_EXPORTER_OTLP_HEADERS="X SF Token!=SECRET07,x-sf-token=SECRET08"
expect bad_key "header item 1 has an empty key"
run empty_key   OTEL_EXPORTER_OTLP_HEADERS="=SECRET09"
run split_value OTEL_EXPORTER_OTLP_HEADERS="x-sf-token=SECRET10,SECRET11"
expect split_value "header item 2 has no '='"
run newline     OTEL_EXPORTER_OTLP_HEADERS="x-sf-token=SECRET12%0Aevil: SECRET13"
expect newline "header item 1 has a value with bytes gRPC metadata does not allow"
run nonascii    OTEL_EXPORTER_OTLP_HEADERS="x-sf-token=SECRET14%FF"
expect nonascii "header item 1 has a value with bytes gRPC metadata does not allow"
# credentials in a URL are not supported: both OTLP exporters are off (one
# line each, the URL redacted); text keeps the agent running
run userinfo    STACKSHOT_EXPORTERS=otlp_logs,otlp_profiles,text \
                OTEL_EXPORTER_OTLP_ENDPOINT="https://user:SECRET15@collector:4317"
expect userinfo "OTEL_EXPORTER_OTLP_ENDPOINT=https://\*\*\*@collector:4317: not an endpoint.*the otlp_logs exporter is off"
run query       OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$port/v1?token=SECRET16#SECRET17"
run logs_ep     SPLUNK_PROFILER_LOGS_ENDPOINT="http://127.0.0.1:$port/?access_token=SECRET18"
exit $fail
