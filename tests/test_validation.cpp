// Bad arguments are rejected with an exception naming the problem, before any
// kernel runs (checked by counting Kokkos kernel launches through the tools
// interface).
#include "core/random_tensor.hpp"
#include "kernels/forward.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace linattn {
namespace {


int g_launches = 0;
void count_launch(const char*, std::uint32_t, std::uint64_t*) { ++g_launches; }

Problem small_problem() {
  Problem p;
  p.B = 1; p.T = 40; p.H = 2; p.DK = 8; p.DV = 12; p.chunk = 16;
  return p;
}

// Expects std::invalid_argument whose message contains `needle`, with no kernel launched.
void expect_rejected(const std::function<void()>& call, const std::string& needle) {
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(count_launch);
  g_launches = 0;
  try {
    call();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message was: " << e.what();
  }
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
  EXPECT_EQ(g_launches, 0) << "a kernel ran before the arguments were rejected";
}

TEST(Validation, LaunchCounterSeesKernels) {
  // Guards the guard: the counter must see the launches of a valid run.
  const Problem p = small_problem();
  const auto in = random_inputs(p, DType::f32, 1, false);
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(count_launch);
  g_launches = 0;
  run_forward(p, ForwardConfig{}, in.q, in.k, in.v);
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
  EXPECT_GT(g_launches, 0);
}

TEST(Validation, UnsupportedChunkIsRejected) {
  Problem p = small_problem();
  const auto in = random_inputs(p, DType::f32, 1, false);
  for (std::int64_t chunk : {0, 8, 48, 256}) {
    p.chunk = chunk;
    expect_rejected([&] { run_forward(p, ForwardConfig{}, in.q, in.k, in.v); }, "chunk size");
  }
}

TEST(Validation, ZeroDimensionsAreRejected) {
  Problem p = small_problem();
  p.DK = 0;
  expect_rejected([&] { validate(p); }, "DK");
  p = small_problem();
  p.DV = 0;
  expect_rejected([&] { validate(p); }, "DV");
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 0}, {1, 40, 2, 0}, {1, 40, 2, 12}, 16, 1.0); }, "DK");
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 2, 8}, {1, 40, 2, 0}, 16, 1.0); }, "DV");
}

TEST(Validation, DisagreeingShapesAreRejected) {
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 2, 9}, {1, 40, 2, 12}, 16, 1.0); }, "DK");
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 2, 8}, {1, 41, 2, 12}, 16, 1.0); }, "in T");
  expect_rejected([&] { problem_from_shapes({2, 40, 2, 8}, {1, 40, 2, 8}, {2, 40, 2, 12}, 16, 1.0); }, "in B");
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 3, 8}, {1, 40, 2, 12}, 16, 1.0); }, "in H");
  expect_rejected([&] { problem_from_shapes({1, 40, 8}, {1, 40, 2, 8}, {1, 40, 2, 12}, 16, 1.0); }, "rank 4");
  const std::vector<std::int64_t> bad_state{1, 2, 8, 8};
  expect_rejected([&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 2, 8}, {1, 40, 2, 12}, 16, 1.0, &bad_state); },
                  "initial_state");

  // Tensors that do not match the problem handed to run_forward.
  const Problem p = small_problem();
  const auto in = random_inputs(p, DType::f32, 1, false);
  Problem wrong = p;
  wrong.DV = 16;
  expect_rejected([&] { run_forward(wrong, ForwardConfig{}, in.q, in.k, in.v); }, "v has shape");
  const auto half = random_inputs(p, DType::bf16, 1, false);
  expect_rejected([&] { run_forward(p, ForwardConfig{}, in.q, half.k, in.v); }, "share one dtype");
  const Tensor state(DType::f32, {1, 2, 12, 8});
  expect_rejected([&] { run_forward(p, ForwardConfig{}, in.q, in.k, in.v, &state); }, "initial_state");
}

TEST(Validation, BadCuSeqlensAreRejected) {
  Problem p;
  p.B = 1; p.T = 40; p.H = 2; p.DK = 8; p.DV = 12; p.chunk = 16;
  const auto in = random_inputs(p, DType::f32, 2, false);
  for (Variant variant : {Variant::fused, Variant::materialized, Variant::recompute, Variant::recurrent}) {
    ForwardConfig cfg;
    cfg.variant = variant;
    auto with = [&](std::vector<std::int64_t> cu, const std::string& needle) {
      Problem bad = p;
      bad.cu_seqlens = std::move(cu);
      expect_rejected([&] { run_forward(bad, cfg, in.q, in.k, in.v); }, needle);
    };
    with({0, 20, 10, 40}, "not increasing");
    with({0, 20, 20, 40}, "not increasing");  // an empty sequence
    with({0, 20, 39}, "last entry must be T");
    with({0, 20, 41}, "last entry must be T");
    with({5, 20, 40}, "start at 0");
    with({0}, "at least one sequence");
  }
  // B != 1: q, k, v [2, 20, H, D] with cu_seqlens.
  Problem two = p;
  two.B = 2;
  two.T = 20;
  const auto in2 = random_inputs(two, DType::f32, 3, false);
  two.cu_seqlens = {0, 20};
  expect_rejected([&] { run_forward(two, ForwardConfig{}, in2.q, in2.k, in2.v); }, "B = 1");
  expect_rejected([&] { problem_from_shapes({2, 20, 2, 8}, {2, 20, 2, 8}, {2, 20, 2, 12}, 16, 1.0, nullptr, {0, 20}); },
                  "B = 1");
  // The initial state of a packed batch has one state per sequence.
  Problem packed = p;
  packed.cu_seqlens = {0, 10, 40};
  const Tensor per_batch(DType::f32, {1, 2, 8, 12});
  expect_rejected([&] { run_forward(packed, ForwardConfig{}, in.q, in.k, in.v, &per_batch); }, "initial_state");
  const std::vector<std::int64_t> per_batch_shape{1, 2, 8, 12};
  expect_rejected(
      [&] { problem_from_shapes({1, 40, 2, 8}, {1, 40, 2, 8}, {1, 40, 2, 12}, 16, 1.0, &per_batch_shape, {0, 10, 40}); },
      "initial_state");
}

TEST(Validation, InitialZNeedsNormalizeAndItsShape) {
  const Problem p = small_problem();
  const auto in = random_inputs(p, DType::f32, 4, false, true, true);
  expect_rejected([&] { run_forward(p, ForwardConfig{}, in.q, in.k, in.v, nullptr, &in.initial_z); }, "normalize");
  ForwardConfig cfg;
  cfg.normalize = true;
  const Tensor wrong(DType::f32, {1, 2, 12});
  expect_rejected([&] { run_forward(p, cfg, in.q, in.k, in.v, nullptr, &wrong); }, "z_state");
}

}  // namespace
}  // namespace linattn
