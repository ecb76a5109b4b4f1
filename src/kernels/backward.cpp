#include "kernels/backward.hpp"

#include "kernels/backward_path.hpp"
#include "kernels/forward_typed.hpp"
#include "kernels/path_choice_here.hpp"

#include <stdexcept>

namespace linattn {

namespace {

// The forward's snapshots in the accumulation type, recomputed on the device
// (fused variant, whatever path the forward takes here).
template <class In, class Acc>
DeviceView5<Acc> recompute_snapshots(const Problem& p, const DeviceView4<const In>& q, const DeviceView4<const In>& k,
                                     const DeviceView4<const In>& v, const DeviceView4<const Acc>& s0) {
  ForwardViews<In, Acc, Acc, Acc> fw;
  fw.q = q;
  fw.k = k;
  fw.v = v;
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
                                  const Tensor& d_o, const Tensor* dht, DType out_dtype) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(q.dtype);
  BackwardOutput out;
  Kokkos::Timer timer;
  BackwardViews<In, Out, Snap, Acc> views;
  views.q = upload4<In>("linattn::q", q);
  views.k = upload4<In>("linattn::k", k);
  views.v = upload4<In>("linattn::v", v);
  views.d_o = upload4<In>("linattn::do", d_o);
  if (dht) views.dht = upload4<Acc>("linattn::dht", converted(*dht, acc_dtype));
  const std::int64_t N = p.num_sequences();
  views.dq = DeviceView4<Out>(Kokkos::view_alloc(std::string("linattn::dq"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  views.dk = DeviceView4<Out>(Kokkos::view_alloc(std::string("linattn::dk"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DK);
  views.dv = DeviceView4<Out>(Kokkos::view_alloc(std::string("linattn::dv"), Kokkos::WithoutInitializing), p.B, p.T, p.H, p.DV);
  views.dh0 = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::dh0"), Kokkos::WithoutInitializing), N, p.H, p.DK, p.DV);
  DeviceView4<const Acc> initial;
  if (config.recompute_h && s0) initial = upload4<Acc>("linattn::initial_state", converted(*s0, acc_dtype));
  if (!config.recompute_h) views.h = upload5<Snap>("linattn::h", *h);
  if (config.poison_outputs) {
    Kokkos::deep_copy(views.dq, quiet_nan<Out>());
    Kokkos::deep_copy(views.dk, quiet_nan<Out>());
    Kokkos::deep_copy(views.dv, quiet_nan<Out>());
    Kokkos::deep_copy(views.dh0, quiet_nan<Acc>());
  }
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  if constexpr (std::is_same<Snap, Acc>::value) {
    if (config.recompute_h) views.h = recompute_snapshots<In, Acc>(p, views.q, views.k, views.v, initial);
  }
  run_backward_path<decltype(views), Acc>(p, views, make_sequence_map(p), path, config.team_size);
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();

  timer.reset();
  out.dq = Tensor(out_dtype, p.qk_shape());
  out.dk = Tensor(out_dtype, p.qk_shape());
  out.dv = Tensor(out_dtype, p.v_shape());
  out.dh0 = Tensor(acc_dtype, p.state_shape());
  download(out.dq, views.dq);
  download(out.dk, views.dk);
  download(out.dv, views.dv);
  download(out.dh0, views.dh0);
  out.download_seconds = timer.seconds();
  return out;
}

template <class In, class Out>
BackwardOutput with_snapshot_type(const Problem& p, const BackwardConfig& c, GemmPath path, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor* h, const Tensor* s0,
                                  const Tensor& d_o, const Tensor* dht) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType od = c.output_fp32 ? DType::f32 : q.dtype;
  if (!c.recompute_h && h->dtype == DType::bf16) return run_backward_typed<In, Out, bf16_t>(p, c, path, q, k, v, h, s0, d_o, dht, od);
  return run_backward_typed<In, Out, Acc>(p, c, path, q, k, v, h, s0, d_o, dht, od);
}

template <class In>
BackwardOutput with_output_type(const Problem& p, const BackwardConfig& c, GemmPath path, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor* h, const Tensor* s0,
                                const Tensor& d_o, const Tensor* dht) {
  if (c.output_fp32) return with_snapshot_type<In, float>(p, c, path, q, k, v, h, s0, d_o, dht);
  return with_snapshot_type<In, In>(p, c, path, q, k, v, h, s0, d_o, dht);
}

}  // namespace

PathChoice choose_backward_path_here(const BackwardConfig& config, const Problem* p, DType input) {
  BackwardPathFacts f;
  f.backend = kernel_backend();
  f.requested = config.gemm;
  f.output_fp32 = config.output_fp32;
  f.known_case = p != nullptr;
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
                            const Tensor* dht) {
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
  const GemmPath path = choice.path;
  BackwardOutput out;
  switch (q.dtype) {
    case DType::f16: out = with_output_type<fp16_t>(p, config, path, q, k, v, h, initial_state, d_o, dht); break;
    case DType::bf16: out = with_output_type<bf16_t>(p, config, path, q, k, v, h, initial_state, d_o, dht); break;
    case DType::f32: out = with_output_type<float>(p, config, path, q, k, v, h, initial_state, d_o, dht); break;
    case DType::f64: out = with_output_type<double>(p, config, path, q, k, v, h, initial_state, d_o, dht); break;
  }
  out.gemm = choice.path;
  return out;
}

}  // namespace linattn
