// Standalone timing of the CUDA tensor-core fused kernels without Kokkos, for
// fast iteration on the kernels themselves (seconds to build instead of
// minutes): the mma.sync kernel and, built for sm_90a, the wgmma kernel, in
// one run, with the wgmma kernel's snapshots and final state compared to the
// mma.sync kernel's. The numbers that count come from `linattn bench` and
// bench/compare_fla.py.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc bench/fused_tensor_core_bench.cu -o tc_bench
//   ./tc_bench B T H DK DV [block_dv] [reps] [group_width]
#include "kernels/cuda/fused_tensor_core.hpp"
#include "wgmma/fused_wgmma.hpp"

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
    std::fprintf(stderr, "usage: %s B T H DK DV [block_dv] [reps] [group_width]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]),
            DV = std::atoi(argv[5]);
  const int block_dv = argc > 6 ? std::atoi(argv[6]) : 0, reps = argc > 7 ? std::atoi(argv[7]) : 20;
  const int group_width = argc > 8 ? std::atoi(argv[8]) : 32;  // wgmma kernel: DV columns per warpgroup
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
  CHECK(cudaDeviceSynchronize());

  // copy bandwidth, same run
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
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
  CHECK(cudaFree(ca));
  CHECK(cudaFree(cb));
  std::sort(cms.begin(), cms.end());
  const double copy_gbps = 2.0 * cbytes / (cms[cms.size() / 2] * 1e-3) / 1e9;
  const double bytes = 2.0 * (2 * nq + 2 * nv + nh) + 4.0 * ns;
  const std::vector<float> hq = to_host(q, nq), hk = to_host(k, nq), hv = to_host(v, nv);

  linattn::cuda::FusedTensorCoreArgs args{q, k, v, nullptr, o, h, fs, B, T, H, DK, DV, 1.0f};
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<float> ref_h, ref_fs;  // the mma.sync kernel's, to check the wgmma kernel's against
  for (const char* kernel : {"mma.sync", "wgmma"}) {
    const bool wgmma = kernel[0] == 'w';
    auto run = [&] {
      return wgmma ? linattn::cuda::run_fused_wgmma<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(args, block_dv, sms, 0, group_width)
                   : linattn::cuda::run_fused_tensor_core<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(args, block_dv, sms, 0);
    };
    CHECK(cudaMemset(o, 0xff, nv * 2));  // poison: NaN patterns
    CHECK(cudaMemset(h, 0xff, nh * 2));
    CHECK(cudaMemset(fs, 0xff, ns * 4));
    const int used = run();
    CHECK(cudaDeviceSynchronize());
    const std::vector<float> ho = to_host(o, nv), hh = to_host(h, nh);
    std::vector<float> hfs(ns);
    CHECK(cudaMemcpy(hfs.data(), fs, ns * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2; ++i) run();
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      CHECK(cudaEventRecord(e0));
      run();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];

    // accuracy on the (b=0, h=0) slice, first min(T, 512) tokens, against fp64
    const int Ts = T < 512 ? T : 512;
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
    // every snapshot and the final state, against the mma.sync kernel's
    double hdiff = 0, fdiff = 0;
    if (ref_h.empty()) {
      ref_h = hh;
      ref_fs = hfs;
    } else {
      for (std::size_t i = 0; i < nh; ++i) {
        finite = finite && std::isfinite(hh[i]);
        hdiff = std::max(hdiff, double(std::fabs(hh[i] - ref_h[i])) / (1e-3 + std::fabs(ref_h[i])));
      }
      for (std::size_t i = 0; i < ns; ++i) {
        finite = finite && std::isfinite(hfs[i]);
        fdiff = std::max(fdiff, double(std::fabs(hfs[i] - ref_fs[i])) / (1e-3 + std::fabs(ref_fs[i])));
      }
    }
    std::printf("%-8s B=%d T=%d H=%d DK=%d DV=%d block_dv=%d: %.3f ms (min %.3f), %.0f GB/s, %.1f%% of copy %.0f GB/s, "
                "floor %.3f ms, o rel L2 %.2e, h / final state max rel diff to mma.sync %.1e / %.1e%s\n",
                kernel, B, T, H, DK, DV, used, med, ms[0], bytes / (med * 1e-3) / 1e9,
                100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbps, copy_gbps, bytes / copy_gbps / 1e6, std::sqrt(num / den),
                hdiff, fdiff, finite ? "" : " NON-FINITE");
  }
  return 0;
}
