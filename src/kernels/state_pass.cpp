#include "kernels/state_pass.hpp"

#include "kernels/forward_typed.hpp"
#include "kernels/state_pass_kernel.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/state_pass_tensor_core.hpp"
#endif

#include <stdexcept>

namespace linattn {

const char* state_pass_kind_name(StatePassKind k) {
  switch (k) {
    case StatePassKind::tensor_core: return "tensorcore";
    case StatePassKind::fused_tiles: return "fused tiles";
    case StatePassKind::forward: return "forward";
  }
  return "?";
}

StatePassKind state_pass_kind(const Problem& p, const ForwardConfig& config, DType input) {
  const PathChoice choice = choose_forward_path(p, config, input);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  if (choice.path == GemmPath::tensor_core && !p.varlen()) return StatePassKind::tensor_core;
  const bool tiles = choice.path == GemmPath::host_tile || choice.path == GemmPath::kokkos_kernels;
  if (config.variant == Variant::fused && tiles && !config.normalize) return StatePassKind::fused_tiles;
  return StatePassKind::forward;
}

double state_pass_cost(StatePassKind k) {
  switch (k) {
    case StatePassKind::tensor_core: return 0.25;
    case StatePassKind::fused_tiles: return 0.22;
    case StatePassKind::forward: return 1.0;
  }
  return 1.0;
}

namespace {

#if defined(KOKKOS_ENABLE_CUDA)
template <class In, class Acc>
void run_tensor_core_pass(const Problem& p, const StatePassViews<In, Acc>& views, const DeviceView3<Acc>& z0,
                          const DeviceView3<Acc>& z_state) {
  using E = typename cuda_element<In>::type;
  if constexpr (std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value) {
    ScopedRegion region("linattn::tensor_core_state_pass");
    cuda::FusedTensorCoreArgs args{};
    args.k = views.k.data();
    args.v = views.v.data();
    args.initial_state = views.initial_state.extent(0) > 0 ? views.initial_state.data() : nullptr;
    args.final_state = views.final_state.data();
    args.initial_z = z0.extent(0) > 0 ? z0.data() : nullptr;
    args.z_state = z_state.extent(0) > 0 ? z_state.data() : nullptr;
    args.B = static_cast<int>(p.B);
    args.T = static_cast<int>(p.T);
    args.H = static_cast<int>(p.H);
    args.DK = static_cast<int>(p.DK);
    args.DV = static_cast<int>(p.DV);
    cuda::run_state_pass_tensor_core<E>(args, current_device_sms(), ExecSpace().cuda_stream());
    return;
  }
  throw std::logic_error("tensor-core state pass on a type it does not take");
}
#endif

template <class In>
StatePassOutput run_state_kernel(const Problem& p, const ForwardConfig& config, StatePassKind kind, const Tensor& k,
                                 const Tensor& v, const Tensor* initial_state, const Tensor* initial_z) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  const DType acc_dtype = accumulation_dtype(k.dtype);
  StatePassOutput out;
  out.kind = kind;
  Kokkos::Timer timer;
  StatePassViews<In, Acc> views;
  views.k = upload4<In>("linattn::k", k);
  views.v = upload4<In>("linattn::v", v);
  if (initial_state) views.initial_state = upload4<Acc>("linattn::initial_state", converted(*initial_state, acc_dtype));
  DeviceView3<Acc> z0, z_state;
  if (initial_z) z0 = upload3<Acc>("linattn::initial_z", converted(*initial_z, acc_dtype));
  const auto N = p.num_sequences();
  views.final_state = DeviceView4<Acc>(Kokkos::view_alloc(std::string("linattn::final_state"), Kokkos::WithoutInitializing),
                                       N, p.H, p.DK, p.DV);
  if (config.normalize)
    z_state = DeviceView3<Acc>(Kokkos::view_alloc(std::string("linattn::z_state"), Kokkos::WithoutInitializing), N,
                               p.H, p.DK);
  if (config.poison_outputs) {
    Kokkos::deep_copy(views.final_state, quiet_nan<Acc>());
    if (config.normalize) Kokkos::deep_copy(z_state, quiet_nan<Acc>());
  }
  Kokkos::fence();
  out.upload_seconds = timer.seconds();

  timer.reset();
  if (kind == StatePassKind::tensor_core) {
#if defined(KOKKOS_ENABLE_CUDA)
    run_tensor_core_pass<In, Acc>(p, views, z0, z_state);
#else
    throw std::logic_error("tensor-core state pass without CUDA");
#endif
  } else {
    const PathChoice choice = choose_forward_path(p, config, k.dtype);
    const TileGemm tiles = choice.path == GemmPath::host_tile ? TileGemm::host : TileGemm::portable;
    run_fused_state_pass<In, Acc, ForwardViews<In, In, Acc, Acc>>(p, views, config.block_dv, config.team_size, tiles);
  }
  Kokkos::fence();
  out.kernel_seconds = timer.seconds();

  timer.reset();
  out.final_state = Tensor(acc_dtype, p.state_shape());
  download(out.final_state, views.final_state);
  if (config.normalize) {
    out.z_state = Tensor(acc_dtype, p.z_shape());
    download(out.z_state, z_state);
  }
  out.download_seconds = timer.seconds();
  return out;
}

}  // namespace

StatePassOutput run_state_pass(const Problem& p, const ForwardConfig& config, const Tensor& k, const Tensor& v,
                               const Tensor* initial_state, const Tensor* initial_z) {
  const StatePassKind kind = state_pass_kind(p, config, k.dtype);
  if (kind == StatePassKind::forward) {
    // The state does not depend on q: k stands in for it.
    ForwardConfig c = config;
    c.snapshots = SnapshotMode::none;
    const ForwardOutput f = run_forward(p, c, k, k, v, initial_state, initial_z);
    StatePassOutput out;
    out.final_state = f.final_state;
    out.z_state = f.z_state;
    out.upload_seconds = f.upload_seconds;
    out.kernel_seconds = f.kernel_seconds;
    out.download_seconds = f.download_seconds;
    return out;
  }
  check_forward(p, config, k.dtype);
  require_shape(k, p.qk_shape(), "k");
  require_shape(v, p.v_shape(), "v");
  if (v.dtype != k.dtype) throw std::invalid_argument("k and v must share one dtype");
  if (initial_state) require_shape(*initial_state, p.state_shape(), "initial_state");
  if (initial_z) {
    if (!config.normalize) throw std::invalid_argument("an initial z_state is only used with normalize");
    require_shape(*initial_z, p.z_shape(), "z_state (initial)");
  }
  switch (k.dtype) {
    case DType::f16: return run_state_kernel<fp16_t>(p, config, kind, k, v, initial_state, initial_z);
    case DType::bf16: return run_state_kernel<bf16_t>(p, config, kind, k, v, initial_state, initial_z);
    case DType::f32: return run_state_kernel<float>(p, config, kind, k, v, initial_state, initial_z);
    case DType::f64: return run_state_kernel<double>(p, config, kind, k, v, initial_state, initial_z);
  }
  throw std::invalid_argument("unsupported dtype");
}

}  // namespace linattn
