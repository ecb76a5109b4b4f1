// What the standalone CUDA harnesses (fused_tensor_core_bench.cu,
// tensor_core_backward_bench.cu) share: a CUDA call checked, and inputs
// uniform in [-1, 1] (never zero) made on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

// x[i] from splitmix64 of (i, seed), rounded to E (a zero draw becomes 0.5).
template <class E>
__global__ void fill_uniform(E* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) / float(1 << 24) * 2.0f - 1.0f;
    x[i] = E(u == 0.0f ? 0.5f : u);
  }
}
