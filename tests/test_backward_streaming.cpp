// The streamed backward (README.md "The backward", docs/ARCHITECTURE.md "The
// streamed backward"): the plan of its windows, and the real linattn binary
// under a memory budget that forces several windows, whose dq, dk, dv and dh0
// must be the bits of the whole case in one run_backward call, plain and
// packed (sequences longer than a window, and sequences ending inside one),
// with dht and initial states, from stored snapshots (fp32, bf16) and with
// --recompute-h; `linattn verify` accepts the streamed output.
#include "cli_runner.hpp"
#include "core/error_metrics.hpp"
#include "io/grad_input_file.hpp"
#include "io/grad_output_file.hpp"
#include "io/hdf5_dataset.hpp"
#include "io/hdf5_file.hpp"
#include "io/input_file.hpp"
#include "kernels/backward.hpp"
#include "pipeline/backward_window_plan.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <regex>
#include <tuple>

namespace linattn {
namespace {

using testing::contains;
using testing::Exit;
using testing::linattn_cli;
using testing::TempDir;

BackwardStorage bf16_storage(bool recompute) {
  BackwardStorage s;
  s.input = s.output = s.snapshot = DType::bf16;
  s.recompute_h = recompute;
  return s;
}

// The windows tile the tokens in order at chunk boundaries of their
// sequences, number h's chunks consecutively, and each fits the budget.
void expect_valid_plan(const Problem& p, const BackwardStorage& s, const std::vector<Window>& windows,
                       std::int64_t budget) {
  ASSERT_FALSE(windows.empty());
  std::int64_t t = 0, chunk = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const Window& w = windows[i];
    EXPECT_EQ(w.t0, t);
    EXPECT_GT(w.t1, w.t0);
    EXPECT_EQ(w.chunk0, chunk);
    EXPECT_LE(backward_window_bytes(p, s, w), budget);
    EXPECT_EQ(p.varlen() ? window_problem(p, w).total_chunks() : window_problem(p, w).num_chunks(), w.chunks);
    const std::int64_t start = p.varlen() ? p.cu_seqlens[w.seq_begin] : 0;
    EXPECT_EQ((w.t0 - start) % p.chunk, 0);
    EXPECT_EQ(w.continues, w.t0 > start);
    if (i + 1 < windows.size()) EXPECT_EQ(w.carries, windows[i + 1].continues);
    t = w.t1;
    chunk += w.chunks;
  }
  EXPECT_EQ(t, p.T);
  EXPECT_EQ(chunk, p.total_chunks());
}

TEST(BackwardWindowPlan, WholeCaseWhenItFitsElseWindowsWithinTheBudget) {
  Problem p;
  p.B = 2; p.T = 1000; p.H = 2; p.DK = 16; p.DV = 32; p.chunk = 16;
  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "stored h");
    const BackwardStorage s = bf16_storage(recompute);
    const std::int64_t whole = backward_window_bytes(p, s, whole_case_window(p));
    ASSERT_EQ(plan_backward_windows(p, s, whole).size(), 1u);
    const Window first_chunk{0, p.chunk, 0, p.B, false, true, 0, 1};
    const std::int64_t one_chunk = backward_window_bytes(p, s, first_chunk);
    for (const std::int64_t budget : {whole - 1, whole / 3, 3 * one_chunk, one_chunk}) {
      const std::vector<Window> windows = plan_backward_windows(p, s, budget);
      EXPECT_GT(windows.size(), 1u);
      expect_valid_plan(p, s, windows, budget);
    }
    EXPECT_EQ(plan_backward_windows(p, s, one_chunk).size(), static_cast<std::size_t>(p.num_chunks()));
    EXPECT_THROW(plan_backward_windows(p, s, one_chunk - 1), BudgetError);
  }
}

TEST(BackwardWindowPlan, PackedWindowsCutSequencesAtTheirChunkBoundaries) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    Problem p;
    p.B = 1; p.H = 2; p.DK = 16; p.DV = 16; p.chunk = 16;
    p.cu_seqlens = {0};
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) p.cu_seqlens.push_back(p.cu_seqlens.back() + 1 + static_cast<std::int64_t>(rng() % 300));
    p.T = p.cu_seqlens.back();
    const BackwardStorage s = bf16_storage(trial % 2 == 0);
    const std::int64_t budget = 100 * 1024 + static_cast<std::int64_t>(rng() % (200 * 1024));
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_valid_plan(p, s, plan_backward_windows(p, s, budget), budget);
  }
}

// The windows a case line reports ("... 6 windows (working set ...").
int windows_reported(const std::string& output, const std::string& forward) {
  const std::regex line(std::regex_replace(forward, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") +
                        R"(  .*  (\d+) windows? \(working set)");
  std::smatch m;
  return std::regex_search(output, m, line) ? std::stoi(m[1]) : -1;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const char* name) {
  EXPECT_EQ(a.dtype, b.dtype) << name;
  EXPECT_EQ(a.shape, b.shape) << name;
  EXPECT_TRUE(a.bytes == b.bytes) << name << " differs";
}

// dq, dk, dv and dh0 (and cu_seqlens) of two gradient outputs, bit for bit.
void expect_same_gradients(const GradOutputData& a, const GradOutputData& b) {
  expect_same_bits(a.dq, b.dq, "dq");
  expect_same_bits(a.dk, b.dk, "dk");
  expect_same_bits(a.dv, b.dv, "dv");
  expect_same_bits(a.dh0, b.dh0, "dh0");
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
}

class BackwardStreaming : public ::testing::Test {
 protected:
  TempDir dir{"backward-streaming"};
  std::string plain = dir / "plain.h5", packed = dir / "packed.h5";
  std::string fwd = dir / "fwd";

  Exit cli(const std::string& args) { return linattn_cli(dir, args); }

  // A plain fp32 case (B = 2, fp32 snapshots) and a packed bf16 one (bf16
  // snapshots; a sequence of 3000 tokens spans several windows, short ones
  // end inside them), both with initial states, chunk 32, and their gradients
  // (do and dht, never zero).
  void SetUp() override {
    Exit e = cli("generate -o '" + plain + "' --shape 2,1000,2,16,24 --dtype fp32 --initial-state --seed 41");
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("generate -o '" + packed + "' --shape 1,1,2,16,24 --dtype bf16 --seqlens 1,63,64,65,3000,700,5,129 "
            "--initial-state --seed 42");
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("run '" + plain + "' -o '" + fwd + "' --chunk 32 --scale 0.5");
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("run '" + packed + "' -o '" + fwd + "' --chunk 32 --scale 0.75 --snapshots bf16");
    ASSERT_EQ(e.code, 0) << e.output;
    for (const std::string name : {"plain", "packed"}) {
      e = cli("generate --grad '" + dir / (name + ".h5") + "' -o '" + dir / (name + "_grad.h5") + "' --seed 43");
      ASSERT_EQ(e.code, 0) << e.output;
    }
  }

  // The backward of forward output NAME.case0.h5 into OUT, with extra options.
  Exit backward(const std::string& name, const std::string& out, const std::string& options) {
    return cli("backward '" + fwd + "/" + name + ".case0.h5' --grad '" + dir / (name + "_grad.h5") + "' -o '" +
               dir / out + "' " + options);
  }
};

// run_backward on the whole case in memory, as `linattn backward` ran before
// it streamed: what every windowed run must reproduce bit for bit.
BackwardOutput whole_case_in_memory(const std::string& input, const std::string& forward, const std::string& grad,
                                    bool recompute) {
  const CaseData in = read_case(input, "case0");
  const hdf5::File f = hdf5::open_read_only(forward);
  const RunRecord rec = read_run_record(f.get(), forward);
  const Tensor h = hdf5::read_tensor(f.get(), forward, "h");
  const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, rec.chunk_size, rec.scale,
                                        &in.initial_state.shape, in.cu_seqlens);
  const GradData g = read_grad_case(grad, "case0", p, in.q.dtype);
  BackwardConfig config;
  config.recompute_h = recompute;
  return run_backward(p, config, in.q, in.k, in.v, recompute ? nullptr : &h, &in.initial_state, g.d_o, &g.dht);
}

TEST_F(BackwardStreaming, WindowsGiveTheBitsOfTheWholeCase) {
  for (const std::string name : {"plain", "packed"}) {
    for (const bool recompute : {false, true}) {
      const std::string tag = name + (recompute ? "-recompute" : "-stored");
      SCOPED_TRACE(tag);
      const std::string extra = recompute ? " --recompute-h" : "";
      const std::string forward = fwd + "/" + name + ".case0.h5";
      const Exit whole = backward(name, tag + "-whole", extra);
      ASSERT_EQ(whole.code, 0) << whole.output;
      EXPECT_EQ(windows_reported(whole.output, forward), 1) << whole.output;
      const Exit streamed = backward(name, tag + "-streamed", "--memory-budget 1M" + extra);
      ASSERT_EQ(streamed.code, 0) << streamed.output;
      EXPECT_GE(windows_reported(streamed.output, forward), 4) << streamed.output;
      EXPECT_TRUE(contains(streamed.output, "memory budget 1 MiB")) << streamed.output;

      const std::string stem = "/" + name + ".case0.grad.h5";
      const GradOutputData a = read_grad_output_file(dir / (tag + "-whole") + stem);
      const GradOutputData b = read_grad_output_file(dir / (tag + "-streamed") + stem);
      expect_same_gradients(a, b);
      EXPECT_EQ(b.record.recompute_h, recompute);

      // The whole case is what run_backward gives in memory.
      const BackwardOutput ref = whole_case_in_memory(dir / (name + ".h5"), forward, dir / (name + "_grad.h5"), recompute);
      expect_same_bits(ref.dq, a.dq, "dq (in memory)");
      expect_same_bits(ref.dk, a.dk, "dk (in memory)");
      expect_same_bits(ref.dv, a.dv, "dv (in memory)");
      expect_same_bits(ref.dh0, a.dh0, "dh0 (in memory)");

      const Exit v = cli("verify '" + dir / (tag + "-streamed") + stem + "'");
      EXPECT_EQ(v.code, 0) << v.output;
      EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;
    }
  }
}

// One reader process or three (each with a slot of its own, so up to three
// windows read ahead): the same bits, window by window.
TEST_F(BackwardStreaming, OneOrThreeReadersGiveTheSameBits) {
  for (const std::string name : {"plain", "packed"}) {
    SCOPED_TRACE(name);
    const Exit one = backward(name, name + "-one-reader", "--memory-budget 1M --readers 1");
    ASSERT_EQ(one.code, 0) << one.output;
    EXPECT_TRUE(contains(one.output, "(1 processes")) << one.output;
    const Exit three = backward(name, name + "-three-readers", "--memory-budget 1M --readers 3");
    ASSERT_EQ(three.code, 0) << three.output;
    EXPECT_TRUE(contains(three.output, "(3 processes")) << three.output;
    EXPECT_GE(windows_reported(three.output, fwd + "/" + name + ".case0.h5"), 4) << three.output;
    const std::string stem = "/" + name + ".case0.grad.h5";
    expect_same_gradients(read_grad_output_file(dir / (name + "-one-reader") + stem),
                          read_grad_output_file(dir / (name + "-three-readers") + stem));
  }
}

// Several writers (grad_write_stage.hpp): the gradient file mapped and each
// window's dq, dk, dv and dh0 rows copied in by threads at once: the bits of
// the one-writer run, in small windows, plain and packed.
TEST_F(BackwardStreaming, MappedWritersGiveTheSameBits) {
  for (const std::string name : {"plain", "packed"}) {
    SCOPED_TRACE(name);
    const Exit one = backward(name, name + "-one-writer", "--memory-budget 1M");
    ASSERT_EQ(one.code, 0) << one.output;
    const Exit mapped = backward(name, name + "-mapped", "--memory-budget 1M --writers 3");
    ASSERT_EQ(mapped.code, 0) << mapped.output;
    EXPECT_TRUE(contains(mapped.output, "(3 threads, 1 file mapped)")) << mapped.output;
    EXPECT_GE(windows_reported(mapped.output, fwd + "/" + name + ".case0.h5"), 4) << mapped.output;
    const std::string stem = "/" + name + ".case0.grad.h5";
    expect_same_gradients(read_grad_output_file(dir / (name + "-one-writer") + stem),
                          read_grad_output_file(dir / (name + "-mapped") + stem));
  }
}

// Gated cases (g per token, g_gamma per head, gk per key channel), plain and
// packed: the windows carry dS (dg and dgk sum within each chunk), so dq, dk,
// dv, dh0, dg and dgk are the whole case's bits; dg_gamma sums dg over the
// windows in another order (fp64), so it agrees to rounding. `verify` accepts
// the streamed outputs, the gate's gradient included.
TEST(GatedBackwardStreaming, WindowsGiveTheWholeCaseAndVerify) {
  TempDir dir("gated-backward-streaming");
  auto cli = [&](const std::string& args) { return linattn_cli(dir, args); };
  const std::string fwd = dir / "fwd";
  const struct {
    const char* name;
    const char* generate;
  } cases[] = {{"g_plain", "--shape 2,1000,2,16,24 --dtype fp32 --gate g --gate-strength 0.3"},
               {"gamma_packed", "--shape 1,1,2,16,24 --dtype bf16 --seqlens 1,63,64,65,3000,700,5,129 --gate gamma"},
               {"gk_packed", "--shape 1,1,2,16,24 --dtype fp32 --seqlens 1,63,64,65,3000,700,5,129 --gate gk"},
               {"gk_plain", "--shape 2,1000,2,16,24 --dtype bf16 --gate gk"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string input = dir / (std::string(c.name) + ".h5"), grad = dir / (std::string(c.name) + "_grad.h5");
    const std::string forward = fwd + "/" + c.name + ".case0.h5";
    Exit e = cli("generate -o '" + input + "' " + c.generate + " --initial-state --seed 45");
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("run '" + input + "' -o '" + fwd + "' --chunk 32 --scale 0.5");
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("generate --grad '" + input + "' -o '" + grad + "' --seed 46");
    ASSERT_EQ(e.code, 0) << e.output;
    const std::string base = "backward '" + forward + "' --grad '" + grad + "' -o '";
    const Exit whole = cli(base + dir / (std::string(c.name) + "-whole") + "'");
    ASSERT_EQ(whole.code, 0) << whole.output;
    const Exit streamed = cli(base + dir / (std::string(c.name) + "-streamed") + "' --memory-budget 1M");
    ASSERT_EQ(streamed.code, 0) << streamed.output;
    EXPECT_GE(windows_reported(streamed.output, forward), 4) << streamed.output;
    const std::string stem = std::string("/") + c.name + ".case0.grad.h5";
    const GradOutputData a = read_grad_output_file(dir / (std::string(c.name) + "-whole") + stem);
    const GradOutputData b = read_grad_output_file(dir / (std::string(c.name) + "-streamed") + stem);
    // The same windows written through a mapping by two threads (grad_write_stage.hpp): the same bytes.
    const Exit mapped = cli(base + dir / (std::string(c.name) + "-mapped") + "' --memory-budget 1M --writers 2");
    ASSERT_EQ(mapped.code, 0) << mapped.output;
    EXPECT_TRUE(contains(mapped.output, "(2 threads, 1 file mapped)")) << mapped.output;
    const GradOutputData m = read_grad_output_file(dir / (std::string(c.name) + "-mapped") + stem);
    for (const auto& [x, y, what] : {std::make_tuple(&b.dq, &m.dq, "dq (mapped)"), std::make_tuple(&b.dk, &m.dk, "dk (mapped)"),
                                     std::make_tuple(&b.dv, &m.dv, "dv (mapped)"), std::make_tuple(&b.dh0, &m.dh0, "dh0 (mapped)"),
                                     std::make_tuple(&b.dg, &m.dg, "dg (mapped)"), std::make_tuple(&b.dgk, &m.dgk, "dgk (mapped)"),
                                     std::make_tuple(&b.dg_gamma, &m.dg_gamma, "dg_gamma (mapped)")})
      expect_same_bits(*x, *y, what);
    expect_same_bits(a.dq, b.dq, "dq");
    expect_same_bits(a.dk, b.dk, "dk");
    expect_same_bits(a.dv, b.dv, "dv");
    expect_same_bits(a.dh0, b.dh0, "dh0");
    const bool per_head = std::string(c.name).rfind("gamma", 0) == 0, per_channel = std::string(c.name).rfind("gk", 0) == 0;
    const char* gradient = per_head ? "dg_gamma" : per_channel ? "dgk" : "dg";
    if (per_head) {
      ASSERT_EQ(b.dg_gamma.shape, std::vector<std::int64_t>{2});
      EXPECT_TRUE(a.dg.empty() && b.dg.empty());
      EXPECT_LE(relative_l2(b.dg_gamma.to_double(), a.dg_gamma.to_double()), 1e-6);
    } else if (per_channel) {
      ASSERT_EQ(b.dgk.shape, b.dq.shape);
      expect_same_bits(a.dgk, b.dgk, "dgk");
      EXPECT_TRUE(a.dg.empty() && a.dg_gamma.empty());
    } else {
      expect_same_bits(a.dg, b.dg, "dg");
      EXPECT_TRUE(a.dg_gamma.empty() && a.dgk.empty());
    }
    EXPECT_EQ(b.record.run.gate, per_head ? "g_gamma" : per_channel ? "gk" : "g");
    // The whole case in memory, as run_backward gives it.
    const CaseData in = read_case(input, "case0");
    const hdf5::File f = hdf5::open_read_only(forward);
    const Tensor h = hdf5::read_tensor(f.get(), forward, "h");
    const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, 32, 0.5, &in.initial_state.shape,
                                          in.cu_seqlens);
    const GradData g = read_grad_case(grad, "case0", p, in.q.dtype);
    BackwardConfig config;
    config.gate = in.gate;
    const BackwardOutput ref =
        run_backward(p, config, in.q, in.k, in.v, &h, &in.initial_state, g.d_o, &g.dht, &in.log_decay);
    expect_same_bits(ref.dq, a.dq, "dq (in memory)");
    expect_same_bits(ref.dh0, a.dh0, "dh0 (in memory)");
    if (per_head) expect_same_bits(ref.dg_gamma, a.dg_gamma, "dg_gamma (in memory)");
    else expect_same_bits(ref.dg, per_channel ? a.dgk : a.dg, "dg or dgk (in memory)");
    const Exit v = cli("verify '" + dir / (std::string(c.name) + "-streamed") + stem + "'");
    EXPECT_EQ(v.code, 0) << v.output;
    EXPECT_TRUE(contains(v.output, std::string(gradient) + " ")) << v.output;
    EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;
    // The gate's gradient changed (its first tenth negated): verify fails on it alone.
    GradOutputData t = read_grad_output_file(dir / (std::string(c.name) + "-streamed") + stem);
    Tensor& gate_gradient = per_head ? t.dg_gamma : per_channel ? t.dgk : t.dg;
    for (std::int64_t e = 0; e < std::max<std::int64_t>(1, gate_gradient.numel() / 10); ++e)
      gate_gradient.set(e, -gate_gradient.get(e) - 0.1);
    const std::string tampered = dir / (std::string(c.name) + "-tampered.grad.h5");
    write_grad_output_file(tampered, t, false);
    const Exit bad = cli("verify '" + tampered + "'");
    EXPECT_EQ(bad.code, 1) << bad.output;
    EXPECT_TRUE(contains(bad.output, "ABOVE LEVEL")) << bad.output;
    EXPECT_TRUE(contains(bad.output, "verify: FAILED")) << bad.output;
  }
}

TEST_F(BackwardStreaming, NonFiniteGradientInALaterWindowFailsTheCaseAndLeavesNoFile) {
  // do with a NaN near the end: the first window the backward reads.
  const CaseData in = read_case(plain, "case0");
  const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, 32, 0.5, nullptr, {});
  GradData g = read_grad_case(dir / "plain_grad.h5", "case0", p, DType::f32);
  g.d_o.set(g.d_o.numel() - 100, std::nan(""));
  write_grad_file(dir / "bad_grad.h5", {{"case0", g.d_o, g.dht}});
  const Exit e = cli("backward '" + fwd + "/plain.case0.h5' --grad '" + dir / "bad_grad.h5" + "' -o '" + dir / "bad" +
                     "' --memory-budget 1M");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "dataset 'case0/do': 1 non-finite element in tokens [")) << e.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad/plain.case0.grad.h5"));
  EXPECT_FALSE(std::filesystem::exists(dir / "bad/plain.case0.grad.h5.partial"));
}

TEST_F(BackwardStreaming, BudgetBelowOneChunkIsRefused) {
  // Four rows of 4096 tokens with DK = DV = 128 at chunk 128: one chunk of every row exceeds 1 MiB.
  const std::string big = dir / "big.h5";
  ASSERT_EQ(cli("generate -o '" + big + "' --shape 4,256,4,128,128 --dtype fp32 --seed 44").code, 0);
  ASSERT_EQ(cli("run '" + big + "' -o '" + fwd + "' --chunk 128").code, 0);
  ASSERT_EQ(cli("generate --grad '" + big + "' -o '" + dir / "big_grad.h5" + "'").code, 0);
  const Exit e = cli("backward '" + fwd + "/big.case0.h5' --grad '" + dir / "big_grad.h5" + "' -o '" + dir / "b" +
                     "' --memory-budget 1M");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "the memory budget is too small for this case's backward")) << e.output;
  EXPECT_TRUE(contains(e.output, "a third of the memory budget; raise --memory-budget")) << e.output;
}

}  // namespace
}  // namespace linattn
