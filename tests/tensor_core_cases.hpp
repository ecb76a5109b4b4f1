// What the tensor-core forward tests share (test_tensor_core_packed.cpp,
// test_tensor_core_head_sizes.cpp): whether this build has the kernels, the
// problems they run, the configuration that asks for tensor cores, and the
// trace line that names a case.
#pragma once

#include "core/problem.hpp"
#include "kernels/forward.hpp"

#include <string>
#include <vector>

namespace linattn::testing {

#if defined(KOKKOS_ENABLE_CUDA)
constexpr bool kHaveTensorCores = true;
#else
constexpr bool kHaveTensorCores = false;
#endif

inline Problem plain_problem(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t DK, std::int64_t DV) {
  Problem p;
  p.B = B; p.T = T; p.H = H; p.DK = DK; p.DV = DV; p.chunk = 64; p.scale = 0.3;
  return p;
}

// B = 1, the sequences of `lengths` packed along T.
inline Problem packed_problem(const std::vector<std::int64_t>& lengths, std::int64_t H, std::int64_t DK,
                              std::int64_t DV) {
  Problem p = plain_problem(1, 0, H, DK, DV);
  p.cu_seqlens = {0};
  for (std::int64_t n : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + n);
  p.T = p.cu_seqlens.back();
  return p;
}

inline ForwardConfig tensor_cores(int segments, std::int64_t block_dv, bool fp32_out, SnapshotMode snaps,
                                  bool normalize) {
  ForwardConfig cfg;
  cfg.gemm = GemmPath::tensor_core;
  cfg.segments = segments;
  cfg.block_dv = block_dv;
  cfg.output_fp32 = fp32_out;
  cfg.snapshots = snaps;
  cfg.normalize = normalize;
  return cfg;
}

inline std::string describe(const Problem& p, const ForwardConfig& cfg, DType dtype, bool state) {
  std::string s = std::string(dtype_name(dtype)) + " B=" + std::to_string(p.B) + " T=" + std::to_string(p.T) +
                  " H=" + std::to_string(p.H) + " DK=" + std::to_string(p.DK) + " DV=" + std::to_string(p.DV) +
                  (p.varlen() ? " packed N=" + std::to_string(p.num_sequences()) : "") + " segments " +
                  std::to_string(cfg.segments) + " block_dv " + std::to_string(cfg.block_dv);
  if (cfg.output_fp32) s += " fp32 o";
  if (cfg.snapshots == SnapshotMode::bf16) s += " bf16 h";
  if (cfg.normalize) s += " normalized";
  if (state) s += " with initial state";
  return s;
}

}  // namespace linattn::testing
