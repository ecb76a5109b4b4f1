// fla's normalize=True as a small pass after any variant: per (sequence, head)
// a scan over the tokens keeps the running key sum z_t = z0 + sum_{s<=t} k_s
// (one element of z per thread of the team, in the accumulation type), and
// divides o_t by scale * q_t . z_t + 1e-10. o arrives unnormalized in the
// accumulation type and is rounded to the output type once, after the
// division (rounding first would add a second rounding). z after the last
// token of each sequence is z_state [N, H, DK], which a later run can take as
// its z0 to resume the sequence.
#pragma once

#include "core/half_types.hpp"
#include "core/problem.hpp"
#include "kernels/execution.hpp"
#include "kernels/sequence_map.hpp"

namespace linattn {

template <class T>
using DeviceView3 = Kokkos::View<T***, Kokkos::LayoutRight, MemSpace>;

template <class In, class Acc, class Out>
struct NormalizeOutput {
  using ZVector = Kokkos::View<Acc*, ScratchSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  DeviceView4<const In> q, k;       // [B, T, H, DK]
  DeviceView4<const Acc> o_raw;     // [B, T, H, DV], unnormalized (may alias o when Out = Acc)
  DeviceView4<Out> o;               // [B, T, H, DV]
  DeviceView3<const Acc> initial_z; // [N, H, DK] or empty (start from zero)
  DeviceView3<Acc> z_state;         // [N, H, DK]
  SequenceMap seqs;
  int H, DK, DV;
  Acc scale;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int n = m.league_rank() / H, h = m.league_rank() % H;
    const Sequence seq = seqs.sequence(n);
    const int b = seq.b;
    ZVector z(m.team_scratch(0), DK);
    const bool has_z0 = initial_z.extent(0) > 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int d) { z(d) = has_z0 ? initial_z(n, h, d) : Acc(0); });
    m.team_barrier();
    for (int s = 0; s < seq.length; ++s) {
      const int t = seq.t0 + s;
      Acc qz = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(m, DK),
          [&](const int d, Acc& sum) {
            const Acc zd = z(d) + to_acc<Acc>(k(b, t, h, d));  // inclusive: z_t includes k_t
            z(d) = zd;
            sum += to_acc<Acc>(q(b, t, h, d)) * zd;
          },
          qz);
      const Acc denominator = scale * qz + Acc(1e-10);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DV),
                           [&](const int j) { o(b, t, h, j) = from_acc<Out>(o_raw(b, t, h, j) / denominator); });
      m.team_barrier();  // z of this token is complete before the next one reads it
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(m, DK), [&](const int d) { z_state(n, h, d) = z(d); });
  }
};

template <class In, class Acc, class Out>
void run_normalize(const Problem& p, const SequenceMap& seqs, const DeviceView4<const In>& q,
                   const DeviceView4<const In>& k, const DeviceView4<const Acc>& o_raw, const DeviceView4<Out>& o,
                   const DeviceView3<const Acc>& initial_z, const DeviceView3<Acc>& z_state) {
  ScopedRegion region("linattn::normalize");
  using Kernel = NormalizeOutput<In, Acc, Out>;
  using ZVector = typename Kernel::ZVector;
  Kernel kernel{q, k, o_raw, o, initial_z, z_state, seqs, static_cast<int>(p.H), static_cast<int>(p.DK),
                static_cast<int>(p.DV), static_cast<Acc>(p.scale)};
  const int league = static_cast<int>(p.num_sequences() * p.H);
  const std::size_t bytes = ZVector::shmem_size(static_cast<std::size_t>(p.DK));
  Kokkos::parallel_for("linattn::normalize_output",
                       TeamPolicy(league, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(bytes)), kernel);
}

}  // namespace linattn
