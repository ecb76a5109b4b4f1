#include "benchmark/benchmark.hpp"

#include "core/error_metrics.hpp"
#include "core/ledger.hpp"
#include "core/random_tensor.hpp"
#include "kernels/backward.hpp"
#include "kernels/forward_typed.hpp"
#include "kernels/backward_path.hpp"
#include "kernels/state_pass_run.hpp"
#include "kernels/run_variant.hpp"
#include "reference/backward.hpp"
#include "reference/channel_gated.hpp"
#include "reference/gated.hpp"
#include "reference/references.hpp"

#include <Kokkos_Random.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace linattn {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string device_name() {
#if defined(KOKKOS_ENABLE_CUDA)
  if (std::is_same<ExecSpace, Kokkos::Cuda>::value) {
    int device = 0;
    cudaDeviceProp prop;
    cudaGetDevice(&device);
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) return prop.name;
  }
#endif
  return "host (" + kokkos_backend_name() + ")";
}

// Uniform in [-1, 1) without exact zeros (positive: in (0, 1)), rounded to T,
// generated on the device.
template <class T>
void fill_random(const DeviceView4<T>& x, std::uint64_t seed, bool positive) {
  Kokkos::Random_XorShift64_Pool<ExecSpace> pool(seed);
  T* data = x.data();
  Kokkos::parallel_for(
      "linattn::bench::fill_random", Kokkos::RangePolicy<ExecSpace>(0, x.size()), KOKKOS_LAMBDA(const std::size_t i) {
        auto gen = pool.get_state();
        double r = gen.drand(positive ? 0.0 : -1.0, 1.0);
        pool.free_state(gen);
        if (r == 0.0) r = 0.5;
        data[i] = from_acc<T>(r);
      });
}

// x(0, 0:tokens, 0, :) as fp64 on the host: the (b = 0, h = 0) slice.
template <class T>
std::vector<double> slice_to_host(const DeviceView4<T>& x, std::int64_t tokens) {
  const std::int64_t D = static_cast<std::int64_t>(x.extent(3));
  Kokkos::View<double**, Kokkos::LayoutRight, MemSpace> dense("linattn::bench::slice", tokens, D);
  Kokkos::parallel_for(
      "linattn::bench::slice", Kokkos::RangePolicy<ExecSpace>(0, tokens * D), KOKKOS_LAMBDA(const std::int64_t i) {
        dense(i / D, i % D) = storage_traits<T>::to_double(x(0, i / D, 0, i % D));
      });
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dense);
  return std::vector<double>(host.data(), host.data() + tokens * D);
}

// x(0, 0:tokens, 0) of a [B, T, H] view (dg) as fp64 on the host: the (b = 0, h = 0) row.
template <class T>
std::vector<double> slice_to_host(const DeviceView3<T>& x, std::int64_t tokens) {
  Kokkos::View<double*, Kokkos::LayoutRight, MemSpace> dense("linattn::bench::slice", tokens);
  Kokkos::parallel_for(
      "linattn::bench::slice", Kokkos::RangePolicy<ExecSpace>(0, tokens),
      KOKKOS_LAMBDA(const std::int64_t t) { dense(t) = static_cast<double>(x(0, t, 0)); });
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dense);
  return std::vector<double>(host.data(), host.data() + tokens);
}

// The (b = 0, h = 0) slice of p's first `tokens` tokens as a problem of its
// own: B = H = 1 and, when packed, the sequences it cuts, up to its end.
Problem accuracy_slice(const Problem& p, std::int64_t tokens) {
  Problem slice = p;
  slice.B = 1;
  slice.H = 1;
  slice.T = tokens;
  if (p.varlen()) {
    slice.cu_seqlens.clear();
    for (std::int64_t c : p.cu_seqlens)
      if (c < tokens) slice.cu_seqlens.push_back(c);
    slice.cu_seqlens.push_back(tokens);
  }
  return slice;
}

// A row's times (median, min, max of `ms`) and the rates derived from them and
// its flops and min_bytes (set before), against the run's copy bandwidth.
void set_times(VariantTiming& row, const std::vector<double>& ms, double copy_gbps) {
  row.median_ms = median(ms);
  row.min_ms = *std::min_element(ms.begin(), ms.end());
  row.max_ms = *std::max_element(ms.begin(), ms.end());
  row.gbps = row.min_bytes / (row.median_ms * 1e-3) / 1e9;
  row.tflops = row.flops / (row.median_ms * 1e-3) / 1e12;
  row.copy_fraction = row.gbps / copy_gbps;
  row.floor_ms = row.min_bytes / (copy_gbps * 1e9) * 1e3;
}

// The benchmark's gate, drawn on the host (fp32, as files hold it): g uniform in [-1, 0), or RetNet's
// gammas; and the gate of the accuracy slice (b = 0, h = 0, its first `tokens` tokens). None: both empty.
struct BenchGate {
  Tensor gate;
  reference::Gate slice;
};
BenchGate bench_gate(const BenchConfig& bc, std::int64_t tokens) {
  const Problem& p = bc.problem;
  BenchGate out;
  if (bc.gate == GateKind::none) return out;
  out.gate = bc.gate == GateKind::per_head
                 ? Tensor::from_double(DType::f32, {p.H}, retnet_log_gammas(p.H))
                 : random_tensor(DType::f32, gate_shape(p, bc.gate), derive_seed(bc.seed, 4), -1.0, 0.0);
  const std::vector<double> g = out.gate.to_double();
  if (bc.gate == GateKind::per_head) {
    out.slice = reference::Gate::per_head({g[0]});
  } else if (bc.gate == GateKind::per_channel) {  // gk of (b = 0, h = 0): [tokens, DK], read by gla_chunked
    std::vector<double> gs(static_cast<std::size_t>(tokens * p.DK));
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t d = 0; d < p.DK; ++d) gs[t * p.DK + d] = g[static_cast<std::size_t>(t * p.H * p.DK + d)];
    out.slice = {GateKind::per_channel, std::move(gs)};
  } else {
    std::vector<double> gs(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) gs[t] = g[static_cast<std::size_t>(t * p.H)];  // b = 0, h = 0
    out.slice = reference::Gate::per_token(std::move(gs));
  }
  return out;
}

ForwardConfig forward_config(const BenchConfig& bc, Variant variant) {
  ForwardConfig cfg;
  cfg.variant = variant;
  cfg.gemm = bc.gemm;
  cfg.snapshots = bc.snapshots;
  cfg.output_fp32 = bc.output_fp32;
  cfg.normalize = bc.normalize;
  cfg.block_dv = bc.block_dv;
  cfg.segments = bc.segments;
  cfg.team_size = bc.team_size;
  cfg.gate = bc.gate;
  return cfg;
}

// The state pass on the fused forward's k and v (which left its final state
// in views.final_state), on its kernel; its row's "o rel L2" compares the two
// final states.
template <class Views>
VariantTiming bench_state_pass(const BenchConfig& bc, const ForwardConfig& cfg, const Views& forward,
                               double copy_gbps) {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  const Problem& p = bc.problem;
  const StatePassKind kind = state_pass_kind(p, cfg, bc.dtype);
  if (kind == StatePassKind::forward)
    throw std::invalid_argument(std::string("--state-pass: no state kernel on this path (the state pass is the forward ") +
                                "itself: normalize off the tensor cores, the register-blocked kernels, or a gate on tensor cores)");
  StatePassViews<In, Acc> views;
  views.k = forward.k;
  views.v = forward.v;
  views.g = forward.g;  // the forward's gate, if any: the gated state pass
  views.g_gamma = forward.g_gamma;
  views.gk = forward.gk;
  views.final_state = DeviceView4<Acc>(Kokkos::view_alloc(std::string("state_pass_final"), Kokkos::WithoutInitializing),
                                       p.num_sequences(), p.H, p.DK, p.DV);
  DeviceView3<Acc> z0, z_state;
  if (bc.normalize)
    z_state = DeviceView3<Acc>(Kokkos::view_alloc(std::string("state_pass_z"), Kokkos::WithoutInitializing),
                               p.num_sequences(), p.H, p.DK);
  Kokkos::deep_copy(views.final_state, quiet_nan<Acc>());
  for (int i = 0; i < bc.warmup; ++i) run_state_pass_on(p, cfg, kind, views, z0, z_state);
  Kokkos::fence();
  std::vector<double> ms;
  for (int i = 0; i < bc.reps; ++i) {
    Kokkos::Timer timer;
    run_state_pass_on(p, cfg, kind, views, z0, z_state);
    Kokkos::fence();
    ms.push_back(timer.seconds() * 1e3);
  }
  VariantTiming row;
  row.state_pass = true;
  row.gemm = kind == StatePassKind::tensor_core ? GemmPath::tensor_core : choose_path_here<In>(p, cfg).path;
  row.flops = 2.0 * double(p.B) * p.T * p.H * p.DK * p.DV;  // K^T V per token
  const ByteCounts bytes = count_bytes(p, bc.dtype, bc.dtype, nullptr, false);  // what it reads and writes of these
  row.min_bytes = bytes.k + bytes.v + bytes.final_state;  // the gate's bytes aside (its forward rows count them)
  set_times(row, ms, copy_gbps);
  const auto mine = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), views.final_state);
  const auto theirs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), forward.final_state);
  row.o_rel_l2 = relative_l2(std::vector<double>(mine.data(), mine.data() + mine.size()),
                             std::vector<double>(theirs.data(), theirs.data() + theirs.size()));
  return row;
}

template <class In, class Out, class Snap>
BenchReport bench_typed(const BenchConfig& bc, double copy_gbps) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const Problem& p = bc.problem;
  BenchReport report;

  DeviceView4<In> q(Kokkos::view_alloc(std::string("q"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  DeviceView4<In> k(Kokkos::view_alloc(std::string("k"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  DeviceView4<In> v(Kokkos::view_alloc(std::string("v"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  // Normalized attention divides by q . cumsum(k): with signed q and k that
  // sum crosses zero somewhere and o there is noise in any precision, so
  // normalized benchmarks draw positive q and k, as feature maps give them.
  fill_random(q, derive_seed(bc.seed, 1), bc.normalize);
  fill_random(k, derive_seed(bc.seed, 2), bc.normalize);
  fill_random(v, derive_seed(bc.seed, 3), false);
  ForwardViews<In, Out, Snap, Acc> views;
  views.q = q;
  views.k = k;
  views.v = v;
  views.o = DeviceView4<Out>(Kokkos::view_alloc(std::string("o"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  const std::int64_t N = p.num_sequences();
  views.final_state = DeviceView4<Acc>(Kokkos::view_alloc(std::string("final_state"), Kokkos::WithoutInitializing),
                                       N, p.H, p.DK, p.DV);
  const std::vector<std::int64_t> hs = p.h_shape();
  if (bc.snapshots != SnapshotMode::none)
    views.h = DeviceView5<Snap>(Kokkos::view_alloc(std::string("h"), Kokkos::WithoutInitializing), hs[0], hs[1], hs[2],
                                hs[3], hs[4]);

  const std::int64_t tokens = std::min<std::int64_t>(p.T, bc.accuracy_tokens);
  const BenchGate gate = bench_gate(bc, tokens);
  if (bc.gate != GateKind::none) upload_gate<Acc>(views, bc.gate, gate.gate, accumulation_dtype(bc.dtype));
  const reference::Gate& slice_gate = gate.slice;

  // fp64 reference on the (b = 0, h = 0) slice: o there depends only on that
  // slice (and, when packed, on the sequences it cuts, up to its end).
  // accuracy_tokens 0: no check (o_rel_l2 NaN, printed as "-").
  std::vector<double> o_ref;
  if (tokens > 0) {
    const Problem slice = accuracy_slice(p, tokens);
    const std::vector<double> qs = slice_to_host(q, tokens), ks = slice_to_host(k, tokens), vs = slice_to_host(v, tokens);
    o_ref = bc.gate == GateKind::none          ? reference::forward(slice, {qs, ks, vs, nullptr, nullptr}, bc.normalize).o
            : bc.gate == GateKind::per_channel ? reference::gla_chunked(slice, {qs, ks, vs, nullptr}, {slice_gate.log_decay}).o
                                               : reference::gated_forward(slice, {qs, ks, vs, nullptr}, slice_gate).o;
  }

  const DType in_dtype = bc.dtype;
  const DType out_dtype = bc.output_fp32 ? DType::f32 : in_dtype;
  const DType snap_dtype = snapshot_dtype(in_dtype, bc.snapshots);
  for (Variant variant : bc.variants) {
    const ForwardConfig cfg = forward_config(bc, variant);
    NormalizeViews<Acc> norm;  // z_state, and o_raw where the path divides in a pass of its own
    if (bc.normalize) {
      norm.z_state = DeviceView3<Acc>(Kokkos::view_alloc(std::string("z_state"), Kokkos::WithoutInitializing), N, p.H, p.DK);
      if (normalize_writes_raw_o(choose_path_here<In>(p, cfg)))
        norm.o_raw = DeviceView4<Acc>(Kokkos::view_alloc(std::string("o_raw"), Kokkos::WithoutInitializing), p.B, p.T,
                                      p.H, p.DV);
    }
    auto run_once = [&] { return bc.normalize ? run_variant_normalized(p, cfg, views, norm) : run_variant(p, cfg, views); };
    Kokkos::deep_copy(views.o, quiet_nan<Out>());  // poisoned: the accuracy check sees unwritten elements
    VariantRun run;
    for (int i = 0; i < bc.warmup; ++i) run = run_once();
    Kokkos::fence();
    std::vector<double> ms;
    for (int i = 0; i < bc.reps; ++i) {
      Kokkos::Timer timer;
      run = run_once();
      Kokkos::fence();
      ms.push_back(timer.seconds() * 1e3);
    }
    VariantTiming row;
    row.variant = variant;
    row.gemm = run.gemm;
    row.block_dv = run.plan.block_dv;
    row.segments = run.segments;
    row.flops = variant_flops(p, variant);
    row.min_bytes = count_bytes(p, in_dtype, out_dtype, bc.snapshots == SnapshotMode::none ? nullptr : &snap_dtype,
                                false, bc.gate)
                        .total();
    set_times(row, ms, copy_gbps);
    row.o_rel_l2 = tokens > 0 ? relative_l2(slice_to_host(views.o, tokens), o_ref) : std::nan("");
    report.rows.push_back(row);
    if (bc.state_pass && variant == Variant::fused) report.rows.push_back(bench_state_pass(bc, cfg, views, copy_gbps));
  }
  return report;
}

// The backward of the fused forward: q, k, v, do made on the device, h stored
// by one forward run (as `run` stores it), then the backward timed. Its floor
// reads q, k, v, do and h and writes dq, dk, dv and dh0 once (a gate's g and
// dg aside, as the forward rows leave g aside). dq, dk and dv of the whole
// (b = 0, h = 0) row are checked against the fp64 reference; gated (the
// forward and the backward with the same g or g_gamma), against the gated
// reference, dg of that row's tokens too (the kernel's dg per token, which
// run_backward sums per head for g_gamma on the host, outside the kernel).
template <class In, class Out, class Snap>
BenchReport bench_backward_typed(const BenchConfig& bc, double copy_gbps) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const Problem& p = bc.problem;
  BenchReport report;
  auto alloc4 = [](const char* name, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return DeviceView4<In>(Kokkos::view_alloc(std::string(name), Kokkos::WithoutInitializing), a, b, c, d);
  };
  const DeviceView4<In> q = alloc4("q", p.B, p.T, p.H, p.DK), k = alloc4("k", p.B, p.T, p.H, p.DK),
                        v = alloc4("v", p.B, p.T, p.H, p.DV), d_o = alloc4("do", p.B, p.T, p.H, p.DV);
  fill_random(q, derive_seed(bc.seed, 1), false);
  fill_random(k, derive_seed(bc.seed, 2), false);
  fill_random(v, derive_seed(bc.seed, 3), false);
  fill_random(d_o, derive_seed(bc.seed, 4), false);
  const std::int64_t N = p.num_sequences();
  const std::vector<std::int64_t> hs = p.h_shape();
  ForwardViews<In, Acc, Snap, Acc> fw;
  fw.q = q;
  fw.k = k;
  fw.v = v;
  fw.o = DeviceView4<Acc>(Kokkos::view_alloc(std::string("o"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  fw.final_state = DeviceView4<Acc>(Kokkos::view_alloc(std::string("final_state"), Kokkos::WithoutInitializing), N,
                                    p.H, p.DK, p.DV);
  const DeviceView5<Snap> h(Kokkos::view_alloc(std::string("h"), Kokkos::WithoutInitializing), hs[0], hs[1], hs[2],
                            hs[3], hs[4]);
  fw.h = h;
  const BenchGate gate = bench_gate(bc, p.T);
  if (bc.gate != GateKind::none) upload_gate<Acc>(fw, bc.gate, gate.gate, accumulation_dtype(bc.dtype));
  ForwardConfig fc;
  fc.snapshots = bc.snapshots;
  fc.gate = bc.gate;
  run_variant(p, fc, fw);

  BackwardViews<In, Out, Snap, Acc> views;
  views.q = q;
  views.k = k;
  views.v = v;
  views.d_o = d_o;
  views.h = h;
  views.dq = DeviceView4<Out>(Kokkos::view_alloc(std::string("dq"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  views.dk = DeviceView4<Out>(Kokkos::view_alloc(std::string("dk"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  views.dv = DeviceView4<Out>(Kokkos::view_alloc(std::string("dv"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  views.dh0 = DeviceView4<Acc>(Kokkos::view_alloc(std::string("dh0"), Kokkos::WithoutInitializing), N, p.H, p.DK, p.DV);
  views.g = fw.g;
  views.g_gamma = fw.g_gamma;
  views.gk = fw.gk;
  if (bc.gate == GateKind::per_channel) {
    views.dgk = DeviceView4<Acc>(Kokkos::view_alloc(std::string("dgk"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
    Kokkos::deep_copy(views.dgk, quiet_nan<Acc>());
  } else if (bc.gate != GateKind::none) {
    views.dg = DeviceView3<Acc>(Kokkos::view_alloc(std::string("dg"), Kokkos::WithoutInitializing), p.B, p.T, p.H);
    Kokkos::deep_copy(views.dg, quiet_nan<Acc>());
  }
  BackwardConfig cfg;
  cfg.gemm = bc.gemm;
  cfg.output_fp32 = bc.output_fp32;
  cfg.gate = bc.gate;
  const PathChoice choice = choose_backward_path_here(cfg, &p, bc.dtype);
  const SequenceMap seqs = make_sequence_map(p);
  Kokkos::deep_copy(views.dq, quiet_nan<Out>());
  Kokkos::deep_copy(views.dk, quiet_nan<Out>());
  Kokkos::deep_copy(views.dv, quiet_nan<Out>());
  for (int i = 0; i < bc.warmup; ++i) run_backward_path<decltype(views), Acc>(p, views, seqs, choice.path, bc.team_size);
  Kokkos::fence();
  std::vector<double> ms;
  for (int i = 0; i < bc.reps; ++i) {
    Kokkos::Timer timer;
    run_backward_path<decltype(views), Acc>(p, views, seqs, choice.path, bc.team_size);
    Kokkos::fence();
    ms.push_back(timer.seconds() * 1e3);
  }
  // dq, dk and dv of the whole (b = 0, h = 0) row against the fp64 reference (dk and dv need every token after
  // theirs, so the row is not cut at accuracy_tokens), from the values the kernel read (h as stored is the
  // kernel's; the reference recomputes it, so bf16 snapshots show as one bf16 rounding). accuracy_tokens 0: no
  // check (the whole row's fp64 gk reference takes minutes at 8192 tokens of 256 x 512); the errors are NaN.
  const bool check = bc.accuracy_tokens > 0;
  const std::int64_t tokens = p.T;
  reference::GatedGradients ref;
  if (check) {
    const Problem slice = accuracy_slice(p, tokens);
    const std::vector<double> qs = slice_to_host(q, tokens), ks = slice_to_host(k, tokens),
                              vs = slice_to_host(v, tokens), dos = slice_to_host(d_o, tokens);
    if (bc.gate == GateKind::none)
      static_cast<reference::Gradients&>(ref) = reference::backward(slice, {qs, ks, vs, nullptr}, {dos, nullptr});
    else if (bc.gate == GateKind::per_channel)  // dgk in ref.dg
      ref = reference::as_gated_gradients(
          reference::gla_backward_chunked(slice, {qs, ks, vs, nullptr}, {gate.slice.log_decay}, {dos, nullptr}));
    else
      ref = reference::gated_backward(slice, {qs, ks, vs, nullptr}, gate.slice, {dos, nullptr});
  }

  VariantTiming row;
  row.backward = true;
  row.gemm = choice.path;
  row.block_dv = p.DV;
  row.flops = backward_flops(p, false);
  const double in_bytes = dtype_size(bc.dtype), out_bytes = dtype_size(bc.output_fp32 ? DType::f32 : bc.dtype);
  const double tokens_all = double(p.B) * p.T * p.H;
  row.min_bytes = tokens_all * (2 * p.DK + 2 * p.DV) * in_bytes + double(hs[0]) * hs[1] * hs[2] * hs[3] * hs[4] * sizeof(Snap) +
                  tokens_all * (2 * p.DK + p.DV) * out_bytes + double(N) * p.H * p.DK * p.DV * sizeof(Acc);
  set_times(row, ms, copy_gbps);
  const double unchecked = std::nan("");
  row.o_rel_l2 = check ? relative_l2(slice_to_host(views.dq, tokens), ref.dq) : unchecked;
  row.dk_rel_l2 = check ? relative_l2(slice_to_host(views.dk, tokens), ref.dk) : unchecked;
  row.dv_rel_l2 = check ? relative_l2(slice_to_host(views.dv, tokens), ref.dv) : unchecked;
  if (!check) row.dg_rel_l2 = unchecked;
  else if (bc.gate == GateKind::per_channel) row.dg_rel_l2 = relative_l2(slice_to_host(views.dgk, tokens), ref.dg);
  else if (bc.gate != GateKind::none) row.dg_rel_l2 = relative_l2(slice_to_host(views.dg, tokens), ref.dg);
  report.rows.push_back(row);
  return report;
}

template <class In, class Out>
BenchReport bench_snapshot_type(const BenchConfig& bc, double copy_gbps) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  if (bc.backward) {
    if (bc.snapshots == SnapshotMode::bf16) return bench_backward_typed<In, Out, bf16_t>(bc, copy_gbps);
    return bench_backward_typed<In, Out, Acc>(bc, copy_gbps);
  }
  if (bc.snapshots == SnapshotMode::bf16) return bench_typed<In, Out, bf16_t>(bc, copy_gbps);
  return bench_typed<In, Out, Acc>(bc, copy_gbps);
}

template <class In>
BenchReport bench_output_type(const BenchConfig& bc, double copy_gbps) {
  if (bc.output_fp32) return bench_snapshot_type<In, float>(bc, copy_gbps);
  return bench_snapshot_type<In, In>(bc, copy_gbps);
}

}  // namespace

double measure_copy_bandwidth(std::size_t bytes, int reps) {
  const std::size_t n = bytes / sizeof(float);
  Kokkos::View<float*, MemSpace> a(Kokkos::view_alloc(std::string("linattn::bench::copy_a"), Kokkos::WithoutInitializing), n);
  Kokkos::View<float*, MemSpace> b(Kokkos::view_alloc(std::string("linattn::bench::copy_b"), Kokkos::WithoutInitializing), n);
  Kokkos::deep_copy(a, 1.0f);
  Kokkos::deep_copy(b, a);  // warm-up
  Kokkos::fence();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    Kokkos::Timer timer;
    Kokkos::deep_copy(b, a);
    Kokkos::fence();
    s.push_back(timer.seconds());
  }
  return 2.0 * static_cast<double>(n * sizeof(float)) / median(s) / 1e9;
}

BenchReport run_benchmark(const BenchConfig& bc) {
  validate(bc.problem);
  if (bc.reps < 1) throw std::invalid_argument("reps must be at least 1");
  // Every variant's path is checked before any is timed, with run's checks and messages.
  if (bc.backward) {
    if (bc.normalize) throw std::invalid_argument("the backward takes unnormalized forwards: --backward with --normalize");
    if (bc.snapshots == SnapshotMode::none) throw std::invalid_argument("--backward reads the snapshots: not --snapshots none");
    BackwardConfig cfg;
    cfg.gemm = bc.gemm;
    cfg.output_fp32 = bc.output_fp32;
    cfg.gate = bc.gate;
    const PathChoice choice = choose_backward_path_here(cfg, &bc.problem, bc.dtype);
    if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  } else {
    for (Variant variant : bc.variants) check_forward(bc.problem, forward_config(bc, variant), bc.dtype);
  }
  const bool gpu = !std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;
  const double copy_gbps = measure_copy_bandwidth(gpu ? (std::size_t(2) << 30) : (std::size_t(512) << 20), gpu ? 10 : 5);
  BenchReport report;
  switch (bc.dtype) {
    case DType::f16: report = bench_output_type<fp16_t>(bc, copy_gbps); break;
    case DType::bf16: report = bench_output_type<bf16_t>(bc, copy_gbps); break;
    case DType::f32: report = bench_output_type<float>(bc, copy_gbps); break;
    case DType::f64: report = bench_output_type<double>(bc, copy_gbps); break;
  }
  report.backend = kokkos_backend_name();
  report.kokkos_version = kokkos_version_string();
  report.device = device_name();
  report.copy_gbps = copy_gbps;
  return report;
}

}  // namespace linattn
