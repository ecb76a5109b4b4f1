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

}  // namespace
}  // namespace linattn
