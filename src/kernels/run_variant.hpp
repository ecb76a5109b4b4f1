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
#include "kernels/normalize_output.hpp"
#include "kernels/path_choice_here.hpp"
#include "kernels/recompute_forward.hpp"
#include "kernels/recurrent_forward.hpp"
#include "kernels/sequence_map.hpp"
#include "kernels/tensor_core_dispatch.hpp"

#include <stdexcept>
#include <type_traits>

namespace linattn {

struct VariantRun {
  ScratchPlan plan;
  GemmPath gemm = GemmPath::kokkos_kernels;
  int segments = 1;  // per sequence (tensor-core kernel only)
};

// Runs the variant on `choice`'s path (choose_path_here's answer, not refused).
template <class Views>
VariantRun run_variant_on(const Problem& p, const ForwardConfig& config, const Views& views, const PathChoice& choice) {
  // A gate is data: a configuration that names one without the views holding it would run level 1.
  if ((config.gate != GateKind::none) != views.gated())
    throw std::logic_error("run_variant: the configuration's gate and the views' gate disagree");
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

template <class Views>
VariantRun run_variant(const Problem& p, const ForwardConfig& config, const Views& views) {
  const PathChoice choice = choose_path_here<typename Views::input_type>(p, config);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  return run_variant_on(p, config, views, choice);
}

// Normalization's views: z0 ([N, H, DK] or empty), z_state, and o_raw, the
// unnormalized o in the accumulation type that the portable paths write
// before normalize_output.hpp divides it (empty where the tensor-core kernel
// runs: it divides in its own pass, see normalize_writes_raw_o).
template <class Acc>
struct NormalizeViews {
  DeviceView4<Acc> o_raw;
  DeviceView3<const Acc> z0;
  DeviceView3<Acc> z_state;
};

// Whether normalization needs the o_raw buffer on this path.
inline bool normalize_writes_raw_o(const PathChoice& choice) { return choice.path != GemmPath::tensor_core; }

// run_variant with fla's normalize=True applied to views.o: in the tensor-core
// kernel's own pass where it runs, else as a pass after the variant.
template <class Views>
VariantRun run_variant_normalized(const Problem& p, const ForwardConfig& config, const Views& views,
                                  const NormalizeViews<typename Views::acc_type>& norm) {
  using In = typename Views::input_type;
  using Acc = typename Views::acc_type;
  const PathChoice choice = choose_path_here<In>(p, config);
  if (!choice.ok()) throw std::invalid_argument(choice.refusal);
  if constexpr (std::is_same<Acc, float>::value) {
    if (!normalize_writes_raw_o(choice)) {
      const TensorCoreNormalize fused{norm.z0.extent(0) > 0 ? norm.z0.data() : nullptr, norm.z_state.data()};
      const TensorCoreLaunch launch = run_fused_tensor_core(p, views, config.block_dv, config.segments, &fused);
      VariantRun run;
      run.gemm = choice.path;
      run.plan.block_dv = launch.block_dv;
      run.segments = launch.segments;
      return run;
    }
  }
  if (norm.o_raw.extent(0) == 0) throw std::logic_error("normalize on this path needs the o_raw buffer");
  ForwardViews<In, Acc, typename Views::snapshot_type, Acc> raw;
  raw.q = views.q;
  raw.k = views.k;
  raw.v = views.v;
  raw.initial_state = views.initial_state;
  raw.o = norm.o_raw;
  raw.h = views.h;
  raw.final_state = views.final_state;
  const VariantRun run = run_variant_on(p, config, raw, choice);
  run_normalize<In, Acc, typename Views::output_type>(p, make_sequence_map(p), views.q, views.k, norm.o_raw, views.o,
                                                      norm.z0, norm.z_state);
  return run;
}

// run_variant and run_variant_normalized for every element-type combination
// the program runs (input; output: the input type or fp32; snapshots: bf16
// or the accumulation type), compiled once each in run_variant_<input>.cpp
// rather than in every translation unit that runs the forward (forward.cpp,
// compute_stage.cpp, benchmark.cpp, backward.cpp): explicit instantiation.
#define LINATTN_RUN_VARIANT(PREFIX, In, Out, Snap, Acc)                                                   \
  PREFIX template VariantRun run_variant<ForwardViews<In, Out, Snap, Acc>>(                                \
      const Problem&, const ForwardConfig&, const ForwardViews<In, Out, Snap, Acc>&);                      \
  PREFIX template VariantRun run_variant_normalized<ForwardViews<In, Out, Snap, Acc>>(                     \
      const Problem&, const ForwardConfig&, const ForwardViews<In, Out, Snap, Acc>&, const NormalizeViews<Acc>&);
#define LINATTN_RUN_VARIANTS_FP16(PREFIX)                     \
  LINATTN_RUN_VARIANT(PREFIX, fp16_t, fp16_t, bf16_t, float) \
  LINATTN_RUN_VARIANT(PREFIX, fp16_t, fp16_t, float, float)  \
  LINATTN_RUN_VARIANT(PREFIX, fp16_t, float, bf16_t, float)  \
  LINATTN_RUN_VARIANT(PREFIX, fp16_t, float, float, float)
#define LINATTN_RUN_VARIANTS_BF16(PREFIX)                     \
  LINATTN_RUN_VARIANT(PREFIX, bf16_t, bf16_t, bf16_t, float) \
  LINATTN_RUN_VARIANT(PREFIX, bf16_t, bf16_t, float, float)  \
  LINATTN_RUN_VARIANT(PREFIX, bf16_t, float, bf16_t, float)  \
  LINATTN_RUN_VARIANT(PREFIX, bf16_t, float, float, float)
#define LINATTN_RUN_VARIANTS_FP32(PREFIX)                   \
  LINATTN_RUN_VARIANT(PREFIX, float, float, bf16_t, float) \
  LINATTN_RUN_VARIANT(PREFIX, float, float, float, float)
#define LINATTN_RUN_VARIANTS_FP64(PREFIX)                       \
  LINATTN_RUN_VARIANT(PREFIX, double, double, bf16_t, double) \
  LINATTN_RUN_VARIANT(PREFIX, double, double, double, double) \
  LINATTN_RUN_VARIANT(PREFIX, double, float, bf16_t, double)  \
  LINATTN_RUN_VARIANT(PREFIX, double, float, double, double)

LINATTN_RUN_VARIANTS_FP16(extern)
LINATTN_RUN_VARIANTS_BF16(extern)
LINATTN_RUN_VARIANTS_FP32(extern)
LINATTN_RUN_VARIANTS_FP64(extern)

}  // namespace linattn
