// The sequences of a run as the kernels see them: a plain batch is B
// sequences of T tokens (sequence n = batch row n, h indexed (n, c)); a packed
// variable-length batch is N sequences of the one row (h indexed (0,
// chunk_starts()[n] + c)). Every kernel iterates over sequences through this map,
// so that one code path serves both. Device-safe: the offsets live in Views of
// the execution space's memory.
#pragma once

#include "core/chunk_length.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"

#include <string>
#include <vector>

namespace linattn {

// One sequence: where its tokens are and where its snapshots go.
struct Sequence {
  int b;            // batch row of q, k, v, o
  int t0;           // first token in that row
  int length;       // tokens
  int h_b;          // h's batch index
  int h_c0;         // h's chunk index of its first chunk
  int num_chunks;   // ceil(length / C); chunk c holds chunk_length(c, length, C) tokens
};

struct SequenceMap {
  Kokkos::View<const std::int64_t*, MemSpace> cu_seqlens;   // [N + 1]; empty for a plain batch
  Kokkos::View<const std::int64_t*, MemSpace> chunk_starts; // [N + 1]: Problem::chunk_starts()
  int T = 0, C = 0, NT = 0;      // NT: chunks per row of a plain batch
  int num_sequences = 0;
  int total_chunks = 0;          // chunks over all sequences (a plain batch: B * NT)

  KOKKOS_INLINE_FUNCTION Sequence sequence(int n) const {
    if (cu_seqlens.extent(0) == 0) return {n, 0, T, n, 0, NT};
    const int t0 = static_cast<int>(cu_seqlens(n)), len = static_cast<int>(cu_seqlens(n + 1)) - t0;
    return {0, t0, len, 0, static_cast<int>(chunk_starts(n)), (len + C - 1) / C};
  }

  // The sequence holding global chunk g (0 <= g < total_chunks), and the chunk's index in it.
  KOKKOS_INLINE_FUNCTION void locate_chunk(int g, int& n, int& c) const {
    if (cu_seqlens.extent(0) == 0) {
      n = g / NT;
      c = g - n * NT;
      return;
    }
    int lo = 0, hi = num_sequences;  // chunk_starts(lo) <= g < chunk_starts(hi)
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (chunk_starts(mid) <= g) lo = mid;
      else hi = mid;
    }
    n = lo;
    c = g - static_cast<int>(chunk_starts(lo));
  }
};

// What a team of a sequence-walking kernel (league over DV block x sequence x
// head, DV block fastest) owns: sequence n, head h, and the DV columns
// d0 .. d0 + W of the block (the last block of a ragged DV is narrower).
struct SequenceBlock {
  Sequence seq;
  int n, h, d0, W;
};

KOKKOS_INLINE_FUNCTION SequenceBlock sequence_block(const SequenceMap& seqs, int league_rank, int num_blocks, int H,
                                                    int block_dv, int DV) {
  const int bv = league_rank % num_blocks, nh = league_rank / num_blocks;
  const int d0 = bv * block_dv;
  return {seqs.sequence(nh / H), nh / H, nh % H, d0, DV - d0 < block_dv ? DV - d0 : block_dv};
}

// A copy of host offsets in the execution space's memory.
inline Kokkos::View<const std::int64_t*, MemSpace> upload_offsets(const char* label,
                                                                   const std::vector<std::int64_t>& host) {
  Kokkos::View<std::int64_t*, MemSpace> device(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing),
                                               host.size());
  auto mirror = Kokkos::create_mirror_view(device);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(device, mirror);
  return device;
}

// Uploads p's sequence offsets (nothing for a plain batch).
inline SequenceMap make_sequence_map(const Problem& p) {
  SequenceMap map;
  map.T = static_cast<int>(p.T);
  map.C = static_cast<int>(p.chunk);
  map.NT = static_cast<int>(p.num_chunks());
  map.num_sequences = static_cast<int>(p.num_sequences());
  if (!p.varlen()) {
    map.total_chunks = static_cast<int>(p.B * p.num_chunks());
    return map;
  }
  // One running sum (docs/ARCHITECTURE.md, "Cost per sequence"): the pipeline builds a map per window.
  const std::vector<std::int64_t> starts = p.chunk_starts();
  map.total_chunks = static_cast<int>(starts.back());
  map.cu_seqlens = upload_offsets("linattn::cu_seqlens", p.cu_seqlens);
  map.chunk_starts = upload_offsets("linattn::chunk_starts", starts);
  return map;
}

}  // namespace linattn
