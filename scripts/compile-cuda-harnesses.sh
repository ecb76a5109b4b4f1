#!/usr/bin/env bash
# Compiles the standalone CUDA harnesses (bench/*_bench.cu: the tensor-core
# forward with every tile it instantiates, and the tensor-core backward)
# for sm_90a, without Kokkos, into build/cuda-harnesses/. A host without
# nvcc says so and skips; a kernel that does not compile fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [[ ! -x "$NVCC" ]]; then
  echo "compile-cuda-harnesses: no nvcc on this host; the CUDA kernels were not compiled"
  exit 0
fi
mkdir -p build/cuda-harnesses
for src in bench/*_bench.cu; do
  name=$(basename "$src" .cu)
  echo "compile-cuda-harnesses: $src (sm_90a)"
  "$NVCC" -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench "$src" -o "build/cuda-harnesses/$name" &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
if ((status != 0)); then
  echo "compile-cuda-harnesses: FAILED"
  exit 1
fi
echo "compile-cuda-harnesses: $(ls bench/*_bench.cu | wc -l) harnesses compiled"
