// Runs one forward variant on Views that already live on the device: the
// tensor-core kernel where it applies (and is not turned off), the TeamPolicy
// kernels otherwise: the register-blocked kernels when asked for (and by
// default for the fused and materialized variants off the host), the host tile GEMM on host
// execution spaces unless the portable KokkosBatched path is asked for. Shared by run_forward and the
// benchmark. The tensor-core kernel takes plain batches of the fused variant
// only: a packed variable-length batch (or the recurrent variant) always runs
// the TeamPolicy kernels.
#pragma once

#include "kernels/forward.hpp"
#include "kernels/fused_forward.hpp"
#include "kernels/materialized_register_forward.hpp"
#include "kernels/materialized_forward.hpp"
#include "kernels/recompute_forward.hpp"
#include "kernels/recurrent_forward.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/tensor_core_dispatch.hpp"

namespace linattn {

struct VariantRun {
  ScratchPlan plan;
  GemmPath gemm = GemmPath::kokkos_kernels;
  int segments = 1;  // per sequence (tensor-core kernel only)
};

template <class Views>
VariantRun run_variant(const Problem& p, const ForwardConfig& config, const Views& views) {
  using In = typename Views::input_type;
  using Out = typename Views::output_type;
  using Snap = typename Views::snapshot_type;
  VariantRun run;
  const bool tensor_cores_allowed = (config.gemm == GemmPath::automatic || config.gemm == GemmPath::tensor_core) &&
                                    !p.varlen() && config.variant != Variant::recurrent;
  if (tensor_cores_allowed && tensor_core_unavailable<In, Out, Snap>(p, config).empty()) {
    const TensorCoreLaunch launch = run_fused_tensor_core(p, views, config.block_dv, config.segments);
    run.plan.block_dv = launch.block_dv;
    run.segments = launch.segments;
    run.gemm = GemmPath::tensor_core;
    return run;
  }
  if (config.segments > 1)
    throw std::invalid_argument("segments > 1 splits sequences on the tensor-core kernel only, which does not run here");
  if (config.gemm == GemmPath::host_tile && !host_execution)
    throw std::invalid_argument("--gemm hosttile is not available: the default execution space is not a host space");
  const SequenceMap seqs = make_sequence_map(p);
  using Acc = typename Views::acc_type;
  const bool registers = config.gemm == GemmPath::registers ||
                         (config.gemm == GemmPath::automatic && !host_execution &&
                          register_forward_unavailable<In, Acc>(p, config).empty());
  if (config.gemm == GemmPath::registers) {
    const std::string why = register_forward_unavailable<In, Acc>(p, config);
    if (!why.empty()) throw std::invalid_argument("--gemm registers is not available: " + why);
  }
  if (registers) {
    run.plan = config.variant == Variant::fused
                   ? run_fused_registers(p, views, seqs, config.block_dv, config.team_size)
                   : run_materialized_registers(p, views, seqs, config.block_dv, config.team_size);
    run.gemm = GemmPath::registers;
    return run;
  }
  const bool host_tiles = host_execution && config.gemm != GemmPath::kokkos_kernels;
  const TileGemm tiles = host_tiles ? TileGemm::host : TileGemm::portable;
  run.gemm = host_tiles ? GemmPath::host_tile : GemmPath::kokkos_kernels;
  switch (config.variant) {
    case Variant::fused: run.plan = run_fused(p, views, seqs, config.block_dv, config.team_size, tiles); break;
    case Variant::recompute: run.plan = run_recompute(p, views, seqs, config.block_dv, config.team_size, tiles); break;
    case Variant::materialized:
      run.plan = run_materialized(p, views, seqs, config.block_dv, config.team_size, tiles);
      break;
    case Variant::recurrent:
      run.plan = run_recurrent(p, views, seqs, config.block_dv, config.team_size);  // no tile products
      break;
  }
  return run;
}

}  // namespace linattn
