// Standalone timing of the CUDA tensor-core fused kernel without Kokkos, for
// fast iteration on the kernel itself (seconds to build instead of minutes).
// The numbers that count come from `linattn bench` and bench/compare_fla.py.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -Isrc bench/fused_tensor_core_bench.cu -o tc_bench
//   ./tc_bench B T H DK DV [block_dv] [reps]
#include "kernels/cuda/fused_tensor_core.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void fill_uniform(__nv_bfloat16* x, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float u = float(z >> 40) / float(1 << 24) * 2.0f - 1.0f;
    x[i] = __float2bfloat16_rn(u == 0.0f ? 0.5f : u);
  }
}

static std::vector<float> to_host(const __nv_bfloat16* d, std::size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B T H DK DV [block_dv] [reps]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]),
            DV = std::atoi(argv[5]);
  const int block_dv = argc > 6 ? std::atoi(argv[6]) : 0, reps = argc > 7 ? std::atoi(argv[7]) : 20;
  const int NT = (T + 63) / 64;
  const std::size_t nq = std::size_t(B) * T * H * DK, nv = std::size_t(B) * T * H * DV;
  const std::size_t nh = std::size_t(B) * NT * H * DK * DV, ns = std::size_t(B) * H * DK * DV;
  __nv_bfloat16 *q, *k, *v, *o, *h;
  float* fs;
  CHECK(cudaMalloc(&q, nq * 2));
  CHECK(cudaMalloc(&k, nq * 2));
  CHECK(cudaMalloc(&v, nv * 2));
  CHECK(cudaMalloc(&o, nv * 2));
  CHECK(cudaMalloc(&h, nh * 2));
  CHECK(cudaMalloc(&fs, ns * 4));
  fill_uniform<<<1024, 256>>>(q, nq, 1);
  fill_uniform<<<1024, 256>>>(k, nq, 2);
  fill_uniform<<<1024, 256>>>(v, nv, 3);
  CHECK(cudaMemset(o, 0xff, nv * 2));  // poison: NaN patterns
  CHECK(cudaDeviceSynchronize());

  linattn::cuda::FusedTensorCoreArgs args{q, k, v, nullptr, o, h, fs, B, T, H, DK, DV, 1.0f};
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  int used = 0;
  for (int i = 0; i < 3; ++i)
    used = linattn::cuda::run_fused_tensor_core<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(args, block_dv, sms, 0);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(e0));
    linattn::cuda::run_fused_tensor_core<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(args, block_dv, sms, 0);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];

  // copy bandwidth, same run
  void *ca, *cb;
  const std::size_t cbytes = std::size_t(2) << 30;
  CHECK(cudaMalloc(&ca, cbytes));
  CHECK(cudaMalloc(&cb, cbytes));
  CHECK(cudaMemcpy(cb, ca, cbytes, cudaMemcpyDeviceToDevice));
  std::vector<float> cms;
  for (int i = 0; i < 10; ++i) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpy(cb, ca, cbytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    cms.push_back(t);
  }
  std::sort(cms.begin(), cms.end());
  const double copy_gbps = 2.0 * cbytes / (cms[cms.size() / 2] * 1e-3) / 1e9;
  const double bytes = 2.0 * (2 * nq + 2 * nv + nh) + 4.0 * ns;

  // accuracy on the (b=0, h=0) slice, first min(T, 512) tokens, against fp64
  const int Ts = T < 512 ? T : 512;
  std::vector<float> hq = to_host(q, nq), hk = to_host(k, nq), hv = to_host(v, nv), ho = to_host(o, nv);
  double num = 0, den = 0;
  bool finite = true;
  std::vector<double> qk(Ts);
  for (int t = 0; t < Ts; ++t) {
    for (int s2 = 0; s2 <= t; ++s2) {
      qk[s2] = 0;
      for (int d = 0; d < DK; ++d) qk[s2] += double(hq[std::size_t(t) * H * DK + d]) * hk[std::size_t(s2) * H * DK + d];
    }
    for (int j = 0; j < DV; ++j) {
      double acc = 0;
      for (int s2 = 0; s2 <= t; ++s2) acc += qk[s2] * hv[std::size_t(s2) * H * DV + j];
      const double x = ho[std::size_t(t) * H * DV + j];
      finite = finite && std::isfinite(x);
      num += (x - acc) * (x - acc);
      den += acc * acc;
    }
  }
  std::printf("B=%d T=%d H=%d DK=%d DV=%d block_dv=%d: %.3f ms (min %.3f), %.0f GB/s, %.1f%% of copy %.0f GB/s, floor %.3f ms, o rel L2 %.2e%s\n",
              B, T, H, DK, DV, used, med, ms[0], bytes / (med * 1e-3) / 1e9, 100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbps,
              copy_gbps, bytes / copy_gbps / 1e6, std::sqrt(num / den), finite ? "" : " NON-FINITE");
  return 0;
}
