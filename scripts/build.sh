#!/usr/bin/env bash
# Configures build/ (Release, tests on) and builds the given targets (all when
# none are named). LINATTN_JOBS sets the parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLINATTN_BUILD_TESTS=ON
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "${LINATTN_JOBS:-2}" "${targets[@]}"
