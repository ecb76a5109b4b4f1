// Standalone check and timing of the gated levels 2 and 3 on the CUDA
// tensor-core fused forward (src/kernels/cuda/fused_tensor_core_kernel.hpp, kGated),
// without Kokkos: RetNet's per-head decay g_gamma [H] and Mamba-2's per-token
// decay g [B, T, H] (fp32 log-decays <= 0), against an fp64 token-by-token
// recurrence S = exp(g_t) S + k_t v_t^T, o_t = scale S^T q_t
// (src/reference/gated.hpp gives the same definition).
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -Ibench bench/gated_tensor_core_bench.cu -o gated_bench   (10 min on 2 cores)
//   ./gated_bench                                 correctness sweep (exit 1 on any FAIL)
//   ./gated_bench time B T H DK DV [dtype] [block_dv]   timing: dtype bf16 (default), fp16 or fp32
//
// The sweep prints one line per case: o, every snapshot h and final_state of
// every (sequence, head) against fp64 by relative L2, each beside its level,
// and PASS or FAIL; outputs are poisoned with NaN first and must all be
// finite after. The levels are docs/NUMERICS.md's (core/accuracy_levels.hpp,
// as tests/test_tensor_core.cpp applies them): o at 1e-5 + u(o) + 2 u(in)^2,
// h at 1e-5 + u(h), final_state at 1e-5 + u(fp32). Then: a gate of zeros
// against level 1, bit for bit; level 1 on gated inputs must be far from the
// gated reference (the check can fail); the launcher's refusals.
#include "kernels/cuda/fused_tensor_core.hpp"

#include "cuda_bench_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using linattn::cuda::FusedTensorCoreArgs;
using linattn::cuda::run_fused_tensor_core;
using bf16 = __nv_bfloat16;
using fp16 = __half;

namespace {

constexpr int kChunk = 64;
constexpr float kScale = 0.3f;

template <class T>
const char* type_name() {
  return sizeof(T) == 4 ? "fp32" : std::is_same<T, bf16>::value ? "bf16" : "fp16";
}
template <class T>
double unit_roundoff() {
  return sizeof(T) == 4 ? std::ldexp(1.0, -24) : std::is_same<T, bf16>::value ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}
inline double to_d(float x) { return x; }
inline double to_d(bf16 x) { return __bfloat162float(x); }
inline double to_d(fp16 x) { return __half2float(x); }

// A device buffer of n elements of T (none when n is 0).
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(std::size_t count) : n(count) {
    if (n) CHECK(cudaMalloc(&p, n * sizeof(T)));
  }
  ~Dev() {
    if (p) cudaFree(p);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void poison() {
    if (p) CHECK(cudaMemset(p, 0xff, n * sizeof(T)));  // NaN in bf16, fp16 and fp32
  }
  void upload(const std::vector<T>& x) { CHECK(cudaMemcpy(p, x.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<double> to_host(std::size_t count = ~std::size_t(0)) const {
    count = std::min(count, n);
    std::vector<T> h(count);
    if (count) CHECK(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<double> d(count);
    for (std::size_t i = 0; i < count; ++i) d[i] = to_d(h[i]);
    return d;
  }
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> b(n * sizeof(T));
    if (n) CHECK(cudaMemcpy(b.data(), p, b.size(), cudaMemcpyDeviceToHost));
    return b;
  }
};

template <class E>
void fill(Dev<E>& x, std::uint64_t seed) {
  if (x.n) fill_uniform<<<256, 256>>>(x.p, x.n, seed);
  CHECK(cudaGetLastError());
}

// ---- Problems and gates

struct Shape {
  int B, T, H, DK, DV;
  std::vector<std::int64_t> lengths;  // packed (B = 1, T their sum) when not empty
  bool packed() const { return !lengths.empty(); }
  int sequences() const { return packed() ? int(lengths.size()) : B; }
  std::int64_t token0(int n) const {
    std::int64_t t = 0;
    if (!packed()) return std::int64_t(n) * T;
    for (int i = 0; i < n; ++i) t += lengths[i];
    return t;
  }
  int length(int n) const { return packed() ? int(lengths[n]) : T; }
  int chunks(int n) const { return (length(n) + kChunk - 1) / kChunk; }
  std::int64_t chunk0(int n) const {  // the sequence's first snapshot
    std::int64_t c = 0;
    for (int i = 0; i < n; ++i) c += chunks(i);
    return c;
  }
  std::int64_t total_chunks() const { return chunk0(sequences()); }
  std::vector<std::int64_t> cu_seqlens() const {
    std::vector<std::int64_t> cu{0};
    for (std::int64_t l : lengths) cu.push_back(cu.back() + l);
    return cu;
  }
  std::string describe() const {
    std::string s = "B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                    " DK=" + std::to_string(DK) + " DV=" + std::to_string(DV);
    if (packed()) {
      s += " packed";
      for (std::size_t i = 0; i < lengths.size(); ++i) s += (i ? "," : " ") + std::to_string(lengths[i]);
    }
    return s;
  }
};

inline Shape plain(int B, int T, int H, int DK, int DV) { return {B, T, H, DK, DV, {}}; }
inline Shape packed(std::vector<std::int64_t> lengths, int H, int DK, int DV) {
  std::int64_t T = 0;
  for (std::int64_t l : lengths) T += l;
  return {1, int(T), H, DK, DV, std::move(lengths)};
}

enum class GateName { strong, weak, moderate, retnet, head_strong, zero_token, zero_head, none };

const char* gate_label(GateName g) {
  switch (g) {
    case GateName::strong: return "g in [-5,-1]";
    case GateName::weak: return "g in [-1e-4,0)";
    case GateName::moderate: return "g logsigmoid";
    case GateName::retnet: return "g_gamma RetNet";
    case GateName::head_strong: return "g_gamma -1-h";
    case GateName::zero_token: return "g zero";
    case GateName::zero_head: return "g_gamma zero";
    case GateName::none: return "no gate";
  }
  return "";
}
bool per_head(GateName g) {
  return g == GateName::retnet || g == GateName::head_strong || g == GateName::zero_head;
}

// The gate's fp32 values: g [B, T, H] or g_gamma [H] (empty for none).
std::vector<float> make_gate(GateName name, const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = per_head(name) ? std::size_t(s.H) : std::size_t(s.B) * s.T * s.H;
  std::vector<float> g(name == GateName::none ? 0 : n);
  auto uniform = [&](double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (float& x : g) do x = float(u(rng)); while (x == 0.0f);  // never exactly zero (level 1 there)
  };
  switch (name) {
    case GateName::strong: uniform(-5.0, -1.0); break;
    case GateName::weak: uniform(-1e-4, 0.0); break;
    case GateName::moderate: {  // Mamba-2 style: logsigmoid of normal values, g in about [-3, -0.01]
      std::normal_distribution<double> normal(0.75, 1.5);
      for (float& x : g) {
        const double z = std::min(std::max(normal(rng), -2.95), 4.6);
        x = float(-std::log1p(std::exp(-z)));
      }
      break;
    }
    case GateName::retnet:
      for (int h = 0; h < s.H; ++h) g[h] = float(std::log1p(-std::exp2(-5.0 - h)));
      break;
    case GateName::head_strong:
      for (int h = 0; h < s.H; ++h) g[h] = -1.0f - float(h);
      break;
    default: break;  // zero, none
  }
  return g;
}

// ---- The fp64 reference: token by token, one (sequence, head)

struct Host {  // the inputs as the kernel read them, widened to double
  std::vector<double> q, k, v, s0;
  std::vector<float> g;
  bool per_head = false;
};

struct PairRef {
  std::vector<double> o;   // [len][DV]
  std::vector<double> h;   // [chunks][DK * DV]: the state before each chunk
  std::vector<double> fs;  // [DK * DV]
};

// token0: the sequence's first token in the row; len tokens; state_row: its row of s0 (n * H + head).
PairRef reference_pair(const Host& in, const Shape& s, std::int64_t token0, int len, int hh, int state_row,
                       bool snapshots, bool gated = true) {
  const int H = s.H, DK = s.DK, DV = s.DV;
  PairRef r;
  r.o.assign(std::size_t(len) * DV, 0.0);
  std::vector<double> S(std::size_t(DK) * DV, 0.0);
  if (!in.s0.empty())
    for (std::size_t e = 0; e < S.size(); ++e) S[e] = in.s0[std::size_t(state_row) * DK * DV + e];
  std::vector<double> acc(DV);
  for (int t = 0; t < len; ++t) {
    if (snapshots && t % kChunk == 0) r.h.insert(r.h.end(), S.begin(), S.end());
    const std::size_t tok = std::size_t(token0 + t);
    double g = 0.0;
    if (gated && !in.g.empty()) g = in.per_head ? in.g[hh] : in.g[tok * H + hh];
    const double a = std::exp(g);
    const double* k = &in.k[(tok * H + hh) * DK];
    const double* v = &in.v[(tok * H + hh) * DV];
    const double* q = &in.q[(tok * H + hh) * DK];
    for (int i = 0; i < DK; ++i) {
      double* row = &S[std::size_t(i) * DV];
      for (int j = 0; j < DV; ++j) row[j] = a * row[j] + k[i] * v[j];
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int i = 0; i < DK; ++i) {
      const double* row = &S[std::size_t(i) * DV];
      for (int j = 0; j < DV; ++j) acc[j] += q[i] * row[j];
    }
    for (int j = 0; j < DV; ++j) r.o[std::size_t(t) * DV + j] = kScale * acc[j];
  }
  r.fs = S;
  return r;
}

struct Err {
  double num = 0, den = 0;
  void add(double x, double ref) {
    num += (x - ref) * (x - ref);
    den += ref * ref;
  }
  double rel() const { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }  // NaN stays NaN
};

bool all_finite(const std::vector<double>& x) {
  for (double e : x)
    if (!std::isfinite(e)) return false;
  return true;
}

// ---- One case

struct Case {
  Shape shape;
  GateName gate;
  bool init_state;
  bool snapshots;  // h written
  int block_dv;    // 0 chooses
  int segments = 1;  // per sequence: 1 whole, N > 1 split (segment_sums.hpp's gated sums)
};

struct Outcome {
  double o, h, fs;  // relative L2 over every (sequence, head)
  bool finite;
  int block_dv;
  int segments;  // what the launcher used
};

int g_sms = 0;
int g_cases = 0, g_failed = 0;

void report(bool pass, const std::string& line) {
  ++g_cases;
  if (!pass) ++g_failed;
  std::printf("%-4s %s\n", pass ? "PASS" : "FAIL", line.c_str());
  std::fflush(stdout);
}

// Device inputs of a case: q, k, v (E), the initial state and the gate.
template <class E>
struct Inputs {
  Dev<E> q, k, v;
  Dev<float> s0, g;
  Host host;
  Inputs(const Shape& s, bool init_state, const std::vector<float>& gate, bool gate_per_head, std::uint64_t seed)
      : q(std::size_t(s.B) * s.T * s.H * s.DK),
        k(q.n),
        v(std::size_t(s.B) * s.T * s.H * s.DV),
        s0(init_state ? std::size_t(s.sequences()) * s.H * s.DK * s.DV : 0),
        g(gate.size()) {
    fill(q, seed * 8 + 1);
    fill(k, seed * 8 + 2);
    fill(v, seed * 8 + 3);
    fill(s0, seed * 8 + 4);
    if (g.n) g.upload(gate);
    CHECK(cudaDeviceSynchronize());
    host.q = q.to_host();
    host.k = k.to_host();
    host.v = v.to_host();
    host.s0 = s0.to_host();
    host.g = gate;
    host.per_head = gate_per_head;
  }
};

// Runs the kernel (gated unless level1) and compares with the gated fp64 reference.
template <class E, class OutT, class SnapT>
Outcome run_case(const Case& cs, std::uint64_t seed, bool level1 = false) {
  const Shape& s = cs.shape;
  const std::vector<float> gate = make_gate(cs.gate, s, seed * 8 + 5);
  Inputs<E> in(s, cs.init_state, gate, per_head(cs.gate), seed);
  const std::int64_t NC = s.total_chunks();
  Dev<OutT> o(std::size_t(s.B) * s.T * s.H * s.DV);
  Dev<SnapT> h(cs.snapshots ? std::size_t(NC) * s.H * s.DK * s.DV : 0);
  Dev<float> fs(std::size_t(s.sequences()) * s.H * s.DK * s.DV);
  o.poison();
  h.poison();
  fs.poison();
  FusedTensorCoreArgs args{};
  args.q = in.q.p;
  args.k = in.k.p;
  args.v = in.v.p;
  args.initial_state = in.s0.p;
  args.o = o.p;
  args.h = h.p;
  args.final_state = fs.p;
  args.B = s.B;
  args.T = s.T;
  args.H = s.H;
  args.DK = s.DK;
  args.DV = s.DV;
  args.scale = kScale;
  if (!level1 && !gate.empty()) (per_head(cs.gate) ? args.g_gamma : args.g) = in.g.p;
  const std::vector<std::int64_t> cu = s.cu_seqlens();
  const auto plan =
      run_fused_tensor_core<E, OutT, SnapT>(args, cs.block_dv, cs.segments, g_sms, 0, s.packed() ? &cu : nullptr);
  CHECK(cudaDeviceSynchronize());
  const std::vector<double> ho = o.to_host(), hh = h.to_host(), hfs = fs.to_host();
  Outcome out{0, 0, 0, all_finite(ho) && all_finite(hh) && all_finite(hfs), plan.block_dv, plan.segments};
  Err eo, eh, efs;
  for (int n = 0; n < s.sequences(); ++n)
    for (int head = 0; head < s.H; ++head) {
      const std::int64_t t0 = s.token0(n);
      const int len = s.length(n);
      const PairRef r = reference_pair(in.host, s, t0, len, head, n * s.H + head, cs.snapshots);
      for (int t = 0; t < len; ++t)
        for (int j = 0; j < s.DV; ++j)
          eo.add(ho[((std::size_t(t0) + t) * s.H + head) * s.DV + j], r.o[std::size_t(t) * s.DV + j]);
      const std::size_t st = std::size_t(s.DK) * s.DV;
      if (cs.snapshots)
        for (int c = 0; c < s.chunks(n); ++c)
          for (std::size_t e = 0; e < st; ++e)
            eh.add(hh[((std::size_t(s.chunk0(n)) + c) * s.H + head) * st + e], r.h[std::size_t(c) * st + e]);
      for (std::size_t e = 0; e < st; ++e) efs.add(hfs[(std::size_t(n) * s.H + head) * st + e], r.fs[e]);
    }
  out.o = eo.rel();
  out.h = cs.snapshots ? eh.rel() : 0.0;
  out.fs = efs.rel();
  return out;
}

template <class E, class OutT, class SnapT>
std::string config_name(bool snapshots) {
  return std::string(type_name<E>()) + " in, " + type_name<OutT>() + " o, h " + (snapshots ? type_name<SnapT>() : "none");
}

template <class E, class OutT, class SnapT>
void check_case(const Case& cs) {
  const std::uint64_t seed = 1000 + std::uint64_t(g_cases);
  const double lo = 1e-5 + unit_roundoff<OutT>() + 2 * unit_roundoff<E>() * unit_roundoff<E>();
  const double lh = 1e-5 + unit_roundoff<SnapT>(), lf = 1e-5 + unit_roundoff<float>();
  char line[512];
  try {
    const Outcome r = run_case<E, OutT, SnapT>(cs, seed);
    // !(x <= level) so that NaN fails
    // NaN fails; a split asked for must be the one run
    const bool split_ok = cs.segments <= 1 || r.segments == cs.segments;
    const bool pass = r.finite && r.o <= lo && r.h <= lh && r.fs <= lf && split_ok;
    std::snprintf(line, sizeof line,
                  "%-26s %-48s bv=%-3d seg=%-2d %-15s %s  o %.2e/%.2e  h %.2e/%.2e  fs %.2e/%.2e%s%s",
                  config_name<E, OutT, SnapT>(cs.snapshots).c_str(), cs.shape.describe().c_str(), r.block_dv,
                  r.segments, gate_label(cs.gate), cs.init_state ? "s0" : "--", r.o, lo, r.h, lh, r.fs, lf,
                  r.finite ? "" : "  NON-FINITE (unwritten or overflow)", split_ok ? "" : "  NOT SPLIT AS ASKED");
    report(pass, line);
  } catch (const std::exception& e) {
    std::snprintf(line, sizeof line, "%-26s %-48s bv=%-3d %-15s threw: %s", config_name<E, OutT, SnapT>(cs.snapshots).c_str(),
                  cs.shape.describe().c_str(), cs.block_dv, gate_label(cs.gate), e.what());
    report(false, line);
  }
}

// ---- A gate of zeros against level 1, bit for bit

template <class E, class OutT, class SnapT>
void check_zero_gate(const Shape& s, int block_dv) {
  const std::uint64_t seed = 5000 + std::uint64_t(g_cases);
  for (GateName zero : {GateName::zero_token, GateName::zero_head}) {
    const std::vector<float> gate = make_gate(zero, s, 0);
    Inputs<E> in(s, true, gate, per_head(zero), seed);
    const std::int64_t NC = s.total_chunks();
    const std::size_t no = std::size_t(s.B) * s.T * s.H * s.DV, nh = std::size_t(NC) * s.H * s.DK * s.DV,
                      ns = std::size_t(s.sequences()) * s.H * s.DK * s.DV;
    std::vector<unsigned char> bits[2][3];
    int used = 0;
    for (int gated = 0; gated < 2; ++gated) {
      Dev<OutT> o(no);
      Dev<SnapT> h(nh);
      Dev<float> fs(ns);
      o.poison();
      h.poison();
      fs.poison();
      FusedTensorCoreArgs args{};
      args.q = in.q.p;
      args.k = in.k.p;
      args.v = in.v.p;
      args.initial_state = in.s0.p;
      args.o = o.p;
      args.h = h.p;
      args.final_state = fs.p;
      args.B = s.B;
      args.T = s.T;
      args.H = s.H;
      args.DK = s.DK;
      args.DV = s.DV;
      args.scale = kScale;
      if (gated) (per_head(zero) ? args.g_gamma : args.g) = in.g.p;
      const std::vector<std::int64_t> cu = s.cu_seqlens();
      used = run_fused_tensor_core<E, OutT, SnapT>(args, block_dv, 1, g_sms, 0, s.packed() ? &cu : nullptr).block_dv;
      CHECK(cudaDeviceSynchronize());
      bits[gated][0] = o.bytes();
      bits[gated][1] = h.bytes();
      bits[gated][2] = fs.bytes();
    }
    const bool so = bits[0][0] == bits[1][0], sh = bits[0][1] == bits[1][1], sf = bits[0][2] == bits[1][2];
    char line[512];
    std::snprintf(line, sizeof line, "%-26s %-48s bv=%-3d %-15s same bits as level 1: o %s, h %s, final_state %s",
                  config_name<E, OutT, SnapT>(true).c_str(), s.describe().c_str(), used, gate_label(zero),
                  so ? "yes" : "NO", sh ? "yes" : "NO", sf ? "yes" : "NO");
    report(so && sh && sf, line);
  }
}

// ---- Level 1 on gated inputs: must be far from the gated reference

template <class E, class OutT, class SnapT>
void check_gate_matters(const Case& cs) {
  const Outcome r = run_case<E, OutT, SnapT>(cs, 7000 + std::uint64_t(g_cases), true);
  char line[512];
  std::snprintf(line, sizeof line, "%-26s %-48s bv=%-3d %-15s level 1 (gate ignored) vs the gated reference: o %.2e (must be > 0.1)",
                config_name<E, OutT, SnapT>(cs.snapshots).c_str(), cs.shape.describe().c_str(), r.block_dv,
                gate_label(cs.gate), r.o);
  report(r.o > 0.1, line);
}

// ---- The launcher's refusals

void check_refusals() {
  const Shape s = plain(1, 1024, 2, 64, 64);  // level 1 would split it (choose_segments: 2)
  Inputs<bf16> in(s, false, make_gate(GateName::moderate, s, 1), false, 9000);
  Dev<bf16> o(std::size_t(s.T) * s.H * s.DV);
  Dev<float> fs(std::size_t(s.H) * s.DK * s.DV), z(std::size_t(s.H) * s.DK), gamma(s.H);
  gamma.upload(make_gate(GateName::retnet, s, 0));
  auto args = [&] {
    FusedTensorCoreArgs a{};
    a.q = in.q.p;
    a.k = in.k.p;
    a.v = in.v.p;
    a.o = o.p;
    a.final_state = fs.p;
    a.B = s.B;
    a.T = s.T;
    a.H = s.H;
    a.DK = s.DK;
    a.DV = s.DV;
    a.scale = kScale;
    a.g = in.g.p;
    return a;
  };
  auto refused = [&](const char* what, FusedTensorCoreArgs a, int segments) {
    std::string msg = "not refused";
    bool ok = false;
    try {
      run_fused_tensor_core<bf16, bf16, bf16>(a, 0, segments, g_sms, 0);
      CHECK(cudaDeviceSynchronize());
    } catch (const std::invalid_argument& e) {
      ok = true;
      msg = e.what();
    }
    report(ok, std::string("refusal: ") + what + ": " + msg);
  };
  FusedTensorCoreArgs a = args();
  a.z_state = z.p;
  refused("gate with normalize", a, 1);
  a = args();
  a.g_gamma = gamma.p;
  refused("g and g_gamma together", a, 1);
  // segments 0 (choose) with a gate splits as level 1 does.
  a = args();
  a.B = 1;
  const auto plan = run_fused_tensor_core<bf16, bf16, bf16>(a, 0, 0, g_sms, 0);
  CHECK(cudaDeviceSynchronize());
  report(plan.segments == 2, "segments 0 (choose) with a gate runs " + std::to_string(plan.segments) + " segment(s) (must be 2)");
}

// ---- The sweep

template <class E, class OutT, class SnapT>
int widest(int DK, int DV) {  // the widest block this configuration allows for the head
  constexpr bool one_state_tile =
      !linattn::cuda::detail::kSplitState<E, OutT> && !linattn::cuda::detail::kStageSnapshot<E, OutT, SnapT>;
  return linattn::cuda::widest_block_within(
      DV, linattn::cuda::max_block_dv(linattn::cuda::dk_tile(DK), one_state_tile, sizeof(E) == 4));
}
template <class E, class OutT, class SnapT>
bool allowed(int DK, int bv) {
  constexpr bool one_state_tile =
      !linattn::cuda::detail::kSplitState<E, OutT> && !linattn::cuda::detail::kStageSnapshot<E, OutT, SnapT>;
  return bv <= linattn::cuda::max_block_dv(linattn::cuda::dk_tile(DK), one_state_tile, sizeof(E) == 4);
}

// Every configuration the sweep runs (E, OutT, SnapT): 16-bit inputs with
// 16-bit and fp32 o, fp32 inputs with fp32 o; snapshots in the input type
// (from shared memory), fp32 (from registers) and bf16 of fp16 (staged).
template <class F>
void for_each_config(F f) {
  f(bf16{}, bf16{}, bf16{});
  f(bf16{}, float{}, float{});
  f(fp16{}, fp16{}, bf16{});
  f(fp16{}, float{}, float{});
  f(float{}, float{}, float{});
}

void sweep() {
  const GateName gates[] = {GateName::strong, GateName::weak, GateName::moderate, GateName::retnet};
  std::printf("== gates x types x block widths (DK = DV = 128, T = 300 ragged, B = 2, H = 2)\n");
  for_each_config([&](auto e, auto out, auto snap) {
    using E = decltype(e);
    using O = decltype(out);
    using S = decltype(snap);
    int i = 0;
    for (GateName g : gates)
      for (int bv : {32, 64, 128}) {
        if (!allowed<E, O, S>(128, bv)) continue;
        check_case<E, O, S>({plain(2, 300, 2, 128, 128), g, (i++ % 2) == 0, true, bv});
      }
  });

  std::printf("== head sizes (T = 300, B = 2, H = 2, initial state; block 32 and the widest)\n");
  const int sizes[][2] = {{64, 64}, {128, 128}, {32, 32}, {96, 96}, {60, 60}, {256, 256}, {128, 64}, {64, 256}};
  for_each_config([&](auto e, auto out, auto snap) {
    using E = decltype(e);
    using O = decltype(out);
    using S = decltype(snap);
    int i = 0;
    for (const auto& hs : sizes) {
      if (sizeof(E) == 4 && hs[0] > 128) continue;  // fp32 inputs take DK <= 128 (tile_rules.hpp)
      const int w = widest<E, O, S>(hs[0], hs[1]);
      for (int bv : {32, w}) {
        check_case<E, O, S>({plain(2, 300, 2, hs[0], hs[1]), gates[i++ % 4], true, true, bv});
        if (w == 32) break;
      }
    }
  });

  std::printf("== packed batches (lengths 1, 63, 64, 65, 300; H = 2)\n");
  for_each_config([&](auto e, auto out, auto snap) {
    using E = decltype(e);
    using O = decltype(out);
    using S = decltype(snap);
    int i = 0;
    const int packed_sizes[][2] = {{64, 64}, {60, 60}, {128, 128}};
    for (const auto& hs : packed_sizes)
      for (GateName g : gates) {
        const int bv = (i % 2) ? widest<E, O, S>(hs[0], hs[1]) : 32;
        check_case<E, O, S>({packed({1, 63, 64, 65, 300}, 2, hs[0], hs[1]), g, (i % 3) != 1, true, bv});
        ++i;
      }
  });

  std::printf("== without snapshots, per-head strong decay, longer sequences\n");
  for_each_config([&](auto e, auto out, auto snap) {
    using E = decltype(e);
    using O = decltype(out);
    using S = decltype(snap);
    check_case<E, O, S>({plain(2, 300, 2, 64, 64), GateName::moderate, true, false, widest<E, O, S>(64, 64)});
    check_case<E, O, S>({packed({1, 63, 64, 65, 300}, 2, 96, 96), GateName::strong, false, false, 32});
    check_case<E, O, S>({plain(2, 300, 3, 128, 128), GateName::head_strong, true, true, 64});
    check_case<E, O, S>({plain(1, 2048, 1, 128, 128), GateName::moderate, true, true, 64});
    check_case<E, O, S>({plain(1, 2048, 1, 128, 128), GateName::weak, false, true, 32});
  });

  std::printf("== split sequences (segments forced; initial state; weak decays carry the state across segments)\n");
  for_each_config([&](auto e, auto out, auto snap) {
    using E = decltype(e);
    using O = decltype(out);
    using S = decltype(snap);
    int i = 0;
    const int split_sizes[][2] = {{64, 64}, {128, 128}, {100, 48}, {256, 64}};
    for (const auto& hs : split_sizes) {
      if (sizeof(E) == 4 && hs[0] > 128) continue;
      for (GateName g : gates) {
        const int segments = 2 + i % 4;  // 1100 tokens, 18 chunks: 2, 3 (6 each), 4 (5, 5, 5, 3), 5 (4, 4, 4, 4, 2)
        check_case<E, O, S>({plain(1, 1100, 2, hs[0], hs[1]), g, true, true, widest<E, O, S>(hs[0], hs[1]), segments});
        ++i;
      }
    }
    Case packed_split{packed({1, 63, 700, 65, 1300}, 2, 64, 96), GateName::weak, true, true, 32, 4};
    check_case<E, O, S>(packed_split);
    packed_split.gate = GateName::retnet;
    check_case<E, O, S>(packed_split);
  });

  std::printf("== a gate of zeros gives level 1's bits (exp(0) = 1 multiplies exactly)\n");
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 128, 128), 32);
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 128, 128), 64);
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 128, 128), 128);
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 64, 64), 64);
  check_zero_gate<bf16, float, float>(plain(2, 300, 2, 128, 128), 64);
  check_zero_gate<fp16, fp16, bf16>(plain(2, 300, 2, 128, 128), 128);
  check_zero_gate<fp16, float, float>(plain(2, 300, 2, 256, 256), 32);
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 256, 256), 64);
  check_zero_gate<float, float, float>(plain(2, 300, 2, 64, 64), 128);
  check_zero_gate<float, float, float>(plain(2, 300, 2, 128, 128), 64);
  check_zero_gate<float, float, float>(plain(2, 300, 2, 128, 128), 32);
  check_zero_gate<bf16, bf16, bf16>(plain(2, 300, 2, 60, 60), 64);
  check_zero_gate<bf16, bf16, bf16>(packed({1, 63, 64, 65, 300}, 2, 128, 128), 128);
  check_zero_gate<float, float, float>(packed({1, 63, 64, 65, 300}, 2, 96, 96), 32);

  std::printf("== the check can fail: level 1 on gated inputs\n");
  check_gate_matters<bf16, bf16, bf16>({plain(2, 300, 2, 128, 128), GateName::moderate, false, true, 64});
  check_gate_matters<float, float, float>({plain(2, 300, 2, 64, 64), GateName::retnet, false, true, 64});

  std::printf("== the launcher's refusals\n");
  check_refusals();
}

// ---- Timing

template <class E, class OutT, class SnapT>
int time_mode(int B, int T, int H, int DK, int DV, int block_dv) {
  const Shape s = plain(B, T, H, DK, DV);
  const int NT = (T + kChunk - 1) / kChunk;
  const std::size_t nq = std::size_t(B) * T * H * DK, nv = std::size_t(B) * T * H * DV,
                    nh = std::size_t(B) * NT * H * DK * DV, ns = std::size_t(B) * H * DK * DV, ng = std::size_t(B) * T * H;
  Dev<E> q(nq), k(nq), v(nv);
  Dev<OutT> o(nv);
  Dev<SnapT> h(nh);
  Dev<float> fs(ns), g(ng), gamma(H);
  fill(q, 1);
  fill(k, 2);
  fill(v, 3);
  g.upload(make_gate(GateName::moderate, s, 4));
  gamma.upload(make_gate(GateName::retnet, s, 0));
  CHECK(cudaDeviceSynchronize());
  const double copy_gbps = copy_bandwidth_gbps();  // same run
  const double base_bytes = sizeof(E) * (2.0 * nq + nv) + sizeof(OutT) * double(nv) + sizeof(SnapT) * double(nh) + 4.0 * ns;
  std::printf("gated timing %s, %s o, %s h, scale %.1f, copy bandwidth %.0f GB/s\n", s.describe().c_str(),
              type_name<OutT>(), type_name<SnapT>(), kScale, copy_gbps);

  // o of (b = 0, head 0), first min(T, 512) tokens, against fp64: a sanity check of each timed kernel.
  const int Ts = std::min(T, 512);
  Host host;
  host.q = q.to_host(std::size_t(Ts) * H * DK);
  host.k = k.to_host(std::size_t(Ts) * H * DK);
  host.v = v.to_host(std::size_t(Ts) * H * DV);
  const std::vector<float> hg = make_gate(GateName::moderate, s, 4), hgamma = make_gate(GateName::retnet, s, 0);

  struct Kernel {
    const char* name;
    int segments;
    const float* g;
    const float* g_gamma;
  };
  const Kernel kernels[] = {{"level 1, whole sequences", 1, nullptr, nullptr},
                            {"level 1, segments chosen", 0, nullptr, nullptr},
                            {"per-token g (level 3)", 1, g.p, nullptr},
                            {"g, segments chosen", 0, g.p, nullptr},
                            {"per-head g_gamma (level 2)", 1, nullptr, gamma.p},
                            {"g_gamma, segments chosen", 0, nullptr, gamma.p}};
  int rc = 0;
  for (const Kernel& kn : kernels) {
    FusedTensorCoreArgs args{q.p, k.p, v.p, nullptr, o.p, h.p, fs.p, B, T, H, DK, DV, kScale};
    args.g = kn.g;
    args.g_gamma = kn.g_gamma;
    linattn::cuda::FusedTensorCorePlan plan{};
    auto run = [&] { plan = run_fused_tensor_core<E, OutT, SnapT>(args, block_dv, kn.segments, g_sms, 0); };
    o.poison();
    run();
    CHECK(cudaDeviceSynchronize());
    if (kn.segments == 0 && plan.segments == 1) continue;  // the same as whole sequences
    host.g = kn.g ? hg : kn.g_gamma ? hgamma : std::vector<float>{};
    host.per_head = kn.g_gamma != nullptr;
    const PairRef ref = reference_pair(host, s, 0, Ts, 0, 0, false);
    const std::vector<double> ho = o.to_host(std::size_t(Ts) * H * DV);
    Err e;
    bool finite = true;
    for (int t = 0; t < Ts; ++t)
      for (int j = 0; j < DV; ++j) {
        const double x = ho[std::size_t(t) * H * DV + j];
        finite = finite && std::isfinite(x);
        e.add(x, ref.o[std::size_t(t) * DV + j]);
      }
    for (int i = 0; i < 2; ++i) run();
    CHECK(cudaDeviceSynchronize());
    const std::vector<float> ms = event_times_ms(run, 20);
    const double med = ms[ms.size() / 2];
    const double bytes = base_bytes + (kn.g ? 4.0 * ng : 0.0);
    std::printf("  %-27s block_dv=%-3d segments=%-3d %8.3f ms (min %.3f)  %5.1f%% of copy, floor %.3f ms  o rel L2 %.2e%s\n",
                kn.name, plan.block_dv, plan.segments, med, ms[0], 100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbps,
                bytes / copy_gbps / 1e6, e.rel(), finite ? "" : " NON-FINITE");
    if (!finite) rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  if (argc > 1 && std::strcmp(argv[1], "time") == 0) {
    if (argc < 7) {
      std::fprintf(stderr, "usage: %s time B T H DK DV [bf16|fp16|fp32] [block_dv]\n", argv[0]);
      return 2;
    }
    const int B = std::atoi(argv[2]), T = std::atoi(argv[3]), H = std::atoi(argv[4]), DK = std::atoi(argv[5]),
              DV = std::atoi(argv[6]);
    const std::string dtype = argc > 7 ? argv[7] : "bf16";
    const int block_dv = argc > 8 ? std::atoi(argv[8]) : 0;
    if (dtype == "bf16") return time_mode<bf16, bf16, bf16>(B, T, H, DK, DV, block_dv);
    if (dtype == "fp16") return time_mode<fp16, fp16, bf16>(B, T, H, DK, DV, block_dv);
    if (dtype == "fp32") return time_mode<float, float, float>(B, T, H, DK, DV, block_dv);
    std::fprintf(stderr, "dtype must be bf16, fp16 or fp32\n");
    return 2;
  }
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s            (correctness sweep)\n       %s time B T H DK DV [bf16|fp16|fp32] [block_dv]\n",
                 argv[0], argv[0]);
    return 2;
  }
  sweep();
  std::printf("%d of %d checks passed%s\n", g_cases - g_failed, g_cases, g_failed ? ": FAIL" : ": PASS");
  return g_failed ? 1 : 0;
}
