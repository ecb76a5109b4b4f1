// run_backward on spans (kernels/backward.hpp), as the streamed backward
// calls it: inputs read where they lie in one buffer (a read slot), dq, dk,
// dv and dg written into an output slot laid out by backward_window_targets
// (pipeline/backward_window_outputs.hpp). Same bits as the tensor entry point;
// nothing outside the targets is written; mismatched targets are refused.
#include "backward_check.hpp"
#include "gate_cases.hpp"
#include "pipeline/backward_window_outputs.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace linattn {
namespace {

using backward_test::plain;
using testing::channel_gate_size;
using testing::per_token_log_decays;
using testing::uniform_values;

// Copies each tensor into `slot` one after another (at odd offsets, so no
// span starts where a Tensor's allocation would) and returns spans there.
class Slot {
 public:
  explicit Slot(std::size_t bytes) : bytes_(bytes) {}
  TensorSpan put(const Tensor& t) {
    used_ += 8;  // not 16- or 64-aligned on purpose for 8-byte elements
    TensorSpan s(t.dtype, t.shape, bytes_.data() + used_);
    std::memcpy(s.bytes, t.bytes.data(), t.bytes.size());
    used_ += t.bytes.size();
    return s;
  }

 private:
  std::vector<unsigned char> bytes_;
  std::size_t used_ = 0;
};

void expect_same_bits(const TensorSpan& got, const Tensor& want, const char* name) {
  ASSERT_EQ(got.shape, want.shape) << name;
  ASSERT_EQ(got.dtype, want.dtype) << name;
  EXPECT_EQ(std::memcmp(got.bytes, want.bytes.data(), want.bytes.size()), 0) << name;
}

TEST(BackwardSpans, SameBitsAsTensorsAndNothingOutsideTheTargets) {
  std::uint64_t seed = 7100;
  for (DType dtype : {DType::f32, DType::bf16})
    for (GateKind gate : {GateKind::none, GateKind::per_token, GateKind::per_channel}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " gate " + gate_dataset_name(gate));
      const Problem p = plain(2, 100, 2, 16, 24, 32);
      const ProblemInputs in = random_inputs(p, dtype, ++seed, true);
      const Tensor d_o = random_tensor(dtype, p.v_shape(), ++seed);
      const Tensor dht = random_tensor(DType::f32, p.state_shape(), ++seed);
      const DType acc = accumulation_dtype(dtype);
      Tensor g;
      if (gate == GateKind::per_token)
        g = Tensor::from_double(acc, {p.B, p.T, p.H}, per_token_log_decays(p, -0.5, -0.01, ++seed));
      if (gate == GateKind::per_channel)
        g = Tensor::from_double(acc, p.qk_shape(), uniform_values(channel_gate_size(p), -0.5, -0.01, ++seed));
      ForwardConfig fc;
      fc.snapshots = SnapshotMode::accumulation;
      fc.gate = gate;
      const ForwardOutput fw =
          run_forward(p, fc, in.q, in.k, in.v, &in.initial_state, nullptr, g.empty() ? nullptr : &g);
      BackwardConfig bc;
      bc.gate = gate;
      bc.poison_outputs = true;
      const BackwardOutput want =
          run_backward(p, bc, in.q, in.k, in.v, &fw.h, nullptr, d_o, &dht, g.empty() ? nullptr : &g);

      Slot reads(in.q.bytes.size() * 8 + fw.h.bytes.size() + dht.bytes.size() + g.bytes.size() + 1024);
      BackwardSpans spans;
      spans.q = reads.put(in.q);
      spans.k = reads.put(in.k);
      spans.v = reads.put(in.v);
      spans.d_o = reads.put(d_o);
      spans.h = reads.put(fw.h);
      spans.dht = reads.put(dht);
      if (!g.empty()) spans.gate = reads.put(g);

      // The output slot, poisoned, with room past the end that must stay so.
      const std::int64_t bytes = backward_window_output_bytes(p, dtype, acc, gate);
      std::vector<unsigned char> out(static_cast<std::size_t>(bytes) + 4096, 0xA5);
      BackwardTargets targets = backward_window_targets(p, dtype, acc, gate, out.data());
      const BackwardOutput got = run_backward(p, bc, spans, &targets);
      EXPECT_TRUE(got.dq.empty() && got.dk.empty() && got.dv.empty() && got.dg.empty());
      expect_same_bits(targets.dq, want.dq, "dq");
      expect_same_bits(targets.dk, want.dk, "dk");
      expect_same_bits(targets.dv, want.dv, "dv");
      expect_same_bits(got.dh0, want.dh0, "dh0");
      if (gate != GateKind::none) expect_same_bits(targets.dg, want.dg, "dg");
      else EXPECT_TRUE(targets.dg.empty());
      // The targets lie in order inside the slot's bytes; the rest is untouched.
      const unsigned char* end = gate == GateKind::none ? targets.dv.bytes + targets.dv.size_bytes()
                                                        : targets.dg.bytes + targets.dg.size_bytes();
      EXPECT_LE(end, out.data() + bytes);
      for (const unsigned char* b = end; b < out.data() + out.size(); ++b) ASSERT_EQ(*b, 0xA5) << "byte past the targets";

      // Targets of another shape or dtype are refused before any kernel runs.
      BackwardTargets wrong = targets;
      wrong.dk.dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
      EXPECT_THROW(run_backward(p, bc, spans, &wrong), std::invalid_argument);
      wrong = targets;
      wrong.dv.shape[1] -= 1;
      EXPECT_THROW(run_backward(p, bc, spans, &wrong), std::invalid_argument);
    }
}

}  // namespace
}  // namespace linattn
