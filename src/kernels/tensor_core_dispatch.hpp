// Runs the CUDA tensor-core kernel of the fused variant over the Kokkos Views
// on Kokkos' own stream. Whether it runs is choose_path's answer
// (path_choice.hpp), not this file's.
#pragma once

#include "core/half_types.hpp"
#include "kernels/forward.hpp"
#include "kernels/forward_views.hpp"

#include <stdexcept>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/fused_tensor_core.hpp"
#include "kernels/cuda/fused_tensor_core_types.hpp"

namespace linattn::cuda {
LINATTN_TC_FORWARD_TYPES(LINATTN_TC_FORWARD_EXTERN)  // compiled once, in fused_tensor_core_*.cpp
}  // namespace linattn::cuda
#endif

namespace linattn {

#if defined(KOKKOS_ENABLE_CUDA)
template <class T>
struct cuda_element {
  using type = T;
};
template <>
struct cuda_element<bf16_t> {
  using type = __nv_bfloat16;
};
template <>
struct cuda_element<fp16_t> {
  using type = __half;
};
#endif

#if defined(KOKKOS_ENABLE_CUDA)
// The SMs of the current device: the tensor-core launchers size their grids by it.
inline int current_device_sms() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}
#endif

struct TensorCoreLaunch {
  std::int64_t block_dv = 0;
  int segments = 1;  // per sequence
};

// Normalization in the kernel's own pass: z0 ([N, H, DK] or empty) and z_state.
struct TensorCoreNormalize {
  const float* initial_z = nullptr;
  float* z_state = nullptr;
};

// Runs the fused variant on tensor cores (segments: 0 chooses), over plain or
// packed batches; with `normalize`, o is divided in the same pass; with a
// gate in the views (g or g_gamma), the gated levels (split sequences too);
// with gk, GLA's per-key-channel decay (whole sequences).
// Returns what it used.
template <class Views>
TensorCoreLaunch run_fused_tensor_core(const Problem& p, const Views& views, std::int64_t block_dv, int segments,
                                       const TensorCoreNormalize* normalize = nullptr) {
#if defined(KOKKOS_ENABLE_CUDA)
  using E = typename cuda_element<typename Views::input_type>::type;
  using O = typename cuda_element<typename Views::output_type>::type;
  using S = typename cuda_element<typename Views::snapshot_type>::type;
  if constexpr (std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value ||
                std::is_same<E, float>::value) {
    ScopedRegion region("linattn::fused_tensor_core");
    cuda::FusedTensorCoreArgs args{};
    args.q = views.q.data();
    args.k = views.k.data();
    args.v = views.v.data();
    args.initial_state = views.initial_state.extent(0) > 0 ? views.initial_state.data() : nullptr;
    args.o = views.o.data();
    args.h = views.h.extent(0) > 0 ? static_cast<void*>(views.h.data()) : nullptr;
    args.final_state = views.final_state.data();
    args.B = static_cast<int>(p.B);
    args.T = static_cast<int>(p.T);
    args.H = static_cast<int>(p.H);
    args.DK = static_cast<int>(p.DK);
    args.DV = static_cast<int>(p.DV);
    args.scale = static_cast<float>(p.scale);
    if (normalize) {
      args.initial_z = normalize->initial_z;
      args.z_state = normalize->z_state;
    }
    // The gate's log-decays in fp32, the accumulation type of every input the kernel takes.
    static_assert(std::is_same<typename Views::acc_type, float>::value, "the tensor-core kernel accumulates in fp32");
    if (views.g.extent(0) > 0) args.g = views.g.data();
    if (views.g_gamma.extent(0) > 0) args.g_gamma = views.g_gamma.data();
    if (views.gk.extent(0) > 0) args.gk = views.gk.data();
    const cuda::FusedTensorCorePlan plan =
        cuda::run_fused_tensor_core<E, O, S>(args, static_cast<int>(block_dv), segments, current_device_sms(),
                                             ExecSpace().cuda_stream(),
                                             p.varlen() ? &p.cu_seqlens : nullptr);
    return {plan.block_dv, plan.segments};
  }
#endif
  (void)p;
  (void)views;
  (void)block_dv;
  (void)segments;
  (void)normalize;
  throw std::logic_error("tensor-core kernel requested where it is unavailable");
}

}  // namespace linattn
