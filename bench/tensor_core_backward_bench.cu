// Standalone timing and check of the CUDA tensor-core backward without Kokkos
// (seconds to build), for iteration on the kernels themselves: the forward
// kernel stores bf16 snapshots h, then the backward (both kernels) is timed,
// and dq, dk, dv, dh0 of the first (and last) (batch, head) slice are compared
// with an fp64 reverse recurrence on the same rounded inputs. The numbers that
// count come from `linattn bench --backward` and bench/compare_fla.py.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc bench/tensor_core_backward_bench.cu -o tcb_bench
//   ./tcb_bench B T H DK DV [reps]
//
// TC_SEQLENS=L1,L2,... packs the B*T tokens into these sequences (B = 1);
// TC_FP16=1 runs fp16 inputs (bf16 snapshots); TC_DHT=1 adds a random dht;
// TC_BIGSMEM=1 runs the chunk kernel with separate h/dh and P/A tiles;
// TC_TILED=1 the tiled chunk kernels at every head size.
#include "kernels/cuda/fused_tensor_core.hpp"
#include "kernels/cuda/tensor_core_backward.hpp"

#include "cuda_bench_support.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

template <class E>
static std::vector<double> to_host(const E* d, std::size_t n) {
  std::vector<E> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(E), cudaMemcpyDeviceToHost));
  std::vector<double> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = double(float(h[i]));
  return f;
}

struct Slice {
  std::vector<double> dq, dk, dv, dh0;
};

// fp64 reference of one head's tokens [t0, t0 + len) of one sequence:
// dq_t = scale S_t do_t, (dk_s, dv_s) = (G_s v_s, G_s^T k_s), G_s = dht + scale sum_{t>=s} q_t do_t^T.
static void reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                      const std::vector<double>& d_o, const double* dht, std::size_t t0, int len, int H, int head,
                      int DK, int DV, double scale, Slice& out) {
  std::vector<double> S(std::size_t(DK) * DV, 0.0), G(std::size_t(DK) * DV, 0.0);
  if (dht) G.assign(dht, dht + std::size_t(DK) * DV);
  auto at = [&](const std::vector<double>& x, std::size_t t, int D) { return &x[((t0 + t) * H + head) * D]; };
  for (int t = 0; t < len; ++t) {
    const double *kt = at(k, t, DK), *vt = at(v, t, DV), *ot = at(d_o, t, DV);
    for (int i = 0; i < DK; ++i) {
      double acc = 0;
      for (int j = 0; j < DV; ++j) {
        S[i * DV + j] += kt[i] * vt[j];
        acc += S[i * DV + j] * ot[j];
      }
      out.dq.push_back(scale * acc);
    }
  }
  std::vector<double> dk(std::size_t(len) * DK), dv(std::size_t(len) * DV);
  for (int t = len - 1; t >= 0; --t) {
    const double *qt = at(q, t, DK), *kt = at(k, t, DK), *vt = at(v, t, DV), *ot = at(d_o, t, DV);
    for (int i = 0; i < DK; ++i)
      for (int j = 0; j < DV; ++j) G[i * DV + j] += scale * qt[i] * ot[j];
    for (int i = 0; i < DK; ++i) {
      double acc = 0;
      for (int j = 0; j < DV; ++j) acc += G[i * DV + j] * vt[j];
      dk[std::size_t(t) * DK + i] = acc;
    }
    for (int j = 0; j < DV; ++j) {
      double acc = 0;
      for (int i = 0; i < DK; ++i) acc += G[i * DV + j] * kt[i];
      dv[std::size_t(t) * DV + j] = acc;
    }
  }
  out.dk.insert(out.dk.end(), dk.begin(), dk.end());
  out.dv.insert(out.dv.end(), dv.begin(), dv.end());
  out.dh0.insert(out.dh0.end(), G.begin(), G.end());
}

static double rel_l2(const std::vector<double>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(x[i])) return NAN;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

template <class E>
int run(int B, std::int64_t T, int H, int DK, int DV, int reps, const std::vector<std::int64_t>* cu) {
  const std::size_t tokens = std::size_t(B) * T, nq = tokens * H * DK, nv = tokens * H * DV;
  const linattn::cuda::BackwardWork work = linattn::cuda::backward_work(B, T, cu);
  const std::size_t chunks = work.chunks.size(), N = work.seqs.size(), state = std::size_t(DK) * DV;
  const float scale = 1.0f / std::sqrt(float(DK));
  E *q, *k, *v, *d_o, *o, *dq, *dk, *dv;
  __nv_bfloat16* h;
  float *fin, *dht = nullptr, *dh0;
  for (E** p : {&q, &k, &d_o, &dq, &dk}) CHECK(cudaMalloc(p, (p == &d_o ? nv : nq) * sizeof(E)));
  for (E** p : {&v, &o, &dv}) CHECK(cudaMalloc(p, nv * sizeof(E)));
  CHECK(cudaMalloc(&h, chunks * H * state * 2));
  CHECK(cudaMalloc(&fin, N * H * state * 4));
  CHECK(cudaMalloc(&dh0, N * H * state * 4));
  fill_uniform<<<1024, 256>>>(q, nq, 1);
  fill_uniform<<<1024, 256>>>(k, nq, 2);
  fill_uniform<<<1024, 256>>>(v, nv, 3);
  fill_uniform<<<1024, 256>>>(d_o, nv, 4);
  std::vector<double> dht_host;
  if (std::getenv("TC_DHT")) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(N * H * state);
    for (float& e : x) e = u(rng);
    dht_host.assign(x.begin(), x.end());
    CHECK(cudaMalloc(&dht, x.size() * 4));
    CHECK(cudaMemcpy(dht, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  linattn::cuda::FusedTensorCoreArgs fa{};
  fa.q = q;
  fa.k = k;
  fa.v = v;
  fa.o = o;
  fa.h = h;
  fa.final_state = fin;
  fa.B = B;
  fa.T = int(T);
  fa.H = H;
  fa.DK = DK;
  fa.DV = DV;
  fa.scale = scale;
  linattn::cuda::run_fused_tensor_core<E, E, __nv_bfloat16>(fa, 0, 1, sms, 0, cu);
  CHECK(cudaDeviceSynchronize());

  linattn::cuda::TensorCoreBackwardArgs ba{};
  ba.q = q;
  ba.k = k;
  ba.v = v;
  ba.d_o = d_o;
  ba.h = h;
  ba.dht = dht;
  ba.dq = dq;
  ba.dk = dk;
  ba.dv = dv;
  ba.dh0 = dh0;
  ba.H = H;
  ba.DK = DK;
  ba.DV = DV;
  ba.scale = scale;
  for (E* p : {dq, dk}) CHECK(cudaMemset(p, 0xff, nq * sizeof(E)));  // NaN poison
  CHECK(cudaMemset(dv, 0xff, nv * sizeof(E)));
  CHECK(cudaMemset(dh0, 0xff, N * H * state * 4));
  const bool compact = !std::getenv("TC_BIGSMEM"), tiled = std::getenv("TC_TILED") != nullptr;
  auto backward = [&] { linattn::cuda::run_tensor_core_backward<E, __nv_bfloat16>(ba, B, T, cu, sms, 0, compact, tiled); };
  backward();
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i) backward();
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(e0));
    backward();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[reps / 2];
  // Floor: q, k, v, do and h read once, dq, dk, dv written once (16-bit), dh0 fp32.
  const double bytes = double(tokens) * H * (2 * DK + 2 * DV) * 2 + double(chunks) * H * state * 2 +
                       double(tokens) * H * (2 * DK + DV) * 2 + double(N) * H * state * 4;
  std::printf("%s%s%s %d,%lld,%d,%d,%d seqs %zu chunks %zu  backward %.3f ms (min %.3f)  %.0f GB/s at the floor's bytes\n",
              sizeof(E) == 2 && std::is_same<E, __half>::value ? "fp16" : "bf16", compact ? "" : " (2 state tiles)", tiled ? " (tiled)" : "", B, T, H, DK, DV, N, chunks, median,
              ms[0], bytes / median / 1e6);

  // Check: the first sequence's head 0 and the last sequence's last head.
  const auto hq = to_host(q, nq), hk = to_host(k, nq), hv = to_host(v, nv), ho = to_host(d_o, nv);
  const auto gq = to_host(dq, nq), gk = to_host(dk, nq), gv = to_host(dv, nv);
  std::vector<float> g0(N * H * state);
  CHECK(cudaMemcpy(g0.data(), dh0, g0.size() * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int which = 0; which < 2; ++which) {
    const int n = which == 0 ? 0 : int(N) - 1, head = which == 0 ? 0 : H - 1;
    const std::int64_t s0 = cu ? (*cu)[n] : std::int64_t(n) * T;
    const int len = int(cu ? (*cu)[n + 1] - (*cu)[n] : T);
    Slice ref, got;
    reference(hq, hk, hv, ho, dht ? &dht_host[(std::size_t(n) * H + head) * state] : nullptr, s0, len, H, head, DK, DV,
              scale, ref);
    for (int t = 0; t < len; ++t) {
      for (int i = 0; i < DK; ++i) got.dq.push_back(gq[((s0 + t) * H + head) * DK + i]);
      for (int i = 0; i < DK; ++i) got.dk.push_back(gk[((s0 + t) * H + head) * DK + i]);
      for (int j = 0; j < DV; ++j) got.dv.push_back(gv[((s0 + t) * H + head) * DV + j]);
    }
    for (std::size_t i = 0; i < state; ++i) got.dh0.push_back(g0[(std::size_t(n) * H + head) * state + i]);
    const double eq = rel_l2(got.dq, ref.dq), ek = rel_l2(got.dk, ref.dk), ev = rel_l2(got.dv, ref.dv),
                 eh = rel_l2(got.dh0, ref.dh0);
    std::printf("  slice (seq %d, head %d, %d tokens): rel L2 dq %.2e dk %.2e dv %.2e dh0 %.2e\n", n, head, len, eq, ek,
                ev, eh);
    if (!(eq < 1e-2 && ek < 1e-2 && ev < 1e-2 && eh < 1e-4)) bad = 1;
  }
  return bad;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B T H DK DV [reps]\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), H = std::atoi(argv[3]), DK = std::atoi(argv[4]), DV = std::atoi(argv[5]);
  const std::int64_t T = std::atoll(argv[2]);
  const int reps = argc > 6 ? std::atoi(argv[6]) : 20;
  std::vector<std::int64_t> cu;
  if (const char* s = std::getenv("TC_SEQLENS")) {
    cu.push_back(0);
    for (const char* p = s; *p;) {
      char* end = nullptr;
      cu.push_back(cu.back() + std::strtoll(p, &end, 10));
      p = *end ? end + 1 : end;
    }
    if (B != 1 || cu.back() != T) {
      std::fprintf(stderr, "TC_SEQLENS must add up to T with B = 1\n");
      return 2;
    }
  }
  const std::vector<std::int64_t>* c = cu.empty() ? nullptr : &cu;
  const int bad = std::getenv("TC_FP16") ? run<__half>(B, T, H, DK, DV, reps, c)
                                         : run<__nv_bfloat16>(B, T, H, DK, DV, reps, c);
  if (bad) std::printf("  FAILED: error above the bound\n");
  return bad;
}
