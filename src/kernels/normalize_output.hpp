// fla's normalize=True as a small pass after any variant: the running key
// sum z_t = z0 + sum_{s<=t} k_s (per sequence and head, inclusive) and the
// division of o_t by scale * q_t . z_t + 1e-10. o arrives unnormalized in the
// accumulation type and is rounded to the output type once, after the
// division (rounding first would add a second rounding). z after the last
// token of each sequence is z_state [N, H, DK], which a later run can take as
// its z0 to resume the sequence.
//
// The scan is chunked so that it is parallel over chunks, as the forward is:
// (1) the key sum of every (chunk, head), (2) per (sequence, head) an
// exclusive scan of those sums from z0 (and z_state), (3) per (chunk, head)
// the chunk's z_t from its prefix, the denominators, and the division of o.
// z is kept in the accumulation type throughout.
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/sequence_map.hpp"

namespace linattn {

// (1) sums(g, h, d) = sum of k over the tokens of global chunk g.
template <class In, class Acc>
struct ChunkKeySums {
  DeviceView4<const In> k;
  DeviceView3<Acc> sums;  // [total_chunks, H, DK]
  SequenceMap seqs;
  int H, DK, C;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int g = m.league_rank() / H, h = m.league_rank() % H;
    int n = 0, c = 0;
    seqs.locate_chunk(g, n, c);
    const Sequence seq = seqs.sequence(n);
    const int t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int d) {
      Acc sum = 0;
      for (int s = 0; s < L; ++s) sum += to_acc<Acc>(k(seq.b, t0 + s, h, d));
      sums(g, h, d) = sum;
    });
  }
};

// (2) sums(g) becomes z before chunk g (z0 + the sums of the sequence's earlier
// chunks); z_state = z after the sequence's last chunk.
template <class Acc>
struct ChunkPrefixScan {
  DeviceView3<Acc> sums;             // in: chunk sums; out: exclusive prefixes
  DeviceView3<const Acc> initial_z;  // [N, H, DK] or empty
  DeviceView3<Acc> z_state;          // [N, H, DK]
  SequenceMap seqs;
  int H, DK;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int n = m.league_rank() / H, h = m.league_rank() % H;
    const Sequence seq = seqs.sequence(n);
    const int g0 = seqs.cu_seqlens.extent(0) == 0 ? n * seqs.NT : seq.h_c0;  // its first global chunk
    const bool has_z0 = initial_z.extent(0) > 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int d) {
      Acc z = has_z0 ? initial_z(n, h, d) : Acc(0);
      for (int c = 0; c < seq.num_chunks; ++c) {
        const Acc sum = sums(g0 + c, h, d);
        sums(g0 + c, h, d) = z;
        z += sum;
      }
      z_state(n, h, d) = z;
    });
  }
};

// (3) o_t = o_t / (scale * q_t . z_t + 1e-10) over the tokens of chunk g: each
// thread walks the chunk for one element d of z from the chunk's prefix,
// leaving q_t[d] z_t[d] in a C x (DK + 1) scratch tile (the extra column keeps
// a GPU's threads that read one row each off one shared-memory bank); then a
// thread per token sums its row, and the team divides the chunk's o rows.
// Three barriers per chunk, nothing sequential per token across the team.
template <class In, class Acc, class Out>
struct NormalizeOutput : KernelShape {
  using Vector = Kokkos::View<Acc*, ScratchSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  DeviceView4<const In> q, k;       // [B, T, H, DK]
  DeviceView4<const Acc> o_raw;     // [B, T, H, DV], unnormalized (may alias o when Out = Acc)
  DeviceView4<Out> o;               // [B, T, H, DV]
  DeviceView3<const Acc> prefixes;  // [total_chunks, H, DK]: z before each chunk
  SequenceMap seqs;
  int level;
  Acc scale;

  static std::size_t scratch_bytes(std::int64_t C, std::int64_t DK) {
    return Tile<Acc>::shmem_size(static_cast<std::size_t>(C), static_cast<std::size_t>(DK + 1)) +
           Vector::shmem_size(static_cast<std::size_t>(C));
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int g = m.league_rank() / H, h = m.league_rank() % H;
    int n = 0, c = 0;
    seqs.locate_chunk(g, n, c);
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b, t0 = seq.t0 + c * C, L = chunk_length(c, seq.length, C);
    Tile<Acc> P(m.team_scratch(level), C, DK + 1);
    Vector denominator(m.team_scratch(level), C);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int d) {
      Acc z = prefixes(g, h, d);
      for (int s = 0; s < L; ++s) {
        z += to_acc<Acc>(k(b, t0 + s, h, d));  // inclusive: z_t includes k_t
        P(s, d) = to_acc<Acc>(q(b, t0 + s, h, d)) * z;
      }
    });
    m.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, L), [&](const int s) {
      Acc qz = 0;
      for (int d = 0; d < DK; ++d) qz += P(s, d);
      denominator(s) = scale * qz + Acc(1e-10);
    });
    m.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, L * DV), [&](const int e) {
      const int s = e / DV, j = e % DV;
      o(b, t0 + s, h, j) = from_acc<Out>(o_raw(b, t0 + s, h, j) / denominator(s));
    });
  }
};

template <class In, class Acc, class Out>
void run_normalize(const Problem& p, const SequenceMap& seqs, const DeviceView4<const In>& q,
                   const DeviceView4<const In>& k, const DeviceView4<const Acc>& o_raw, const DeviceView4<Out>& o,
                   const DeviceView3<const Acc>& initial_z, const DeviceView3<Acc>& z_state) {
  ScopedRegion region("linattn::normalize");
  const int H = static_cast<int>(p.H), DK = static_cast<int>(p.DK), C = static_cast<int>(p.chunk),
            G = seqs.total_chunks;
  DeviceView3<Acc> prefixes(Kokkos::view_alloc(std::string("linattn::z_prefixes"), Kokkos::WithoutInitializing), G, H,
                            DK);
  Kokkos::parallel_for("linattn::normalize_chunk_sums", TeamPolicy(G * H, Kokkos::AUTO),
                       ChunkKeySums<In, Acc>{k, prefixes, seqs, H, DK, C});
  Kokkos::parallel_for("linattn::normalize_prefix_scan", TeamPolicy(seqs.num_sequences * H, Kokkos::AUTO),
                       ChunkPrefixScan<Acc>{prefixes, initial_z, z_state, seqs, H, DK});
  using Divide = NormalizeOutput<In, Acc, Out>;
  const std::size_t bytes = Divide::scratch_bytes(C, DK);
  const int level = bytes <= static_cast<std::size_t>(TeamPolicy::scratch_size_max(0)) ? 0 : 1;
  Kokkos::parallel_for("linattn::normalize_output",
                       TeamPolicy(G * H, Kokkos::AUTO).set_scratch_size(level, Kokkos::PerTeam(bytes)),
                       Divide{kernel_shape(p), q, k, o_raw, o, prefixes, seqs, level, static_cast<Acc>(p.scale)});
}

}  // namespace linattn
