#!/usr/bin/env bash
# One GPU session in one call: the whole test suite, then the benchmarks.
# Runs where the binaries were carried (built elsewhere against a CUDA Kokkos,
# stripped, with their non-system libraries beside them):
#   GPU_DIR=.gpu FLA=.fla bash bench/gpu_session.sh [tests] [bench] [compare]
# GPU_DIR holds linattn, linattn_tests and lib/ (from ../shared/tools/bundle-libs).
# Logs go to $OUT when set (the device tool's folder), else bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_DIR=${GPU_DIR:-.gpu}
LOGS=${OUT:-bench/results}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$PWD/$GPU_DIR/lib:${LD_LIBRARY_PATH:-}"
steps=${*:-tests bench compare}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$LOGS/gpu-info.txt"
for step in $steps; do
  case $step in
    tests)
      "$GPU_DIR/linattn_tests" 2>&1 | tee "$LOGS/gpu-tests.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|error' ;;
    bench)
      "$GPU_DIR/linattn" bench --shape 8,16384,16,128 --shape 1,32768,32,128 --variants fused --gemm tensorcore \
        --reps 20 --json "$LOGS/bench-tensorcore.json" 2>&1 | tee "$LOGS/bench-tensorcore.txt" ;;
    compare)
      python3 bench/compare_fla.py --fla "${FLA:-.fla}" --linattn "$GPU_DIR/linattn" --json "$LOGS/compare-fla.json" \
        2>&1 | tee "$LOGS/compare-fla.txt" ;;
    *) "$GPU_DIR/linattn" bench $step ;;
  esac
done
