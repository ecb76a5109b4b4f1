// The segment split of the tensor-core launcher (docs/ARCHITECTURE.md,
// "Tensor-core segment split"): how many segments each sequence is cut into
// and how many chunks each holds. Plain integer arithmetic without CUDA, so
// that the CPU build tests it (tests/test_segment_split.cpp).
#pragma once

#include "kernels/cuda/tile_rules.hpp"

#include <algorithm>
#include <cstdint>

namespace linattn::cuda {

// Segments per sequence of NT chunks. A block walks its chunks one after
// another, so with few sequences most SMs would idle; then each sequence is
// split into segments (of at least 8 chunks) so that the blocks of the widest
// DV block fill about one wave: each segment starts from the initial state
// plus the K^T V sums of the segments before it (segment_sum_kernel reads K
// and V once more for them). Measured on the H200 (132 SMs) at 1,32768,32,128:
// whole sequences 1.26 ms, 4 segments (128 blocks) 0.86 ms, 8: 0.88, 16: 0.95;
// at 2,16384,32,128: whole 0.95 ms, 2 segments 0.86, 4: 0.87.
//
// A block of one group of 32 columns on a 64-row DK tile is small (4 warps,
// little shared memory), and about four share an SM: sequences that give one
// such block per SM are cut until the SMs hold four. H200, 8,8192,16,32 (128
// blocks): whole 0.266 ms, 2 segments 0.246, 4: 0.199, 8: 0.204; fp32 inputs
// 0.882, 0.698, 0.650. Wider blocks or DK tiles fill an SM alone, and cutting
// only adds the segment sums: DK 60 (64 columns) whole 0.319 ms, 2 segments
// 0.451; DK 96 0.559, 0.754 (bench/results/segments-sweep.txt).
LINATTN_TILE_RULE int blocks_per_sm(int DK, int block_dv) { return dk_tile(DK) == 64 && block_dv == 32 ? 4 : 1; }

inline int choose_segments(int B, int H, int NT, int DK, int DV, int num_sms) {
  const int bv = widest_block_dv(DK, DV);
  const std::int64_t blocks = std::int64_t(B) * H * dv_blocks(DV, bv);
  const std::int64_t segments = std::min<std::int64_t>(std::int64_t(num_sms) * blocks_per_sm(DK, bv) / blocks, NT / 8);
  return segments >= 2 ? static_cast<int>(segments) : 1;
}

// The cut for `segments` >= 2 requested: ceil(NT / segments) chunks per
// segment, then the count again, so that no segment is empty (20 chunks asked
// in 8 segments: 7 segments of 3 chunks, the last holding 2).
struct SegmentSplit {
  int seg_chunks;  // chunks per segment (the last may hold fewer)
  int segments;    // segments per sequence
};

inline SegmentSplit split_segments(int NT, int segments) {
  const int seg_chunks = (NT + segments - 1) / segments;
  return {seg_chunks, (NT + seg_chunks - 1) / seg_chunks};
}

}  // namespace linattn::cuda
