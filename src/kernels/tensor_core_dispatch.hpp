// Chooses between the portable KokkosBatched tile GEMMs and the CUDA
// tensor-core kernel for the fused variant, and runs the latter over the
// Kokkos Views on Kokkos' own stream.
#pragma once

#include "core/half_types.hpp"
#include "kernels/forward.hpp"
#include "kernels/forward_views.hpp"

#include <string>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include "kernels/cuda/fused_tensor_core.hpp"
#endif

namespace linattn {

// Empty when the tensor-core kernel can run this (variant, types, shape) here;
// otherwise the reason it cannot.
template <class In, class Out, class Snap>
std::string tensor_core_unavailable(const Problem& p, const ForwardConfig& config) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (!std::is_same<ExecSpace, Kokkos::Cuda>::value) return "the default execution space is not CUDA";
  if (config.variant != Variant::fused) return "only the fused variant has a tensor-core kernel";
  if (p.varlen()) return "packed variable-length batches run on the TeamPolicy kernels";
  if (!std::is_same<In, bf16_t>::value && !std::is_same<In, fp16_t>::value) return "inputs are not fp16 or bf16";
  if (!cuda::fused_tensor_core_supports(static_cast<int>(p.chunk), static_cast<int>(p.DK), static_cast<int>(p.DV)))
    return "the tensor-core kernel needs chunk 64, DK 64 or 128 and DV a multiple of 32";
  if (config.block_dv != 0 && config.block_dv != 32 && config.block_dv != 64 && config.block_dv != 128)
    return "the tensor-core kernel takes block_dv 32, 64 or 128";
  if (config.block_dv != 0 && p.DV % config.block_dv != 0) return "DV is not a multiple of block_dv";
  if (p.B * p.H > 65535) return "B * H exceeds the CUDA grid limit";
  return {};
#else
  (void)p;
  (void)config;
  return "linattn was built without CUDA";
#endif
}

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

struct TensorCoreLaunch {
  std::int64_t block_dv = 0;
  int segments = 1;  // per sequence
};

// Runs the fused variant on tensor cores (segments: 0 chooses); returns what it used.
template <class Views>
TensorCoreLaunch run_fused_tensor_core(const Problem& p, const Views& views, std::int64_t block_dv, int segments) {
#if defined(KOKKOS_ENABLE_CUDA)
  using E = typename cuda_element<typename Views::input_type>::type;
  using O = typename cuda_element<typename Views::output_type>::type;
  using S = typename cuda_element<typename Views::snapshot_type>::type;
  if constexpr (std::is_same<E, __nv_bfloat16>::value || std::is_same<E, __half>::value) {
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
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const cuda::FusedTensorCorePlan plan =
        cuda::run_fused_tensor_core<E, O, S>(args, static_cast<int>(block_dv), segments, sms, ExecSpace().cuda_stream());
    return {plan.block_dv, plan.segments};
  }
#endif
  (void)p;
  (void)views;
  (void)block_dv;
  (void)segments;
  throw std::logic_error("tensor-core kernel requested where it is unavailable");
}

}  // namespace linattn
