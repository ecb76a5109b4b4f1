// The device-resident benchmark behind `linattn bench`: random inputs made on
// the device, warm-up, fenced timings (median of N), the copy bandwidth of the
// same device measured in the same run, the ledger's FLOPs and minimum bytes,
// and the accuracy of o against the fp64 reference on a slice.
#pragma once

#include "core/gate.hpp"

#include "core/variant.hpp"
#include "kernels/forward.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace linattn {

struct BenchConfig {
  Problem problem;  // with cu_seqlens: a packed batch (B = 1)
  DType dtype = DType::bf16;
  std::vector<Variant> variants{Variant::fused, Variant::materialized, Variant::recompute};
  GemmPath gemm = GemmPath::automatic;
  SnapshotMode snapshots = SnapshotMode::bf16;  // as fla stores h
  bool output_fp32 = false;
  bool normalize = false;  // fla's normalize=True (o divided by scale q . cumsum k)
  bool backward = false;   // time the backward (run_backward's kernel) instead of the forward variants
  GateKind gate = GateKind::none;  // with a decay (forward, state pass or backward): g [B, T, H] uniform in [-1, 0), or RetNet's g_gamma [H]
  bool state_pass = false; // after the fused row, time the state pass (kernels/state_pass.hpp) on the same k, v
  std::int64_t block_dv = 0;
  int segments = 0;  // tensor-core kernel: 0 chooses
  int team_size = 0;
  int reps = 20;
  int warmup = 3;
  std::int64_t accuracy_tokens = 1024;  // tokens of (b=0, h=0) checked against fp64 (their sequences, when packed)
  std::uint64_t seed = 1;
};

struct VariantTiming {
  Variant variant = Variant::fused;
  bool backward = false;  // a backward row: o_rel_l2 is then dq's, on the whole (b = 0, h = 0) row
  bool state_pass = false;  // a state-pass row: o_rel_l2 is then its final state's against the fused forward's
  GemmPath gemm = GemmPath::kokkos_kernels;
  std::int64_t block_dv = 0;
  int segments = 1;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double flops = 0, min_bytes = 0;
  double gbps = 0;            // min_bytes / median time
  double tflops = 0;          // ledger FLOPs / median time
  double copy_fraction = 0;   // gbps / measured copy bandwidth
  double floor_ms = 0;        // min_bytes / measured copy bandwidth
  double o_rel_l2 = 0;        // vs fp64 reference on the slice
  double dk_rel_l2 = 0, dv_rel_l2 = 0;  // backward rows
  double dg_rel_l2 = 0;                 // gated backward rows: dg of the (b = 0, h = 0) row's tokens
};

struct BenchReport {
  std::string backend, kokkos_version, device;
  double copy_gbps = 0;  // large device-to-device copy, bytes read + written
  std::vector<VariantTiming> rows;
};

// Measures the copy bandwidth (bytes read + written per second) with a
// deep_copy of `bytes` bytes, median of `reps`.
double measure_copy_bandwidth(std::size_t bytes, int reps);

BenchReport run_benchmark(const BenchConfig& config);

}  // namespace linattn
