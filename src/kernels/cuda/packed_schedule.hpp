// The work list of the tensor-core kernel for a packed batch (cu_seqlens):
// which chunks of which sequence each block walks, and in what order
// (docs/ARCHITECTURE.md, "Packed batches on tensor cores"). Plain C++ without
// CUDA, so that the CPU build tests it (tests/test_packed_schedule.cpp).
//
// A block walks one run of consecutive chunks of one sequence (one head, one
// DV block), so chunks never cross sequences. The walks are listed longest
// first, so that the scheduler starts the long ones before the short ones fill
// the gaps (longest-processing-time order), and a sequence whose walk would
// set the kernel's time is split into segments, as plain batches are
// (segment_split.hpp), when choose_packed_split's model says it pays.
#pragma once

#include "kernels/cuda/segment_split.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

namespace linattn::cuda {

// One run of chunks [c_begin, c_end) of sequence `seq`, whose tokens are
// token0 .. token0 + length of the packed row and whose snapshots start at
// chunk h_chunk0 of h. Segment `seg` > 0 starts from the sums of rows
// sum_base .. sum_base + seg - 1 (one per earlier segment of the sequence);
// in the list of sums to compute, sum_base + seg is where this run's sum goes.
struct TensorCoreWork {
  std::int64_t token0;
  int length;
  int seq;
  int h_chunk0;
  int c_begin, c_end;
  int sum_base;
  int seg;
};

struct PackedSchedule {
  std::vector<TensorCoreWork> walks;  // what the fused kernel's blocks walk, longest first
  std::vector<TensorCoreWork> sums;   // segments whose K^T V sum a later segment needs
  int sum_rows = 0;                   // rows of the sums array (per head)
  int max_segments = 1;               // segments of the most-split sequence
};

// The time model behind the split, in chunk-steps t (one chunk of one block:
// head, DV block). Measured on the H200 (BENCHMARKS.md, "Packed batches"): a
// walk of L chunks takes about L t whatever else shares its SM, and the SMs
// together do about num_sms steps per t, so the fused pass takes
// max(longest walk, steps / num_sms) t. Splitting adds the segment-sum pass,
// whose chunks (K^T V only) cost about half a step: kSumStepCost *
// max(longest summed segment, summed steps / num_sms) t. (8 sequences of
// 32,768 tokens, H 32, D 64: unsplit 0.30 ms, the longest walk's 153 chunks;
// split in 2, 0.33 ms: the sum pass cost more than the 153 -> 125 it saved.)
constexpr double kSumStepCost = 0.5;

// Chunks per segment for packed sequences of `chunks` chunks each, or 0 to
// leave them whole: the cheapest of no split and splits into k = 2..64 pieces
// of the longest sequence (segments of at least 8 chunks, as choose_segments),
// by the model above.
inline int choose_packed_split(const std::vector<int>& chunks, int H, int DK, int DV, int num_sms) {
  if (chunks.empty()) return 0;
  const double per_chunk = double(H) * dv_blocks(DV, widest_block_dv(DK, DV)), sms = std::max(num_sms, 1);
  std::vector<int> longest_first(chunks);
  std::sort(longest_first.begin(), longest_first.end(), std::greater<int>());
  double steps = 0;
  for (int nc : chunks) steps += nc * per_chunk;
  const double base = steps / sms;
  const int longest = longest_first.front();
  double best_cost = std::max<double>(longest, base);
  int best = 0;
  for (int k = 2; k <= 64; ++k) {
    const int target = (longest + k - 1) / k;
    if (target < 8) break;
    double walk = 0, summed_walk = 0, summed_steps = 0;
    for (int nc : longest_first) {
      if (nc <= target) {
        walk = std::max<double>(walk, nc);  // the longest whole sequence; the rest are shorter
        break;
      }
      const SegmentSplit split = split_segments(nc, (nc + target - 1) / target);
      walk = std::max<double>(walk, split.seg_chunks);
      summed_walk = std::max<double>(summed_walk, split.seg_chunks);
      summed_steps += double(split.segments - 1) * split.seg_chunks * per_chunk;
    }
    const double cost = std::max(walk, base) + kSumStepCost * std::max(summed_walk, summed_steps / sms);
    if (cost < best_cost) {
      best_cost = cost;
      best = target;
    }
  }
  return best;
}

// segments: 0 splits as choose_packed_split says; 1 never splits; N > 1 cuts
// every sequence into N segments (fewer when it has fewer chunks).
inline PackedSchedule schedule_packed(const std::vector<std::int64_t>& cu_seqlens, int chunk, int H, int DK, int DV,
                                      int num_sms, int segments) {
  if (cu_seqlens.size() < 2) throw std::invalid_argument("packed schedule: cu_seqlens needs at least two offsets");
  PackedSchedule s;
  const int N = static_cast<int>(cu_seqlens.size()) - 1;
  std::vector<int> chunks(N);
  for (int n = 0; n < N; ++n) chunks[n] = static_cast<int>((cu_seqlens[n + 1] - cu_seqlens[n] + chunk - 1) / chunk);
  const int target = segments == 0 ? choose_packed_split(chunks, H, DK, DV, num_sms) : 0;
  std::int64_t h_chunk0 = 0;
  for (int n = 0; n < N; ++n) {
    const int length = static_cast<int>(cu_seqlens[n + 1] - cu_seqlens[n]);
    const int nc = (length + chunk - 1) / chunk;
    TensorCoreWork w{cu_seqlens[n], length, n, static_cast<int>(h_chunk0), 0, nc, 0, 0};
    h_chunk0 += nc;
    const int pieces = segments != 0 ? std::min(segments, nc) : target > 0 ? (nc + target - 1) / target : 1;
    if (nc == 0 || pieces <= 1) {  // an empty sequence still writes its final state (and z)
      s.walks.push_back(w);
      continue;
    }
    const SegmentSplit split = split_segments(nc, pieces);
    s.max_segments = std::max(s.max_segments, split.segments);
    w.sum_base = s.sum_rows;
    for (int j = 0; j < split.segments; ++j) {
      w.seg = j;
      w.c_begin = j * split.seg_chunks;
      w.c_end = std::min(nc, w.c_begin + split.seg_chunks);
      s.walks.push_back(w);
      if (j + 1 < split.segments) s.sums.push_back(w);
    }
    s.sum_rows += split.segments - 1;
  }
  std::stable_sort(s.walks.begin(), s.walks.end(), [](const TensorCoreWork& a, const TensorCoreWork& b) {
    return a.c_end - a.c_begin > b.c_end - b.c_begin;
  });
  return s;
}

}  // namespace linattn::cuda
