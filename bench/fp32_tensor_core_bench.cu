// Standalone timing of the tensor-core forward on fp32 inputs (fp32 tiles,
// three TF32 products: src/kernels/cuda/mma_primitives.hpp, Elem<float>)
// without Kokkos, for fast iteration on the kernel: o and h in fp32 (bf16 h
// with TC_H_BF16=1), the median of `reps` runs beside the copy bandwidth of
// the same run, and o's relative L2 on the (b=0, h=0) slice (first 512
// tokens) against fp64. The numbers that count come from `linattn bench` and
// bench/compare_fla.py --dtype fp32.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench bench/fp32_tensor_core_bench.cu -o fp32_bench
//   ./fp32_bench B T H DK DV [block_dv] [reps] [segments]
#include "kernels/cuda/fused_tensor_core.hpp"

#include "cuda_bench_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <class SnapT>
static int run(int B, int T, int H, int DK, int DV, int block_dv, int reps, int segments_arg) {
  const int NT = (T + 63) / 64;
  const std::size_t nq = std::size_t(B) * T * H * DK, nv = std::size_t(B) * T * H * DV;
  const std::size_t nh = std::size_t(B) * NT * H * DK * DV, ns = std::size_t(B) * H * DK * DV;
  float *q, *k, *v, *o, *fs;
  SnapT* h;
  CHECK(cudaMalloc(&q, nq * 4));
  CHECK(cudaMalloc(&k, nq * 4));
  CHECK(cudaMalloc(&v, nv * 4));
  CHECK(cudaMalloc(&o, nv * 4));
  CHECK(cudaMalloc(&h, nh * sizeof(SnapT)));
  CHECK(cudaMalloc(&fs, ns * 4));
  fill_uniform<<<1024, 256>>>(q, nq, 1);
  fill_uniform<<<1024, 256>>>(k, nq, 2);
  fill_uniform<<<1024, 256>>>(v, nv, 3);
  CHECK(cudaDeviceSynchronize());

  const double copy_gbps = copy_bandwidth_gbps();  // same run
  const double bytes = 4.0 * (2 * nq + 2 * nv + ns) + double(sizeof(SnapT)) * nh;

  linattn::cuda::FusedTensorCoreArgs args{q, k, v, nullptr, o, h, fs, B, T, H, DK, DV, 1.0f};
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  linattn::cuda::FusedTensorCorePlan plan{};
  auto kernel = [&] { plan = linattn::cuda::run_fused_tensor_core<float, float, SnapT>(args, block_dv, segments_arg, sms, 0); };
  CHECK(cudaMemset(o, 0xff, nv * 4));  // poison: NaN patterns
  kernel();
  CHECK(cudaDeviceSynchronize());
  std::vector<float> hq(nq), hk(nq), hv(nv), ho(nv);
  CHECK(cudaMemcpy(hq.data(), q, nq * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hk.data(), k, nq * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hv.data(), v, nv * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ho.data(), o, nv * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 2; ++i) kernel();
  const std::vector<float> ms = event_times_ms(kernel, reps);
  const double med = ms[ms.size() / 2];

  bool finite = true;
  const double o_l2 = slice_o_rel_l2(hq, hk, hv, ho, T, H, DK, DV, finite);
  std::printf("fp32 B=%d T=%d H=%d DK=%d DV=%d h=%s block_dv=%d segments=%d: %.3f ms, %.1f%% of copy %.0f GB/s, "
              "floor %.3f ms, o rel L2 %.2e%s\n",
              B, T, H, DK, DV, sizeof(SnapT) == 4 ? "fp32" : "bf16", plan.block_dv, plan.segments, med,
              100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbps, copy_gbps, bytes / copy_gbps / 1e6, o_l2,
              finite ? "" : " NON-FINITE");
  return finite ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B T H DK DV [block_dv] [reps] [segments]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]),
            DV = std::atoi(argv[5]);
  const int block_dv = argc > 6 ? std::atoi(argv[6]) : 0, reps = argc > 7 ? std::atoi(argv[7]) : 20;
  const int segments = argc > 8 ? std::atoi(argv[8]) : 1;
  if (std::getenv("TC_H_BF16")) return run<__nv_bfloat16>(B, T, H, DK, DV, block_dv, reps, segments);
  return run<float>(B, T, H, DK, DV, block_dv, reps, segments);
}
