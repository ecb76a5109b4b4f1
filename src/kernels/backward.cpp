#include "kernels/backward.hpp"

#include "kernels/backward_path.hpp"
#include "kernels/forward_typed.hpp"
#include "kernels/path_choice_here.hpp"

#include <stdexcept>

namespace linattn {

namespace {

// dg_gamma[h]: dg summed over every token of head h (in fp64, in token order).
Tensor sum_per_head(const Problem& p, const TensorSpan& dg, DType dtype) {
  const std::vector<double> d = dg.to_double();
  std::vector<double> sum(static_cast<std::size_t>(p.H), 0.0);
  for (std::size_t i = 0; i < d.size(); ++i) sum[i % static_cast<std::size_t>(p.H)] += d[i];
  return Tensor::from_double(dtype, {p.H}, sum);
}

// Where an output goes: the caller's target when given, else a tensor of the
// result, allocated here.
TensorSpan target(const TensorSpan* given, Tensor& own, DType dtype, const std::vector<std::int64_t>& shape) {
  if (given) return *given;
  own = Tensor::uninitialized(dtype, shape);
  return own;
}

// The forward's snapshots in the accumulation type, recomputed on the device
// (fused variant, whatever path the forward takes here).
template <class In, class Acc, class Views>
DeviceView5<Acc> recompute_snapshots(const Problem& p, const Views& views, const DeviceView4<const Acc>& s0) {
  ForwardViews<In, Acc, Acc, Acc> fw;
  fw.q = views.q;
  fw.k = views.k;
  fw.v = views.v;
  fw.g = views.g;
  fw.g_gamma = views.g_gamma;
  fw.gk = views.gk;
  fw.initial_state = s0;
  fw.o = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::backward::o"), Kokkos::WithoutInitializing), p.B,
                          p.T, p.H, p.DV);
  fw.final_state = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::backward::final"), Kokkos::WithoutInitializing),
                                    p.num_sequences(), p.H, p.DK, p.DV);
  const std::vector<std::int64_t> hs = p.h_shape();
  DeviceView5<Acc> h(Kokkos::view_alloc(std::string("linattn::backward::h"), Kokkos::WithoutInitializing), hs[0], hs[1],
                     hs[2], hs[3], hs[4]);
  fw.h = h;
  ForwardConfig cfg;
  cfg.snapshots = SnapshotMode::accumulation;
  cfg.gate = views.channel_gated() ? GateKind::per_channel
             : views.gated()       ? (views.g.extent(0) > 0 ? GateKind::per_token : GateKind::per_head)
                                   : GateKind::none;
  // Never split sequences (the tensor-core kernel would choose segments per call, summing the
  // state in another order): a window of the streamed backward then recomputes the whole case's
  // bits, as `run`'s windows do (pipeline/compute_stage.hpp).
  cfg.segments = 1;
  run_variant(p, cfg, fw);
  return h;
}

template <class In, class Out, class Snap>
BackwardOutput run_backward_typed(const Problem& p, const BackwardConfig& config, GemmPath path,
                                  const BackwardSpans& in, const BackwardTargets* into, DType out_dtype) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(in.q.dtype);
  BackwardOutput out;
  Kokkos::Timer timer;
  BackwardViews<In, Out, Snap, Acc> views;
  views.q = input_view<DeviceView4<In>>("linattn::q", in.q);
  views.k = input_view<DeviceView4<In>>("linattn::k", in.k);
  views.v = input_view<DeviceView4<In>>("linattn::v", in.v);
  views.d_o = input_view<DeviceView4<In>>("linattn::do", in.d_o);
  if (!in.dht.empty()) views.dht = upload4<Acc>("linattn::dht", converted(in.dht, acc_dtype));
  TensorSpan dg;
  if (config.gate != GateKind::none) {
    upload_gate<Acc>(views, config.gate, in.gate, acc_dtype);
    if (channel_gate(config.gate)) {
      dg = target(into ? &into->dg : nullptr, out.dg, acc_dtype, p.qk_shape());
      views.dgk = output_view<DeviceView4<Acc>>("linattn::dgk", dg);
    } else {
      dg = target(into ? &into->dg : nullptr, out.dg, acc_dtype, {p.B, p.T, p.H});
      views.dg = output_view<DeviceView3<Acc>>("linattn::dg", dg);
    }
  }
  const TensorSpan dq = target(into ? &into->dq : nullptr, out.dq, out_dtype, p.qk_shape());
  const TensorSpan dk = target(into ? &into->dk : nullptr, out.dk, out_dtype, p.qk_shape());
  const TensorSpan dv = target(into ? &into->dv : nullptr, out.dv, out_dtype, p.v_shape());
  out.dh0 = Tensor::uninitialized(acc_dtype, p.state_shape());
  views.dq = output_view<DeviceView4<Out>>("linattn::dq", dq);
  views.dk = output_view<DeviceView4<Out>>("linattn::dk", dk);
  views.dv = output_view<DeviceView4<Out>>("linattn::dv", dv);
  views.dh0 = output_view<DeviceView4<Acc>>("linattn::dh0", out.dh0);
  DeviceView4<const Acc> initial;
  if (config.recompute_h && !in.initial_state.empty())
    initial = upload4<Acc>("linattn::initial_state", converted(in.initial_state, acc_dtype));
  if (!config.recompute_h) views.h = input_view<DeviceView5<Snap>>("linattn::h", in.h);
  if (config.poison_outputs) {
    Kokkos::deep_copy(views.dq, quiet_nan<Out>());
    Kokkos::deep_copy(views.dk, quiet_nan<Out>());
    Kokkos::deep_copy(views.dv, quiet_nan<Out>());
    Kokkos::deep_copy(views.dh0, quiet_nan<Acc>());
    if (views.dg.extent(0) > 0) Kokkos::deep_copy(views.dg, quiet_nan<Acc>());
    if (views.dgk.extent(0) > 0) Kokkos::deep_copy(views.dgk, quiet_nan<Acc>());
  }
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  if constexpr (std::is_same<Snap, Acc>::value) {
    if (config.recompute_h) views.h = recompute_snapshots<In, Acc>(p, views, initial);
  }
  run_backward_path<decltype(views), Acc>(p, views, make_sequence_map(p), path, config.team_size);
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();

  timer.reset();
  output_to(dq, views.dq);
  output_to(dk, views.dk);
  output_to(dv, views.dv);
  output_to(out.dh0, views.dh0);
  if (views.dg.extent(0) > 0) {
    output_to(dg, views.dg);
    if (config.gate == GateKind::per_head) out.dg_gamma = sum_per_head(p, dg, acc_dtype);
  }
  if (views.dgk.extent(0) > 0) output_to(dg, views.dgk);
  out.download_seconds = timer.seconds();
  return out;
}

template <class In, class Out>
BackwardOutput with_snapshot_type(const Problem& p, const BackwardConfig& c, GemmPath path, const BackwardSpans& in,
                                  const BackwardTargets* into) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType od = c.output_fp32 ? DType::f32 : in.q.dtype;
  if (!c.recompute_h && in.h.dtype == DType::bf16) return run_backward_typed<In, Out, bf16_t>(p, c, path, in, into, od);
  return run_backward_typed<In, Out, Acc>(p, c, path, in, into, od);
}

template <class In>
BackwardOutput with_output_type(const Problem& p, const BackwardConfig& c, GemmPath path, const BackwardSpans& in,
                                const BackwardTargets* into) {
  if (c.output_fp32) return with_snapshot_type<In, float>(p, c, path, in, into);
  return with_snapshot_type<In, In>(p, c, path, in, into);
}

// A target's shape and dtype, as run_backward would allocate it.
void require_target(const TensorSpan& t, DType dtype, const std::vector<std::int64_t>& shape, const char* name) {
  require_shape(t, shape, name);
  if (t.dtype != dtype)
    throw std::invalid_argument(std::string(name) + " target is " + dtype_name(t.dtype) + ", expected " + dtype_name(dtype));
}

}  // namespace

PathChoice choose_backward_path_here(const BackwardConfig& config, const Problem* p, DType input) {
  BackwardPathFacts f;
  f.backend = kernel_backend();
  f.requested = config.gemm;
  f.output_fp32 = config.output_fp32;
  f.known_case = p != nullptr;
  f.gated = config.gate != GateKind::none;
  f.channel_gated = channel_gate(config.gate);
  if (p) {
    f.input = input;
    f.chunk = p->chunk;
    f.DK = p->DK;
    f.DV = p->DV;
  }
  return choose_backward_path(f);
}

BackwardOutput run_backward(const Problem& p, const BackwardConfig& config, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor* h, const Tensor* initial_state, const Tensor& d_o,
                            const Tensor* dht, const Tensor* gate) {
  BackwardSpans in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.d_o = d_o;
  if (h) in.h = *h;
  if (initial_state) in.initial_state = *initial_state;
  if (dht) in.dht = *dht;
  if (gate) in.gate = *gate;
  return run_backward(p, config, in);
}

BackwardOutput run_backward(const Problem& p, const BackwardConfig& config, const BackwardSpans& in,
                            const BackwardTargets* into) {
  validate(p);
  const PathChoice choice = choose_backward_path_here(config, &p, in.q.dtype);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  require_shape(in.q, p.qk_shape(), "q");
  require_shape(in.k, p.qk_shape(), "k");
  require_shape(in.v, p.v_shape(), "v");
  require_shape(in.d_o, p.v_shape(), "do");
  if (in.k.dtype != in.q.dtype || in.v.dtype != in.q.dtype || in.d_o.dtype != in.q.dtype)
    throw std::invalid_argument("q, k, v and do must share one dtype");
  if (!in.dht.empty()) require_shape(in.dht, p.state_shape(), "dht");
  if (!in.initial_state.empty()) require_shape(in.initial_state, p.state_shape(), "initial_state");
  if (!config.recompute_h) {
    if (in.h.empty()) throw std::invalid_argument("the backward needs the forward's snapshots h (or recompute_h)");
    require_shape(in.h, p.h_shape(), "h");
    if (in.h.dtype != DType::bf16 && in.h.dtype != accumulation_dtype(in.q.dtype))
      throw std::invalid_argument(std::string("h must be bf16 or ") + dtype_name(accumulation_dtype(in.q.dtype)) +
                                  ", not " + dtype_name(in.h.dtype));
  }
  check_gate(p, config.gate, in.gate.empty() ? nullptr : &in.gate);
  if (into) {
    const DType od = config.output_fp32 ? DType::f32 : in.q.dtype, acc = accumulation_dtype(in.q.dtype);
    require_target(into->dq, od, p.qk_shape(), "dq");
    require_target(into->dk, od, p.qk_shape(), "dk");
    require_target(into->dv, od, p.v_shape(), "dv");
    if (config.gate != GateKind::none)
      require_target(into->dg, acc, channel_gate(config.gate) ? p.qk_shape() : std::vector<std::int64_t>{p.B, p.T, p.H},
                     "dg");
  }
  const GemmPath path = choice.path;
  BackwardOutput out;
  switch (in.q.dtype) {
    case DType::f16: out = with_output_type<fp16_t>(p, config, path, in, into); break;
    case DType::bf16: out = with_output_type<bf16_t>(p, config, path, in, into); break;
    case DType::f32: out = with_output_type<float>(p, config, path, in, into); break;
    case DType::f64: out = with_output_type<double>(p, config, path, in, into); break;
  }
  out.gemm = choice.path;
  return out;
}

}  // namespace linattn
