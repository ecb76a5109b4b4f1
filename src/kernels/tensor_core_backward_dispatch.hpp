// Runs the CUDA tensor-core backward (src/kernels/cuda/tensor_core_backward.hpp)
// over the Kokkos Views of a BackwardViews on Kokkos' own stream. Whether it
// runs is choose_backward_path's answer (path_choice.hpp), not this file's.
#pragma once

#include "core/problem.hpp"
#include "kernels/tensor_core_dispatch.hpp"

#include <stdexcept>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/tensor_core_backward.hpp"
#endif

namespace linattn {

template <class Views>
void run_tensor_core_backward(const Problem& p, const Views& views) {
#if defined(KOKKOS_ENABLE_CUDA)
  using E = typename cuda_element<typename Views::input_type>::type;
  using S = typename cuda_element<typename Views::snapshot_type>::type;
  constexpr bool kTakes = std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value ||
                          std::is_same<E, float>::value;
  if constexpr (kTakes && std::is_same<typename Views::output_type, typename Views::input_type>::value &&
                (std::is_same<S, __nv_bfloat16>::value || std::is_same<S, float>::value)) {
    ScopedRegion region("linattn::tensor_core_backward");
    cuda::TensorCoreBackwardArgs args{};
    args.q = views.q.data();
    args.k = views.k.data();
    args.v = views.v.data();
    args.d_o = views.d_o.data();
    args.h = views.h.data();
    args.dht = views.dht.extent(0) > 0 ? views.dht.data() : nullptr;
    args.dq = views.dq.data();
    args.dk = views.dk.data();
    args.dv = views.dv.data();
    args.dh0 = views.dh0.data();
    args.H = static_cast<int>(p.H);
    args.DK = static_cast<int>(p.DK);
    args.DV = static_cast<int>(p.DV);
    args.scale = static_cast<float>(p.scale);
    if (views.channel_gated()) {  // GLA's gk and dgk [B, T, H, DK] in fp32
      args.gk = views.gk.data();
      args.dg = views.dgk.data();
    } else if (views.gated()) {  // the log-decays and dg in fp32, the accumulation type of every input it takes
      if (views.g.extent(0) > 0) args.g = views.g.data();
      if (views.g_gamma.extent(0) > 0) args.g_gamma = views.g_gamma.data();
      args.dg = views.dg.data();
    }
    cuda::run_tensor_core_backward<E, S>(args, static_cast<int>(p.B), p.T, p.varlen() ? &p.cu_seqlens : nullptr,
                                         current_device_sms(), ExecSpace().cuda_stream());
    return;
  }
#endif
  (void)p;
  (void)views;
  throw std::logic_error("tensor-core backward requested where it is unavailable");
}

}  // namespace linattn
