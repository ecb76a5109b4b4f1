// verify's references one (sequence, head) at a time (app/reference_by_head)
// give the bits of reference::forward and reference::backward, plain and
// packed, with initial states and normalization, and report pieces whose
// tokens add up to every token of every row.
#include "app/reference_by_head.hpp"
#include "core/random_tensor.hpp"
#include "pipeline/window_plan.hpp"

#include <gtest/gtest.h>

namespace linattn {
namespace {

Problem plain_case() {
  Problem p;
  p.B = 2; p.T = 75; p.H = 3; p.DK = 8; p.DV = 12; p.chunk = 16; p.scale = 0.35;
  return p;
}

Problem packed_case() {
  Problem p = plain_case();
  p.B = 1;
  p.T = 90;
  p.cu_seqlens = {0, 1, 40, 90};
  return p;
}

TEST(ReferenceByHead, ForwardGivesTheBitsOfTheWholeReference) {
  for (const Problem& p : {plain_case(), packed_case()})
    for (bool normalized : {false, true}) {
      SCOPED_TRACE(std::string(p.varlen() ? "packed" : "plain") + (normalized ? ", normalized" : ""));
      const ProblemInputs in = random_inputs(p, DType::f32, 41, true, normalized, normalized);
      const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                                s0 = in.initial_state.to_double(), z0 = in.initial_z.to_double();
      const reference::Inputs inputs{q, k, v, &s0, normalized ? &z0 : nullptr};
      std::int64_t tokens = 0, elements = 0, pieces = 0;
      const reference::Result by_head =
          forward_reference_by_head(p, inputs, normalized, [&](std::int64_t t, std::int64_t e) {
            tokens += t;
            elements += e;
            ++pieces;
          });
      const reference::Result whole = reference::forward(p, inputs, normalized);
      EXPECT_EQ(by_head.o, whole.o);
      EXPECT_EQ(by_head.h, whole.h);
      EXPECT_EQ(by_head.final_state, whole.final_state);
      EXPECT_EQ(by_head.z_state, whole.z_state);
      EXPECT_EQ(pieces, p.num_sequences() * p.H);
      EXPECT_EQ(tokens, case_tokens(p));
      EXPECT_EQ(elements, (p.varlen() ? 1 : p.B) * p.T * p.H * (2 * p.DK + p.DV));
    }
}

TEST(ReferenceByHead, BackwardGivesTheBitsOfTheWholeReference) {
  for (const Problem& p : {plain_case(), packed_case()}) {
    SCOPED_TRACE(p.varlen() ? "packed" : "plain");
    const ProblemInputs in = random_inputs(p, DType::f32, 43, true);
    const Tensor d_o = random_tensor(DType::f32, p.v_shape(), 44);
    const Tensor dht = random_tensor(DType::f32, p.state_shape(), 45);
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                              s0 = in.initial_state.to_double(), g = d_o.to_double(), gt = dht.to_double();
    std::int64_t tokens = 0;
    const reference::Gradients by_head = backward_reference_by_head(
        p, {q, k, v, &s0}, {g, &gt}, [&](std::int64_t t, std::int64_t) { tokens += t; });
    const reference::Gradients whole = reference::backward(p, {q, k, v, &s0}, {g, &gt});
    EXPECT_EQ(by_head.dq, whole.dq);
    EXPECT_EQ(by_head.dk, whole.dk);
    EXPECT_EQ(by_head.dv, whole.dv);
    EXPECT_EQ(by_head.dh0, whole.dh0);
    EXPECT_EQ(tokens, case_tokens(p));
  }
}

}  // namespace
}  // namespace linattn
