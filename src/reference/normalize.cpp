// fla's normalize=True, as its own step on an unnormalized result: the running
// key sum z (inclusive cumsum per sequence and head, from z0) and the division
// of o by scale * q . z + 1e-10.
#include "reference/references.hpp"

namespace linattn::reference {

void normalize(const Problem& p, const Inputs& in, Result& r) {
  validate_shapes(p);
  const std::int64_t H = p.H, DK = p.DK, DV = p.DV;
  r.z_state.assign(static_cast<std::size_t>(p.num_sequences() * H * DK), 0.0);
  for (std::int64_t n = 0; n < p.num_sequences(); ++n)
    for (std::int64_t hh = 0; hh < H; ++hh) {
      std::vector<double> z(static_cast<std::size_t>(DK), 0.0);
      if (in.initial_z)
        for (std::int64_t d = 0; d < DK; ++d) z[d] = (*in.initial_z)[(n * H + hh) * DK + d];
      const std::int64_t b = p.sequence_batch(n), t0 = p.sequence_start(n);
      for (std::int64_t t = t0; t < t0 + p.sequence_length(n); ++t) {
        const std::int64_t row = (b * p.T + t) * H + hh;  // token t of batch row b, head hh
        double qz = 0;
        for (std::int64_t d = 0; d < DK; ++d) {
          z[d] += in.k[row * DK + d];
          qz += in.q[row * DK + d] * z[d];
        }
        const double denominator = p.scale * qz + 1e-10;
        for (std::int64_t j = 0; j < DV; ++j) r.o[row * DV + j] /= denominator;
      }
      for (std::int64_t d = 0; d < DK; ++d) r.z_state[(n * H + hh) * DK + d] = z[d];
    }
}

}  // namespace linattn::reference
