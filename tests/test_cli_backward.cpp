// The real linattn binary, backward end to end: generate -> run -> generate
// --grad -> backward -> verify on plain and packed cases, bf16 and fp32, the
// gradients checked here against the fp64 reference too; the refusals (a
// --grad count that does not pair, a forward without snapshots unless
// --recompute-h, a normalized forward, an existing output unless --force);
// a bad gradient input fails its case only; verify fails on a tampered
// gradient.
#include "cli_runner.hpp"
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "core/random_tensor.hpp"
#include "io/file_error.hpp"
#include "io/grad_input_file.hpp"
#include "io/grad_output_file.hpp"
#include "io/input_file.hpp"
#include "reference/backward.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace linattn {
namespace {

using testing::contains;
using testing::Exit;
using testing::linattn_cli;
using testing::TempDir;
namespace fs = std::filesystem;

// A gradient output against the fp64 reference backward, recomputed here from
// the input case and the gradient input (independently of `verify`).
void expect_matches_reference(const std::string& grad_output, const std::string& input, const std::string& group,
                              const std::string& grad, bool bf16_snapshots) {
  SCOPED_TRACE(grad_output);
  const GradOutputData out = read_grad_output_file(grad_output);
  const CaseData in = read_case(input, group);
  const Problem p = problem_from_shapes(in.q.shape, in.k.shape, in.v.shape, out.record.run.chunk_size,
                                        out.record.run.scale, &in.initial_state.shape, in.cu_seqlens);
  const GradData g = read_grad_case(grad, group, p, in.q.dtype);
  ASSERT_FALSE(g.dht.empty());
  const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                            s0 = in.initial_state.to_double(), d_o = g.d_o.to_double(), dht = g.dht.to_double();
  const reference::Gradients ref = reference::backward(p, {q, k, v, &s0}, {d_o, &dht});
  const DType dtype = in.q.dtype, stored = out.dq.dtype;
  ASSERT_EQ(out.dq.shape, p.qk_shape());
  ASSERT_EQ(out.dk.shape, p.qk_shape());
  ASSERT_EQ(out.dv.shape, p.v_shape());
  ASSERT_EQ(out.dh0.shape, p.state_shape());
  EXPECT_EQ(out.dk.dtype, stored);
  EXPECT_EQ(out.dv.dtype, stored);
  EXPECT_EQ(out.dh0.dtype, accumulation_dtype(dtype));
  EXPECT_EQ(out.cu_seqlens, in.cu_seqlens);
  EXPECT_LE(relative_l2(out.dq.to_double(), ref.dq), output_level(dtype, stored, bf16_snapshots)) << "dq";
  EXPECT_LE(relative_l2(out.dk.to_double(), ref.dk), stored_level(dtype, stored)) << "dk";
  EXPECT_LE(relative_l2(out.dv.to_double(), ref.dv), stored_level(dtype, stored)) << "dv";
  EXPECT_LE(relative_l2(out.dh0.to_double(), ref.dh0), stored_level(dtype, out.dh0.dtype)) << "dh0";
}

class CliBackward : public ::testing::Test {
 protected:
  TempDir dir{"cli-backward"};
  std::string plain = dir / "plain.h5", packed = dir / "packed.h5";
  std::string fwd = dir / "fwd", bwd = dir / "bwd";

  Exit cli(const std::string& args) { return linattn_cli(dir, args); }

  // Two plain cases (fp32 B = 2, bf16 B = 1) with initial states, their
  // forward (chunk 32, scale 0.5, fp32 snapshots unless told) and gradients.
  void plain_forward(const std::string& run_options = "",
                     const std::string& cases = "--shape 2,100,2,16,24 --shape 1,70,3,32,32 --dtype fp32 --dtype bf16 "
                                                "--initial-state --seed 21") {
    Exit e = cli("generate -o '" + plain + "' " + cases);
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("run '" + plain + "' -o '" + fwd + "' --chunk 32 --scale 0.5 " + run_options);
    ASSERT_EQ(e.code, 0) << e.output;
    e = cli("generate --grad '" + plain + "' -o '" + dir / "plain_grad.h5" + "' --seed 31");
    ASSERT_EQ(e.code, 0) << e.output;
  }
  std::string plain_backward_args() const {
    const std::string g = dir / "plain_grad.h5";
    return "backward '" + fwd + "/plain.case0.h5' '" + fwd + "/plain.case1.h5' --grad '" + g + "' --grad '" + g +
           "' -o '" + bwd + "'";
  }
};

TEST_F(CliBackward, GenerateRunBackwardVerify) {
  plain_forward();
  // Packed sequences (bf16, fp32), bf16 snapshots, chunk 64.
  Exit e = cli("generate -o '" + packed + "' --shape 1,1,2,16,24 --dtype bf16 --dtype fp32 --seqlens 1,63,64,65,30 "
               "--initial-state --seed 22");
  ASSERT_EQ(e.code, 0) << e.output;
  e = cli("run '" + packed + "' -o '" + fwd + "' --snapshots bf16 --scale 0.75");
  ASSERT_EQ(e.code, 0) << e.output;
  const std::string packed_grad = dir / "packed_grad.h5";
  e = cli("generate --grad '" + packed + "' -o '" + packed_grad + "' --seed 32");
  ASSERT_EQ(e.code, 0) << e.output;

  // generate --grad: do like v in the input dtype, dht per sequence in fp32, never zero, in the input's groups.
  {
    const CaseData c1 = read_case(packed, "case1");
    const Problem p = problem_from_shapes(c1.q.shape, c1.k.shape, c1.v.shape, 64, 1.0, nullptr, c1.cu_seqlens);
    const GradData g = read_grad_case(packed_grad, "case1", p, DType::f32);
    EXPECT_EQ(g.group, "case1");
    EXPECT_EQ(g.d_o.shape, (std::vector<std::int64_t>{1, 223, 2, 24}));
    EXPECT_EQ(g.dht.shape, (std::vector<std::int64_t>{5, 2, 16, 24}));
    EXPECT_EQ(g.dht.dtype, DType::f32);
    for (std::int64_t i = 0; i < g.d_o.numel(); ++i) ASSERT_NE(g.d_o.get(i), 0.0) << "do holds a zero";
    EXPECT_THROW(read_grad_case(packed_grad, "case1", p, DType::bf16), FileError) << "case1's do is fp32";
  }

  const std::string plain_grad = dir / "plain_grad.h5";
  e = cli("backward '" + fwd + "/plain.case0.h5' '" + fwd + "/plain.case1.h5' '" + fwd + "/packed.case0.h5' '" + fwd +
          "/packed.case1.h5' --grad '" + plain_grad + "' --grad '" + plain_grad + "' --grad '" + packed_grad +
          "' --grad '" + packed_grad + "' -o '" + bwd + "'");
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_TRUE(contains(e.output, "[1/4] " + fwd + "/plain.case0.h5  B=2 T=100 H=2 DK=16 DV=24 fp32  backward/"))
      << e.output;
  EXPECT_TRUE(contains(e.output, "[3/4] " + fwd + "/packed.case0.h5  B=1 T=223 H=2 DK=16 DV=24 bf16 5 seqs"))
      << e.output;
  EXPECT_TRUE(contains(e.output, "-> " + bwd + "/packed.case1.grad.h5")) << e.output;
  EXPECT_TRUE(contains(e.output, "cases: 4 ok, 0 failed")) << e.output;

  for (const std::string group : {"case0", "case1"}) {
    expect_matches_reference(bwd + "/plain." + group + ".grad.h5", plain, group, plain_grad, false);
    expect_matches_reference(bwd + "/packed." + group + ".grad.h5", packed, group, packed_grad, true);
  }
  const GradOutputData out = read_grad_output_file(bwd + "/packed.case0.grad.h5");
  EXPECT_EQ(out.dq.dtype, DType::bf16);
  EXPECT_EQ(out.record.run.variant, "backward");
  EXPECT_EQ(out.record.run.chunk_size, 64);
  EXPECT_EQ(out.record.run.scale, 0.75);
  EXPECT_EQ(out.record.run.snapshot_dtype, "bf16");
  EXPECT_EQ(out.record.run.input_file, packed);
  EXPECT_EQ(out.record.run.input_group, "case0");
  EXPECT_EQ(out.record.run.num_sequences, 5);
  EXPECT_GT(out.record.run.flops, 0.0);
  EXPECT_GT(out.record.run.min_bytes, 0.0);
  EXPECT_EQ(out.record.forward_file, fwd + "/packed.case0.h5");
  EXPECT_EQ(out.record.grad_file, packed_grad);
  EXPECT_EQ(out.record.grad_group, "case0");
  EXPECT_FALSE(out.record.recompute_h);

  for (const std::string name : {"plain.case0", "plain.case1", "packed.case0", "packed.case1"}) {
    const Exit v = cli("verify '" + bwd + "/" + name + ".grad.h5'");
    EXPECT_EQ(v.code, 0) << v.output;
    EXPECT_TRUE(contains(v.output, "dh0")) << v.output;
    EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;
  }

  // --out-dtype fp32: dq, dk, dv in fp32, still within their (smaller) level.
  e = cli("backward '" + fwd + "/packed.case0.h5' --grad '" + packed_grad + "' -o '" + dir / "bwd32" +
          "' --out-dtype fp32");
  ASSERT_EQ(e.code, 0) << e.output;
  expect_matches_reference(dir / "bwd32/packed.case0.grad.h5", packed, "case0", packed_grad, true);
  EXPECT_EQ(read_grad_output_file(dir / "bwd32/packed.case0.grad.h5").dq.dtype, DType::f32);
  EXPECT_EQ(cli("verify '" + dir / "bwd32/packed.case0.grad.h5" + "'").code, 0);
}

// The kernels' first launch (a module load on a GPU) runs on a tiny case before
// the first case of each configuration and is reported on that case's line,
// never as its kernel time: once for two cases alike, again for another dtype.
TEST_F(CliBackward, KernelsWarmUpOncePerConfiguration) {
  plain_forward("", "--shape 1,70,2,16,16 --dtype fp32 --dtype fp32 --dtype bf16 --cases 3 --seed 23");
  const std::string g = dir / "plain_grad.h5";
  const Exit e = cli("backward '" + fwd + "/plain.case0.h5' '" + fwd + "/plain.case1.h5' '" + fwd + "/plain.case2.h5' --grad '" +
          g + "' --grad '" + g + "' --grad '" + g + "' -o '" + bwd + "'");
  ASSERT_EQ(e.code, 0) << e.output;
  std::vector<std::string> lines(3);
  std::istringstream text(e.output);
  for (std::string line; std::getline(text, line);)
    for (int i = 0; i < 3; ++i)
      if (contains(line, "[" + std::to_string(i + 1) + "/3] ")) lines[i] = line;
  EXPECT_TRUE(contains(lines[0], "(kernels' warm-up before it ")) << e.output;
  EXPECT_FALSE(contains(lines[1], "warm-up")) << e.output;
  EXPECT_TRUE(contains(lines[2], "(kernels' warm-up before it ")) << e.output;
}

TEST_F(CliBackward, GradCountMustPairWithTheForwardOutputs) {
  plain_forward();
  const Exit e = cli("backward '" + fwd + "/plain.case0.h5' '" + fwd + "/plain.case1.h5' --grad '" + dir /
                     "plain_grad.h5" + "' -o '" + bwd + "'");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "2 forward outputs but 1 --grad file: give --grad once per forward output, in the "
                                 "same order")) << e.output;
  EXPECT_FALSE(fs::exists(bwd + "/plain.case0.grad.h5"));
}

// The backward has one variant; a forward variant's name is refused with what to use instead.
TEST_F(CliBackward, OnlyTheFusedVariant) {
  plain_forward();
  const std::string args = "'" + fwd + "/plain.case0.h5' --grad '" + dir / "plain_grad.h5" + "' -o '" + bwd + "'";
  const Exit e = cli("backward " + args + " --variant materialized");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_TRUE(contains(e.output, "the backward has one variant, fused")) << e.output;
  EXPECT_FALSE(fs::exists(bwd + "/plain.case0.grad.h5"));
  EXPECT_EQ(cli("backward " + args + " --variant fused").code, 0);
}

TEST_F(CliBackward, ForwardWithoutSnapshotsNeedsRecomputeH) {
  plain_forward("--snapshots none");
  Exit e = cli(plain_backward_args());
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, fwd + "/plain.case0.h5: holds no snapshots h (its forward ran with --snapshots "
                                       "none): pass --recompute-h")) << e.output;
  EXPECT_TRUE(contains(e.output, "cases: 0 ok, 2 failed")) << e.output;
  EXPECT_FALSE(fs::exists(bwd + "/plain.case0.grad.h5"));

  e = cli(plain_backward_args() + " --recompute-h");
  ASSERT_EQ(e.code, 0) << e.output;
  for (const std::string group : {"case0", "case1"}) {
    const std::string out = bwd + "/plain." + group + ".grad.h5";
    expect_matches_reference(out, plain, group, dir / "plain_grad.h5", false);
    const GradOutputData g = read_grad_output_file(out);
    EXPECT_TRUE(g.record.recompute_h);
    EXPECT_EQ(g.record.run.snapshot_dtype, "fp32");
    const Exit v = cli("verify '" + out + "'");
    EXPECT_EQ(v.code, 0) << v.output;
    EXPECT_TRUE(contains(v.output, "snapshots recomputed")) << v.output;
  }
}

TEST_F(CliBackward, ExistingOutputRefusedWithoutForce) {
  plain_forward();
  ASSERT_EQ(cli(plain_backward_args()).code, 0);
  const Exit again = cli(plain_backward_args());
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_TRUE(contains(again.output, bwd + "/plain.case0.grad.h5: output exists (pass --force to overwrite, or "
                                          "--skip-existing to keep it)"))
      << again.output;
  const Exit forced = cli(plain_backward_args() + " --force");
  EXPECT_EQ(forced.code, 0) << forced.output;
  EXPECT_TRUE(contains(forced.output, "cases: 2 ok, 0 failed")) << forced.output;
  EXPECT_NE(cli(plain_backward_args() + " --force --skip-existing").code, 0) << "the two exclude each other";
}

// An interrupted batch resumes: complete outputs are kept (reported
// skipped, not read or written again), a missing one is made, with the bits
// of a run that was never interrupted.
TEST_F(CliBackward, SkipExistingResumesTheBatch) {
  plain_forward();
  ASSERT_EQ(cli(plain_backward_args()).code, 0);
  const std::string first = bwd + "/plain.case0.grad.h5", second = bwd + "/plain.case1.grad.h5";
  const GradOutputData want = read_grad_output_file(second);
  const auto kept_time = std::filesystem::last_write_time(first);
  std::filesystem::remove(second);
  const Exit resumed = cli(plain_backward_args() + " --skip-existing");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "[1/2] " + fwd + "/plain.case0.h5  skipped: " + first +
                                           " exists (--skip-existing)"))
      << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "cases: 2 ok, 0 failed (1 of the ok skipped: output exists)")) << resumed.output;
  EXPECT_EQ(std::filesystem::last_write_time(first), kept_time);
  const GradOutputData got = read_grad_output_file(second);
  EXPECT_TRUE(got.dq.bytes == want.dq.bytes && got.dk.bytes == want.dk.bytes && got.dv.bytes == want.dv.bytes &&
              got.dh0.bytes == want.dh0.bytes);
}

TEST_F(CliBackward, BadGradFileFailsItsCaseOnly) {
  plain_forward();
  // case1's do one column short in DV; case0 takes the good file.
  const std::string bad = dir / "bad_grad.h5";
  const CaseData c1 = read_case(plain, "case1");
  write_grad_file(bad, {{"case1", random_tensor(DType::bf16, {1, 70, 3, 31}, 5), Tensor()}});
  const Exit e = cli("backward '" + fwd + "/plain.case0.h5' '" + fwd + "/plain.case1.h5' --grad '" + dir /
                     "plain_grad.h5" + "' --grad '" + bad + "' -o '" + bwd + "'");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "[2/2] " + fwd + "/plain.case1.h5  FAILED: " + bad +
                                     ": dataset 'case1/do': shape [1, 70, 3, 31], but the forward's input case "
                                     "implies [B, T, H, DV] = [1, 70, 3, 32]")) << e.output;
  EXPECT_TRUE(contains(e.output, "cases: 1 ok, 1 failed")) << e.output;
  EXPECT_TRUE(fs::exists(bwd + "/plain.case0.grad.h5"));
  EXPECT_FALSE(fs::exists(bwd + "/plain.case1.grad.h5"));
  EXPECT_FALSE(fs::exists(bwd + "/plain.case1.grad.h5.partial"));

  // Wrong dtype of do and of dht, and a file without the case's group and without a root do.
  write_grad_file(bad, {{"case1", random_tensor(DType::f32, c1.v.shape, 6), Tensor()}}, {});
  Exit f = cli("backward '" + fwd + "/plain.case1.h5' --grad '" + bad + "' -o '" + bwd + "'");
  EXPECT_EQ(f.code, 1) << f.output;
  EXPECT_TRUE(contains(f.output, "dataset 'case1/do': dtype fp32, expected bf16 (do takes the dtype of the inputs, "
                                 "bf16)")) << f.output;
  write_grad_file(bad, {{"case1", random_tensor(DType::bf16, c1.v.shape, 6), random_tensor(DType::bf16, {1, 3, 32, 32}, 7)}},
                  {});
  f = cli("backward '" + fwd + "/plain.case1.h5' --grad '" + bad + "' -o '" + bwd + "'");
  EXPECT_EQ(f.code, 1) << f.output;
  EXPECT_TRUE(contains(f.output, "dataset 'case1/dht': dtype bf16, expected fp32")) << f.output;
  write_grad_file(bad, {{"other", random_tensor(DType::bf16, c1.v.shape, 6), Tensor()}}, {});
  f = cli("backward '" + fwd + "/plain.case1.h5' --grad '" + bad + "' -o '" + bwd + "'");
  EXPECT_EQ(f.code, 1) << f.output;
  EXPECT_TRUE(contains(f.output, "dataset 'do': missing (a gradient file holds do [B, T, H, DV] in group 'case1' or "
                                 "at the root")) << f.output;
  // A root pair serves a root lookup: the same do and no dht, at the root.
  write_grad_file(bad, {{"", random_tensor(DType::bf16, c1.v.shape, 6), Tensor()}}, {});
  f = cli("backward '" + fwd + "/plain.case1.h5' --grad '" + bad + "' -o '" + bwd + "'");
  EXPECT_EQ(f.code, 0) << f.output;
  const Exit v = cli("verify '" + bwd + "/plain.case1.grad.h5'");
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_TRUE(contains(v.output, "no dht")) << v.output;
}

TEST_F(CliBackward, NormalizedForwardAndChangedInputRefused) {
  plain_forward();
  const std::string g = dir / "plain_grad.h5";
  const std::string norm = dir / "norm";
  ASSERT_EQ(cli("run '" + plain + "' -o '" + norm + "' --normalize").code, 0);
  Exit e = cli("backward '" + norm + "/plain.case0.h5' --grad '" + g + "' -o '" + bwd + "'");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "the backward takes unnormalized forwards")) << e.output;

  // The input regenerated with other shapes under the same name: the forward no longer matches it.
  ASSERT_EQ(cli("generate -o '" + plain + "' --shape 2,90,2,16,24 --shape 1,70,3,32,32 --dtype fp32 --dtype bf16 "
                "--initial-state --seed 21 --force").code,
            0);
  e = cli("backward '" + fwd + "/plain.case0.h5' --grad '" + g + "' -o '" + bwd + "'");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "dataset 'o': shape [2, 100, 2, 24], but its input case " + plain +
                                     ":case0 implies [2, 90, 2, 24]")) << e.output;

  // Packed sequences moved inside the same T: only cu_seqlens tells.
  const std::string gen = "generate -o '" + packed + "' --shape 1,1,1,16,16 --dtype fp32 --seed 23 --force --seqlens ";
  ASSERT_EQ(cli(gen + "10,20").code, 0);
  ASSERT_EQ(cli("run '" + packed + "' -o '" + fwd + "'").code, 0);
  ASSERT_EQ(cli(gen + "20,10").code, 0);
  ASSERT_EQ(cli("generate --grad '" + packed + "' -o '" + dir / "packed_grad.h5" + "'").code, 0);
  e = cli("backward '" + fwd + "/packed.case0.h5' --grad '" + dir / "packed_grad.h5" + "' -o '" + bwd + "'");
  EXPECT_EQ(e.code, 1) << e.output;
  EXPECT_TRUE(contains(e.output, "dataset 'cu_seqlens': entry 1 is 10, but its input case " + packed +
                                     ":case0 has 20")) << e.output;
}

TEST_F(CliBackward, VerifyFailsOnATamperedGradient) {
  plain_forward();
  ASSERT_EQ(cli(plain_backward_args()).code, 0);
  for (const char* tensor : {"dq", "dk", "dv", "dh0"}) {
    SCOPED_TRACE(tensor);
    GradOutputData out = read_grad_output_file(bwd + "/plain.case0.grad.h5");  // fp32
    Tensor& t = std::string(tensor) == "dq" ? out.dq : std::string(tensor) == "dk" ? out.dk
                : std::string(tensor) == "dv" ? out.dv : out.dh0;
    t.set(17, t.get(17) * 1.5 + 0.1);
    const std::string tampered = dir / "tampered.grad.h5";
    write_grad_output_file(tampered, out, false);
    const Exit v = cli("verify '" + tampered + "'");
    EXPECT_EQ(v.code, 1) << v.output;
    EXPECT_TRUE(contains(v.output, "ABOVE LEVEL")) << v.output;
    EXPECT_TRUE(contains(v.output, "verify: FAILED")) << v.output;
  }
  // Another gradient input than the one the backward took.
  const std::string other = dir / "other_grad.h5";
  ASSERT_EQ(cli("generate --grad '" + plain + "' -o '" + other + "' --seed 99").code, 0);
  const Exit v = cli("verify '" + bwd + "/plain.case1.grad.h5' --grad '" + other + "'");
  EXPECT_EQ(v.code, 1) << v.output;
  EXPECT_EQ(cli("verify '" + bwd + "/plain.case1.grad.h5'").code, 0);
}

TEST_F(CliBackward, Help) {
  for (const std::string sub : {"backward", "generate", "verify"}) {
    const Exit e = cli(sub + " --help");
    EXPECT_EQ(e.code, 0) << sub << ": " << e.output;
    EXPECT_TRUE(contains(e.output, "--grad")) << sub << ": " << e.output;
  }
  EXPECT_NE(cli("generate --grad x.h5 --shape 1,2,3,4,5 -o y.h5").code, 0) << "--grad takes no --shape";
}

}  // namespace
}  // namespace linattn
