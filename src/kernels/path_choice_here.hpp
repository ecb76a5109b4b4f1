// choose_path (path_choice.hpp) with the facts of this build: the backend of
// Kokkos' default execution space, and whether the register-blocked plan for
// these input types fits its team scratch. run_variant dispatches on the
// answer; check_forward throws its refusal.
#pragma once

#include "core/half_types.hpp"
#include "kernels/execution.hpp"
#include "kernels/forward.hpp"
#include "kernels/path_choice.hpp"
#include "kernels/register_tiles.hpp"

#include <type_traits>

namespace linattn {

constexpr Backend kernel_backend() {
#if defined(KOKKOS_ENABLE_CUDA)
  if (std::is_same<ExecSpace, Kokkos::Cuda>::value) return Backend::cuda;
#endif
  return host_execution ? Backend::host : Backend::other_device;
}

template <class In>
constexpr DType dtype_of() {
  if constexpr (std::is_same<In, fp16_t>::value) return DType::f16;
  else if constexpr (std::is_same<In, bf16_t>::value) return DType::bf16;
  else if constexpr (std::is_same<In, float>::value) return DType::f32;
  else {
    static_assert(std::is_same<In, double>::value, "inputs are fp16, bf16, fp32 or fp64");
    return DType::f64;
  }
}

template <class In>
PathFacts path_facts_here(const Problem& p, const ForwardConfig& config) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  PathFacts f;
  f.backend = kernel_backend();
  f.variant = config.variant;
  f.requested = config.gemm;
  f.input = dtype_of<In>();
  f.chunk = p.chunk;
  f.DK = p.DK;
  f.DV = p.DV;
  f.B = p.B;
  f.H = p.H;
  f.packed = p.varlen();
  f.block_dv = config.block_dv;
  f.segments = config.segments;
  f.gated = config.gate != GateKind::none;
  f.channel_gated = channel_gate(config.gate);
  f.normalize = config.normalize;
  // as the kernel's kOneStateTile (cuda/fused_tensor_core.hpp, the launcher)
  f.one_state_tile = !config.output_fp32 && !(f.input == DType::f16 && config.snapshots == SnapshotMode::bf16);
  f.register_plan_refusal =
      register_tiles::make_plan<In, Acc>(p, config.block_dv, config.team_size, decay_form(config.gate)).unavailable;
  return f;
}

template <class In>
PathChoice choose_path_here(const Problem& p, const ForwardConfig& config) {
  return choose_path(path_facts_here<In>(p, config));
}

}  // namespace linattn
