// Standalone timing of the CUDA tensor-core fused kernels without Kokkos, for
// fast iteration on the kernels themselves (seconds to build instead of
// minutes): the mma.sync kernel over whole sequences, then split into
// `segments` per sequence (unless 1; 0 chooses), then with TC_WGMMA=1 the
// wgmma experiment (built for sm_90a), in one run, with every later kernel's
// o, snapshots and final state compared to the first one's. The numbers that
// count come from `linattn bench` and bench/compare_fla.py.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench bench/fused_tensor_core_bench.cu -o tc_bench
//   ./tc_bench B T H DK DV [block_dv] [reps] [group_width] [segments]
//
// With TC_PACKED=N two more rows: the same batch as one packed row cut every
// T tokens ("packed": the same bits as mma.sync, since the memory is the
// same), and the B*T tokens cut at N-1 uniform random points ("random": time
// only; its o differs, as its sequences do). TC_SEQLENS=L1,L2,... gives the
// random row these lengths instead (adding up to B*T).
#include "kernels/cuda/fused_tensor_core.hpp"
#include "wgmma/fused_wgmma.hpp"

#include "cuda_bench_support.hpp"

#include <algorithm>
#include <random>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static std::vector<float> to_host(const __nv_bfloat16* d, std::size_t n) {
  std::vector<__nv_bfloat16> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B T H DK DV [block_dv] [reps] [group_width] [segments]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]),
            DV = std::atoi(argv[5]);
  const int block_dv = argc > 6 ? std::atoi(argv[6]) : 0, reps = argc > 7 ? std::atoi(argv[7]) : 20;
  const int group_width = argc > 8 ? std::atoi(argv[8]) : 32;  // wgmma kernel: DV columns per warpgroup
  const int segments_arg = argc > 9 ? std::atoi(argv[9]) : 0;  // mma.sync kernel: 1 whole sequences, 0 chooses
  const int NT = (T + 63) / 64;
  const std::size_t nq = std::size_t(B) * T * H * DK, nv = std::size_t(B) * T * H * DV;
  // A packed row of N sequences has up to N - 1 more chunks (a ragged end each) and N states.
  const int packed_extra = std::getenv("TC_PACKED") ? std::atoi(std::getenv("TC_PACKED")) : 0;
  const std::size_t nh = (std::size_t(B) * NT + packed_extra) * H * DK * DV,
                    ns = std::size_t(std::max(B, packed_extra)) * H * DK * DV;
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

  const double copy_gbps = copy_bandwidth_gbps();  // same run
  const double bytes = 2.0 * (2 * nq + 2 * nv + nh) + 4.0 * ns;
  const std::vector<float> hq = to_host(q, nq), hk = to_host(k, nq), hv = to_host(v, nv);

  linattn::cuda::FusedTensorCoreArgs args{q, k, v, nullptr, o, h, fs, B, T, H, DK, DV, 1.0f};
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<float> ref_o, ref_h, ref_fs;  // the first kernel's, to check the others against
  // mma.sync over whole sequences (the reference for the rest), then with
  // segments_arg segments unless that is 1, then wgmma when TC_WGMMA is set.
  std::vector<const char*> kernels{"mma.sync"};
  if (segments_arg != 1) kernels.push_back("split");
  if (std::getenv("TC_WGMMA")) kernels.push_back("wgmma");
  const int packed_n = std::getenv("TC_PACKED") ? std::atoi(std::getenv("TC_PACKED")) : 0;
  std::vector<std::int64_t> uniform_cuts, random_cuts;
  if (packed_n > 0) {
    kernels.push_back("packed");
    kernels.push_back("random");
    for (int b = 0; b <= B; ++b) uniform_cuts.push_back(std::int64_t(b) * T);
    std::mt19937_64 gen(7);
    std::uniform_int_distribution<std::int64_t> cut(1, std::int64_t(B) * T - 1);
    random_cuts = {0, std::int64_t(B) * T};
    for (int i = 1; i < packed_n; ++i) random_cuts.push_back(cut(gen));
    std::sort(random_cuts.begin(), random_cuts.end());
    if (const char* lengths = std::getenv("TC_SEQLENS")) {
      random_cuts = {0};
      for (const char* p = lengths; *p;) {
        char* end = nullptr;
        random_cuts.push_back(random_cuts.back() + std::strtoll(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
      if (random_cuts.back() != std::int64_t(B) * T) {
        std::fprintf(stderr, "TC_SEQLENS adds up to %lld, not B*T\n", static_cast<long long>(random_cuts.back()));
        return 2;
      }
    }
  }
  for (const char* kernel : kernels) {
    const bool wgmma = kernel[0] == 'w';
    int segments = 1;
    auto run = [&] {
      if (wgmma) return linattn::cuda::run_fused_wgmma<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(args, block_dv, sms, 0, group_width);
      if (kernel[0] == 'p' || kernel[0] == 'r') {
        linattn::cuda::FusedTensorCoreArgs row = args;
        row.T = B * T;
        row.B = 1;
        const auto plan = linattn::cuda::run_fused_tensor_core<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(
            row, block_dv, segments_arg, sms, 0, kernel[0] == 'p' ? &uniform_cuts : &random_cuts);
        segments = plan.segments;
        return plan.block_dv;
      }
      const auto plan = linattn::cuda::run_fused_tensor_core<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16>(
          args, block_dv, kernel[0] == 's' ? segments_arg : 1, sms, 0);
      segments = plan.segments;
      return plan.block_dv;
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
    const std::vector<float> ms = event_times_ms(run, reps);
    const double med = ms[ms.size() / 2];
    // accuracy on the (b=0, h=0) slice, first min(T, 512) tokens, against fp64
    bool finite = true;
    const double o_l2 = slice_o_rel_l2(hq, hk, hv, ho, T, H, DK, DV, finite);
    // o, every snapshot and the final state, against the mma.sync kernel's (relative L2)
    auto rel_l2 = [&](const std::vector<float>& x, const std::vector<float>& ref) {
      double n2 = 0, d2 = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        finite = finite && std::isfinite(x[i]);
        n2 += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        d2 += double(ref[i]) * ref[i];
      }
      return std::sqrt(n2 / d2);
    };
    double odiff = 0, hdiff = 0, fdiff = 0;
    if (ref_h.empty()) {
      ref_o = ho;
      ref_h = hh;
      ref_fs = hfs;
    } else {
      odiff = rel_l2(ho, ref_o);
      hdiff = rel_l2(hh, ref_h);
      fdiff = rel_l2(hfs, ref_fs);
    }
    // A hash of every output bit, to tell builds of the same arithmetic apart from changed arithmetic.
    std::uint64_t hash = 1469598103934665603ull;
    for (const std::vector<float>* x : std::initializer_list<const std::vector<float>*>{&ho, &hh, &hfs})
      for (float f : *x) {
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        hash = (hash ^ u) * 1099511628211ull;
      }
    std::printf("%-8s B=%d T=%d H=%d DK=%d DV=%d block_dv=%d segments=%d: %.3f ms (min %.3f), %.0f GB/s, %.1f%% of copy %.0f GB/s, "
                "floor %.3f ms, o rel L2 %.2e, o / h / final state rel L2 to mma.sync %.1e / %.1e / %.1e, hash %016llx%s\n",
                kernel, B, T, H, DK, DV, used, segments, med, ms[0], bytes / (med * 1e-3) / 1e9,
                100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbps, copy_gbps, bytes / copy_gbps / 1e6, o_l2,
                odiff, hdiff, fdiff, static_cast<unsigned long long>(hash), finite ? "" : " NON-FINITE");
  }
  return 0;
}
