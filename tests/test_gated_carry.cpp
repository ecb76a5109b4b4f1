// Context parallel's gated carries (parallel/gated_carry.hpp, docs/PARALLEL.md
// "Context parallel"): a case cut into three segments along T, each carry the
// gated state pass over its segment alone (the first from the initial state,
// the others from zero), composed in chain order with the state before each
// segment decayed by that segment's tokens, gives the whole case's final state
// to the fp32 accumulation order (fp64: its own); composed without the decay
// it does not. A prefix's state pass is the gated forward's snapshot at that
// chunk, bit for bit: the one-carry start of 2 ranks. The scalar gates and
// GLA's gk (each state row d decayed by its own channel's sum).
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "gate_cases.hpp"
#include "kernels/state_pass.hpp"
#include "parallel/gated_carry.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace linattn {
namespace {

// Tokens [t0, t1) of every row of x [B, T, H, ...] (or g [B, T, H]).
Tensor token_slice(const Tensor& x, std::int64_t t0, std::int64_t t1) {
  std::vector<std::int64_t> shape = x.shape;
  shape[1] = t1 - t0;
  Tensor out(x.dtype, shape);
  std::size_t per_token = dtype_size(x.dtype);
  for (std::size_t d = 2; d < shape.size(); ++d) per_token *= static_cast<std::size_t>(shape[d]);
  const std::size_t T = static_cast<std::size_t>(x.shape[1]);
  for (std::int64_t b = 0; b < x.shape[0]; ++b)
    std::memcpy(out.bytes.data() + static_cast<std::size_t>(b) * (t1 - t0) * per_token,
                x.bytes.data() + (static_cast<std::size_t>(b) * T + t0) * per_token, (t1 - t0) * per_token);
  return out;
}

void add_into(Tensor& a, const Tensor& b) {
  for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, a.get(i) + b.get(i));  // exact for fp32 and fp64 sums
}

TEST(GatedCarry, TotalLogDecayPerRowAndHead) {
  // g [2, 3, 2]: per (row, head) the sum over the tokens.
  const Tensor g = Tensor::from_double(DType::f32, {2, 3, 2}, {-1, -2, -0.5, -0.25, -4, -8, -1, -1, -2, -3, -0.125, -1});
  EXPECT_EQ(parallel::total_log_decay(GateKind::per_token, g, 2, 3, 2),
            (std::vector<double>{-5.5, -10.25, -3.125, -5}));
  const Tensor g_gamma = Tensor::from_double(DType::f32, {2}, {-0.5, -0.03125});
  EXPECT_EQ(parallel::total_log_decay(GateKind::per_head, g_gamma, 2, 40, 2), (std::vector<double>{-20, -1.25, -20, -1.25}));
  EXPECT_TRUE(parallel::total_log_decay(GateKind::none, Tensor(), 2, 40, 2).empty());
  EXPECT_THROW(parallel::total_log_decay(GateKind::per_token, g, 2, 4, 2), std::invalid_argument);
}

TEST(GatedCarry, DecayStateScalesEachRowAndHead) {
  Tensor s = Tensor::from_double(DType::f32, {1, 2, 1, 2}, {1, 2, 3, 4});
  parallel::decay_state(s, {std::log(0.5), -1000.0});  // a strong decay underflows to 0: the state forgotten
  EXPECT_EQ(s.to_double(), (std::vector<double>{0.5, 1, 0, 0}));
  EXPECT_THROW(parallel::decay_state(s, {0.0}), std::invalid_argument);
}

TEST(GatedCarry, TotalLogDecayAndDecayStatePerKeyChannel) {
  // gk [1, 2, 1, 2]: per (row, head, key channel) the sum over the tokens.
  const Tensor gk = Tensor::from_double(DType::f32, {1, 2, 1, 2}, {-1, -2, -0.5, -0.25});
  EXPECT_EQ(parallel::total_log_decay(GateKind::per_channel, gk, 1, 2, 1), (std::vector<double>{-1.5, -2.25}));
  EXPECT_THROW(parallel::total_log_decay(GateKind::per_channel, gk, 1, 3, 1), std::invalid_argument);
  // State [1, 1, DK 2, DV 2]: row d of the head's block by its own channel's decay.
  Tensor s = Tensor::from_double(DType::f32, {1, 1, 2, 2}, {1, 2, 3, 4});
  parallel::decay_state(s, {std::log(0.5), std::log(0.25)});
  EXPECT_EQ(s.to_double(), (std::vector<double>{0.5, 1, 0.75, 1}));
}

// The scalar gates' cases, then GLA's per-channel ones (gk [B, T, H, DK]).
std::vector<testing::GateCase> every_gate_case(const Problem& p, std::uint64_t seed) {
  std::vector<testing::GateCase> cases = testing::gate_cases(p, seed);
  for (const testing::ChannelCase& c : testing::channel_cases(p, seed + 10))
    cases.push_back({"gk " + c.name, GateKind::per_channel, c.gk});
  return cases;
}

TEST(GatedCarry, ThreeSegmentsComposeToTheWholeCasesState) {
  Problem p;
  p.B = 2; p.T = 150; p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 16; p.scale = 0.3;
  const std::int64_t cuts[] = {0, 48, 96, 150};  // chunk boundaries, as segment_plan cuts
  std::uint64_t seed = 8100;
  for (const testing::GateCase& gc : every_gate_case(p, 8150))
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      if (gc.name.find("strong") != std::string::npos) continue;  // forgets within a segment: the carry before it is 0 either way
      SCOPED_TRACE(gc.name + " " + dtype_name(dtype));
      ForwardConfig cfg;
      cfg.gate = gc.kind;
      cfg.poison_outputs = true;
      const ProblemInputs in = random_inputs(p, dtype, ++seed, true);
      const Tensor gate = Tensor::from_double(accumulation_dtype(dtype), gate_shape(p, gc.kind), gc.values);
      const Tensor whole = run_state_pass(p, cfg, in.k, in.v, &in.initial_state, nullptr, &gate).final_state;
      Tensor decayed, undecayed;
      for (int j = 0; j < 3; ++j) {
        const Problem piece = plain_problem(p, p.B, cuts[j + 1] - cuts[j]);
        const Tensor g = gc.kind == GateKind::per_head ? gate : token_slice(gate, cuts[j], cuts[j + 1]);
        const Tensor carry = run_state_pass(piece, cfg, token_slice(in.k, cuts[j], cuts[j + 1]),
                                            token_slice(in.v, cuts[j], cuts[j + 1]), j == 0 ? &in.initial_state : nullptr,
                                            nullptr, &g)
                                 .final_state;
        if (j == 0) {
          decayed = undecayed = carry;
          continue;
        }
        parallel::decay_state(decayed, parallel::total_log_decay(gc.kind, g, p.B, piece.T, p.H));
        add_into(decayed, carry);
        add_into(undecayed, carry);
      }
      const double level = stored_level(dtype, accumulation_dtype(dtype));
      const double err = relative_l2(decayed.to_double(), whole.to_double());
      EXPECT_LE(err, level);
      EXPECT_GT(relative_l2(undecayed.to_double(), whole.to_double()), 100 * level) << "the undecayed carry must show";
    }
}

TEST(GatedCarry, APrefixsStatePassIsTheForwardsSnapshotBitwise) {
  Problem p;
  p.B = 2; p.T = 150; p.H = 2; p.DK = 16; p.DV = 24; p.chunk = 16; p.scale = 0.3;
  std::uint64_t seed = 8200;
  for (const testing::GateCase& gc : every_gate_case(p, 8250))
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(gc.name + " " + dtype_name(dtype));
      ForwardConfig cfg;
      cfg.gate = gc.kind;
      cfg.poison_outputs = true;
      const ProblemInputs in = random_inputs(p, dtype, ++seed, true);
      const Tensor gate = Tensor::from_double(DType::f32, gate_shape(p, gc.kind), gc.values);
      const ForwardOutput f = run_forward(p, cfg, in.q, in.k, in.v, &in.initial_state, nullptr, &gate);
      const std::int64_t chunks = 5, t1 = chunks * p.chunk;  // h[:, 5] is the state after tokens [0, 80)
      const Problem prefix = plain_problem(p, p.B, t1);
      const Tensor g = gc.kind == GateKind::per_head ? gate : token_slice(gate, 0, t1);
      const Tensor s = run_state_pass(prefix, cfg, token_slice(in.k, 0, t1), token_slice(in.v, 0, t1),
                                      &in.initial_state, nullptr, &g)
                           .final_state;
      // h [B, NT, H, DK, DV]: rows b, chunk 5.
      const std::size_t state = static_cast<std::size_t>(p.H * p.DK * p.DV) * dtype_size(s.dtype);
      const std::size_t NT = static_cast<std::size_t>(f.h.shape[1]);
      ASSERT_EQ(f.h.dtype, s.dtype);
      for (std::int64_t b = 0; b < p.B; ++b)
        EXPECT_EQ(std::memcmp(s.bytes.data() + b * state, f.h.bytes.data() + (b * NT + chunks) * state, state), 0)
            << "row " << b;
    }
}

}  // namespace
}  // namespace linattn
