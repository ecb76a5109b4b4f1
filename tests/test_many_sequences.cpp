// Many short sequences (docs/ARCHITECTURE.md, "Cost per sequence"): nothing
// done once per sequence or per window may cost O(N) itself (a sum over the
// sequences before it, a copy of cu_seqlens), or a packed batch of N
// sequences costs O(N^2). Each test times a step of `linattn run` or
// `linattn verify` on packed sequences of 1-8 tokens and fails if the
// quadratic cost came back.
//
// Each timing is this thread's CPU time in the fastest of a few calls (a
// shared machine only ever adds to it), and each bound sits far from both
// answers: from 50,000 to 200,000 sequences linear work grows 4x and
// quadratic work 16x (bound: 8x); 200,000 sequences against one sequence of
// the same tokens, where a quadratic step costs a hundred times more (bound:
// 10x, or for the kernels 3x the ratio of their chunks, which their work
// follows). The answers themselves (chunk starts and places as the
// definition gives them) are checked in test_sequence_map.cpp,
// test_chunk_errors.cpp, test_varlen.cpp and test_window_plan.cpp.
#include "app/chunk_errors.hpp"
#include "core/tensor.hpp"
#include "kernels/forward.hpp"
#include "pipeline/window_plan.hpp"
#include "reference/references.hpp"

#include <gtest/gtest.h>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace linattn {
namespace {

constexpr std::int64_t kFew = 50000, kMany = 200000;
constexpr double kLinearGrowth = 4, kQuadraticGrowth = 16;
constexpr double kGrowthBound = 8;  // sqrt(4 * 16): as far from either in ratio

// N packed sequences of 1-8 tokens (seeded), one head of DK = DV = 4.
Problem short_sequences(std::int64_t N, std::int64_t chunk) {
  std::mt19937_64 rng(14);
  std::uniform_int_distribution<std::int64_t> length(1, 8);
  Problem p;
  p.H = 1;
  p.DK = p.DV = 4;
  p.chunk = chunk;
  p.scale = 0.5;
  p.cu_seqlens.reserve(static_cast<std::size_t>(N + 1));
  p.cu_seqlens.push_back(0);
  for (std::int64_t n = 0; n < N; ++n) p.cu_seqlens.push_back(p.cu_seqlens.back() + length(rng));
  p.T = p.cu_seqlens.back();
  return p;
}

// The same tokens as one sequence.
Problem one_sequence(const Problem& packed) {
  Problem p = packed;
  p.cu_seqlens = {0, packed.T};
  return p;
}

// CPU seconds of this thread in the fastest of `repetitions` calls: CPU time
// leaves out the time other processes take from a shared machine, the
// fastest call most of what remains. (The tests run on this thread alone:
// Kokkos' host backends, no reader processes.) A call within `bound`
// seconds ends the repetitions early: the fastest is then within it too, so
// only a slow call needs another look.
double fastest(int repetitions, const std::function<void()>& work,
               double bound = std::numeric_limits<double>::infinity()) {
  auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repetitions; ++i) {
    const double start = now();
    work();
    best = std::min(best, now() - start);
    if (best <= bound) break;
  }
  return best;
}

// How much longer a job takes on kMany sequences than on kFew. job(p)
// prepares what the job needs and returns the part to time.
double growth(int repetitions, std::int64_t chunk, const std::function<std::function<void()>(const Problem&)>& job) {
  const double t_few = fastest(repetitions, job(short_sequences(kFew, chunk)));
  const double t_many = fastest(repetitions, job(short_sequences(kMany, chunk)), kGrowthBound * t_few);
  ::testing::Test::RecordProperty("seconds_50000", std::to_string(t_few));
  ::testing::Test::RecordProperty("seconds_200000", std::to_string(t_many));
  return t_many / t_few;
}

// `linattn run` cuts the case into windows and makes each its own problem
// (compute_stage_typed.hpp). Windows of about 80 sequences: their count
// grows with N, so a copy of all N offsets per window would be quadratic.
TEST(ManySequences, WindowsCostLinearTime) {
  CaseStorage storage;
  WindowLimits limits;
  limits.input = limits.output = limits.device_extra = 16 << 10;
  std::int64_t windows = 0;
  const double g = growth(5, 64, [&](const Problem& p) {
    return [&, p] {
      const std::vector<Window> plan = plan_windows(p, storage, limits);
      std::int64_t sequences = 0;
      for (const Window& w : plan) sequences += window_problem(p, w).num_sequences();
      EXPECT_GE(sequences, p.num_sequences());
      windows = static_cast<std::int64_t>(plan.size());
    };
  });
  EXPECT_GT(windows, kMany / 200);  // many windows
  EXPECT_LT(g, kGrowthBound) << "linear: " << kLinearGrowth << "x, quadratic: " << kQuadraticGrowth << "x";
}

// `linattn verify --per-chunk`: the error of every chunk.
TEST(ManySequences, PerChunkErrorsCostLinearTime) {
  const double g = growth(3, 64, [](const Problem& p) {
    auto o = std::make_shared<std::vector<double>>(static_cast<std::size_t>(p.T * p.H * p.DV), 1.0);
    auto h = std::make_shared<std::vector<double>>(static_cast<std::size_t>(p.total_chunks() * p.H * p.DK * p.DV), 1.0);
    auto o_ref = std::make_shared<std::vector<double>>(o->size(), 1.5);
    auto h_ref = std::make_shared<std::vector<double>>(h->size(), 2.0);
    return [p, o, h, o_ref, h_ref] {
      const std::vector<ChunkError> errors = chunk_errors(p, *o, *o_ref, *h, *h_ref);
      ASSERT_EQ(static_cast<std::int64_t>(errors.size()), p.num_sequences());  // one chunk each
      EXPECT_DOUBLE_EQ(errors.back().o, 1.0 / 3.0);
      EXPECT_DOUBLE_EQ(errors.back().h, 0.5);
    };
  });
  EXPECT_LT(g, kGrowthBound) << "linear: " << kLinearGrowth << "x, quadratic: " << kQuadraticGrowth << "x";
}

// fp32 values in [-0.5, 0.5) that vary from element to element (cheaper to
// make than random_inputs, and the timings need no more).
Tensor pattern(const std::vector<std::int64_t>& shape, std::uint32_t salt) {
  Tensor t(DType::f32, shape);
  float* x = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    x[i] = static_cast<float>((static_cast<std::uint32_t>(i) * 2654435761u + salt) % 1024u) / 1024.0f - 0.5f;
  return t;
}

// 200,000 sequences at chunk 16 and their tokens as one sequence, with
// inputs (made once for both tests below).
struct ShortAndLong {
  Problem many, one;
  Tensor q, k, v;
  std::vector<double> q64, k64, v64;
};
const ShortAndLong& short_and_long() {
  static const ShortAndLong cases = [] {
    ShortAndLong c;
    c.many = short_sequences(kMany, 16);
    c.one = one_sequence(c.many);
    c.q = pattern(c.many.qk_shape(), 1);
    c.k = pattern(c.many.qk_shape(), 2);
    c.v = pattern(c.many.v_shape(), 3);
    c.q64 = c.q.to_double();
    c.k64 = c.k.to_double();
    c.v64 = c.v.to_double();
    return c;
  }();
  return cases;
}

// The fp64 reference of `linattn verify` (per sequence) against one sequence
// of the same tokens: the short sequences do less arithmetic (shorter causal
// sums); what they add is a fixed cost per sequence.
constexpr double kReferenceBound = 10;
TEST(ManySequences, ReferenceCostsAFewTimesOneSequence) {
  const ShortAndLong& c = short_and_long();
  const double t_one = fastest(2, [&] { reference::forward(c.one, {c.q64, c.k64, c.v64}, false); });
  const double bound = kReferenceBound * t_one;
  const double t_many = fastest(2, [&] { reference::forward(c.many, {c.q64, c.k64, c.v64}, false); }, bound);
  RecordProperty("seconds_one", std::to_string(t_one));
  RecordProperty("seconds_200000", std::to_string(t_many));
  EXPECT_LT(t_many, bound) << t_many << " s for 200,000 sequences, " << t_one << " s for one";
}

// run_forward (what `linattn run` does to each window) against one sequence
// of the same tokens. The kernels work a whole chunk for each chunk, however
// short (chunk 16 here: 56,000 chunks for the one sequence, 200,000 for the
// short ones), so the bound is a generous multiple of that ratio.
constexpr double kForwardBound = 3;  // times the ratio of the chunks
TEST(ManySequences, RunForwardCostsAFewTimesOneSequence) {
  const ShortAndLong& c = short_and_long();
  const ForwardConfig config;
  const double t_one = fastest(2, [&] { run_forward(c.one, config, c.q, c.k, c.v); });
  const double chunks = static_cast<double>(c.many.total_chunks()) / static_cast<double>(c.one.total_chunks());
  const double bound = kForwardBound * chunks * t_one;
  const double t_many = fastest(2, [&] { run_forward(c.many, config, c.q, c.k, c.v); }, bound);
  RecordProperty("seconds_one", std::to_string(t_one));
  RecordProperty("seconds_200000", std::to_string(t_many));
  EXPECT_LT(t_many, bound) << t_many << " s for 200,000 sequences, " << t_one << " s for one (" << chunks
                           << "x the chunks)";
}

}  // namespace
}  // namespace linattn
