// The real linattn binary, end to end: generate -> run -> verify on a
// generated file, the outputs checked here against the fp64 reference too;
// verify fails on tampered outputs and on the wrong input; a batch with a bad
// input exits non-zero after finishing the good cases; ledger prints the
// specification's cost table; every subcommand has --help.
#include "cli_runner.hpp"
#include "core/accuracy_levels.hpp"
#include "core/error_metrics.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "reference/references.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace linattn {
namespace {

using testing::contains;
using testing::Exit;
using testing::linattn_cli;
using testing::TempDir;
namespace fs = std::filesystem;

// Multiplies one element of a float32 dataset in place (the file is a copy).
void tamper_element(const std::string& path, const char* dataset, std::size_t index, float factor) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, dataset, H5P_DEFAULT);
  const hid_t space = H5Dget_space(ds);
  std::vector<float> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  ASSERT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  values.at(index) *= factor;
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
}

void set_scale_attribute(const std::string& path, double scale) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t attr = H5Aopen(f, "scale", H5P_DEFAULT);
  ASSERT_GE(H5Awrite(attr, H5T_NATIVE_DOUBLE, &scale), 0);
  H5Aclose(attr);
  H5Fclose(f);
}

// Replaces a string attribute of the file's root (variable-length UTF-8, as linattn writes them).
void set_string_attribute(const std::string& path, const char* name, const std::string& value) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete(f, name), 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* text = value.c_str();
  ASSERT_GE(H5Awrite(attr, type, &text), 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(f);
}

class CliEndToEnd : public ::testing::Test {
 protected:
  TempDir dir{"cli"};
  std::string input = dir / "in.h5";
  std::string outdir = dir / "out";

  void generate(const std::string& path, int seed) {
    const Exit g = linattn_cli(dir, "generate -o '" + path + "' --shape 2,100,2,16,24 --shape 1,70,3,32,32 "
                                    "--dtype fp32 --dtype bf16 --seed " + std::to_string(seed) + " --initial-state");
    ASSERT_EQ(g.code, 0) << g.output;
  }
};

TEST_F(CliEndToEnd, GenerateRunVerify) {
  generate(input, 7);
  ASSERT_EQ(list_cases(input), (std::vector<std::string>{"case0", "case1"}));
  const CaseData c0 = read_case(input, "case0");
  EXPECT_EQ(c0.q.dtype, DType::f32);
  EXPECT_EQ(c0.q.shape, (std::vector<std::int64_t>{2, 100, 2, 16}));
  EXPECT_EQ(c0.initial_state.shape, (std::vector<std::int64_t>{2, 2, 16, 24}));
  EXPECT_EQ(read_case(input, "case1").v.dtype, DType::bf16);
  for (const Tensor* t : {&c0.q, &c0.k, &c0.v, &c0.initial_state})
    for (std::int64_t i = 0; i < t->numel(); ++i) ASSERT_NE(t->get(i), 0.0) << "generated inputs hold a zero";

  const Exit run = linattn_cli(dir, "run '" + input + "' -o '" + outdir +
                                        "' --chunk 32 --scale 0.5 --variant materialized --snapshots bf16");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "[1/2] " + input + ":case0  B=2 T=100 H=2 DK=16 DV=24 fp32  materialized")) << run.output;
  EXPECT_TRUE(contains(run.output, "[2/2] " + input + ":case1  B=1 T=70 H=3 DK=32 DV=32 bf16")) << run.output;
  EXPECT_TRUE(contains(run.output, "cases: 2 ok, 0 failed")) << run.output;

  // The outputs, checked here against the fp64 reference independently of `verify`.
  for (const std::string group : {"case0", "case1"}) {
    SCOPED_TRACE(group);
    const std::string out_path = outdir + "/in." + group + ".h5";
    const OutputData out = read_output_file(out_path);
    const CaseData in = read_case(input, group);
    EXPECT_EQ(out.record.chunk_size, 32);
    EXPECT_EQ(out.record.scale, 0.5);
    EXPECT_EQ(out.record.variant, "materialized");
    EXPECT_EQ(out.record.input_file, input);
    EXPECT_EQ(out.record.input_group, group);
    EXPECT_EQ(out.record.snapshot_dtype, "bf16");
    EXPECT_GT(out.record.flops, 0.0);
    EXPECT_GT(out.record.min_bytes, 0.0);
    Problem p;
    p.B = in.q.shape[0]; p.T = in.q.shape[1]; p.H = in.q.shape[2]; p.DK = in.q.shape[3]; p.DV = in.v.shape[3];
    p.chunk = 32;
    p.scale = 0.5;
    const std::vector<double> q = in.q.to_double(), k = in.k.to_double(), v = in.v.to_double(),
                              s0 = in.initial_state.to_double();
    const auto ref = reference::chunked(p, {q, k, v, &s0});
    ASSERT_EQ(out.o.dtype, in.q.dtype);
    ASSERT_EQ(out.h.dtype, DType::bf16);
    ASSERT_EQ(out.h.shape, p.h_shape());
    EXPECT_LE(relative_l2(out.o.to_double(), ref.o), output_level(in.q.dtype, out.o.dtype, true));
    EXPECT_LE(relative_l2(out.h.to_double(), ref.h), stored_level(in.q.dtype, DType::bf16));
    EXPECT_LE(relative_l2(out.final_state.to_double(), ref.final_state), stored_level(in.q.dtype, DType::f32));

    const Exit verify = linattn_cli(dir, "verify '" + out_path + "' --input '" + input + "' --per-chunk");
    EXPECT_EQ(verify.code, 0) << verify.output;
    EXPECT_TRUE(contains(verify.output, "verify: ok")) << verify.output;
  }
  // --input defaults to the file recorded in the output; the last chunk of case0 holds 100 - 3*32 = 4 tokens.
  const Exit per_chunk = linattn_cli(dir, "verify '" + outdir + "/in.case0.h5' --per-chunk");
  EXPECT_EQ(per_chunk.code, 0) << per_chunk.output;
  EXPECT_TRUE(contains(per_chunk.output, "\n    3       4  ")) << per_chunk.output;
}

// Without --scale, run uses flash-linear-attention's default DK^-0.5, writes it
// into the output's attributes and shows it in the case's result line;
// --scale 1 stays available.
TEST_F(CliEndToEnd, DefaultScaleIsOneOverTheSquareRootOfDK) {
  generate(input, 12);
  const Exit run = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "'");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::pair<const char*, std::int64_t> cases[] = {{"case0", 16}, {"case1", 32}};
  for (const auto& [group, dk] : cases) {
    SCOPED_TRACE(group);
    const std::string out_path = outdir + "/in." + std::string(group) + ".h5";
    EXPECT_EQ(read_output_file(out_path).record.scale, 1.0 / std::sqrt(static_cast<double>(dk)));
    const Exit verify = linattn_cli(dir, "verify '" + out_path + "'");  // o = DK^-0.5 S^T q, against fp64
    EXPECT_EQ(verify.code, 0) << verify.output;
  }
  EXPECT_TRUE(contains(run.output, "[1/2] " + input + ":case0  B=2 T=100 H=2 DK=16 DV=24 fp32  fused/")) << run.output;
  EXPECT_TRUE(contains(run.output, "  scale 0.25  kernel ")) << run.output;
  EXPECT_TRUE(contains(run.output, "  scale 0.1768  kernel ")) << run.output;

  const Exit one = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "' --force --scale 1");
  ASSERT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(read_output_file(outdir + "/in.case0.h5").record.scale, 1.0);
  EXPECT_TRUE(contains(one.output, "  scale 1  kernel ")) << one.output;
}

// verify finds the input from any folder: the output records the input's path
// relative to its own folder (and its absolute path). A case at the root of
// plain.h5 writes OUT/plain.h5, so from inside OUT the input's name as typed
// ("plain.h5") is the output itself.
TEST_F(CliEndToEnd, VerifyFindsTheInputFromAnyFolder) {
  const std::string work = dir / "work", elsewhere = dir / "elsewhere";
  fs::create_directories(work);
  fs::create_directories(elsewhere);
  const std::string in_work = "cd '" + work + "' &&";
  ASSERT_EQ(linattn_cli(dir, "generate -o plain.h5 --shape 2,100,2,16,24 --dtype fp32 --seed 13 --cases 1", in_work)
                .code,
            0);
  // generate writes case0: move it to the root, so that the output is named as the input.
  {
    const hid_t f = H5Fopen((work + "/plain.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    for (const char* name : {"q", "k", "v"})
      ASSERT_GE(H5Lmove(f, (std::string("case0/") + name).c_str(), f, name, H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Ldelete(f, "case0", H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const Exit run = linattn_cli(dir, "run plain.h5 -o out", in_work);
  ASSERT_EQ(run.code, 0) << run.output;
  const OutputData out = read_output_file(work + "/out/plain.h5");
  EXPECT_EQ(out.record.input_file_relative, "../plain.h5");
  EXPECT_EQ(fs::path(out.record.input_file), fs::weakly_canonical(work + "/plain.h5"));

  Exit v = linattn_cli(dir, "verify ../work/out/plain.h5", "cd '" + elsewhere + "' &&");
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;
  v = linattn_cli(dir, "verify plain.h5", "cd '" + work + "/out' &&");
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;

  // The output and its input moved together: the relative path still finds it.
  const std::string moved = dir / "moved";
  fs::rename(work, moved);
  v = linattn_cli(dir, "verify out/plain.h5", "cd '" + moved + "' &&");
  EXPECT_EQ(v.code, 0) << v.output;
  // backward finds the forward's input the same way, and verify its gradient output's files.
  ASSERT_EQ(linattn_cli(dir, "generate --grad plain.h5 -o grad.h5 --seed 14", "cd '" + moved + "' &&").code, 0);
  v = linattn_cli(dir, "backward ../moved/out/plain.h5 --grad ../moved/grad.h5 -o ../moved/bwd",
                  "cd '" + elsewhere + "' &&");
  ASSERT_EQ(v.code, 0) << v.output;
  v = linattn_cli(dir, "verify plain.grad.h5", "cd '" + moved + "/bwd' &&");
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_TRUE(contains(v.output, "verify: ok")) << v.output;

  // The output given as its own input is refused, saying so.
  v = linattn_cli(dir, "verify plain.h5 --input plain.h5", "cd '" + moved + "/out' &&");
  EXPECT_EQ(v.code, 2) << v.output;
  EXPECT_TRUE(contains(v.output, "linattn verify: error: plain.h5: --input plain.h5 is this output file itself"))
      << v.output;
  // So is an output made before the relative path was recorded, read from inside its folder, where the input's
  // name as typed then ("plain.h5") is the output itself.
  set_string_attribute(moved + "/out/plain.h5", "input_file", "plain.h5");
  {
    const hid_t f = H5Fopen((moved + "/out/plain.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete(f, "input_file_relative"), 0);
    H5Fclose(f);
  }
  v = linattn_cli(dir, "verify plain.h5", "cd '" + moved + "/out' &&");
  EXPECT_EQ(v.code, 2) << v.output;
  EXPECT_TRUE(contains(v.output, "plain.h5: its attribute 'input_file' names plain.h5, which is this output file "
                                 "itself")) << v.output;
  v = linattn_cli(dir, "verify out/plain.h5", "cd '" + moved + "' &&");  // from where it was made: found as typed
  EXPECT_EQ(v.code, 0) << v.output;
}

TEST_F(CliEndToEnd, VerifyFailsOnTamperedOutputsAndWrongInput) {
  generate(input, 8);
  const Exit run = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "'");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::string out0 = outdir + "/in.case0.h5", out1 = outdir + "/in.case1.h5";

  const std::string tampered_o = dir / "tampered_o.h5";
  fs::copy_file(out0, tampered_o);
  tamper_element(tampered_o, "o", 1234, 1.5f);
  Exit v = linattn_cli(dir, "verify '" + tampered_o + "' --input '" + input + "'");
  EXPECT_EQ(v.code, 1) << v.output;
  EXPECT_TRUE(contains(v.output, "ABOVE LEVEL")) << v.output;
  EXPECT_TRUE(contains(v.output, "verify: FAILED")) << v.output;

  const std::string tampered_h = dir / "tampered_h.h5";
  fs::copy_file(out0, tampered_h);
  tamper_element(tampered_h, "h", 2 * 16 * 24 + 5, 2.0f);  // one element of h[0, 1] (chunk 64: NT = 2)
  v = linattn_cli(dir, "verify '" + tampered_h + "'");
  EXPECT_EQ(v.code, 1) << v.output;

  const std::string wrong_scale = dir / "wrong_scale.h5";
  fs::copy_file(out1, wrong_scale);
  set_scale_attribute(wrong_scale, 0.25);
  v = linattn_cli(dir, "verify '" + wrong_scale + "'");
  EXPECT_EQ(v.code, 1) << v.output;

  const std::string other = dir / "other.h5";  // same shapes and dtypes, other values
  generate(other, 9);
  v = linattn_cli(dir, "verify '" + out1 + "' --input '" + other + "'");
  EXPECT_EQ(v.code, 1) << v.output;

  // The untouched outputs still pass.
  EXPECT_EQ(linattn_cli(dir, "verify '" + out0 + "'").code, 0);
  EXPECT_EQ(linattn_cli(dir, "verify '" + out1 + "'").code, 0);
}

TEST_F(CliEndToEnd, BatchWithABadInputFinishesTheOthersAndExitsNonZero) {
  generate(input, 10);
  const std::string missing = dir / "missing.h5";
  const Exit run = linattn_cli(dir, "run '" + missing + "' '" + input + "' -o '" + outdir + "'");
  EXPECT_EQ(run.code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "[1/3] " + missing + "  FAILED: " + missing + ": no such file\n")) << run.output;
  EXPECT_TRUE(contains(run.output, "cases: 2 ok, 1 failed")) << run.output;
  EXPECT_TRUE(fs::exists(outdir + "/in.case0.h5"));
  EXPECT_TRUE(fs::exists(outdir + "/in.case1.h5"));

  const Exit again = linattn_cli(dir, "run '" + input + "' -o '" + outdir + "'");
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_TRUE(contains(again.output, outdir + "/in.case0.h5: output exists (pass --force to overwrite, or --skip-existing to keep it)")) << again.output;
  EXPECT_EQ(linattn_cli(dir, "run '" + input + "' -o '" + outdir + "' --force").code, 0);
}

TEST_F(CliEndToEnd, PackedSequencesNormalizedRunVerify) {
  // generate --seqlens --positive --initial-state --initial-z -> run --normalize -> verify, per variant.
  const Exit g = linattn_cli(dir, "generate -o '" + input + "' --shape 1,1,2,16,24 --dtype bf16 --dtype fp32 "
                                  "--seqlens 1,63,64,65,300 --positive --initial-state --initial-z --seed 11");
  ASSERT_EQ(g.code, 0) << g.output;
  const CaseData c0 = read_case(input, "case0");
  EXPECT_EQ(c0.cu_seqlens, (std::vector<std::int64_t>{0, 1, 64, 128, 193, 493}));
  EXPECT_EQ(c0.q.shape, (std::vector<std::int64_t>{1, 493, 2, 16}));
  EXPECT_EQ(c0.initial_state.shape, (std::vector<std::int64_t>{5, 2, 16, 24}));
  EXPECT_EQ(c0.initial_z.shape, (std::vector<std::int64_t>{5, 2, 16}));
  for (std::int64_t i = 0; i < c0.q.numel(); ++i) ASSERT_GT(c0.q.get(i), 0.0) << "--positive wrote a value <= 0";

  for (const std::string variant : {"fused", "materialized", "recompute", "recurrent"}) {
    SCOPED_TRACE(variant);
    const std::string out = outdir + "_" + variant;
    const Exit run = linattn_cli(dir, "run '" + input + "' -o '" + out + "' --normalize --variant " + variant);
    ASSERT_EQ(run.code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, "cases: 2 ok, 0 failed")) << run.output;
    for (const std::string group : {"case0", "case1"}) {
      const std::string path = out + "/in." + group + ".h5";
      const OutputData o = read_output_file(path);
      EXPECT_TRUE(o.record.normalize);
      EXPECT_EQ(o.record.num_sequences, 5);
      EXPECT_EQ(o.h.shape, (std::vector<std::int64_t>{1, 1 + 1 + 1 + 2 + 5, 2, 16, 24}));
      EXPECT_EQ(o.final_state.shape, (std::vector<std::int64_t>{5, 2, 16, 24}));
      EXPECT_EQ(o.z_state.shape, (std::vector<std::int64_t>{5, 2, 16}));
      EXPECT_EQ(o.cu_seqlens, c0.cu_seqlens);
      const Exit verify = linattn_cli(dir, "verify '" + path + "' --per-chunk");
      EXPECT_EQ(verify.code, 0) << verify.output;
      EXPECT_TRUE(contains(verify.output, "5 packed sequences, normalized")) << verify.output;
      EXPECT_TRUE(contains(verify.output, "z_state")) << verify.output;
    }
  }
  // The checks bite: a wrong z_state, and o of a run that was not normalized.
  const std::string tampered = dir / "tampered_z.h5";
  fs::copy_file(outdir + "_fused/in.case1.h5", tampered);
  tamper_element(tampered, "z_state", 7, 1.01f);
  Exit v = linattn_cli(dir, "verify '" + tampered + "'");
  EXPECT_EQ(v.code, 1) << v.output;
  EXPECT_TRUE(contains(v.output, "ABOVE LEVEL")) << v.output;
  const std::string plain_out = dir / "plain";
  const std::string plain_in = dir / "plain_in.h5";
  ASSERT_EQ(linattn_cli(dir, "generate -o '" + plain_in + "' --shape 1,1,2,16,24 --seqlens 30,70 --positive --seed 12")
                .code,
            0);
  ASSERT_EQ(linattn_cli(dir, "run '" + plain_in + "' -o '" + plain_out + "'").code, 0);
  EXPECT_EQ(linattn_cli(dir, "verify '" + plain_out + "/plain_in.case0.h5'").code, 0);
  const std::string pretend = dir / "pretend_normalized.h5";
  fs::copy_file(outdir + "_fused/in.case1.h5", pretend);
  const Exit wrong = linattn_cli(dir, "verify '" + pretend + "' --input '" + plain_in + "'");
  EXPECT_NE(wrong.code, 0) << wrong.output;
}

// --gate adds each gate's own work per N (count_gate, src/core/ledger.cpp): at
// N = 512, C = DK = DV = 64 (8 chunks), gk multiplies 512 (C DK + 2 DK) +
// 8 DK DV = 2.195 M times and takes 512 (C DK + 2 DK) + 8 DK = 2.163 M exps over
// 4 * 512 * DK bytes; g and gamma multiply 512 (C + DV + DK) + 8 DK DV = 0.131 M
// times and take 512 (C + 2) = 0.034 M exps, over 4 * 512 bytes (g) or 4 (gamma).
// generate writes gates a run accepts: --gate-strength above 1e36 would draw
// log-decays below the lowest one (kLowestLogDecay, core/gate.hpp), so it is refused.
TEST_F(CliEndToEnd, GenerateKeepsGatesInTheAcceptedRange) {
  const std::string out = dir / "strength.h5";
  const Exit lowest = linattn_cli(dir, "generate -o '" + out + "' --shape 1,64,1,8,8 --dtype fp32 --gate gk --gate-strength 1e36");
  ASSERT_EQ(lowest.code, 0) << lowest.output;
  const std::string outdir = dir / "strength-out";
  const Exit run = linattn_cli(dir, "run '" + out + "' -o '" + outdir + "'");
  EXPECT_EQ(run.code, 0) << run.output;
  const Exit beyond =
      linattn_cli(dir, "generate -o '" + out + "' --shape 1,64,1,8,8 --dtype fp32 --gate gk --gate-strength 2e36 --force");
  EXPECT_NE(beyond.code, 0) << beyond.output;
  EXPECT_TRUE(contains(beyond.output, "--gate-strength")) << beyond.output;
}

TEST_F(CliEndToEnd, LedgerCountsEachGate) {
  const struct {
    const char* gate;
    std::vector<std::string> columns;  // gate Mmul, gate Mexp, gate/ideal (not checked), gate MB
  } cases[] = {{"gk", {"2.195", "2.163", "", "0.131"}}, {"g", {"0.131", "0.034", "", "0.002"}},
               {"gamma", {"0.131", "0.034", "", "0.000"}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.gate);
    const Exit e = linattn_cli(dir, std::string("ledger --dk 64 --dv 64 --chunk 64 --seq 512 --gate ") + c.gate);
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_TRUE(contains(e.output, "gate Mmul")) << e.output;
    std::istringstream lines(e.output);
    bool found = false;
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::vector<std::string> cells;
      for (std::string w; words >> w;) cells.push_back(w);
      if (cells.empty() || cells[0] != "512") continue;
      found = true;
      ASSERT_EQ(cells.size(), 15u) << line;  // the 11 columns of the table without a gate, then the gate's 4
      for (std::size_t i = 0; i < c.columns.size(); ++i)
        if (!c.columns[i].empty()) EXPECT_EQ(cells[11 + i], c.columns[i]) << line;
    }
    EXPECT_TRUE(found) << e.output;
  }
  EXPECT_FALSE(contains(linattn_cli(dir, "ledger --seq 512").output, "gate Mmul"));
  EXPECT_NE(linattn_cli(dir, "ledger --seq 512 --gate gx").code, 0);
}

TEST_F(CliEndToEnd, LedgerPrintsTheSeedTable) {
  const Exit e = linattn_cli(dir, "ledger --dk 64 --dv 64 --chunk 64 --seq 512,2048,8192,16384,65536");
  ASSERT_EQ(e.code, 0) << e.output;
  // The specification's cost table (N, NC, redundancy, step 1, ideal, causal FA, ratios), then its sequential pass.
  const std::vector<std::vector<std::string>> seed = {
      {"512", "8", "3.5x", "0.015", "0.017", "0.034", "0.438", "0.500", "0.004"},
      {"2048", "32", "15.5x", "0.260", "0.067", "0.537", "0.484", "0.125", "0.017"},
      {"8192", "128", "63.5x", "4.261", "0.268", "8.590", "0.496", "0.031", "0.067"},
      {"16384", "256", "127.5x", "17.113", "0.537", "34.360", "0.498", "0.016", "0.134"},
      {"65536", "1024", "511.5x", "274.609", "2.147", "549.756", "0.500", "0.004", "0.537"},
  };
  std::istringstream lines(e.output);
  std::string line;
  std::size_t row = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string w; words >> w;) cells.push_back(w);
    if (cells.empty() || row >= seed.size() || cells[0] != seed[row][0]) continue;
    ASSERT_GE(cells.size(), seed[row].size()) << line;
    for (std::size_t c = 0; c < seed[row].size(); ++c) EXPECT_EQ(cells[c], seed[row][c]) << line;
    ++row;
  }
  EXPECT_EQ(row, seed.size()) << e.output;

  // Every column is named for what it counts, and a legend says so: the recompute form's whole forward is
  // never below the ideal forward (its prefix states alone, 0.015 at N = 512, are).
  EXPECT_TRUE(contains(e.output, "recompute state GFLOP")) << e.output;
  EXPECT_TRUE(contains(e.output, "ideal forward GFLOP")) << e.output;
  EXPECT_TRUE(contains(e.output, "What each column counts")) << e.output;
  std::istringstream again(e.output);
  int compared = 0;
  while (std::getline(again, line)) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string w; words >> w;) cells.push_back(w);
    if (cells.size() != 11 || cells[0] == "N" || !std::isdigit(static_cast<unsigned char>(cells[0][0]))) continue;
    EXPECT_GE(std::stod(cells[10]), std::stod(cells[4])) << line;
    ++compared;
  }
  EXPECT_EQ(compared, 5) << e.output;
}

// Bare `linattn` prints the usage and exits 2, as every usage error does.
TEST_F(CliEndToEnd, BareLinattnPrintsTheUsageAndExits2) {
  const Exit bare = linattn_cli(dir, "");
  EXPECT_EQ(bare.code, 2) << bare.output;
  EXPECT_TRUE(contains(bare.output, "a subcommand is required")) << bare.output;
  EXPECT_TRUE(contains(bare.output, "Usage:")) << bare.output;
  for (const std::string sub : {"run", "generate", "verify", "ledger", "bench", "backward"})
    EXPECT_TRUE(contains(bare.output, sub)) << bare.output;
  EXPECT_EQ(linattn_cli(dir, "run").code, 2);  // a required option missing
  EXPECT_EQ(linattn_cli(dir, "nonsense").code, 2);
}

// bench names its accuracy columns for what they hold (the backward's dq, dk,
// dv, and dg when gated; the state pass's final state), and run and bench take one set of
// --snapshots values, each help saying why its default is what it is.
TEST_F(CliEndToEnd, BenchNamesItsAccuracyColumnsAndSnapshotsAgreeWithRun) {
  const Exit backward = linattn_cli(dir, "bench --shape 1,128,1,16 --dtype fp32 --backward --reps 1 --warmup 0");
  ASSERT_EQ(backward.code, 0) << backward.output;
  EXPECT_TRUE(contains(backward.output, "dq rel L2  dk rel L2  dv rel L2")) << backward.output;
  EXPECT_FALSE(contains(backward.output, "o rel L2")) << backward.output;
  EXPECT_TRUE(contains(backward.output, "scale 0.25")) << backward.output;
  const Exit gated = linattn_cli(dir, "bench --shape 1,128,1,16 --dtype fp32 --backward --gate g --reps 1 --warmup 0");
  ASSERT_EQ(gated.code, 0) << gated.output;
  EXPECT_TRUE(contains(gated.output, "dv rel L2  dg rel L2")) << gated.output;
  const Exit forward =
      // bf16: a state kernel on every build (host tiles; on CUDA the tensor cores, fp32 having none there)
      linattn_cli(dir, "bench --shape 1,128,1,16 --dtype bf16 --variants fused --state-pass --reps 1 --warmup 0");
  ASSERT_EQ(forward.code, 0) << forward.output;
  EXPECT_TRUE(contains(forward.output, "o rel L2  final_state rel L2")) << forward.output;

  const Exit run_help = linattn_cli(dir, "run --help"), bench_help = linattn_cli(dir, "bench --help");
  for (const Exit* help : {&run_help, &bench_help}) {
    EXPECT_TRUE(contains(help->output, "--snapshots TEXT:{fp32,bf16,none}")) << help->output;
    EXPECT_TRUE(contains(help->output, "run defaults to fp32") || contains(help->output, "bench defaults to bf16"))
        << help->output;
  }
  EXPECT_EQ(linattn_cli(dir, "bench --shape 1,128,1,16 --snapshots fp64 --reps 1").code, 2);
}

TEST_F(CliEndToEnd, HelpOnEverySubcommand) {
  for (const std::string sub : {"", "run", "generate", "verify", "ledger"}) {
    const Exit e = linattn_cli(dir, sub + " --help");
    EXPECT_EQ(e.code, 0) << sub << ": " << e.output;
    EXPECT_TRUE(contains(e.output, "Usage:")) << sub << ": " << e.output;
  }
  EXPECT_NE(linattn_cli(dir, "run x.h5 -o out --variant fastest").code, 0);
}

}  // namespace
}  // namespace linattn
