// Standalone timing of GLA's gk on the tensor-core forward without Kokkos, for
// fast iteration on its two kernels: the pass that prepares the chunk's
// operands (src/kernels/cuda/channel_gate_prep.hpp) alone, then the whole
// forward (that pass and the fused kernel's channel instantiation) beside the
// level-1 forward of the same q, k, v; medians of `reps` runs beside the copy
// bandwidth of the same run (the floor counts gk's fp32 bytes), and o's
// relative L2 on the (b = 0, h = 0) slice (its first 512 tokens) against an
// fp64 recurrence. bf16 inputs, o and h; gk uniform in [-strength, 0).
// Where the launcher splits the sequences (or `segments` > 1 asks it to), the
// whole-sequence walk is timed too and o of the two compared in full.
// The numbers that count come from `linattn bench --gate gk` and
// bench/compare_fla.py --gate gk.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench bench/channel_gate_bench.cu -o gk_bench
//   ./gk_bench B T H DK DV [reps] [strength] [block_dv] [segments]
#include "kernels/cuda/fused_tensor_core.hpp"

#include "cuda_bench_support.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

using bf16 = __nv_bfloat16;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B T H DK DV [reps] [strength] [block_dv] [segments]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]),
            DV = std::atoi(argv[5]);
  const int reps = argc > 6 ? std::atoi(argv[6]) : 20;
  const float strength = argc > 7 ? float(std::atof(argv[7])) : 1.0f;
  const int block_dv = argc > 8 ? std::atoi(argv[8]) : 0;  // 0: as the launcher chooses
  const int segments = argc > 9 ? std::atoi(argv[9]) : 0;  // 0: as the launcher chooses
  const int NT = (T + 63) / 64;
  const std::size_t nq = std::size_t(B) * T * H * DK, nv = std::size_t(B) * T * H * DV;
  const std::size_t nh = std::size_t(B) * NT * H * DK * DV, ns = std::size_t(B) * H * DK * DV;
  bf16 *q, *k, *v, *o, *h;
  float *gk, *fs;
  CHECK(cudaMalloc(&q, nq * 2));
  CHECK(cudaMalloc(&k, nq * 2));
  CHECK(cudaMalloc(&v, nv * 2));
  CHECK(cudaMalloc(&o, nv * 2));
  CHECK(cudaMalloc(&h, nh * 2));
  CHECK(cudaMalloc(&gk, nq * 4));
  CHECK(cudaMalloc(&fs, ns * 4));
  fill_uniform<<<1024, 256>>>(q, nq, 1);
  fill_uniform<<<1024, 256>>>(k, nq, 2);
  fill_uniform<<<1024, 256>>>(v, nv, 3);
  fill_uniform<<<1024, 256>>>(gk, nq, 4);
  make_log_decays<<<1024, 256>>>(gk, nq, strength);
  CHECK(cudaDeviceSynchronize());
  const double copy_gbps = copy_bandwidth_gbps();
  const double bytes = 2.0 * (2 * nq + 2 * nv + nh) + 4.0 * (ns + nq);  // q, k, v, o, h, final state, gk
  const float scale = 1.0f / std::sqrt(float(DK));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  // The prepared operands alone (what the fused kernel reads besides v).
  linattn::cuda::FusedTensorCoreArgs args{q, k, v, nullptr, o, h, fs, B, T, H, DK, DV, scale};
  args.gk = gk;
  auto prep = [&] { (void)linattn::cuda::prepare_channel_gate<bf16>(args, nullptr, 0); };
  prep();
  CHECK(cudaDeviceSynchronize());
  const std::vector<float> prep_ms = event_times_ms(prep, reps);
  const double prep_bytes = 2.0 * 4 * nq + 4.0 * nq + 4.0 * B * T * H * 64;  // q, k in, qg, kg out, gk, scores

  linattn::cuda::FusedTensorCorePlan plan{};
  auto forward = [&] { plan = linattn::cuda::run_fused_tensor_core<bf16, bf16, bf16>(args, block_dv, segments, sms, 0); };
  CHECK(cudaMemset(o, 0xff, nv * 2));  // poison
  forward();
  CHECK(cudaDeviceSynchronize());
  const std::vector<bf16> hq = copy_to_host(q, nq), hk = copy_to_host(k, nq), hv = copy_to_host(v, nv), ho = copy_to_host(o, nv);
  const std::vector<float> hg = copy_to_host(gk, nq);
  forward();
  const std::vector<float> gk_ms = event_times_ms(forward, reps);
  linattn::cuda::FusedTensorCoreArgs level1 = args;
  level1.gk = nullptr;
  auto forward1 = [&] { (void)linattn::cuda::run_fused_tensor_core<bf16, bf16, bf16>(level1, block_dv, 0, sms, 0); };
  forward1();
  const std::vector<float> l1_ms = event_times_ms(forward1, reps);
  // A split walk beside the whole one: time, and o of the two in full.
  double whole_ms = 0, split_vs_whole = 0;
  if (plan.segments > 1) {
    auto whole = [&] { (void)linattn::cuda::run_fused_tensor_core<bf16, bf16, bf16>(args, plan.block_dv, 1, sms, 0); };
    CHECK(cudaMemset(o, 0xff, nv * 2));
    whole();
    CHECK(cudaDeviceSynchronize());
    const std::vector<bf16> ow = copy_to_host(o, nv);
    double dn = 0, dd = 0;
    for (std::size_t e = 0; e < nv; ++e) {
      const double a = double(__bfloat162float(ho[e])), b = double(__bfloat162float(ow[e]));
      dn += (a - b) * (a - b);
      dd += b * b;
    }
    split_vs_whole = std::sqrt(dn / dd);
    const std::vector<float> w_ms = event_times_ms(whole, reps);
    whole_ms = w_ms[w_ms.size() / 2];
  }

  // o of the (0, 0) slice against the fp64 recurrence S = diag(exp(gk)) S + k v^T, o = scale S^T q.
  const int Ts = T < 512 ? T : 512;
  std::vector<double> S(std::size_t(DK) * DV, 0.0);
  double num = 0, den = 0;
  bool finite = true;
  for (int t = 0; t < Ts; ++t) {
    const std::size_t qk_row = std::size_t(t) * H * DK, v_row = std::size_t(t) * H * DV;
    for (int d = 0; d < DK; ++d) {
      const double a = std::exp(double(hg[qk_row + d])), kd = double(__bfloat162float(hk[qk_row + d]));
      for (int j = 0; j < DV; ++j)
        S[std::size_t(d) * DV + j] = a * S[std::size_t(d) * DV + j] + kd * double(__bfloat162float(hv[v_row + j]));
    }
    for (int j = 0; j < DV; ++j) {
      double ref = 0;
      for (int d = 0; d < DK; ++d) ref += double(__bfloat162float(hq[qk_row + d])) * S[std::size_t(d) * DV + j];
      ref *= scale;
      const double x = double(__bfloat162float(ho[v_row + j]));
      finite = finite && std::isfinite(x);
      num += (x - ref) * (x - ref);
      den += ref * ref;
    }
  }
  const double pm = prep_ms[prep_ms.size() / 2], gm = gk_ms[gk_ms.size() / 2], lm = l1_ms[l1_ms.size() / 2];
  std::printf("gk bf16 B=%d T=%d H=%d DK=%d DV=%d strength %.3g: prepare %.3f ms (%.1f%% of copy for its bytes), "
              "forward %.3f ms (block_dv %d, %.1f%% of copy %.0f GB/s, floor %.3f ms), level 1 %.3f ms, "
              "o rel L2 %.2e%s\n",
              B, T, H, DK, DV, strength, pm, 100.0 * prep_bytes / (pm * 1e-3) / 1e9 / copy_gbps, gm, plan.block_dv,
              100.0 * bytes / (gm * 1e-3) / 1e9 / copy_gbps, copy_gbps, bytes / copy_gbps / 1e6, lm,
              std::sqrt(num / den), finite ? "" : " NON-FINITE");
  if (plan.segments > 1)
    std::printf("  %d segments; whole sequences %.3f ms; o split against whole, all tokens: rel L2 %.2e%s\n",
                plan.segments, whole_ms, split_vs_whole, std::isfinite(split_vs_whole) ? "" : " NON-FINITE");
  return finite && std::isfinite(split_vs_whole) ? 0 : 1;
}
