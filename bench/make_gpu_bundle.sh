#!/usr/bin/env bash
# Builds linattn and its test binary against an installed CUDA-enabled Kokkos +
# Kokkos Kernels (not built here), then packs both, stripped, with the
# non-system shared libraries they link, into one folder that can be carried to
# a GPU machine and run there with bench/gpu_session.sh.
#   bash bench/make_gpu_bundle.sh /path/to/kokkos-cuda-install [.gpu]
set -euo pipefail
cd "$(dirname "$0")/.."
KOKKOS=${1:?usage: make_gpu_bundle.sh KOKKOS_ROOT [DEST]}
DEST=${2:-.gpu}
export PATH=/usr/local/cuda/bin:$PATH NVCC_WRAPPER_DEFAULT_COMPILER=${NVCC_WRAPPER_DEFAULT_COMPILER:-g++}
# Machine code only, no PTX (cmake/LinattnDependencies.cmake, LINATTN_CUDA_SASS_ONLY).
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$KOKKOS/bin/nvcc_wrapper" \
  -DLINATTN_CUDA_SASS_ONLY=ON -DKokkos_ROOT="$KOKKOS" -DKokkosKernels_ROOT="$KOKKOS" > build-cuda.configure.log
make -C build-cuda -j"${JOBS:-2}" linattn linattn_tests
rm -rf "$DEST" && mkdir -p "$DEST"
cp build-cuda/linattn build-cuda/tests/linattn_tests "$DEST/"
strip "$DEST/linattn" "$DEST/linattn_tests"
bundle=${BUNDLE_LIBS:-../shared/tools/bundle-libs}
bash "$bundle" "$DEST/lib" "$DEST/linattn" "$DEST/linattn_tests"
# The source the binaries came from (gpu_session.sh starts its test log with it).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- src tests CMakeLists.txt cmake || echo ' plus uncommitted changes')" > "$DEST/COMMIT"
du -sh "$DEST"
# Two packs for the device tool, which carries at most 64 MiB a call: the two
# binaries grew past that together (88 MB stripped, 2026-12-06). Carry
# .gpupack/cli.tgz (linattn, lib/, COMMIT) in one call and unpack it there
# (tar xzf); the next call, while that machine is still warm, carries
# .gpupack/tests.tgz (linattn_tests) beside what the first left.
mkdir -p .gpupack
tar cf - "$DEST/linattn" "$DEST/lib" "$DEST/COMMIT" | gzip -6 > .gpupack/cli.tgz
tar cf - "$DEST/linattn_tests" | gzip -6 > .gpupack/tests.tgz
ls -l .gpupack
