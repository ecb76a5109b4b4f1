// The fp64 references agree with each other to rounding, and the checks are
// sensitive to the classic structural mistake (state update before the output).
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "reference/references.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace linattn {
namespace {


struct RefCase {
  Problem p;
  bool initial_state;
};

std::vector<RefCase> reference_cases() {
  std::vector<RefCase> cases;
  Problem seed_tiny;  // the specification's tiny case: B=2, H=2, N=12, D=4, BC=4
  seed_tiny.B = 2; seed_tiny.T = 12; seed_tiny.H = 2; seed_tiny.DK = 4; seed_tiny.DV = 4; seed_tiny.chunk = 4;
  cases.push_back({seed_tiny, false});
  Problem ragged = seed_tiny;  // T % C != 0, DK != DV, scale != 1, initial state
  ragged.T = 45; ragged.DK = 6; ragged.DV = 10; ragged.chunk = 16; ragged.scale = 0.37;
  cases.push_back({ragged, true});
  Problem seed_d;  // the specification's reference-D case: B=2, S=256, H=3, DK=64, DV=128, C=64
  seed_d.B = 2; seed_d.T = 256; seed_d.H = 3; seed_d.DK = 64; seed_d.DV = 128; seed_d.chunk = 64;
  cases.push_back({seed_d, false});
  return cases;
}

void expect_agree(const reference::Result& x, const reference::Result& ref, double tol, const char* what) {
  EXPECT_LE(relative_l2(x.o, ref.o), tol) << what << ": o";
  EXPECT_LE(relative_l2(x.h, ref.h), tol) << what << ": h";
  EXPECT_LE(relative_l2(x.final_state, ref.final_state), tol) << what << ": final_state";
}

TEST(References, AllFormsAgreeInFp64) {
  for (const RefCase& rc : reference_cases()) {
    const Problem& p = rc.p;
    SCOPED_TRACE("T=" + std::to_string(p.T) + " C=" + std::to_string(p.chunk) + " DK=" + std::to_string(p.DK) +
                 " DV=" + std::to_string(p.DV));
    auto in = random_inputs(p, DType::f64, 7, rc.initial_state);
    std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(), s0 = in.initial_state.to_double();
    reference::Inputs inputs{q, k, v, rc.initial_state ? &s0 : nullptr};
    const auto a = reference::recurrent(p, inputs);
    const double tol = 1e-13;
    expect_agree(reference::chunked(p, inputs), a, tol, "chunked vs recurrent");
    expect_agree(reference::recompute(p, inputs), a, tol, "recompute vs recurrent");
    expect_agree(reference::sequential(p, inputs, 2), a, tol, "sequential(2) vs recurrent");
    expect_agree(reference::sequential(p, inputs, p.DV), a, tol, "sequential(DV) vs recurrent");
    expect_agree(reference::parallel(p, inputs), a, tol, "parallel vs recurrent");
    expect_agree(reference::recompute(p, inputs), reference::chunked(p, inputs), tol, "recompute vs chunked");
  }
}

TEST(References, MissingRightShiftIsDetected) {
  for (const RefCase& rc : reference_cases()) {
    const Problem& p = rc.p;
    auto in = random_inputs(p, DType::f64, 11, rc.initial_state);
    std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(), s0 = in.initial_state.to_double();
    reference::Inputs inputs{q, k, v, rc.initial_state ? &s0 : nullptr};
    const auto a = reference::recurrent(p, inputs);
    const double no_shift = relative_l2(reference::chunked(p, inputs, reference::Ordering::inclusive_prefix).o, a.o);
    const double early_update =
        relative_l2(reference::sequential(p, inputs, 32, reference::UpdatePlacement::before_output).o, a.o);
    EXPECT_GT(no_shift, 0.1) << "chunked without the right shift went unnoticed";
    EXPECT_GT(early_update, 0.1) << "sequential with the update before the output went unnoticed";
    ::testing::Test::RecordProperty("no_shift_rel_l2_T" + std::to_string(p.T), std::to_string(no_shift));
    ::testing::Test::RecordProperty("early_update_rel_l2_T" + std::to_string(p.T), std::to_string(early_update));
  }
}

TEST(References, SequentialIsBitwiseIndependentOfBlockDV) {
  Problem p;
  p.B = 2; p.T = 200; p.H = 3; p.DK = 64; p.DV = 128; p.chunk = 64;  // ragged last chunk
  auto in = random_inputs(p, DType::f64, 3, true);
  std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(), s0 = in.initial_state.to_double();
  reference::Inputs inputs{q, k, v, &s0};
  const auto r32 = reference::sequential(p, inputs, 32);
  for (std::int64_t bdv : {64, 128}) {
    const auto r = reference::sequential(p, inputs, bdv);
    EXPECT_EQ(0, std::memcmp(r.o.data(), r32.o.data(), r.o.size() * sizeof(double))) << "o, block_DV " << bdv;
    EXPECT_EQ(0, std::memcmp(r.h.data(), r32.h.data(), r.h.size() * sizeof(double))) << "h, block_DV " << bdv;
    EXPECT_EQ(0, std::memcmp(r.final_state.data(), r32.final_state.data(), r.final_state.size() * sizeof(double)))
        << "final_state, block_DV " << bdv;
  }
}

}  // namespace
}  // namespace linattn
