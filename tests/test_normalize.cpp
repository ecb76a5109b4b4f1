// Normalization (fla's normalize=True) and split-and-resume, on every variant
// and fp64, fp32 and bf16 inputs, with positive q and k (so that the
// denominators scale * q . z + 1e-10 stay away from zero): o, h, final_state
// and z_state match the fp64 reference, with and without an initial z; and a
// sequence run in two halves, the second starting from the first's
// final_state and z_state, gives the o of one run (plain and packed batches).
#include "forward_check.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

namespace linattn {
namespace {

using testing::expect_matches_reference;
using testing::run_inputs;

class NormalizeMatchesReference : public ::testing::TestWithParam<std::tuple<Variant, DType>> {};

TEST_P(NormalizeMatchesReference, PlainAndPackedBatches) {
  const auto [variant, dtype] = GetParam();
  Problem plain;
  plain.B = 2; plain.T = 150; plain.H = 2; plain.DK = 24; plain.DV = 40; plain.chunk = 32; plain.scale = 0.2;
  Problem varlen = plain;
  varlen.B = 1; varlen.T = 193; varlen.cu_seqlens = {0, 1, 64, 128, 193};
  varlen.chunk = 64;
  for (const Problem& p : {plain, varlen}) {
    for (bool with_z0 : {false, true}) {
      SCOPED_TRACE(std::string(p.varlen() ? "packed" : "plain") + (with_z0 ? ", initial z" : ""));
      const ProblemInputs in = random_inputs(p, dtype, 70 + with_z0, with_z0, true, with_z0);
      ForwardConfig cfg;
      cfg.variant = variant;
      cfg.normalize = true;
      expect_matches_reference(p, cfg, in);
      cfg.output_fp32 = true;  // o is divided in fp32 either way; only its final rounding differs
      expect_matches_reference(p, cfg, in);
    }
  }
}

// Tokens [from, to) of every sequence of a plain batch tensor [B, T, H, D].
Tensor token_range(const Tensor& x, std::int64_t from, std::int64_t to) {
  const std::int64_t B = x.shape[0], T = x.shape[1], row = x.shape[2] * x.shape[3], size = dtype_size(x.dtype);
  Tensor out(x.dtype, {B, to - from, x.shape[2], x.shape[3]});
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(out.bytes.data() + b * (to - from) * row * size, x.bytes.data() + (b * T + from) * row * size,
                static_cast<std::size_t>((to - from) * row * size));
  return out;
}

TEST_P(NormalizeMatchesReference, SplitAndResumeGivesOneRun) {
  const auto [variant, dtype] = GetParam();
  Problem whole;
  whole.B = 2; whole.T = 230; whole.H = 2; whole.DK = 16; whole.DV = 24; whole.chunk = 64; whole.scale = 0.5;
  const std::int64_t split = 101;  // not a chunk boundary
  const ProblemInputs in = random_inputs(whole, dtype, 80, true, true, true);
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize ? "normalized" : "unnormalized");
    ForwardConfig cfg;
    cfg.variant = variant;
    cfg.normalize = normalize;
    cfg.output_fp32 = true;  // compare o before its rounding to the input type
    ProblemInputs first_in = in, second_in = in;
    if (!normalize) first_in.initial_z = second_in.initial_z = Tensor();
    const ForwardOutput one = expect_matches_reference(whole, cfg, first_in);

    Problem first = whole, second = whole;
    first.T = split;
    second.T = whole.T - split;
    for (const char* name : {"q", "k", "v"}) {
      const Tensor& x = std::strcmp(name, "q") == 0 ? in.q : std::strcmp(name, "k") == 0 ? in.k : in.v;
      (std::strcmp(name, "q") == 0 ? first_in.q : std::strcmp(name, "k") == 0 ? first_in.k : first_in.v) =
          token_range(x, 0, split);
      (std::strcmp(name, "q") == 0 ? second_in.q : std::strcmp(name, "k") == 0 ? second_in.k : second_in.v) =
          token_range(x, split, whole.T);
    }
    const ForwardOutput a = run_inputs(first, cfg, first_in);
    second_in.initial_state = a.final_state;
    if (normalize) second_in.initial_z = a.z_state;
    const ForwardOutput b = run_inputs(second, cfg, second_in);

    // The halves' o side by side against the one run and against the fp64 reference of the whole.
    const Tensor o_one_first = token_range(one.o, 0, split), o_one_second = token_range(one.o, split, whole.T);
    const double level = accumulation_level(dtype);
    EXPECT_LE(relative_l2(a.o.to_double(), o_one_first.to_double()), level) << "first half";
    EXPECT_LE(relative_l2(b.o.to_double(), o_one_second.to_double()), level) << "second half";
    EXPECT_LE(relative_l2(b.final_state.to_double(), one.final_state.to_double()), level) << "final_state";
    if (normalize) EXPECT_LE(relative_l2(b.z_state.to_double(), one.z_state.to_double()), level) << "z_state";
    const testing::InputValues values(in);  // the reference ignores z0 when not normalizing
    const reference::Result ref = reference::forward(whole, values.inputs(), normalize);
    Tensor ref_o = Tensor::from_double(DType::f64, whole.o_shape(), ref.o);
    EXPECT_LE(relative_l2(b.o.to_double(), token_range(ref_o, split, whole.T).to_double()),
              output_level(dtype, DType::f32, false))
        << "second half against the reference";
  }
}

TEST(Normalize, SplitAndResumePackedSequences) {
  // Two sequences (70 and 130 tokens), each cut after 30 tokens: the packed
  // second halves resume from the packed first halves' states and z.
  Problem whole;
  whole.B = 1; whole.T = 200; whole.H = 2; whole.DK = 16; whole.DV = 16; whole.chunk = 32;
  whole.cu_seqlens = {0, 70, 200};
  const ProblemInputs in = random_inputs(whole, DType::f64, 90, true, true, true);
  ForwardConfig cfg;
  cfg.normalize = true;
  for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
    cfg.variant = variant;
    const ForwardOutput one = run_inputs(whole, cfg, in);
    Problem first = whole, second = whole;
    first.T = 60;
    first.cu_seqlens = {0, 30, 60};
    second.T = 140;
    second.cu_seqlens = {0, 40, 140};
    // Packed token order: [seq0 0:30, seq1 0:30] and [seq0 30:70, seq1 30:130].
    auto pick = [](const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges) {
      std::vector<Tensor> parts;
      std::int64_t T = 0;
      for (const auto& r : ranges) {
        parts.push_back(token_range(x, r.first, r.second));
        T += r.second - r.first;
      }
      Tensor out(x.dtype, {1, T, x.shape[2], x.shape[3]});
      std::size_t at = 0;
      for (const Tensor& part : parts) {
        std::memcpy(out.bytes.data() + at, part.bytes.data(), part.bytes.size());
        at += part.bytes.size();
      }
      return out;
    };
    const std::vector<std::pair<std::int64_t, std::int64_t>> r1 = {{0, 30}, {70, 100}}, r2 = {{30, 70}, {100, 200}};
    ProblemInputs a_in = in, b_in;
    a_in.q = pick(in.q, r1); a_in.k = pick(in.k, r1); a_in.v = pick(in.v, r1);
    const ForwardOutput a = run_inputs(first, cfg, a_in);
    b_in.q = pick(in.q, r2); b_in.k = pick(in.k, r2); b_in.v = pick(in.v, r2);
    b_in.initial_state = a.final_state;
    b_in.initial_z = a.z_state;
    const ForwardOutput b = run_inputs(second, cfg, b_in);
    EXPECT_LE(relative_l2(a.o.to_double(), pick(one.o, r1).to_double()), 1e-13) << variant_name(variant);
    EXPECT_LE(relative_l2(b.o.to_double(), pick(one.o, r2).to_double()), 1e-13) << variant_name(variant);
    EXPECT_LE(relative_l2(b.final_state.to_double(), one.final_state.to_double()), 1e-13) << variant_name(variant);
    EXPECT_LE(relative_l2(b.z_state.to_double(), one.z_state.to_double()), 1e-13) << variant_name(variant);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryVariant, NormalizeMatchesReference,
    ::testing::Combine(::testing::Values(Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent),
                       ::testing::Values(DType::f64, DType::f32, DType::bf16)),
    [](const ::testing::TestParamInfo<NormalizeMatchesReference::ParamType>& info) {
      return std::string(variant_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace linattn
