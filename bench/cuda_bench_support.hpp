// What the standalone CUDA harnesses (fused_tensor_core_bench.cu,
// fp32_tensor_core_bench.cu, tensor_core_backward_bench.cu, the gk harnesses) share: a CUDA
// call checked, inputs uniform in [-1, 1] (never zero) made on the device,
// timings by CUDA events, the copy bandwidth of the same run, and o's error
// on one row against fp64.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// g = -strength * |g| elementwise: log-decays <= 0 (never zero) from fill_uniform's draws.
__global__ void make_log_decays(float* g, std::size_t n, float strength) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    g[i] = -strength * fabsf(g[i]);
}

// n elements of device memory, as they are.
template <class T>
std::vector<T> copy_to_host(const T* p, std::size_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The times of n runs of f in ms (CUDA events around each), sorted.
template <class F>
std::vector<float> event_times_ms(F f, int n) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < n; ++i) {
    CHECK(cudaEventRecord(e0));
    f();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms;
}

// Device-to-device copy bandwidth in GB/s (median of 10 copies of 2 GiB): what the floors divide by.
inline double copy_bandwidth_gbps() {
  void *a, *b;
  const std::size_t bytes = std::size_t(2) << 30;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  const std::vector<float> ms = event_times_ms([&] { CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 10);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

// o's relative L2 against fp64 on the (b = 0, head 0) row, its first
// min(T, 512) tokens, scale 1, from host copies of [T, H, D] rows; finite is
// cleared when an element of that slice is not.
inline double slice_o_rel_l2(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                             const std::vector<float>& o, int T, int H, int DK, int DV, bool& finite) {
  const int Ts = T < 512 ? T : 512;
  double num = 0, den = 0;
  std::vector<double> qk(Ts);
  for (int t = 0; t < Ts; ++t) {
    for (int s = 0; s <= t; ++s) {
      qk[s] = 0;
      for (int d = 0; d < DK; ++d) qk[s] += double(q[std::size_t(t) * H * DK + d]) * k[std::size_t(s) * H * DK + d];
    }
    for (int j = 0; j < DV; ++j) {
      double acc = 0;
      for (int s = 0; s <= t; ++s) acc += qk[s] * v[std::size_t(s) * H * DV + j];
      const double x = o[std::size_t(t) * H * DV + j];
      finite = finite && std::isfinite(x);
      num += (x - acc) * (x - acc);
      den += acc * acc;
    }
  }
  return std::sqrt(num / den);
}
