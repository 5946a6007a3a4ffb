#!/usr/bin/env bash
# Builds stackshot and runs every test.
#   tests/run.sh [build-dir] [extra cmake arguments...]
# Examples:
#   tests/run.sh                                   # build/, warnings are errors
#   tests/run.sh build-asan -DSTACKSHOT_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DSTACKSHOT_WERROR=ON "$@"
cmake --build "$dir" -j"$(nproc)"
# Two tests at a time: most are real programs timed against real clocks
# on a machine that may have two cores. A test that fails in the parallel
# run is run once more, alone: its first output stays in the log above,
# the list of such tests is printed, and the suite fails only if a test
# fails again (a real defect fails both times).
if ctest --test-dir "$dir" --output-on-failure -j2 ${CTEST_ARGS:-}; then
    exit 0
fi
failed=$(cut -d: -f2 "$dir/Testing/Temporary/LastTestsFailed.log" | tr '\n' ' ')
echo "=== failed in the parallel run, run again alone: $failed==="
ctest --test-dir "$dir" --output-on-failure --rerun-failed -j1
echo "=== passed when run again alone (failed under load): $failed==="
