#include "pipeline/compute_stage.hpp"

#include "pipeline/compute_stage_typed.hpp"

namespace linattn::pipeline {
namespace {

template <class In, class Out>
std::unique_ptr<ComputeStage> with_snapshots(const ForwardConfig& config) {
  using Acc = std::conditional_t<std::is_same<In, double>::value, double, float>;
  if (config.snapshots == SnapshotMode::bf16) return std::make_unique<TypedComputeStage<In, Out, bf16_t>>(config);
  return std::make_unique<TypedComputeStage<In, Out, Acc>>(config);
}

template <class In>
std::unique_ptr<ComputeStage> with_output(const ForwardConfig& config) {
  if (config.output_fp32) return with_snapshots<In, float>(config);
  return with_snapshots<In, In>(config);
}

}  // namespace

std::unique_ptr<ComputeStage> make_compute_stage(DType input, const ForwardConfig& config) {
  switch (input) {
    case DType::f16: return with_output<fp16_t>(config);
    case DType::bf16: return with_output<bf16_t>(config);
    case DType::f32: return with_output<float>(config);
    case DType::f64: return with_output<double>(config);
  }
  throw std::invalid_argument("unsupported dtype");
}

}  // namespace linattn::pipeline
