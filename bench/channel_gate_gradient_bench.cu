// Standalone timing of the gk backward's last pass without Kokkos, for fast
// iteration on it (src/kernels/cuda/channel_gate_gradient.hpp; half of the gk
// backward's time at 8,4096,16,128, BENCHMARKS.md): the kernel alone on
// random operands of the shapes the chunk kernels leave it (P = dA lower
// triangular, scale dO h^T and V dh^T, the state rows), medians of `reps`
// runs beside the copy bandwidth of the same run, and dq, dk and dgk of the
// whole (b = 0, h = 0) row against fp64 sums of the pass's formulas (the
// header's comment). P above its diagonal is NaN, which the pass must never
// read; dq, dk and dgk are poisoned before the checked run. bf16 q and k, gk
// uniform in [-strength, 0). The numbers that count come from
// `linattn bench --backward --gate gk` and bench/compare_fla.py.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench bench/channel_gate_gradient_bench.cu -o gk_grad_bench
//   ./gk_grad_bench B T H DK [reps] [strength]
#include "kernels/cuda/channel_gate_gradient.hpp"

#include "cuda_bench_support.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

using bf16 = __nv_bfloat16;

// P = u below and on the diagonal of each chunk, NaN above (never read).
__global__ void poison_upper(float* p, std::size_t rows, int H, int T) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < rows * H * 64; e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t token = e / (std::size_t(H) * 64);
    const int j = int(e % 64), i = int(token % T) % 64;  // plain batch: the chunk restarts every 64 tokens of a row
    if (j > i) p[e] = __int_as_float(0x7fc00000);
  }
}

double rel_l2(const std::vector<double>& ref, const std::vector<double>& got, bool& finite) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    finite = finite && std::isfinite(got[i]);
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s B T H DK [reps] [strength]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), T = std::atoi(argv[2]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]);
  const int reps = argc > 5 ? std::atoi(argv[5]) : 20;
  const float strength = argc > 6 ? float(std::atof(argv[6])) : 1.0f;
  using linattn::cuda::detail::kChunk;
  const linattn::cuda::BackwardWork work = linattn::cuda::backward_work(B, T, nullptr);
  const int chunks = int(work.chunks.size());
  const std::size_t rows = std::size_t(B) * T, nq = rows * H * DK, np = rows * H * kChunk, ns = std::size_t(chunks) * H * DK;
  bf16 *q, *k, *dq, *dk;
  float *gk, *p, *dq_state, *dk_state, *state_rows, *dgk;
  linattn::cuda::BackwardChunk* chunk_table;
  CHECK(cudaMalloc(&q, nq * 2));
  CHECK(cudaMalloc(&k, nq * 2));
  CHECK(cudaMalloc(&dq, nq * 2));
  CHECK(cudaMalloc(&dk, nq * 2));
  CHECK(cudaMalloc(&gk, nq * 4));
  CHECK(cudaMalloc(&p, np * 4));
  CHECK(cudaMalloc(&dq_state, nq * 4));
  CHECK(cudaMalloc(&dk_state, nq * 4));
  CHECK(cudaMalloc(&state_rows, ns * 4));
  CHECK(cudaMalloc(&dgk, nq * 4));
  CHECK(cudaMalloc(&chunk_table, chunks * sizeof(linattn::cuda::BackwardChunk)));
  CHECK(cudaMemcpy(chunk_table, work.chunks.data(), chunks * sizeof(linattn::cuda::BackwardChunk), cudaMemcpyHostToDevice));
  fill_uniform<<<1024, 256>>>(q, nq, 1);
  fill_uniform<<<1024, 256>>>(k, nq, 2);
  fill_uniform<<<1024, 256>>>(gk, nq, 3);
  make_log_decays<<<1024, 256>>>(gk, nq, strength);
  fill_uniform<<<1024, 256>>>(p, np, 4);
  poison_upper<<<1024, 256>>>(p, rows, H, T);
  fill_uniform<<<1024, 256>>>(dq_state, nq, 5);
  fill_uniform<<<1024, 256>>>(dk_state, nq, 6);
  fill_uniform<<<1024, 256>>>(state_rows, ns, 7);
  CHECK(cudaMemset(dq, 0xff, nq * 2));  // poison: NaN in bf16 and fp32
  CHECK(cudaMemset(dk, 0xff, nq * 2));
  CHECK(cudaMemset(dgk, 0xff, nq * 4));
  CHECK(cudaDeviceSynchronize());
  const double copy_gbps = copy_bandwidth_gbps();

  linattn::cuda::TensorCoreBackwardArgs args{};
  args.q = q;
  args.k = k;
  args.dq = dq;
  args.dk = dk;
  args.H = H;
  args.DK = DK;
  args.gk = gk;
  args.dg = dgk;
  args.scores = p;
  args.dq_state = dq_state;
  args.dk_state = dk_state;
  args.state_rows = state_rows;
  args.num_chunks = chunks;
  args.num_tokens = std::int64_t(rows);
  args.chunks = chunk_table;
  auto kernel = linattn::cuda::detail::channel_gate_gradient_kernel<bf16>;
  constexpr std::size_t smem = linattn::cuda::detail::ChannelGradientLayout<float>::bytes;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  auto pass = [&] { kernel<<<dim3(chunks, H), linattn::cuda::detail::kChannelGradientThreads, smem>>>(args); };
  pass();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  // The (0, 0) row against fp64 sums of the pass's formulas (b in natural units).
  const std::vector<bf16> hq = copy_to_host(q, nq), hk = copy_to_host(k, nq), hdq = copy_to_host(dq, nq), hdk = copy_to_host(dk, nq);
  const std::vector<float> hg = copy_to_host(gk, nq), hp = copy_to_host(p, np), hqs = copy_to_host(dq_state, nq),
                           hks = copy_to_host(dk_state, nq), hsr = copy_to_host(state_rows, ns), hdg = copy_to_host(dgk, nq);
  std::vector<double> ref_dq, ref_dk, ref_dg, got_dq, got_dk, got_dg;
  const int NT = (T + kChunk - 1) / kChunk;
  for (int c = 0; c < NT; ++c) {
    const int t0 = c * kChunk, len = std::min(kChunk, T - t0);
    for (int d = 0; d < DK; ++d) {
      auto at = [&](int t) { return (std::size_t(t0 + t) * H) * DK + d; };  // b = 0, h = 0
      auto qv = [&](int t) { return double(__bfloat162float(hq[at(t)])); };
      auto kv = [&](int t) { return double(__bfloat162float(hk[at(t)])); };
      auto pv = [&](int i, int j) { return double(hp[(std::size_t(t0 + i) * H) * kChunk + j]); };
      std::vector<double> b(len), dqv(len), dkv(len);
      double run = 0;
      for (int t = 0; t < len; ++t) b[t] = run += double(hg[at(t)]);
      const double bl = b[len - 1];
      double state = std::exp(bl) * double(hsr[(std::size_t(c) * H) * DK + d]);
      for (int t = 0; t < len; ++t) {
        double x = std::exp(b[t]) * double(hqs[at(t)]), y = std::exp(bl - b[t]) * double(hks[at(t)]);
        for (int j = 0; j <= t; ++j) x += pv(t, j) * kv(j) * std::exp(b[t] - b[j]);
        for (int i = t; i < len; ++i) y += pv(i, t) * qv(i) * std::exp(b[i] - b[t]);
        dqv[t] = x;
        dkv[t] = y;
        state += kv(t) * std::exp(bl - b[t]) * double(hks[at(t)]);
      }
      double suffix = 0;
      std::vector<double> dg(len);
      for (int t = len - 1; t >= 0; --t) dg[t] = (suffix += qv(t) * dqv[t] - kv(t) * dkv[t]) + state;
      for (int t = 0; t < len; ++t) {
        ref_dq.push_back(dqv[t]);
        ref_dk.push_back(dkv[t]);
        ref_dg.push_back(dg[t]);
        got_dq.push_back(double(__bfloat162float(hdq[at(t)])));
        got_dk.push_back(double(__bfloat162float(hdk[at(t)])));
        got_dg.push_back(double(hdg[at(t)]));
      }
    }
  }
  bool finite = true;
  const double e_dq = rel_l2(ref_dq, got_dq, finite), e_dk = rel_l2(ref_dk, got_dk, finite),
               e_dg = rel_l2(ref_dg, got_dg, finite);

  const std::vector<float> ms = event_times_ms(pass, reps);
  // Bytes moved at least once: q, k (bf16), gk, P, dq_state, dk_state, state rows in; dq, dk (bf16), dgk out.
  const double bytes = 2.0 * 2 * nq + 4.0 * (3 * nq + np + ns) + 2.0 * 2 * nq + 4.0 * nq;
  const double m = ms[ms.size() / 2];
  std::printf("gk gradient pass bf16 B=%d T=%d H=%d DK=%d strength %.3g: %.3f ms (%.1f%% of copy %.0f GB/s, floor %.3f ms), "
              "(0, 0) row against fp64: dq %.2e dk %.2e dgk %.2e%s\n",
              B, T, H, DK, strength, m, 100.0 * bytes / (m * 1e-3) / 1e9 / copy_gbps, copy_gbps, bytes / copy_gbps / 1e6,
              e_dq, e_dk, e_dg, finite ? "" : " NON-FINITE");
  return finite ? 0 : 1;
}
