// Runs one forward variant on Views that already live on the device, on the
// path choose_path_here picks (path_choice.hpp holds the rule): the tensor-core
// kernel, the register-blocked kernels, or the TeamPolicy tile kernels over
// the host tile GEMM or KokkosBatched. Shared by run_forward, the pipeline and
// the benchmark.
#pragma once

#include "kernels/forward.hpp"
#include "kernels/fused_forward.hpp"
#include "kernels/materialized_register_forward.hpp"
#include "kernels/materialized_forward.hpp"
#include "kernels/path_choice_here.hpp"
#include "kernels/recompute_forward.hpp"
#include "kernels/recurrent_forward.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/tensor_core_dispatch.hpp"

#include <stdexcept>

namespace linattn {

struct VariantRun {
  ScratchPlan plan;
  GemmPath gemm = GemmPath::kokkos_kernels;
  int segments = 1;  // per sequence (tensor-core kernel only)
};

template <class Views>
VariantRun run_variant(const Problem& p, const ForwardConfig& config, const Views& views) {
  const PathChoice choice = choose_path_here<typename Views::input_type>(p, config);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  VariantRun run;
  run.gemm = choice.path;
  if (choice.path == GemmPath::tensor_core) {
    const TensorCoreLaunch launch = run_fused_tensor_core(p, views, config.block_dv, config.segments);
    run.plan.block_dv = launch.block_dv;
    run.segments = launch.segments;
    return run;
  }
  const SequenceMap seqs = make_sequence_map(p);
  if (choice.path == GemmPath::registers) {
    run.plan = config.variant == Variant::fused
                   ? run_fused_registers(p, views, seqs, config.block_dv, config.team_size)
                   : run_materialized_registers(p, views, seqs, config.block_dv, config.team_size);
    return run;
  }
  const TileGemm tiles = choice.path == GemmPath::host_tile ? TileGemm::host : TileGemm::portable;
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
