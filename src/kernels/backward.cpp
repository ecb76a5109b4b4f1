#include "kernels/backward.hpp"

#include "kernels/backward_path.hpp"
#include "kernels/forward_typed.hpp"
#include "kernels/path_choice_here.hpp"

#include <stdexcept>

namespace linattn {

namespace {

// dg_gamma[h]: dg summed over every token of head h (in fp64, in token order).
Tensor sum_per_head(const Problem& p, const Tensor& dg, DType dtype) {
  const std::vector<double> d = dg.to_double();
  std::vector<double> sum(static_cast<std::size_t>(p.H), 0.0);
  for (std::size_t i = 0; i < d.size(); ++i) sum[i % static_cast<std::size_t>(p.H)] += d[i];
  return Tensor::from_double(dtype, {p.H}, sum);
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
BackwardOutput run_backward_typed(const Problem& p, const BackwardConfig& config, GemmPath path, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor* h, const Tensor* s0,
                                  const Tensor& d_o, const Tensor* dht, const Tensor* gate,
                                  DType out_dtype) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(q.dtype);
  BackwardOutput out;
  Kokkos::Timer timer;
  BackwardViews<In, Out, Snap, Acc> views;
  views.q = input_view<DeviceView4<In>>("linattn::q", q);
  views.k = input_view<DeviceView4<In>>("linattn::k", k);
  views.v = input_view<DeviceView4<In>>("linattn::v", v);
  views.d_o = input_view<DeviceView4<In>>("linattn::do", d_o);
  if (dht) views.dht = upload4<Acc>("linattn::dht", converted(*dht, acc_dtype));
  if (config.gate != GateKind::none) {
    upload_gate<Acc>(views, config.gate, *gate, acc_dtype);
    if (channel_gate(config.gate)) {
      out.dg = Tensor::uninitialized(acc_dtype, p.qk_shape());
      views.dgk = output_view<DeviceView4<Acc>>("linattn::dgk", out.dg);
    } else {
      out.dg = Tensor::uninitialized(acc_dtype, {p.B, p.T, p.H});
      views.dg = output_view<DeviceView3<Acc>>("linattn::dg", out.dg);
    }
  }
  out.dq = Tensor::uninitialized(out_dtype, p.qk_shape());
  out.dk = Tensor::uninitialized(out_dtype, p.qk_shape());
  out.dv = Tensor::uninitialized(out_dtype, p.v_shape());
  out.dh0 = Tensor::uninitialized(acc_dtype, p.state_shape());
  views.dq = output_view<DeviceView4<Out>>("linattn::dq", out.dq);
  views.dk = output_view<DeviceView4<Out>>("linattn::dk", out.dk);
  views.dv = output_view<DeviceView4<Out>>("linattn::dv", out.dv);
  views.dh0 = output_view<DeviceView4<Acc>>("linattn::dh0", out.dh0);
  DeviceView4<const Acc> initial;
  if (config.recompute_h && s0) initial = upload4<Acc>("linattn::initial_state", converted(*s0, acc_dtype));
  if (!config.recompute_h) views.h = input_view<DeviceView5<Snap>>("linattn::h", *h);
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
  output_to(out.dq, views.dq);
  output_to(out.dk, views.dk);
  output_to(out.dv, views.dv);
  output_to(out.dh0, views.dh0);
  if (views.dg.extent(0) > 0) {
    output_to(out.dg, views.dg);
    if (config.gate == GateKind::per_head) out.dg_gamma = sum_per_head(p, out.dg, acc_dtype);
  }
  if (views.dgk.extent(0) > 0) output_to(out.dg, views.dgk);
  out.download_seconds = timer.seconds();
  return out;
}

template <class In, class Out>
BackwardOutput with_snapshot_type(const Problem& p, const BackwardConfig& c, GemmPath path, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor* h, const Tensor* s0,
                                  const Tensor& d_o, const Tensor* dht, const Tensor* gate) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType od = c.output_fp32 ? DType::f32 : q.dtype;
  if (!c.recompute_h && h->dtype == DType::bf16)
    return run_backward_typed<In, Out, bf16_t>(p, c, path, q, k, v, h, s0, d_o, dht, gate, od);
  return run_backward_typed<In, Out, Acc>(p, c, path, q, k, v, h, s0, d_o, dht, gate, od);
}

template <class In>
BackwardOutput with_output_type(const Problem& p, const BackwardConfig& c, GemmPath path, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor* h, const Tensor* s0,
                                const Tensor& d_o, const Tensor* dht, const Tensor* gate) {
  if (c.output_fp32) return with_snapshot_type<In, float>(p, c, path, q, k, v, h, s0, d_o, dht, gate);
  return with_snapshot_type<In, In>(p, c, path, q, k, v, h, s0, d_o, dht, gate);
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
  validate(p);
  const PathChoice choice = choose_backward_path_here(config, &p, q.dtype);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  require_shape(q, p.qk_shape(), "q");
  require_shape(k, p.qk_shape(), "k");
  require_shape(v, p.v_shape(), "v");
  require_shape(d_o, p.v_shape(), "do");
  if (k.dtype != q.dtype || v.dtype != q.dtype || d_o.dtype != q.dtype)
    throw std::invalid_argument("q, k, v and do must share one dtype");
  if (dht) require_shape(*dht, p.state_shape(), "dht");
  if (initial_state) require_shape(*initial_state, p.state_shape(), "initial_state");
  if (!config.recompute_h) {
    if (!h) throw std::invalid_argument("the backward needs the forward's snapshots h (or recompute_h)");
    require_shape(*h, p.h_shape(), "h");
    if (h->dtype != DType::bf16 && h->dtype != accumulation_dtype(q.dtype))
      throw std::invalid_argument(std::string("h must be bf16 or ") + dtype_name(accumulation_dtype(q.dtype)) + ", not " +
                                  dtype_name(h->dtype));
  }
  check_gate(p, config.gate, gate);
  const GemmPath path = choice.path;
  BackwardOutput out;
  switch (q.dtype) {
    case DType::f16: out = with_output_type<fp16_t>(p, config, path, q, k, v, h, initial_state, d_o, dht, gate); break;
    case DType::bf16: out = with_output_type<bf16_t>(p, config, path, q, k, v, h, initial_state, d_o, dht, gate); break;
    case DType::f32: out = with_output_type<float>(p, config, path, q, k, v, h, initial_state, d_o, dht, gate); break;
    case DType::f64: out = with_output_type<double>(p, config, path, q, k, v, h, initial_state, d_o, dht, gate); break;
  }
  out.gemm = choice.path;
  return out;
}

}  // namespace linattn
