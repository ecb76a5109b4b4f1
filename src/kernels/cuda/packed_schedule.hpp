// The work list of the tensor-core kernel for a packed batch (cu_seqlens):
// which chunks of which sequence each block walks, and in what order
// (docs/ARCHITECTURE.md, "Packed batches on tensor cores"). Plain C++ without
// CUDA, so that the CPU build tests it (tests/test_packed_schedule.cpp).
//
// A block walks one run of consecutive chunks of one sequence (one head, one
// DV block), so chunks never cross sequences. The kernel is bound by the
// longest walk: a sequence much longer than the batch's share per SM is split
// into segments, as plain batches are (segment_split.hpp), and the walks are
// listed longest first, so that the scheduler starts the long ones before the
// short ones fill the gaps (longest-processing-time order).
#pragma once

#include "kernels/cuda/segment_split.hpp"

#include <algorithm>
#include <cstdint>
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

// Chunks per segment that keep one wave of blocks busy: the batch's work in
// (chunk, head, DV block) steps over the SMs, at least 8 chunks (a shorter
// segment costs its sum pass more than it saves, as in choose_segments).
inline int balanced_segment_chunks(std::int64_t total_chunks, int H, int DV, int num_sms) {
  const std::int64_t steps = total_chunks * H * (DV / widest_block_dv(DV));
  const std::int64_t share = (steps + num_sms - 1) / std::max(num_sms, 1);
  return static_cast<int>(std::max<std::int64_t>(8, share));
}

// segments: 0 splits the sequences longer than balanced_segment_chunks into
// pieces of about that many chunks; 1 never splits; N > 1 cuts every sequence
// into N segments (fewer when it has fewer chunks).
inline PackedSchedule schedule_packed(const std::vector<std::int64_t>& cu_seqlens, int chunk, int H, int DV,
                                      int num_sms, int segments) {
  if (cu_seqlens.size() < 2) throw std::invalid_argument("packed schedule: cu_seqlens needs at least two offsets");
  PackedSchedule s;
  const int N = static_cast<int>(cu_seqlens.size()) - 1;
  std::int64_t total_chunks = 0;
  for (int n = 0; n < N; ++n) total_chunks += (cu_seqlens[n + 1] - cu_seqlens[n] + chunk - 1) / chunk;
  const int target = segments == 0 ? balanced_segment_chunks(total_chunks, H, DV, num_sms) : 0;
  std::int64_t h_chunk0 = 0;
  for (int n = 0; n < N; ++n) {
    const int length = static_cast<int>(cu_seqlens[n + 1] - cu_seqlens[n]);
    const int nc = (length + chunk - 1) / chunk;
    TensorCoreWork w{cu_seqlens[n], length, n, static_cast<int>(h_chunk0), 0, nc, 0, 0};
    h_chunk0 += nc;
    int pieces = segments == 0 ? (nc + target - 1) / target : std::min(segments, nc);
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
