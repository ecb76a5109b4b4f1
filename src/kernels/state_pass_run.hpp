// The state pass (state_pass.hpp) on Views already on the device: the kernel
// that StatePassKind names, without the forward fallback. Shared by
// run_state_pass and the benchmark.
#pragma once

#include "kernels/path_choice_here.hpp"
#include "kernels/state_pass.hpp"
#include "kernels/state_pass_kernel.hpp"
#include "kernels/tensor_core_dispatch.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/state_pass_tensor_core.hpp"
#endif

#include <stdexcept>

namespace linattn {

#if defined(KOKKOS_ENABLE_CUDA)
template <class In, class Acc>
void run_tensor_core_state_pass(const Problem& p, const StatePassViews<In, Acc>& views, const DeviceView3<Acc>& z0,
                                const DeviceView3<Acc>& z_state) {
  using E = typename cuda_element<In>::type;
  if constexpr (std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value ||
                std::is_same<E, float>::value) {
    ScopedRegion region("linattn::tensor_core_state_pass");
    // gk takes the forward kind (state_pass_kind_on): this pass does not run gk's prep.
    if (views.gk.extent(0) > 0) throw std::logic_error("tensor-core state pass with a per-key-channel gate");
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
    args.g = views.g.extent(0) > 0 ? views.g.data() : nullptr;  // the gate in fp32 (Acc), as the forward takes it
    args.g_gamma = views.g_gamma.extent(0) > 0 ? views.g_gamma.data() : nullptr;
    cuda::run_state_pass_tensor_core<E>(args, current_device_sms(), ExecSpace().cuda_stream());
  } else {
    throw std::logic_error("tensor-core state pass on a type it does not take");
  }
}
#endif

// z0 and z_state empty unless config.normalize (tensor cores only).
template <class In, class Acc>
void run_state_pass_on(const Problem& p, const ForwardConfig& config, StatePassKind kind,
                       const StatePassViews<In, Acc>& views, const DeviceView3<Acc>& z0, const DeviceView3<Acc>& z_state) {
  if (kind == StatePassKind::tensor_core) {
#if defined(KOKKOS_ENABLE_CUDA)
    run_tensor_core_state_pass<In, Acc>(p, views, z0, z_state);
    return;
#else
    (void)z0;
    (void)z_state;
    throw std::logic_error("tensor-core state pass without CUDA");
#endif
  }
  if (kind != StatePassKind::fused_tiles) throw std::logic_error("run_state_pass_on: no state kernel for this path");
  const PathChoice choice = choose_path_here<In>(p, config);
  const TileGemm tiles = choice.path == GemmPath::host_tile ? TileGemm::host : TileGemm::portable;
  run_fused_state_pass<In, Acc, ForwardViews<In, In, Acc, Acc>>(p, views, config.block_dv, config.team_size, tiles);
}

}  // namespace linattn
