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
ctest --test-dir "$dir" --output-on-failure -j2 ${CTEST_ARGS:-}
